package dev.prefill4j.quant.q4_0;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * GGUF Q5_0 (type 6): 32 weights in 22 bytes, {@code d} fp16 at 0, {@code qh} u32 at 2 (bit {@code j} = fifth bit
 * of element {@code j}), {@code qs[16]} at 6 with Q4_0's nibble order; {@code y = (q - 16) * d}.
 *
 * <p>Encoder = ggml's {@code quantize_row_q5_0_ref}: {@code d = max / -16} (signed value of largest magnitude),
 * {@code q = min(31, (int)(x / d + 16.5))}.
 */
public final class Q5_0Quantizer implements Quantizer {
    static final int QK = 32;
    static final int BYTES = 22;

    @Override public String id() { return "q5_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q5_0: 32 x 5-bit + fp16 scale, 5.5 bits/weight, type 6"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(6); }
    @Override public String activationFormat() { return "q8_0"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            int qh = src.get(Blocks.I32, o + 2);
            int base = dstOffset + b * QK;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 6 + j);
                int h0 = ((qh >>> j) << 4) & 0x10;
                int h1 = (qh >>> (j + 12)) & 0x10;
                dst[base + j] = (((q & 0x0F) | h0) - 16) * d;
                dst[base + j + 16] = (((q >>> 4) | h1) - 16) * d;
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            float amax = 0;
            float max = 0;
            for (int j = 0; j < QK; j++) {
                float v = src[base + j];
                if (amax < Math.abs(v)) {
                    amax = Math.abs(v);
                    max = v;
                }
            }
            float d = max / -16f;
            float id = d != 0 ? 1f / d : 0f;
            long o = offset + (long) b * BYTES;
            Blocks.fp16(dst, o, d);
            int qh = 0;
            for (int j = 0; j < 16; j++) {
                int q0 = Math.min(31, (byte) (int) (src[base + j] * id + 16.5f)) & 0xFF;
                int q1 = Math.min(31, (byte) (int) (src[base + j + 16] * id + 16.5f)) & 0xFF;
                dst.set(Blocks.I8, o + 6 + j, (byte) ((q0 & 0x0F) | ((q1 & 0x0F) << 4)));
                qh |= ((q0 & 0x10) >>> 4) << j;
                qh |= ((q1 & 0x10) >>> 4) << (j + 16);
            }
            dst.set(Blocks.I32, o + 2, qh);
        }
    }

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        float sum = 0;
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            int qh = src.get(Blocks.I32, o + 2);
            int base = xOffset + b * QK;
            float s = 0;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 6 + j);
                int h0 = ((qh >>> j) << 4) & 0x10;
                int h1 = (qh >>> (j + 12)) & 0x10;
                s += (((q & 0x0F) | h0) - 16) * x[base + j] + (((q >>> 4) | h1) - 16) * x[base + j + 16];
            }
            sum += s * Blocks.fp16(src, o);
        }
        return sum;
    }
}
