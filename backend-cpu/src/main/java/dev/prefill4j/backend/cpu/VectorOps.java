package dev.prefill4j.backend.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector API building blocks. The species is chosen once: the platform's preferred shape, or the bit size in
 * the system property {@code dev.prefill4j.cpu.vectorBits} (128, 256 or 512) to compare shapes.
 */
final class VectorOps {
    static final VectorSpecies<Float> FLOATS = species();

    private VectorOps() {
    }

    private static VectorSpecies<Float> species() {
        String bits = System.getProperty("dev.prefill4j.cpu.vectorBits");
        if (bits == null) {
            return FloatVector.SPECIES_PREFERRED;
        }
        return switch (bits) {
            case "128" -> FloatVector.SPECIES_128;
            case "256" -> FloatVector.SPECIES_256;
            case "512" -> FloatVector.SPECIES_512;
            default -> throw new IllegalArgumentException("dev.prefill4j.cpu.vectorBits must be 128, 256 or 512");
        };
    }

    /**
     * Sum of the lanes in a fixed order (lane 0 first). {@code reduceLanes(ADD)} leaves the order unspecified and
     * the JIT's intrinsic and the interpreter differ, so results would depend on warm-up; with quantized
     * activations a last-bit difference can flip an int8 rounding downstream.
     */
    static float sum(FloatVector v) {
        float s = 0;
        for (int i = 0; i < v.length(); i++) {
            s += v.lane(i);
        }
        return s;
    }

    /** {@code sum a[ao+i] * b[bo+i]} for {@code i < n}. */
    static float dot(float[] a, int ao, float[] b, int bo, int n) {
        int i = 0;
        float sum = 0;
        int bound = FLOATS.loopBound(n);
        if (bound > 0) {
            FloatVector acc = FloatVector.zero(FLOATS);
            for (; i < bound; i += FLOATS.length()) {
                acc = FloatVector.fromArray(FLOATS, a, ao + i).fma(FloatVector.fromArray(FLOATS, b, bo + i), acc);
            }
            sum = sum(acc);
        }
        for (; i < n; i++) {
            sum += a[ao + i] * b[bo + i];
        }
        return sum;
    }

    /**
     * Four dot products of consecutive weight rows {@code w[wo + r*n ..]} (r = 0..3) with one activation row,
     * sharing each activation load: {@code out[oo + r]}.
     */
    static void dot4(float[] w, int wo, int n, float[] x, int xo, float[] out, int oo) {
        int i = 0;
        int bound = FLOATS.loopBound(n);
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        for (; i < bound; i += FLOATS.length()) {
            FloatVector xv = FloatVector.fromArray(FLOATS, x, xo + i);
            a0 = FloatVector.fromArray(FLOATS, w, wo + i).fma(xv, a0);
            a1 = FloatVector.fromArray(FLOATS, w, wo + n + i).fma(xv, a1);
            a2 = FloatVector.fromArray(FLOATS, w, wo + 2 * n + i).fma(xv, a2);
            a3 = FloatVector.fromArray(FLOATS, w, wo + 3 * n + i).fma(xv, a3);
        }
        float s0 = sum(a0);
        float s1 = sum(a1);
        float s2 = sum(a2);
        float s3 = sum(a3);
        for (; i < n; i++) {
            float xi = x[xo + i];
            s0 += w[wo + i] * xi;
            s1 += w[wo + n + i] * xi;
            s2 += w[wo + 2 * n + i] * xi;
            s3 += w[wo + 3 * n + i] * xi;
        }
        out[oo] = s0;
        out[oo + 1] = s1;
        out[oo + 2] = s2;
        out[oo + 3] = s3;
    }

    /** {@code acc[ao+i] = acc[ao+i] * scale + weight * v[vo+i]}. */
    static void scaleAdd(float[] acc, int ao, float scale, float weight, float[] v, int vo, int n) {
        int i = 0;
        int bound = FLOATS.loopBound(n);
        for (; i < bound; i += FLOATS.length()) {
            FloatVector.fromArray(FLOATS, v, vo + i).mul(weight)
                    .add(FloatVector.fromArray(FLOATS, acc, ao + i).mul(scale)).intoArray(acc, ao + i);
        }
        for (; i < n; i++) {
            acc[ao + i] = acc[ao + i] * scale + weight * v[vo + i];
        }
    }
}
