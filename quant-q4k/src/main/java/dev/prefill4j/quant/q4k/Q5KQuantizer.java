package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

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

    /**
     * The block staged, then in int lanes: the quants and their high bits widened from bytes, level {@code (q & 15) |
     * bit << 4}, then {@code d * scale * level - dmin * min} rounded as ggml's scalar code rounds it (a product, then a
     * difference).
     */
    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        float[] sm = KQuants.SCALES_AND_MINS.get();
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            KQuants.scalesAndMins(b, o, sm); // d * scale, and -dmin * min: adding it is subtracting dmin * min
            int base = dstOffset + k * QK;
            for (int c = 0; c < 4; c++) {
                float d1 = sm[2 * c];
                float m1 = sm[8 + 2 * c];
                float d2 = sm[2 * c + 1];
                float m2 = sm[8 + 2 * c + 1];
                for (int l = 0; l < 32; l += KQuants.FLOATS.length()) {
                    IntVector q = KQuants.widen(b, o + 48 + 32 * c + l);
                    IntVector h = KQuants.widen(b, o + 16 + l);
                    IntVector lo = q.and(0x0F)
                            .or(h.lanewise(VectorOperators.LSHR, 2 * c).and(1).lanewise(VectorOperators.LSHL, 4));
                    IntVector hi = q.lanewise(VectorOperators.LSHR, 4)
                            .or(h.lanewise(VectorOperators.LSHR, 2 * c + 1).and(1).lanewise(VectorOperators.LSHL, 4));
                    ((FloatVector) lo.convert(VectorOperators.I2F, 0)).mul(d1).add(m1)
                            .intoArray(dst, base + 64 * c + l);
                    ((FloatVector) hi.convert(VectorOperators.I2F, 0)).mul(d2).add(m2)
                            .intoArray(dst, base + 64 * c + 32 + l);
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
