package dev.prefill4j.backend.cpu;

import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector API building blocks. The species is chosen once: the platform's preferred shape, or the bit size in
 * the system property {@code dev.prefill4j.cpu.vectorBits} (128, 256 or 512) to compare shapes.
 */
final class VectorOps {
    static final VectorSpecies<Float> FLOATS = species();
    /** Doubles in vectors of the same size: each float vector converts into {@link #PARTS} of them. */
    static final VectorSpecies<Double> DOUBLES = VectorSpecies.of(double.class, FLOATS.vectorShape());
    static final int PARTS = FLOATS.length() / DOUBLES.length();

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
     * Sum of the lanes in a fixed order (lane 0 first), through {@code lanes} (scratch of the species' length). {@code reduceLanes(ADD)} leaves the order unspecified and
     * the JIT's intrinsic and the interpreter differ, so results would depend on warm-up; with quantized
     * activations a last-bit difference can flip an int8 rounding downstream.
     */
    static float sum(FloatVector v, float[] lanes) {
        v.intoArray(lanes, 0);
        float s = 0;
        for (int i = 0; i < lanes.length; i++) {
            s += lanes[i];
        }
        return s;
    }

    /** Float lanes as many as {@link #DOUBLES}' (SwiGLU widens them). */
    private static final VectorSpecies<Float> FLOATS_PER_DOUBLES =
            VectorSpecies.of(float.class, VectorShape.forBitSize(DOUBLES.length() * 32));

    /**
     * {@code gate[go + i] = silu(gate[go + i]) * up[uo + i]} for {@code i < n}: {@code silu(g) = g / (1 + e^-g)}
     * computed in double and rounded to float once, as the scalar {@code StrictMath.exp} version it replaces did
     * (quantized activations round this value to int8, so a last-bit difference shows in the logits): with
     * {@code z = e^-|g| <= 1} (so {@link ExpOps#exp2(DoubleVector)} stays in its domain), {@code g / (1 + z)} for
     * {@code g >= 0} and {@code g z / (1 + z)} below. Vector lanes and the scalar tail ({@link #swiglu(float, float)})
     * do the same operations, so a value does not depend on where it falls.
     */
    static void swiglu(float[] gate, int go, float[] up, int uo, int n) {
        int i = 0;
        for (int bound = DOUBLES.loopBound(n); i < bound; i += DOUBLES.length()) {
            DoubleVector g = (DoubleVector) FloatVector.fromArray(FLOATS_PER_DOUBLES, gate, go + i)
                    .convertShape(VectorOperators.F2D, DOUBLES, 0);
            DoubleVector z = ExpOps.exp2(g.abs().mul(-ExpOps.LOG2E_D));
            DoubleVector num = z.blend(1.0, g.compare(VectorOperators.GE, 0.0));
            ((FloatVector) g.mul(num).div(z.add(1.0)).convertShape(VectorOperators.D2F, FLOATS_PER_DOUBLES, 0))
                    .mul(FloatVector.fromArray(FLOATS_PER_DOUBLES, up, uo + i)).intoArray(gate, go + i);
        }
        for (; i < n; i++) {
            gate[go + i] = swiglu(gate[go + i], up[uo + i]);
        }
    }

    /** {@return silu(g) * u}: the lane arithmetic of {@link #swiglu(float[], int, float[], int, int)}, one value. */
    static float swiglu(float gate, float up) {
        double g = gate;
        double z = ExpOps.exp2(Math.abs(g) * -ExpOps.LOG2E_D);
        double num = g >= 0 ? 1.0 : z;
        return (float) (g * num / (z + 1.0)) * up;
    }

    /**
     * The GEMM micro-kernel: a 4 x 4 block of dot products, weight rows {@code w[wo + i*n ..]} (i &lt; 4) against
     * activation rows {@code x[xo + j*n ..]} (j &lt; 4), into {@code out[oo + j*outStride + i]}. Sixteen accumulators
     * stay in registers; each step loads 4 weight and 4 activation vectors for 16 FMAs.
     */
    static void dot4x4(float[] w, int wo, int n, float[] x, int xo, float[] out, int oo, int outStride, float[] lanes) {
        int bound = FLOATS.loopBound(n);
        FloatVector a00 = FloatVector.zero(FLOATS), a01 = a00, a02 = a00, a03 = a00;
        FloatVector a10 = a00, a11 = a00, a12 = a00, a13 = a00;
        FloatVector a20 = a00, a21 = a00, a22 = a00, a23 = a00;
        FloatVector a30 = a00, a31 = a00, a32 = a00, a33 = a00;
        int i = 0;
        for (; i < bound; i += FLOATS.length()) {
            FloatVector w0 = FloatVector.fromArray(FLOATS, w, wo + i);
            FloatVector w1 = FloatVector.fromArray(FLOATS, w, wo + n + i);
            FloatVector w2 = FloatVector.fromArray(FLOATS, w, wo + 2 * n + i);
            FloatVector w3 = FloatVector.fromArray(FLOATS, w, wo + 3 * n + i);
            FloatVector x0 = FloatVector.fromArray(FLOATS, x, xo + i);
            FloatVector x1 = FloatVector.fromArray(FLOATS, x, xo + n + i);
            FloatVector x2 = FloatVector.fromArray(FLOATS, x, xo + 2 * n + i);
            FloatVector x3 = FloatVector.fromArray(FLOATS, x, xo + 3 * n + i);
            a00 = w0.fma(x0, a00);
            a01 = w1.fma(x0, a01);
            a02 = w2.fma(x0, a02);
            a03 = w3.fma(x0, a03);
            a10 = w0.fma(x1, a10);
            a11 = w1.fma(x1, a11);
            a12 = w2.fma(x1, a12);
            a13 = w3.fma(x1, a13);
            a20 = w0.fma(x2, a20);
            a21 = w1.fma(x2, a21);
            a22 = w2.fma(x2, a22);
            a23 = w3.fma(x2, a23);
            a30 = w0.fma(x3, a30);
            a31 = w1.fma(x3, a31);
            a32 = w2.fma(x3, a32);
            a33 = w3.fma(x3, a33);
        }
        // Explicit calls, no array: an array of vectors would force them onto the heap.
        int o1 = oo + outStride;
        int o2 = oo + 2 * outStride;
        int o3 = oo + 3 * outStride;
        out[oo] = finish(a00, w, wo, x, xo, i, n, lanes);
        out[oo + 1] = finish(a01, w, wo + n, x, xo, i, n, lanes);
        out[oo + 2] = finish(a02, w, wo + 2 * n, x, xo, i, n, lanes);
        out[oo + 3] = finish(a03, w, wo + 3 * n, x, xo, i, n, lanes);
        out[o1] = finish(a10, w, wo, x, xo + n, i, n, lanes);
        out[o1 + 1] = finish(a11, w, wo + n, x, xo + n, i, n, lanes);
        out[o1 + 2] = finish(a12, w, wo + 2 * n, x, xo + n, i, n, lanes);
        out[o1 + 3] = finish(a13, w, wo + 3 * n, x, xo + n, i, n, lanes);
        out[o2] = finish(a20, w, wo, x, xo + 2 * n, i, n, lanes);
        out[o2 + 1] = finish(a21, w, wo + n, x, xo + 2 * n, i, n, lanes);
        out[o2 + 2] = finish(a22, w, wo + 2 * n, x, xo + 2 * n, i, n, lanes);
        out[o2 + 3] = finish(a23, w, wo + 3 * n, x, xo + 2 * n, i, n, lanes);
        out[o3] = finish(a30, w, wo, x, xo + 3 * n, i, n, lanes);
        out[o3 + 1] = finish(a31, w, wo + n, x, xo + 3 * n, i, n, lanes);
        out[o3 + 2] = finish(a32, w, wo + 2 * n, x, xo + 3 * n, i, n, lanes);
        out[o3 + 3] = finish(a33, w, wo + 3 * n, x, xo + 3 * n, i, n, lanes);
    }

    /**
     * The prefill micro-kernel over a transposed weight panel {@code wt[wo + t * 4L + i]} (K-major, four vectors of
     * outputs wide): six activation rows times four vectors of outputs, 24 accumulators in registers, no horizontal
     * sums; each step loads 4 weight vectors and 6 activations for 24 FMAs. Each output is accumulated over k in order
     * with FMA, so results do not depend on the JIT. Writes {@code out[oo + j * outStride + i]}, j &lt; 6, i &lt; 4L;
     * with {@code add}, continues from the sums already there (the next slice of K), so slicing K keeps the bits.
     */
    static void kernel6x4(float[] wt, int wo, int k, float[] x, int xo, int xStride, float[] out, int oo,
                          int outStride, boolean add) {
        int l = FLOATS.length();
        int stride = 4 * l;
        FloatVector c00 = start(add, out, oo + 0 * outStride + 0 * l), c01 = start(add, out, oo + 0 * outStride + 1 * l), c02 = start(add, out, oo + 0 * outStride + 2 * l), c03 = start(add, out, oo + 0 * outStride + 3 * l);
        FloatVector c10 = start(add, out, oo + 1 * outStride + 0 * l), c11 = start(add, out, oo + 1 * outStride + 1 * l), c12 = start(add, out, oo + 1 * outStride + 2 * l), c13 = start(add, out, oo + 1 * outStride + 3 * l);
        FloatVector c20 = start(add, out, oo + 2 * outStride + 0 * l), c21 = start(add, out, oo + 2 * outStride + 1 * l), c22 = start(add, out, oo + 2 * outStride + 2 * l), c23 = start(add, out, oo + 2 * outStride + 3 * l);
        FloatVector c30 = start(add, out, oo + 3 * outStride + 0 * l), c31 = start(add, out, oo + 3 * outStride + 1 * l), c32 = start(add, out, oo + 3 * outStride + 2 * l), c33 = start(add, out, oo + 3 * outStride + 3 * l);
        FloatVector c40 = start(add, out, oo + 4 * outStride + 0 * l), c41 = start(add, out, oo + 4 * outStride + 1 * l), c42 = start(add, out, oo + 4 * outStride + 2 * l), c43 = start(add, out, oo + 4 * outStride + 3 * l);
        FloatVector c50 = start(add, out, oo + 5 * outStride + 0 * l), c51 = start(add, out, oo + 5 * outStride + 1 * l), c52 = start(add, out, oo + 5 * outStride + 2 * l), c53 = start(add, out, oo + 5 * outStride + 3 * l);
        for (int t = 0; t < k; t++) {
            int w = wo + t * stride;
            FloatVector w0 = FloatVector.fromArray(FLOATS, wt, w);
            FloatVector w1 = FloatVector.fromArray(FLOATS, wt, w + l);
            FloatVector w2 = FloatVector.fromArray(FLOATS, wt, w + 2 * l);
            FloatVector w3 = FloatVector.fromArray(FLOATS, wt, w + 3 * l);
            FloatVector x0 = FloatVector.broadcast(FLOATS, x[xo + 0 * xStride + t]);
            c00 = w0.fma(x0, c00);
            c01 = w1.fma(x0, c01);
            c02 = w2.fma(x0, c02);
            c03 = w3.fma(x0, c03);
            FloatVector x1 = FloatVector.broadcast(FLOATS, x[xo + 1 * xStride + t]);
            c10 = w0.fma(x1, c10);
            c11 = w1.fma(x1, c11);
            c12 = w2.fma(x1, c12);
            c13 = w3.fma(x1, c13);
            FloatVector x2 = FloatVector.broadcast(FLOATS, x[xo + 2 * xStride + t]);
            c20 = w0.fma(x2, c20);
            c21 = w1.fma(x2, c21);
            c22 = w2.fma(x2, c22);
            c23 = w3.fma(x2, c23);
            FloatVector x3 = FloatVector.broadcast(FLOATS, x[xo + 3 * xStride + t]);
            c30 = w0.fma(x3, c30);
            c31 = w1.fma(x3, c31);
            c32 = w2.fma(x3, c32);
            c33 = w3.fma(x3, c33);
            FloatVector x4 = FloatVector.broadcast(FLOATS, x[xo + 4 * xStride + t]);
            c40 = w0.fma(x4, c40);
            c41 = w1.fma(x4, c41);
            c42 = w2.fma(x4, c42);
            c43 = w3.fma(x4, c43);
            FloatVector x5 = FloatVector.broadcast(FLOATS, x[xo + 5 * xStride + t]);
            c50 = w0.fma(x5, c50);
            c51 = w1.fma(x5, c51);
            c52 = w2.fma(x5, c52);
            c53 = w3.fma(x5, c53);
        }
        c00.intoArray(out, oo + 0 * outStride + 0 * l);
        c01.intoArray(out, oo + 0 * outStride + 1 * l);
        c02.intoArray(out, oo + 0 * outStride + 2 * l);
        c03.intoArray(out, oo + 0 * outStride + 3 * l);
        c10.intoArray(out, oo + 1 * outStride + 0 * l);
        c11.intoArray(out, oo + 1 * outStride + 1 * l);
        c12.intoArray(out, oo + 1 * outStride + 2 * l);
        c13.intoArray(out, oo + 1 * outStride + 3 * l);
        c20.intoArray(out, oo + 2 * outStride + 0 * l);
        c21.intoArray(out, oo + 2 * outStride + 1 * l);
        c22.intoArray(out, oo + 2 * outStride + 2 * l);
        c23.intoArray(out, oo + 2 * outStride + 3 * l);
        c30.intoArray(out, oo + 3 * outStride + 0 * l);
        c31.intoArray(out, oo + 3 * outStride + 1 * l);
        c32.intoArray(out, oo + 3 * outStride + 2 * l);
        c33.intoArray(out, oo + 3 * outStride + 3 * l);
        c40.intoArray(out, oo + 4 * outStride + 0 * l);
        c41.intoArray(out, oo + 4 * outStride + 1 * l);
        c42.intoArray(out, oo + 4 * outStride + 2 * l);
        c43.intoArray(out, oo + 4 * outStride + 3 * l);
        c50.intoArray(out, oo + 5 * outStride + 0 * l);
        c51.intoArray(out, oo + 5 * outStride + 1 * l);
        c52.intoArray(out, oo + 5 * outStride + 2 * l);
        c53.intoArray(out, oo + 5 * outStride + 3 * l);
    }

    /**
     * One activation row against a transposed panel of four vectors of outputs (the leftover rows of a block); {@code
     * add} as in {@link #kernel6x4}.
     */
    static void kernel1x4(float[] wt, int wo, int k, float[] x, int xo, float[] out, int oo, boolean add) {
        int l = FLOATS.length();
        int stride = 4 * l;
        FloatVector c0 = start(add, out, oo), c1 = start(add, out, oo + l);
        FloatVector c2 = start(add, out, oo + 2 * l), c3 = start(add, out, oo + 3 * l);
        for (int t = 0; t < k; t++) {
            int w = wo + t * stride;
            FloatVector xv = FloatVector.broadcast(FLOATS, x[xo + t]);
            c0 = FloatVector.fromArray(FLOATS, wt, w).fma(xv, c0);
            c1 = FloatVector.fromArray(FLOATS, wt, w + l).fma(xv, c1);
            c2 = FloatVector.fromArray(FLOATS, wt, w + 2 * l).fma(xv, c2);
            c3 = FloatVector.fromArray(FLOATS, wt, w + 3 * l).fma(xv, c3);
        }
        c0.intoArray(out, oo);
        c1.intoArray(out, oo + l);
        c2.intoArray(out, oo + 2 * l);
        c3.intoArray(out, oo + 3 * l);
    }

    /** {@return the accumulator a micro-kernel starts from: zero, or the partial sums it left in {@code out[i..]}} */
    private static FloatVector start(boolean add, float[] out, int i) {
        return add ? FloatVector.fromArray(FLOATS, out, i) : FloatVector.zero(FLOATS);
    }

    /** Lane sum of {@code acc} plus the scalar tail {@code [from, n)} of one dot product. */
    private static float finish(FloatVector acc, float[] w, int wo, float[] x, int xo, int from, int n, float[] lanes) {
        float s = sum(acc, lanes);
        for (int t = from; t < n; t++) {
            s += w[wo + t] * x[xo + t];
        }
        return s;
    }

    /** {@code sum a[ao+i] * b[bo+i]} for {@code i < n}. */
    static float dot(float[] a, int ao, float[] b, int bo, int n, float[] lanes) {
        int i = 0;
        float sum = 0;
        int bound = FLOATS.loopBound(n);
        if (bound > 0) {
            FloatVector acc = FloatVector.zero(FLOATS);
            for (; i < bound; i += FLOATS.length()) {
                acc = FloatVector.fromArray(FLOATS, a, ao + i).fma(FloatVector.fromArray(FLOATS, b, bo + i), acc);
            }
            sum = sum(acc, lanes);
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
    static void dot4(float[] w, int wo, int n, float[] x, int xo, float[] out, int oo, float[] lanes) {
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
        float s0 = sum(a0, lanes);
        float s1 = sum(a1, lanes);
        float s2 = sum(a2, lanes);
        float s3 = sum(a3, lanes);
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

    /** {@code y[yo+i] += a * x[xo+i]} for {@code i < n}. */
    static void axpy(float a, float[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        int bound = FLOATS.loopBound(n);
        FloatVector av = FloatVector.broadcast(FLOATS, a);
        for (; i < bound; i += FLOATS.length()) {
            FloatVector.fromArray(FLOATS, x, xo + i).fma(av, FloatVector.fromArray(FLOATS, y, yo + i)).intoArray(y, yo + i);
        }
        for (; i < n; i++) {
            y[yo + i] = Math.fma(a, x[xo + i], y[yo + i]);
        }
    }

    /** {@code y[yo+i] *= a} for {@code i < n}. */
    static void scale(float[] y, int yo, float a, int n) {
        int i = 0;
        int bound = FLOATS.loopBound(n);
        for (; i < bound; i += FLOATS.length()) {
            FloatVector.fromArray(FLOATS, y, yo + i).mul(a).intoArray(y, yo + i);
        }
        for (; i < n; i++) {
            y[yo + i] *= a;
        }
    }

    /**
     * {@code sum a[ao+i] * b[bo+i]} accumulated in double: every float product is exact in double, so the result is
     * the exact dot product up to double rounding (1e-16 relative), rounded to float once. Lane sums in fixed order.
     */
    static float dotExact(float[] a, int ao, float[] b, int bo, int n, double[] lanes) {
        int i = 0;
        int bound = FLOATS.loopBound(n);
        DoubleVector acc = DoubleVector.zero(DOUBLES);
        for (; i < bound; i += FLOATS.length()) {
            FloatVector va = FloatVector.fromArray(FLOATS, a, ao + i);
            FloatVector vb = FloatVector.fromArray(FLOATS, b, bo + i);
            for (int p = 0; p < PARTS; p++) {
                DoubleVector da = (DoubleVector) va.convertShape(VectorOperators.F2D, DOUBLES, p);
                DoubleVector db = (DoubleVector) vb.convertShape(VectorOperators.F2D, DOUBLES, p);
                acc = da.fma(db, acc);
            }
        }
        acc.intoArray(lanes, 0);
        double s = 0;
        for (int l = 0; l < lanes.length; l++) {
            s += lanes[l];
        }
        for (; i < n; i++) {
            s += (double) a[ao + i] * b[bo + i];
        }
        return (float) s;
    }

    /** Twelve independent FMA chains for {@code iterations} steps: the peak-FLOP/s calibration loop. */
    static float fmaChains(int iterations) {
        FloatVector m = FloatVector.broadcast(FLOATS, 0.999999f);
        FloatVector c = FloatVector.broadcast(FLOATS, 1e-7f);
        // Distinct start values: identical chains could be merged by the compiler and counted twelve times.
        FloatVector a0 = FloatVector.broadcast(FLOATS, 1.00f);
        FloatVector a1 = FloatVector.broadcast(FLOATS, 1.01f);
        FloatVector a2 = FloatVector.broadcast(FLOATS, 1.02f);
        FloatVector a3 = FloatVector.broadcast(FLOATS, 1.03f);
        FloatVector a4 = FloatVector.broadcast(FLOATS, 1.04f);
        FloatVector a5 = FloatVector.broadcast(FLOATS, 1.05f);
        FloatVector a6 = FloatVector.broadcast(FLOATS, 1.06f);
        FloatVector a7 = FloatVector.broadcast(FLOATS, 1.07f);
        FloatVector a8 = FloatVector.broadcast(FLOATS, 1.08f);
        FloatVector a9 = FloatVector.broadcast(FLOATS, 1.09f);
        FloatVector a10 = FloatVector.broadcast(FLOATS, 1.10f);
        FloatVector a11 = FloatVector.broadcast(FLOATS, 1.11f);
        for (int i = 0; i < iterations; i++) {
            a0 = a0.fma(m, c);
            a1 = a1.fma(m, c);
            a2 = a2.fma(m, c);
            a3 = a3.fma(m, c);
            a4 = a4.fma(m, c);
            a5 = a5.fma(m, c);
            a6 = a6.fma(m, c);
            a7 = a7.fma(m, c);
            a8 = a8.fma(m, c);
            a9 = a9.fma(m, c);
            a10 = a10.fma(m, c);
            a11 = a11.fma(m, c);
        }
        return a0.add(a1).add(a2).add(a3).add(a4).add(a5).add(a6).add(a7).add(a8).add(a9).add(a10).add(a11)
                .lane(0);
    }

    /** Streams a segment with vector loads (bandwidth calibration); returns a value that keeps the loads live. */
    static float sumSegment(java.lang.foreign.MemorySegment seg) {
        FloatVector acc0 = FloatVector.zero(FLOATS);
        FloatVector acc1 = acc0;
        long step = FLOATS.vectorByteSize();
        long n = seg.byteSize() - seg.byteSize() % (2 * step);
        java.nio.ByteOrder order = java.nio.ByteOrder.nativeOrder();
        for (long o = 0; o < n; o += 2 * step) {
            acc0 = acc0.add(FloatVector.fromMemorySegment(FLOATS, seg, o, order));
            acc1 = acc1.add(FloatVector.fromMemorySegment(FLOATS, seg, o + step, order));
        }
        return acc0.add(acc1).lane(0);
    }
}
