package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF Q4_K (type 12): 256 weights in 144 bytes: {@code d} fp16 at 0, {@code dmin} fp16 at 2, twelve bytes of
 * packed 6-bit (scale, min) pairs for eight sub-blocks of 32 at 4, and 128 bytes of nibbles at 16. Element
 * {@code 64c + l} is the low nibble of {@code qs[32c + l]} (sub-block {@code 2c}), element {@code 64c + 32 + l} its
 * high nibble (sub-block {@code 2c + 1}); {@code y = d*sc*q - dmin*m} (FORMATS.md §2).
 *
 * <p>The encoder follows ggml's {@code quantize_row_q4_K_ref} step for step, in float arithmetic, so that its
 * bytes equal llama-quantize's (without an importance matrix).
 */
public final class Q4KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 144;

    @Override public String id() { return "q4_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q4_K: 256 x 4-bit, 6-bit sub-block scales/mins, 4.5 bits/weight, type 12"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(12); }
    @Override public String activationFormat() { return "q8_k"; }

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
                int q = o + 16 + 32 * c;
                int y = base + 64 * c;
                for (int l = 0; l < 32; l += KQuants.FLOATS.length()) {
                    // Widened to ints first, as in dot: cheaper than splitting and converting bytes.
                    IntVector v = (IntVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, q + l)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, KQuants.INTS, 0);
                    ((FloatVector) v.and(0x0F).convert(VectorOperators.I2F, 0)).mul(d1).add(m1).intoArray(dst, y + l);
                    ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                            .mul(d2).add(m2).intoArray(dst, y + 32 + l);
                }
            }
        }
    }

    /** Sixteen floats a super-block: {@link #prepareActivations}. */
    @Override
    public int preparedActivations(int count) {
        Blocks.checkCount(count, QK, id());
        return count / QK * 16;
    }

    /**
     * Per super-block sixteen floats in {@link KQuants#scalesAndMins}' layout: zeros where it has the eight scales,
     * then each sub-block's sum of activations where it has the eight mins, so that {@link #dotPrepared} gets all
     * eight minimum terms of a super-block from one vector product. Each sum adds the sub-block's vectors lane by
     * lane, then the lanes by {@link KQuants#sum}'s fixed tree.
     */
    @Override
    public void prepareActivations(float[] x, int xOffset, int count, float[] prepared, int preparedOffset) {
        Blocks.checkCount(count, QK, id());
        var sp = KQuants.FLOATS;
        for (int k = 0; k < count / QK; k++) {
            int p = preparedOffset + 16 * k;
            for (int g = 0; g < 8; g++) {
                FloatVector sum = FloatVector.zero(sp);
                for (int l = 0; l < 32; l += sp.length()) {
                    sum = sum.add(FloatVector.fromArray(sp, x, xOffset + k * QK + 32 * g + l));
                }
                prepared[p + g] = 0;
                prepared[p + 8 + g] = KQuants.sum(sum);
            }
        }
    }

    /** Prepares {@code x} in a per-thread buffer, then {@link #dotPrepared} ({@link Blocks#dotByPreparing}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return Blocks.dotByPreparing(this, src, offset, x, xOffset, count);
    }

    /**
     * Fused, nothing decoded to memory: per sub-block of 32, {@code sum(q * x)} in vector lanes (the nibbles widened
     * to ints with zero extension, so the high one is a plain shift), times {@code d * scale} into one of two
     * accumulators; the minimum terms {@code -dmin * min * sum(x)} of a super-block come from the prepared sums of
     * activations in one vector product ({@link #prepareActivations}); lanes are added in a fixed order at the end.
     * The row is staged once: read in place instead, as the Q6_K dot reads its super-blocks (each 16-byte header
     * copied to a small array for {@link KQuants#scalesAndMins}, which compiled too large to inline on a segment), it
     * ran slower, {@code bench -m 1b-q4_k_m.gguf -p 16 -n 32 -r 2 --profile}, three alternating pairs: {@code
     * ffn_gate+up} 10.5, 9.0, 9.1 against 13.7, 12.5, 13.0 GB/s, tg32 14.66, 12.62, 12.88 against 17.60, 16.07, 17.37
     * tok/s (Zen 5 VM, 2026-12-04). Against summing {@code x} per sub-block here, as every row did before the backend
     * prepared the sums once per matrix product: 1.52x per 2,048-element row (median of 15 in-process A/B rounds, for
     * 256 rows, in L2, and for 8,192). The eight scales and mins of a super-block are unpacked together first ({@link
     * KQuants#scalesAndMins}).
     */
    @Override
    public float dotPrepared(MemorySegment src, long offset, float[] x, int xOffset, float[] prepared,
                             int preparedOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        var sp = KQuants.FLOATS;
        FloatVector a1 = FloatVector.zero(sp);
        FloatVector a2 = a1;
        FloatVector mins = a1;
        float[] sm = KQuants.SCALES_AND_MINS.get();
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            KQuants.scalesAndMins(b, o, sm);
            for (int j = 0; j < 16; j += sp.length()) {
                mins = FloatVector.fromArray(sp, sm, j)
                        .fma(FloatVector.fromArray(sp, prepared, preparedOffset + 16 * k + j), mins);
            }
            int base = xOffset + k * QK;
            for (int c = 0; c < 4; c++) {
                int q = o + 16 + 32 * c;
                int y = base + 64 * c;
                FloatVector qx1 = FloatVector.zero(sp);
                FloatVector qx2 = qx1;
                for (int l = 0; l < 32; l += sp.length()) {
                    IntVector v = (IntVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, q + l)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, KQuants.INTS, 0);
                    qx1 = ((FloatVector) v.and(0x0F).convert(VectorOperators.I2F, 0))
                            .fma(FloatVector.fromArray(sp, x, y + l), qx1);
                    qx2 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                            .fma(FloatVector.fromArray(sp, x, y + 32 + l), qx2);
                }
                a1 = qx1.fma(FloatVector.broadcast(sp, sm[2 * c]), a1);
                a2 = qx2.fma(FloatVector.broadcast(sp, sm[2 * c + 1]), a2);
            }
        }
        // KQuants.sum's tree written out (the same additions): called here, C2 left it out of line and boxed its
        // argument for every row (JFR allocation samples: about 2.6 GB over a tg64 run on the 1B Q4_K_M file).
        FloatVector v = a1.add(a2).add(mins);
        if (KQuants.L > 8) {
            v = v.add(v.rearrange(KQuants.X8));
        }
        if (KQuants.L > 4) {
            v = v.add(v.rearrange(KQuants.X4));
        }
        v = v.add(v.rearrange(KQuants.X2));
        return v.add(v.rearrange(KQuants.X1)).lane(0);
    }

    /** Q4_K multiplies Q8_K activation codes in integer lanes ({@link #dotEncoded}). */
    @Override
    public boolean hasEncodedDot() {
        return true;
    }

    /**
     * {@code sum_blocks d_x * (d * sum_s sc_s * sum(q * x) - dmin * sum_s m_s * sum_s(x))} over Q8_K activations (the
     * sub-block sums of {@code x} from its group sums), each super-block's integer sums exact. With activations in a
     * heap segment ({@link Blocks#heapBytes}) and 256-bit vectors, {@link #dotInt16}; otherwise the same integers
     * in scalar code. Either way the super-blocks are added in double (added in float lanes, tiny-256-Q4_K_M's
     * logits moved 4.2e-3 from llama.cpp's dumps).
     */
    @Override
    public double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        byte[] a = Blocks.heapBytes(act);
        if (a != null && KQuants.SHORTS != null) {
            return dotInt16(b, a, Math.toIntExact(act.address() + actOffset), blocks);
        }
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            long x = actOffset + (long) k * Q8KQuantizer.BYTES;
            long scaled = 0;
            long mins = 0;
            for (int e = 0; e < QK; e++) {
                int s = e / 32;
                int qs = b[o + 16 + 32 * (e / 64) + e % 32] & 0xFF;
                int q = e % 64 < 32 ? qs & 0x0F : qs >>> 4;
                int xe = act.get(Blocks.I8, x + 4 + e);
                scaled += (long) KQuants.scale(b, o, s) * q * xe;
                mins += (long) KQuants.min(b, o, s) * xe;
            }
            double dx = act.get(Blocks.F32, x);
            sum += dx * (Blocks.fp16(b, o) * (double) scaled - Blocks.fp16(b, o + 2) * (double) mins);
        }
        return sum;
    }

    /**
     * The vector form of {@link #dotEncoded} over a staged row: per sub-block of 32, its nibbles (zero-extended to
     * int16 lanes, 16 at a time) times the activation codes (products at most 15 * 127), the two halves added per
     * lane; each int lane adds its two int16 halves ({@code (v + (v << 16)) >> 16}), is multiplied by the sub-block's
     * 6-bit scale and added to int lanes that sum the super-block. The minimum terms are one integer per super-block,
     * {@code sum_s m_s * (bsum_2s + bsum_2s+1)}, from the activations' group sums; both integers are scaled in double.
     */
    private static double dotInt16(byte[] b, byte[] a, int at, int blocks) {
        var s = KQuants.SHORTS;
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            int x = at + k * Q8KQuantizer.BYTES;
            int m = 0;
            for (int g = 0; g < 8; g++) {
                m += KQuants.min(b, o, g) * (Blocks.i16(a, x + 260 + 4 * g) + Blocks.i16(a, x + 262 + 4 * g));
            }
            IntVector isum = IntVector.zero(IntVector.SPECIES_256);
            for (int c = 0; c < 4; c++) {
                int q = o + 16 + 32 * c;
                int y = x + 4 + 64 * c;
                ShortVector w0 = (ShortVector) ByteVector.fromArray(KQuants.BYTES_128, b, q)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
                ShortVector w1 = (ShortVector) ByteVector.fromArray(KQuants.BYTES_128, b, q + 16)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
                IntVector lo = w0.and((short) 0x0F)
                        .mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y).convertShape(VectorOperators.B2S, s, 0))
                        .add(w1.and((short) 0x0F).mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y + 16)
                                .convertShape(VectorOperators.B2S, s, 0))).reinterpretAsInts();
                IntVector hi = w0.lanewise(VectorOperators.LSHR, 4)
                        .mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y + 32)
                                .convertShape(VectorOperators.B2S, s, 0))
                        .add(w1.lanewise(VectorOperators.LSHR, 4).mul((ShortVector) ByteVector
                                .fromArray(KQuants.BYTES_128, a, y + 48).convertShape(VectorOperators.B2S, s, 0)))
                        .reinterpretAsInts();
                isum = isum.add(lo.add(lo.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16)
                                .mul(KQuants.scale(b, o, 2 * c)))
                        .add(hi.add(hi.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16)
                                .mul(KQuants.scale(b, o, 2 * c + 1)));
            }
            // The lanes' integer sum is exact in any order; the super-block as in the scalar form, in double.
            double dx = Blocks.f32(a, x);
            sum += dx * (Blocks.fp16(b, o) * (double) isum.reduceLanes(VectorOperators.ADD)
                    - Blocks.fp16(b, o + 2) * (double) m);
        }
        return sum;
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        int[] levels = new int[QK];
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            KQuants.encodeAffineBlock(src, srcOffset + b * QK, dst, o, 15, -1f, 20, levels);
            for (int c = 0; c < 4; c++) {
                for (int l = 0; l < 32; l++) {
                    dst.set(Blocks.I8, o + 16 + 32 * c + l,
                            (byte) (levels[64 * c + l] | (levels[64 * c + 32 + l] << 4)));
                }
            }
        }
    }
}
