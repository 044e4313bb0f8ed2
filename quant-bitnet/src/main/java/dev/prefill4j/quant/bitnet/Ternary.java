package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/** What TQ1_0 and TQ2_0 share: 256-element blocks with one fp16 scale {@code d = max|x|} and trits {@code t} in 0..2. */
final class Ternary {
    static final int QK = 256;
    /** Float lanes of the dot product, at most 16; trits and ints in vectors with as many lanes. */
    private static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED.length() > 16
            ? FloatVector.SPECIES_512 : FloatVector.SPECIES_PREFERRED;
    static final VectorSpecies<Byte> TRIT_LANES =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(FLOATS.length() * 8));
    static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    private static final ThreadLocal<byte[]> TRITS = ThreadLocal.withInitial(() -> new byte[QK]);
    /** Short lanes of the integer dot product, at most 32; trits and activation codes in byte vectors as wide. */
    static final VectorSpecies<Short> SHORTS = ShortVector.SPECIES_PREFERRED.length() > 32
            ? ShortVector.SPECIES_512 : ShortVector.SPECIES_PREFERRED;
    static final VectorSpecies<Byte> SHORT_LANES =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(SHORTS.length() * 8));
    /** Q8_K, the activation format of both: {@code d} f32 at 0, {@code qs[256]} int8 at 4, group sums at 260. */
    static final int Q8K_BYTES = 292;

    /**
     * The fused dot product of both ternary formats: per block, the format {@code q} unpacks its trits in element
     * order ({@link TernaryQuantizer#unpack}), then activations are added where the trit is +1 and subtracted where it
     * is -1, in vector lanes under masks (no multiplication by a weight); the block sum is scaled by the block's
     * {@code d}; lanes are added first to last at the end. The same trits give the same bits in either format.
     */
    static float dot(byte[] staged, int blocks, TernaryQuantizer q, float[] x, int xOffset) {
        int blockBytes = q.blockBytes();
        int scaleAt = q.scaleAt();
        byte[] trits = TRITS.get();
        FloatVector acc = FloatVector.zero(FLOATS);
        for (int k = 0; k < blocks; k++) {
            int o = k * blockBytes;
            q.unpack(staged, o, trits);
            int base = xOffset + k * QK;
            FloatVector s = FloatVector.zero(FLOATS);
            for (int e = 0; e < QK; e += FLOATS.length()) {
                IntVector t = (IntVector) ByteVector.fromArray(TRIT_LANES, trits, e).convertShape(VectorOperators.B2I, INTS, 0);
                FloatVector a = FloatVector.fromArray(FLOATS, x, base + e);
                s = s.add(a, t.compare(VectorOperators.EQ, 2).cast(FLOATS)).sub(a, t.compare(VectorOperators.EQ, 0).cast(FLOATS));
            }
            acc = s.fma(FloatVector.broadcast(FLOATS, Blocks.fp16(staged, o + scaleAt)), acc);
        }
        float sum = 0;
        for (int i = 0; i < FLOATS.length(); i++) {
            sum += acc.lane(i);
        }
        return sum;
    }

    /**
     * The integer dot product of both ternary formats with Q8_K activations, as llama.cpp's: per block, the int8
     * activation codes are added in 16-bit lanes under masks, into one sum where the trit is +1 and another where it
     * is -1 (no multiplication by a weight; two sums, two independent chains of additions: 1.12x faster than one
     * chain of additions and subtractions, in-process A/B); the lanes' total is exact, since
     * {@code |sum| <= 256 * 127 < 2^15}; it is scaled by {@code d_w * d_x} ({@link #term}). The same trits give the
     * same bits in either format.
     *
     * @param q         the format, which unpacks the trits
     * @param act       Q8_K activations
     * @param actOffset byte offset of the first activation block
     */
    static double dotQ8K(byte[] staged, int blocks, TernaryQuantizer q, MemorySegment act, long actOffset) {
        int blockBytes = q.blockBytes();
        int scaleAt = q.scaleAt();
        byte[] trits = TRITS.get();
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * blockBytes;
            long ao = actOffset + (long) k * Q8K_BYTES;
            q.unpack(staged, o, trits);
            ShortVector plus = ShortVector.zero(SHORTS);
            ShortVector minus = plus;
            for (int e = 0; e < QK; e += SHORTS.length()) {
                ShortVector t = (ShortVector) ByteVector.fromArray(SHORT_LANES, trits, e)
                        .convertShape(VectorOperators.B2S, SHORTS, 0);
                ShortVector xq = codes(act, ao, e);
                plus = plus.add(xq, t.compare(VectorOperators.EQ, 2));
                minus = minus.add(xq, t.compare(VectorOperators.EQ, 0));
            }
            sum += term(Blocks.fp16(staged, o + scaleAt), act, ao, plus.sub(minus));
        }
        return sum;
    }

    /** {@return 16-bit lanes of the Q8_K codes {@code e..} of the block at {@code ao}} */
    static ShortVector codes(MemorySegment act, long ao, int e) {
        return (ShortVector) ByteVector.fromMemorySegment(SHORT_LANES, act, ao + 4 + e, ByteOrder.LITTLE_ENDIAN)
                .convertShape(VectorOperators.B2S, SHORTS, 0);
    }

    /**
     * {@return a block's term of the dot product}: {@code d_w * d_x * sum} where the sum of the lanes is exact; the
     * product needs at most 11 + 24 + 15 significant bits, so it is exact in double, and the terms are added in
     * double.
     */
    static double term(float dw, MemorySegment act, long ao, ShortVector lanes) {
        return (double) dw * act.get(Blocks.F32, ao) * lanes.reduceLanes(VectorOperators.ADD);
    }

    private Ternary() {
    }

    /** {@return the calling thread's array for one block's trits} */
    static byte[] trits() {
        return TRITS.get();
    }

    /** Writes {@code (t - 1) * d} for a block's trits {@code t} (0, 1, 2) to {@code dst[at..]}, in vector lanes. */
    static void decode(byte[] trits, float d, float[] dst, int at) {
        for (int e = 0; e < QK; e += FLOATS.length()) {
            ((FloatVector) ByteVector.fromArray(TRIT_LANES, trits, e).convertShape(VectorOperators.B2I, INTS, 0)
                    .lanewise(VectorOperators.SUB, 1).convert(VectorOperators.I2F, 0)).mul(d).intoArray(dst, at + e);
        }
    }

    /** {@code max|x|} of the block at {@code base}: the scale both formats store. */
    static float absMax(float[] x, int base) {
        float amax = 0;
        for (int j = 0; j < QK; j++) {
            amax = Math.max(amax, Math.abs(x[base + j]));
        }
        return amax;
    }

    /** The trit (0, 1, 2 for -1, 0, +1) of {@code v} at reciprocal scale {@code id}: {@code lroundf(v * id) + 1}. */
    static int trit(float v, float id) {
        return Blocks.roundHalfAway(v * id) + 1;
    }
}
