package dev.prefill4j.backend.cpu;

import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

/**
 * {@code 2^x} for {@code x <= 0}, vectorized and reproducible: the softmax's exponential. The attention scales its
 * queries by {@code log2(e)}, so its scores are in base-2 units and {@code exp(s - max) = 2^(s' - max')}; base 2 needs
 * no reduction by {@code ln 2}, which makes it cheaper than {@code exp} by a third. The same IEEE operations run in
 * every lane, in the scalar version, in the interpreter and in compiled code (fused multiply-adds are correctly rounded
 * in all of them), unlike {@code Math.exp} or {@code Math.pow}, whose intrinsics may differ from the interpreter by an
 * ulp.
 *
 * <p>Method: {@code x = n + f} with {@code n = round(x)} and {@code |f| <= 1/2}, both exact; {@code 2^f} by a degree-6
 * polynomial; {@code 2^n} built in the exponent bits. Rounding and the exponent bits come from one addition: adding
 * {@link #ROUNDER} ({@code 1.5 * 2^23 + 127}) to {@code x} leaves {@code 2^22 + 127 + n} in the low mantissa bits, so
 * shifting the sum's bits left by 23 gives {@code (n + 127) << 23}, the float {@code 2^n}. Inputs below {@link #FLOOR}
 * are clamped to it ({@code 2^-126 ~ 1.2e-38}, negligible beside the maximum's weight of 1, and still a normal float).
 *
 * <p>The polynomial's coefficients were fitted here (least squares at Chebyshev nodes on [-1/2, 1/2], reweighted
 * toward the smallest largest relative error): relative error 2e-9 in exact arithmetic, below float rounding.
 * Measured error: at most 1 ulp against {@code StrictMath.pow(2, x)} over [-126, 0] (CpuKernelsTest).
 */
final class ExpOps {
    /** Clamp: {@code 2^n} stays a normal float. */
    static final float FLOOR = -126f;
    /** {@code log2(e)}: the attention multiplies its queries by it. */
    static final float LOG2E = 1.44269504088896341f;
    /** {@code 1.5 * 2^23 + 127}: adding it rounds a float in [-2^21, 0] to an integer and biases it (see above). */
    private static final float ROUNDER = 12583039f;
    private static final float P1 = 0.6931471824645996f, P2 = 0.24022647738456726f, P3 = 0.055503323674201965f;
    private static final float P4 = 0.00961843691766262f, P5 = 0.0013398875016719103f, P6 = 0.00015353361959569156f;

    /** {@code log2(e)} in double, for {@link #exp2(DoubleVector)}. */
    static final double LOG2E_D = 1.4426950408889634;
    /** Double clamp: {@code 2^n} stays a normal double. */
    private static final double FLOOR_D = -1022;
    /** {@code 1.5 * 2^52 + 1023}: the double counterpart of {@link #ROUNDER}. */
    private static final double ROUNDER_D = 6755399441056767.0;
    /**
     * {@code ln(2)^k / k!}, k = 1..12: the Taylor series of {@code 2^f}, whose remainder on [-1/2, 1/2] is below
     * {@code 0.347^13 / 13! < 2e-16}.
     */
    private static final double[] D = {0.6931471805599453, 0.24022650695910072, 0.05550410866482158,
        0.009618129107628477, 0.0013333558146428443, 0.0001540353039338161, 1.5252733804059841e-05,
        1.321548679014431e-06, 1.01780860092397e-07, 7.054911620801123e-09, 4.4455382718708116e-10,
        2.5678435993488206e-11};

    private ExpOps() {
    }

