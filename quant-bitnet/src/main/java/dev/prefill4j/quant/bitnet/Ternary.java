package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/** What TQ1_0 and TQ2_0 share: 256-element blocks with one fp16 scale {@code d = max|x|} and trits {@code t} in 0..2. */
final class Ternary {
    static final int QK = 256;
    /** Float lanes of the dot product, at most 16; trits and ints in vectors with as many lanes. */
    private static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED.length() > 16
            ? FloatVector.SPECIES_512 : FloatVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Byte> TRIT_LANES =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(FLOATS.length() * 8));
    private static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    private static final ThreadLocal<byte[]> TRITS = ThreadLocal.withInitial(() -> new byte[QK]);

    /** Fills a block's trits (0, 1, 2 for -1, 0, +1) in element order. */
    @FunctionalInterface
    interface TritUnpacker {
        void unpack(byte[] staged, int blockOffset, byte[] trits);
    }

    /**
     * The fused dot product of both ternary formats: per block, the format unpacks its trits in element order, then
     * activations are added where the trit is +1 and subtracted where it is -1, in vector lanes under masks (no
     * multiplication by a weight); the block sum is scaled by the block's {@code d}; lanes are added first to last at
     * the end. The same trits give the same bits in either format.
     *
     * @param scaleAt offset of the fp16 {@code d} within a block
     */
    static float dot(byte[] staged, int blocks, int blockBytes, int scaleAt, TritUnpacker unpack, float[] x, int xOffset) {
        byte[] trits = TRITS.get();
        FloatVector acc = FloatVector.zero(FLOATS);
        for (int k = 0; k < blocks; k++) {
            int o = k * blockBytes;
            unpack.unpack(staged, o, trits);
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

    private Ternary() {
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
