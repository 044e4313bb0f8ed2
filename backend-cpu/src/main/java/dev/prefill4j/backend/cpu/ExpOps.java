package dev.prefill4j.backend.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

/**
 * {@code exp(x)} for {@code x <= 0} (softmax weights after subtracting the running maximum), vectorized and
 * reproducible: the same IEEE operations in every lane, in the scalar tail, in the interpreter and in compiled code
 * (fused multiply-adds are correctly rounded in all of them), unlike {@code Math.exp}, whose intrinsic may differ
 * from the interpreter by an ulp.
 *
 * <p>Method (the textbook one): {@code x = n ln2 + r} with {@code n = round(x / ln2)} and {@code |r| <= ln2 / 2};
 * {@code ln2} split in a short high part and a correction (Cody and Waite) so that {@code r} is exact to float
 * precision; {@code exp(r)} by its Taylor series to degree 7 (truncation error {@code 0.347^8 / 8! < 2e-9}, below
 * float rounding); {@code 2^n} built in the exponent bits. Inputs below {@link #FLOOR} are clamped to it
 * ({@code exp(-87) ~ 1.6e-38}, negligible beside the maximum's weight of 1). Measured error: 2 ulp at most against
 * {@code StrictMath.exp} over [-87, 0] (ExpOpsTest).
 */
final class ExpOps {
    /** Clamp: {@code 2^n} stays a normal float. */
    static final float FLOOR = -87f;
    private static final float LOG2E = 1.44269504088896341f;
    /** {@code ln 2} high part: 0.693359375 has 10 significant bits, so {@code n * LN2_HI} is exact for |n| < 2^14. */
    private static final float LN2_HI = 0.693359375f;
    private static final float LN2_LO = -2.12194440e-4f;
    /** 1.5 * 2^23: adding it rounds a float of magnitude below 2^22 to an integer (to nearest even). */
    private static final float ROUNDER = 12582912f;
    private static final int ROUNDER_BITS = Float.floatToRawIntBits(ROUNDER);
    private static final float C2 = 1f / 2, C3 = 1f / 6, C4 = 1f / 24, C5 = 1f / 120, C6 = 1f / 720, C7 = 1f / 5040;

    private ExpOps() {
    }

    /** {@return exp(x)} for {@code x <= 0}; the lane arithmetic of {@link #exp(FloatVector)}, one value. */
    static float exp(float x) {
        x = Math.max(x, FLOOR);
        float t = Math.fma(x, LOG2E, ROUNDER);
        int n = Float.floatToRawIntBits(t) - ROUNDER_BITS;
        float nf = t - ROUNDER;
        float r = Math.fma(nf, -LN2_HI, x);
        r = Math.fma(nf, -LN2_LO, r);
        float p = Math.fma(C7, r, C6);
        p = Math.fma(p, r, C5);
        p = Math.fma(p, r, C4);
        p = Math.fma(p, r, C3);
        p = Math.fma(p, r, C2);
        p = Math.fma(p, r, 1f);
        p = Math.fma(p, r, 1f);
        return p * Float.intBitsToFloat((n + 127) << 23);
    }

    /** {@return exp(x)} lane by lane, for lanes {@code <= 0}: the arithmetic of {@link #exp(float)} in every lane. */
    static FloatVector exp(FloatVector in) {
        var species = in.species();
        FloatVector x = in.max(FLOOR);
        FloatVector t = x.fma(LOG2E, ROUNDER);
        IntVector n2 = t.reinterpretAsInts().sub(ROUNDER_BITS - 127).lanewise(VectorOperators.LSHL, 23);
        FloatVector nf = t.sub(ROUNDER);
        FloatVector r = nf.fma(FloatVector.broadcast(species, -LN2_HI), x);
        r = nf.fma(FloatVector.broadcast(species, -LN2_LO), r);
        FloatVector p = r.fma(FloatVector.broadcast(species, C7), FloatVector.broadcast(species, C6));
        p = p.fma(r, FloatVector.broadcast(species, C5));
        p = p.fma(r, FloatVector.broadcast(species, C4));
        p = p.fma(r, FloatVector.broadcast(species, C3));
        p = p.fma(r, FloatVector.broadcast(species, C2));
        p = p.fma(r, FloatVector.broadcast(species, 1f));
        p = p.fma(r, FloatVector.broadcast(species, 1f));
        return p.mul(n2.reinterpretAsFloats());
    }
}