    /**
     * {@return 2^x} for {@code x <= 0} in double precision (a few ulp), lane by lane: the method of
     * {@link #exp2(FloatVector)} with double constants and a degree-12 polynomial. For SwiGLU, whose sigmoid is
     * computed in double so that its float result is the one a correctly rounded computation gives, bar rare ties.
     * For vectors of {@link VectorOps#DOUBLES}.
     */
    static DoubleVector exp2(DoubleVector in) {
        // The species a constant, not in.species(): that asks the vector through AbstractVector.species, a site every
        // kernel's vectors pass. In one Q4_K_M prefill process of twelve, compiled code failed its class guess there
        // four times (JFR jdk.Deoptimization, at this method's broadcasts) and the broadcasts and fused multiply-adds
        // below then ran as their Java fallbacks (JFR allocation samples: double[] and Double512Vector made there,
        // about 1,000 young collections a second, pp512 74 against 152-171 tokens/s in the other eleven; 2026-12-07).
        var s = VectorOps.DOUBLES;
        DoubleVector x = in.blend(FLOOR_D, in.compare(VectorOperators.LT, FLOOR_D));
        DoubleVector t = x.add(ROUNDER_D);
        DoubleVector scale = t.reinterpretAsLongs().lanewise(VectorOperators.LSHL, 52).reinterpretAsDoubles();
        DoubleVector f = x.sub(t.sub(ROUNDER_D));
        DoubleVector p = DoubleVector.broadcast(s, D[11]);
        for (int k = 10; k >= 0; k--) {
            p = p.fma(f, DoubleVector.broadcast(s, D[k]));
        }
        return p.fma(f, DoubleVector.broadcast(s, 1.0)).mul(scale);
    }

    /** {@return 2^x} for {@code x <= 0}; the lane arithmetic of {@link #exp2(DoubleVector)}, one value. */
    static double exp2(double x) {
        x = x < FLOOR_D ? FLOOR_D : x;
        double t = x + ROUNDER_D;
        double scale = Double.longBitsToDouble(Double.doubleToRawLongBits(t) << 52);
        double f = x - (t - ROUNDER_D);
        double p = D[11];
        for (int k = 10; k >= 0; k--) {
            p = Math.fma(p, f, D[k]);
        }
        return Math.fma(p, f, 1.0) * scale;
    }

    /** {@return 2^x} for {@code x <= 0}; the lane arithmetic of {@link #exp2(FloatVector)}, one value. */
    static float exp2(float x) {
        x = x < FLOOR ? FLOOR : x;
        float t = x + ROUNDER;
        float scale = Float.intBitsToFloat(Float.floatToRawIntBits(t) << 23);
        float f = x - (t - ROUNDER);
        float p = Math.fma(P6, f, P5);
        p = Math.fma(p, f, P4);
        p = Math.fma(p, f, P3);
        p = Math.fma(p, f, P2);
        p = Math.fma(p, f, P1);
        p = Math.fma(p, f, 1f);
        return p * scale;
    }

    /**
     * {@return 2^x} lane by lane, for lanes {@code <= 0}: the arithmetic of {@link #exp2(float)} in every lane. For
     * vectors of {@link VectorOps#FLOATS}.
     */
    static FloatVector exp2(FloatVector in) {
        var species = VectorOps.FLOATS; // a constant, not in.species(): see exp2(DoubleVector)
        // A compare and a blend: FloatVector.max follows Math.max (NaN and signed zeros), six instructions on x86.
        FloatVector x = in.blend(FLOOR, in.compare(VectorOperators.LT, FLOOR));
        FloatVector t = x.add(ROUNDER);
        FloatVector scale = t.reinterpretAsInts().lanewise(VectorOperators.LSHL, 23).reinterpretAsFloats();
        FloatVector f = x.sub(t.sub(ROUNDER));
        FloatVector p = f.fma(FloatVector.broadcast(species, P6), FloatVector.broadcast(species, P5));
        p = p.fma(f, FloatVector.broadcast(species, P4));
        p = p.fma(f, FloatVector.broadcast(species, P3));
        p = p.fma(f, FloatVector.broadcast(species, P2));
        p = p.fma(f, FloatVector.broadcast(species, P1));
        p = p.fma(f, FloatVector.broadcast(species, 1f));
        return p.mul(scale);
    }
}
