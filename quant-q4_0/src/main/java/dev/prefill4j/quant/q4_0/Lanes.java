package dev.prefill4j.quant.q4_0;

import jdk.incubator.vector.FloatVector;

/** The lane sum of the fused dot products, in a fixed order (the same in compiled and interpreted code). */
final class Lanes {
    private Lanes() {
    }

    /** {@return the lanes of {@code v} added first to last} */
    static float sum(FloatVector v) {
        float s = 0;
        for (int i = 0; i < v.length(); i++) {
            s += v.lane(i);
        }
        return s;
    }
}
