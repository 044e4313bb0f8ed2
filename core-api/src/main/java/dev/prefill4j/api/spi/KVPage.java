package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;

/**
 * A run of consecutive positions of one layer's K and V, as served by a {@link KVCache}.
 *
 * <p>{@code keys} and {@code values} each hold {@code positions} rows of {@code kvDim} elements encoded as
 * {@code elementType}, row after row. The segments are valid until the next call on the cache that returned
 * them, or until it is closed; readers must not keep them.
 *
 * @param firstPosition position of row 0
 * @param positions     rows in this page that hold data
 * @param keys          encoded K rows
 * @param values        encoded V rows
 * @param elementType   encoding of both
 * @param kvDim         elements per row
 * @since 0.1
 */
@Api.Stable
public record KVPage(int firstPosition, int positions, MemorySegment keys, MemorySegment values,
                     KVElementType elementType, int kvDim) {
    /**
     * Decodes {@code count} key elements of row {@code row} starting at element {@code from}.
     *
     * @param row       row within the page
     * @param from      first element in the row
     * @param count     elements
     * @param dst       floats
     * @param dstOffset first index written
     */
    public void key(int row, int from, int count, float[] dst, int dstOffset) {
        elementType.decode(keys, elementType.rowBytes(kvDim) * row, from, count, dst, dstOffset);
    }

    /**
     * Decodes {@code count} value elements of row {@code row} starting at element {@code from}.
     *
     * @param row       row within the page
     * @param from      first element in the row
     * @param count     elements
     * @param dst       floats
     * @param dstOffset first index written
     */
    public void value(int row, int from, int count, float[] dst, int dstOffset) {
        elementType.decode(values, elementType.rowBytes(kvDim) * row, from, count, dst, dstOffset);
    }
}
