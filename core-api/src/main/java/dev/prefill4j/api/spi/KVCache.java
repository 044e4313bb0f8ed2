package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * One session's KV cache, opened by a {@link KVStore}.
 *
 * <p>Positions are appended in order, layer by layer: a forward pass over positions {@code [p, p+n)} appends
 * them to layer 0, reads layer 0's pages, then layer 1, and so on. {@link #truncate} drops positions (used when
 * draft tokens are rejected). One session uses a cache at a time; {@link #page} alone may be called by several
 * attention threads at once.
 *
 * @since 0.1
 */
@Api.Stable
public interface KVCache extends AutoCloseable {
    /** {@return the geometry this cache was opened with} */
    KVConfig config();

    /**
     * Stores K and V of {@code count} consecutive positions of one layer.
     *
     * @param layer    layer index
     * @param position first position; must equal the layer's current {@link #length(int)}
     * @param count    positions
     * @param k        {@code [count][kvDim]} keys, from index 0
     * @param v        {@code [count][kvDim]} values, from index 0
     * @throws IllegalArgumentException if the positions run past the capacity or are not contiguous
     */
    void append(int layer, int position, int count, float[] k, float[] v);

    /** {@return positions stored for {@code layer}} @param layer layer index */
    int length(int layer);

    /**
     * {@return page {@code index} of {@code layer}}; the page holds the positions written so far in
     * {@code [index * pageSize, (index + 1) * pageSize)}.
     *
     * @param layer layer index
     * @param index page index, below {@code ceil(length(layer) / pageSize)}
     */
    KVPage page(int layer, int index);

    /** Forgets every position at or after {@code length}, in every layer. @param length positions kept */
    void truncate(int length);

    /** {@return bytes held by this cache now (RAM or disk, whichever the store uses)} */
    long bytesHeld();

    /** Releases the cache's memory or files. Idempotent. */
    @Override
    void close();
}
