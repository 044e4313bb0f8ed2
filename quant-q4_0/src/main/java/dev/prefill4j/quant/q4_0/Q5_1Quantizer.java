package dev.prefill4j.quant.q4_0;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * GGUF Q5_1 (type 7), llama.cpp's fallback for Q5_K rows that are not a multiple of 256: 32 weights in 24 bytes,
 * {@code d} and {@code m} fp16 at 0 and 2, {@code qh} u32 at 4, {@code qs[16]} at 8 (Q5_0's bit order);
 * {@code y = q * d + m}, q in 0..31. Encoder as ggml's {@code quantize_row_q5_1_ref}: {@code d = (max - min) / 31},
 * {@code m = min}, {@code q = (int)((x - min) / d + 0.5)}.
 */
public final class Q5_1Quantizer implements Quantizer {
    static final int QK = 32;
    static final int BYTES = 24;

    @Override public String id() { return "q5_1"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q5_1: 32 x 5-bit + fp16 scale and min, 6 bits/weight, type 7"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(7); }
    // llama.cpp pairs Q5_1 with Q8_1 activations, whose int8 values and scale equal Q8_0's (Q8_1 only adds a block sum).
    @Override public String activationFormat() { return "q8_0-activations"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            float m = Blocks.fp16(src, o + 2);
            int qh = src.get(Blocks.I32, o + 4);
            int base = dstOffset + b * QK;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 8 + j);
                dst[base + j] = Q5_0Quantizer.low5(q, qh, j) * d + m;
                dst[base + j + 16] = Q5_0Quantizer.high5(q, qh, j) * d + m;
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
            float d = (max - min) / 31f;
            float id = d != 0 ? 1f / d : 0f;
            long o = offset + (long) b * BYTES;
            Blocks.fp16(dst, o, d);
            Blocks.fp16(dst, o + 2, min);
            int[] q0 = new int[16];
            int[] q1 = new int[16];
            for (int j = 0; j < 16; j++) {
                q0[j] = ((int) ((src[base + j] - min) * id + 0.5f)) & 0xFF;
                q1[j] = ((int) ((src[base + j + 16] - min) * id + 0.5f)) & 0xFF;
            }
            Q5_0Quantizer.pack5(q0, q1, dst, o + 8, o + 4);
        }
    }

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        float sum = 0;
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            int qh = src.get(Blocks.I32, o + 4);
            int base = xOffset + b * QK;
            float qx = 0;
            float xs = 0;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 8 + j);
                qx += Q5_0Quantizer.low5(q, qh, j) * x[base + j] + Q5_0Quantizer.high5(q, qh, j) * x[base + j + 16];
                xs += x[base + j] + x[base + j + 16];
            }
            sum += Blocks.fp16(src, o) * qx + Blocks.fp16(src, o + 2) * xs;
        }
        return sum;
    }
}
