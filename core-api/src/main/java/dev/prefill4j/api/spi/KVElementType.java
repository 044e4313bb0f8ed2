package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * How K and V elements are stored in a KV cache. Rows are one position's {@code kvDim} values.
 *
 * @since 0.1
 */
@Api.Stable
public enum KVElementType {
    /** IEEE binary32, exact. */
    F32(4),
    /** IEEE binary16, round to nearest even (as {@link Float#floatToFloat16}). */
    F16(2);

    private static final ValueLayout.OfFloat F32_LE =
            ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfShort I16_LE =
            ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final int elementBytes;

    KVElementType(int elementBytes) {
        this.elementBytes = elementBytes;
    }

    /** {@return bytes per element} */
    public int elementBytes() {
        return elementBytes;
    }

    /** {@return bytes for one row of {@code kvDim} elements} @param kvDim elements per row */
    public long rowBytes(int kvDim) {
        return (long) kvDim * elementBytes;
    }

    /**
     * Encodes {@code count} floats to {@code dst} at byte {@code offset}.
     *
     * @param src       floats
     * @param srcOffset first index read
     * @param count     elements
     * @param dst       destination
     * @param offset    byte offset
     */
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        switch (this) {
            case F32 -> MemorySegment.copy(src, srcOffset, dst, F32_LE, offset, count);
            case F16 -> {
                for (int i = 0; i < count; i++) {
                    dst.set(I16_LE, offset + 2L * i, Float.floatToFloat16(src[srcOffset + i]));
                }
            }
        }
    }

    /**
     * Decodes {@code count} elements from {@code src} at byte {@code offset}.
     *
     * @param src       encoded elements
     * @param offset    byte offset
     * @param dst       floats
     * @param dstOffset first index written
     * @param count     elements
     */
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        switch (this) {
            case F32 -> MemorySegment.copy(src, F32_LE, offset, dst, dstOffset, count);
            case F16 -> {
                for (int i = 0; i < count; i++) {
                    dst[dstOffset + i] = Float.float16ToFloat(src.get(I16_LE, offset + 2L * i));
                }
            }
        }
    }
}
