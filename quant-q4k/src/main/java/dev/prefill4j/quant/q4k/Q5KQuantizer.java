package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * GGUF Q5_K (type 13), which llama.cpp's Q4_K_S mix uses for some {@code attn_v} and {@code ffn_down} tensors:
 * 256 weights in 176 bytes: {@code d}, {@code dmin} fp16 at 0 and 2, Q4_K's packed 6-bit scales/mins at 4,
 * {@code qh[32]} at 16 (bit {@code 2c} / {@code 2c+1} of {@code qh[l]} is the fifth bit of element {@code 64c + l} /
 * {@code 64c + 32 + l}), {@code qs[128]} at 48 in Q4_K's nibble order; {@code y = d*sc*q - dmin*m}, q in 0..31.
 * Layout and encoder from ggml's {@code block_q5_K}, {@code dequantize_row_q5_K}, {@code quantize_row_q5_K_ref}.
 */
public final class Q5KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 176;

    @Override public String id() { return "q5_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q5_K: 256 x 5-bit, 6-bit sub-block scales/mins, 5.5 bits/weight, type 13"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(13); }
    @Override public String activationFormat() { return "q8_k"; }

    private static int level(MemorySegment s, long o, int c, int l, boolean high) {
        int q = Blocks.u8(s, o + 48 + 32 * c + l);
        int bit = (Blocks.u8(s, o + 16 + l) >>> (2 * c + (high ? 1 : 0))) & 1;
        return (high ? q >>> 4 : q & 0x0F) + 16 * bit;
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            float dmin = Blocks.fp16(src, o + 2);
            int base = dstOffset + b * QK;
            byte[] header = Blocks.stage(src, o, 16); // d, dmin and the packed scales
            for (int c = 0; c < 4; c++) {
                float d1 = d * KQuants.scale(header, 0, 2 * c);
                float m1 = dmin * KQuants.min(header, 0, 2 * c);
                float d2 = d * KQuants.scale(header, 0, 2 * c + 1);
                float m2 = dmin * KQuants.min(header, 0, 2 * c + 1);
                for (int l = 0; l < 32; l++) {
                    dst[base + 64 * c + l] = d1 * level(src, o, c, l, false) - m1;
                    dst[base + 64 * c + 32 + l] = d2 * level(src, o, c, l, true) - m2;
                }
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
        int[] levels = new int[QK];
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            KQuants.encodeAffineBlock(src, srcOffset + b * QK, dst, o, 31, -0.5f, 15, levels);
            byte[] qh = new byte[32];
            for (int c = 0; c < 4; c++) {
                for (int l = 0; l < 32; l++) {
                    int l1 = levels[64 * c + l];
                    int l2 = levels[64 * c + 32 + l];
                    if (l1 > 15) {
                        l1 -= 16;
                        qh[l] |= (byte) (1 << (2 * c));
                    }
                    if (l2 > 15) {
                        l2 -= 16;
                        qh[l] |= (byte) (2 << (2 * c));
                    }
                    dst.set(Blocks.I8, o + 48 + 32 * c + l, (byte) (l1 | (l2 << 4)));
                }
            }
            MemorySegment.copy(MemorySegment.ofArray(qh), 0, dst, o + 16, 32);
        }
    }
}
