package dev.prefill4j.quant.q4_0;

import jdk.incubator.vector.FloatVector;

/** The lane sum of the fused dot products, in a fixed order (the same in compiled and interpreted code). */
final class Lanes {
    private static final ThreadLocal<float[]> LANES = ThreadLocal.withInitial(() -> new float[Q4_0Quantizer.FLOATS.length()]);

    private Lanes() {
    }

    /** {@return the lanes of {@code v} added first to last} */
    static float sum(FloatVector v) {
        float[] a = LANES.get();
        v.intoArray(a, 0);
        float s = 0;
        for (float f : a) {
            s += f;
        }
        return s;
    }
}
