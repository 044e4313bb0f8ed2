package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;

/**
 * How K and V elements are stored in a KV cache. A row is one position's {@code kvDim} values (all KV heads,
 * concatenated), encoded on its own.
 *
 * @since 0.1
 */
@Api.Stable
public enum KVElementType {
    /** IEEE binary32, exact. */
    F32(1, 4),
    /** IEEE binary16, round to nearest even (as {@link Float#floatToFloat16}). */
    F16(1, 2),
    /**
     * GGUF Q8_0 blocks (fp16 scale + 32 int8, 34 bytes) along each row, as llama.cpp's Q8_0 KV cache: blocks run over
     * the concatenated heads (FORMATS.md §1), so a model whose heads are narrower than 32 works too. Needs
     * {@code kvDim % 32 == 0}. Encoder: {@code d = max|x| / 127}, {@code q = round(x / d)} half away from zero.
     */
    Q8_0(32, 34);

    private final int blockSize;
    private final int blockBytes;

    KVElementType(int blockSize, int blockBytes) {
        this.blockSize = blockSize;
        this.blockBytes = blockBytes;
    }

    /** {@return elements per block (1 for F32 and F16)} */
    public int blockSize() {
        return blockSize;
    }

    /**
     * {@return bytes for one row of {@code kvDim} elements}
     *
     * @param kvDim elements per row
     * @throws IllegalArgumentException if {@code kvDim} is not a multiple of the block size
     */
    public long rowBytes(int kvDim) {
        Blocks.checkCount(kvDim, blockSize, name());
        return (long) kvDim / blockSize * blockBytes;
    }

    /**
     * Encodes one row of {@code count} floats to {@code dst} at byte {@code offset}.
     *
     * @param src       floats
     * @param srcOffset first index read
     * @param count     elements, a multiple of {@link #blockSize()}
     * @param dst       destination
     * @param offset    byte offset of the row
     */
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        switch (this) {
            case F32 -> MemorySegment.copy(src, srcOffset, dst, Blocks.F32, offset, count);
            case F16 -> {
                for (int i = 0; i < count; i++) {
                    dst.set(Blocks.I16, offset + 2L * i, Float.floatToFloat16(src[srcOffset + i]));
                }
            }
            case Q8_0 -> {
                Blocks.checkCount(count, 32, name());
                for (int b = 0; b < count / 32; b++) {
                    int base = srcOffset + 32 * b;
                    float amax = 0;
                    for (int j = 0; j < 32; j++) {
                        amax = Math.max(amax, Math.abs(src[base + j]));
                    }
                    float d = amax / 127f;
                    float id = d != 0 ? 1f / d : 0f;
                    long o = offset + 34L * b;
                    Blocks.fp16(dst, o, d);
                    for (int j = 0; j < 32; j++) {
                        dst.set(Blocks.I8, o + 2 + j, (byte) Blocks.roundHalfAway(src[base + j] * id));
                    }
                }
            }
        }
    }

    /**
     * Decodes elements {@code [from, from + count)} of the row stored at byte {@code rowOffset}.
     *
     * @param src       encoded rows
     * @param rowOffset byte offset of the row
     * @param from      first element of the row to decode
     * @param count     elements
     * @param dst       floats
     * @param dstOffset first index written
     */
    public void decode(MemorySegment src, long rowOffset, int from, int count, float[] dst, int dstOffset) {
        switch (this) {
            case F32 -> MemorySegment.copy(src, Blocks.F32, rowOffset + 4L * from, dst, dstOffset, count);
            case F16 -> {
                for (int i = 0; i < count; i++) {
                    dst[dstOffset + i] = Float.float16ToFloat(src.get(Blocks.I16, rowOffset + 2L * (from + i)));
                }
            }
            case Q8_0 -> {
                int i = 0;
                while (i < count) {
                    int e = from + i;
                    long block = rowOffset + 34L * (e / 32);
                    float d = Blocks.fp16(src, block);
                    int end = Math.min(count, i + 32 - e % 32);
                    for (; i < end; i++) {
                        dst[dstOffset + i] = src.get(Blocks.I8, block + 2 + (from + i) % 32) * d;
                    }
                }
            }
        }
    }
}
