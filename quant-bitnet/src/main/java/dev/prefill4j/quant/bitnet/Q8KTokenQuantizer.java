package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * {@code q8_k-token}: BitNet b1.58's activations, int8 with one absmax scale per token, in Q8_K's layout so the
 * ternary formats' integer dot product reads it unchanged (256 int8 per block with an f32 scale, 292 bytes: {@code d}
 * at 0, {@code qs[256]} at 4, sixteen int16 group sums at 260; every block of a row carries the row's {@code d}).
 * Encoding one row (one token) of {@code count} elements: {@code q = clamp(rint(x * 127 / max|x|), -128, 127)},
 * {@code d = max|x| / 127}; the scale, the rounding to nearest (ties to even) and the clamp are those of the BitNet
 * b1.58 papers' activation quantizer (Ma et al., 2024: absmax per token to 8 bits). No GGUF type: it exists for
 * {@code --activations per-token}.
 */
public final class Q8KTokenQuantizer implements Quantizer {
    static final String ID = "q8_k-token";

    @Override public String id() { return ID; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "int8 per token by absmax (BitNet b1.58 activations), Q8_K layout"; }
    @Override public int blockSize() { return Ternary.QK; }
    @Override public int blockBytes() { return Ternary.Q8K_BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.empty(); }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        for (int b = 0; b < count / Ternary.QK; b++) {
            long o = offset + (long) b * Ternary.Q8K_BYTES;
            float d = src.get(Blocks.F32, o);
            for (int j = 0; j < Ternary.QK; j++) {
                dst[dstOffset + b * Ternary.QK + j] = d * src.get(Blocks.I8, o + 4 + j);
            }
        }
    }

    /** One scale for all {@code count} elements: the engine encodes a whole row (one token) per call. */
    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, Ternary.QK, id());
        float amax = 0;
        for (int i = 0; i < count; i++) {
            amax = Math.max(amax, Math.abs(src[srcOffset + i]));
        }
        float iscale = amax != 0 ? 127f / amax : 0f;
        float d = amax / 127f;
        for (int b = 0; b < count / Ternary.QK; b++) {
            long o = offset + (long) b * Ternary.Q8K_BYTES;
            dst.set(Blocks.F32, o, d);
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 16 * g; j < 16 * g + 16; j++) {
                    int q = Math.clamp((long) Math.rint(src[srcOffset + b * Ternary.QK + j] * iscale), -128, 127);
                    dst.set(Blocks.I8, o + 4 + j, (byte) q);
                    sum += q;
                }
                dst.set(Blocks.I16, o + 260 + 2L * g, (short) sum);
            }
        }
    }

    /** Block by block, {@code d * sum(q * x)} (the format is meant for activations; this serves completeness). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        float sum = 0;
        for (int b = 0; b < count / Ternary.QK; b++) {
            long o = offset + (long) b * Ternary.Q8K_BYTES;
            float s = 0;
            for (int j = 0; j < Ternary.QK; j++) {
                s = Math.fma(src.get(Blocks.I8, o + 4 + j), x[xOffset + b * Ternary.QK + j], s);
            }
            sum = Math.fma(src.get(Blocks.F32, o), s, sum);
        }
        return sum;
    }
}
