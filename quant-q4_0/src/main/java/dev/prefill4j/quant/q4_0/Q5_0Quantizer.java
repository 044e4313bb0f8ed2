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
    @Override public String activationFormat() { return "q8_0-activations"; }

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
                dst[base + j] = (low5(q, qh, j) - 16) * d;
                dst[base + j + 16] = (high5(q, qh, j) - 16) * d;
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            float d = Q4_0Quantizer.signedAbsMax(src, base) / -16f;
            float id = d != 0 ? 1f / d : 0f;
            long o = offset + (long) b * BYTES;
            Blocks.fp16(dst, o, d);
            int[] q0 = new int[16];
            int[] q1 = new int[16];
            for (int j = 0; j < 16; j++) {
                q0[j] = Math.min(31, (byte) (int) (src[base + j] * id + 16.5f)) & 0xFF;
                q1[j] = Math.min(31, (byte) (int) (src[base + j + 16] * id + 16.5f)) & 0xFF;
            }
            pack5(q0, q1, dst, o + 6, o + 2);
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
                s += (low5(q, qh, j) - 16) * x[base + j] + (high5(q, qh, j) - 16) * x[base + j + 16];
            }
            sum += s * Blocks.fp16(src, o);
        }
        return sum;
    }

    /** The 5-bit level of element {@code j} (low nibble of {@code q}, fifth bit {@code j} of {@code qh}). */
    static int low5(int q, int qh, int j) {
        return (q & 0x0F) | (((qh >>> j) << 4) & 0x10);
    }

    /** The 5-bit level of element {@code j + 16} (high nibble, fifth bit {@code j + 16}). */
    static int high5(int q, int qh, int j) {
        return (q >>> 4) | ((qh >>> (j + 12)) & 0x10);
    }

    /** Packs 5-bit levels of elements {@code j} and {@code j+16}: nibbles at {@code qsAt}, fifth bits as u32 at {@code qhAt}. */
    static void pack5(int[] q0, int[] q1, MemorySegment dst, long qsAt, long qhAt) {
        int qh = 0;
        for (int j = 0; j < 16; j++) {
            dst.set(Blocks.I8, qsAt + j, (byte) ((q0[j] & 0x0F) | ((q1[j] & 0x0F) << 4)));
            qh |= ((q0[j] & 0x10) >>> 4) << j;
            qh |= ((q1[j] & 0x10) >>> 4) << (j + 16);
        }
        dst.set(Blocks.I32, qhAt, qh);
    }
}
