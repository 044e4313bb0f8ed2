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

    /**
     * Announces that pages {@code [fromPage, toPage)} of {@code layer} will be read next, roughly in ascending order,
     * each once, and each handed back with {@link #release}. A store below RAM starts reading ahead (so I/O overlaps
     * attention); a store in RAM ignores it. A new call replaces the previous announcement; {@code fromPage ==
     * toPage} ends it, which attention does when it is done with the layer or fails, so that no read-ahead holds
     * pages nobody will take.
     *
     * @param layer    layer index
     * @param fromPage first page
     * @param toPage   page after the last
     * @since 0.1
     */
    default void readAhead(int layer, int fromPage, int toPage) {
    }

    /**
     * Hands back a page obtained from {@link #page}: its segments are not used any more, and a store that reads
     * ahead may reuse their memory. Pages may be released in any order and from any thread.
     *
     * @param page the page
     * @since 0.1
     */
    default void release(KVPage page) {
    }

    /** {@return bytes read from storage below RAM so far; 0 for a store that keeps everything in RAM} @since 0.1 */
    default long bytesRead() {
        return 0;
    }

    /**
     * Measures how fast the storage under this cache reads this cache's own data sequentially, the way the store
     * reads it (for example with direct I/O), reading at most {@code maxBytes}; a baseline for {@link #bytesRead}
     * throughput. Empty for a store that keeps everything in RAM.
     *
     * @param maxBytes most bytes to read
     * @return bytes per second
     * @since 0.1
     */
    default java.util.OptionalDouble sequentialReadSpeed(long maxBytes) {
        return java.util.OptionalDouble.empty();
    }

    /**
     * {@return whether this cache outlives its session}: the store was asked to keep it (for example
     * {@code --kv-keep NAME}), so {@link #close} leaves it on storage, with the state given to {@link #saveState},
     * for a later session to reopen.
     *
     * @since 0.1
     */
    default boolean persistent() {
        return false;
    }

    /**
     * Gives a persistent cache the caller's state (tokens, sampler, a model fingerprint) to store beside the KV
     * pages when it is closed.
     *
     * @param state opaque bytes
     * @throws UnsupportedOperationException if the cache is not {@link #persistent()}
     * @since 0.1
     */
    default void saveState(byte[] state) {
        throw new UnsupportedOperationException("this KV cache is not kept after its session");
    }

    /**
     * {@return the state a previous session saved with this cache, if this cache was reopened}; empty for a new one
     *
     * @since 0.1
     */
    default java.util.Optional<byte[]> savedState() {
        return java.util.Optional.empty();
    }

    /** Forgets every position at or after {@code length}, in every layer. @param length positions kept */
    void truncate(int length);

    /** {@return bytes held by this cache now (RAM or disk, whichever the store uses)} */
    long bytesHeld();

    /** Releases the cache's memory or files. Idempotent. */
    @Override
    void close();
}
