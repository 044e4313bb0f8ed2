package dev.prefill4j.quant.q4_0;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * The lane sum of the fused dot products, in a fixed order that is the same in compiled and interpreted code: a tree
 * of lane-wise additions, each lane added to the lane half the remaining width away ({@code reduceLanes} leaves its
 * order unspecified, and its intrinsic and the interpreter differ). Adding {@code lane(i)} in a loop, the obvious
 * fixed order, compiles to a jump table per lane.
 */
final class Lanes {
    private static final VectorSpecies<Float> FLOATS = Q4_0Quantizer.FLOATS;
    private static final int L = FLOATS.length();
    static final VectorShuffle<Float> X8 = L > 8 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 8) : null;
    static final VectorShuffle<Float> X4 = L > 4 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 4) : null;
    static final VectorShuffle<Float> X2 = VectorShuffle.fromOp(FLOATS, i -> i ^ 2);
    static final VectorShuffle<Float> X1 = VectorShuffle.fromOp(FLOATS, i -> i ^ 1);

    private Lanes() {
    }

    /** {@return the sum of the lanes of {@code v} (at most 16 of them), by the tree described above} */
    static float sum(FloatVector v) {
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0);
    }

}
