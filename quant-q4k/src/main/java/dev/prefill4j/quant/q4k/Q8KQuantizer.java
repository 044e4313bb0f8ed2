package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * Q8_K (GGUF type 15), the format llama.cpp quantizes activations to before they meet K-quant weights: 256 int8
 * with an fp32 scale, 292 bytes: {@code d} f32 at 0, {@code qs[256]} at 4, sixteen int16 group sums at 260.
 * Encoder = ggml's {@code quantize_row_q8_K_ref}: {@code iscale = -127 / max} (signed value of largest magnitude),
 * {@code q = min(127, nearest_int(iscale * x))}, {@code d = 1 / iscale}.
 */
public final class Q8KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 292;

    @Override public String id() { return "q8_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "Q8_K: 256 x int8 + f32 scale, K-quant activation format, type 15"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(15); }
    @Override public String activationFormat() { return "q8_k"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = src.get(Blocks.F32, o);
            for (int j = 0; j < QK; j++) {
                dst[dstOffset + b * QK + j] = d * src.get(Blocks.I8, o + 4 + j);
            }
        }
    }

    /** Decoded a super-block at a time into L1 and multiplied with vectors ({@link KQuants#dot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return KQuants.dot(this, src, offset, x, xOffset, count);
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            long o = offset + (long) b * BYTES;
            float max = 0;
            float amax = 0;
            for (int j = 0; j < QK; j++) {
                float ax = Math.abs(src[base + j]);
                if (ax > amax) {
                    amax = ax;
                    max = src[base + j];
                }
            }
            if (amax == 0) {
                dst.asSlice(o, BYTES).fill((byte) 0);
                continue;
            }
            float iscale = -127f / max;
            for (int j = 0; j < QK; j++) {
                dst.set(Blocks.I8, o + 4 + j, (byte) Math.min(127, Blocks.nearestInt(iscale * src[base + j])));
            }
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) {
                    sum += dst.get(Blocks.I8, o + 4 + 16 * g + j);
                }
                dst.set(Blocks.I16, o + 260 + 2L * g, (short) sum);
            }
            dst.set(Blocks.F32, o, 1 / iscale);
        }
    }
}
