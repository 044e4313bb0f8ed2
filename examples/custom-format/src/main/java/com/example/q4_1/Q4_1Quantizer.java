package com.example.q4_1;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * GGUF Q4_1 (type 3): 32 weights in 20 bytes, {@code d} fp16 at 0, {@code m} fp16 at 2, {@code qs[16]} at 4 with
 * Q4_0's nibble order (element {@code j} low, {@code j+16} high); {@code y = q * d + m}. Encoder as ggml's
 * {@code quantize_row_q4_1_ref}: {@code d = (max - min) / 15}, {@code m = min},
 * {@code q = min(15, (int)((x - min) / d + 0.5))}.
 *
 * <p>llama.cpp pairs Q4_1 weights with Q8_1 activations, whose int8 values and scale equal Q8_0's (Q8_1 only adds a
 * block sum), so {@link #activationFormat()} names the engine's built-in {@code q8_0-activations} (Q8_0 rounded as
 * llama.cpp's x86 code rounds activations).
 */
public final class Q4_1Quantizer implements Quantizer {
    private static final int QK = 32;
    private static final int BYTES = 20;

    /** Public no-argument constructor for {@link java.util.ServiceLoader}: no work here. */
    public Q4_1Quantizer() {
    }

    @Override public String id() { return "q4_1"; }
    // A compile-time constant: javac records the core-api version this module was built against.
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q4_1: 32 x 4-bit + fp16 scale and min, 5 bits/weight, type 3 (example module)"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(3); }
    @Override public String activationFormat() { return "q8_0-activations"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            float m = Blocks.fp16(src, o + 2);
            int base = dstOffset + b * QK;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 4 + j);
                dst[base + j] = (q & 0x0F) * d + m;
                dst[base + j + 16] = (q >>> 4) * d + m;
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            float min = Float.MAX_VALUE;
            float max = -Float.MAX_VALUE;
            for (int j = 0; j < QK; j++) {
                min = Math.min(min, src[base + j]);
                max = Math.max(max, src[base + j]);
            }
            float d = (max - min) / 15f;
            float id = d != 0 ? 1f / d : 0f;
            long o = offset + (long) b * BYTES;
            Blocks.fp16(dst, o, d);
            Blocks.fp16(dst, o + 2, min);
            for (int j = 0; j < 16; j++) {
                int q0 = Math.min(15, (byte) (int) ((src[base + j] - min) * id + 0.5f));
                int q1 = Math.min(15, (byte) (int) ((src[base + j + 16] - min) * id + 0.5f));
                dst.set(Blocks.I8, o + 4 + j, (byte) (q0 | (q1 << 4)));
            }
        }
    }

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        float sum = 0;
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            int base = xOffset + b * QK;
            float qx = 0;
            float xs = 0;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 4 + j);
                qx += (q & 0x0F) * x[base + j] + (q >>> 4) * x[base + j + 16];
                xs += x[base + j] + x[base + j + 16];
            }
            // sum (q*d + m) x = d * sum q x + m * sum x
            sum += Blocks.fp16(src, o) * qx + Blocks.fp16(src, o + 2) * xs;
        }
        return sum;
    }
}
