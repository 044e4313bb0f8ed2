package dev.prefill4j.backend.cpu;

import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector API building blocks. The species is chosen once: the platform's preferred shape, or the bit size in
 * the system property {@code dev.prefill4j.cpu.vectorBits} (128, 256 or 512) to compare shapes.
 */
final class VectorOps {
    static final VectorSpecies<Float> FLOATS = species();
    /** Doubles in vectors of the same size: each float vector converts into two of them. */
    static final VectorSpecies<Double> DOUBLES = VectorSpecies.of(double.class, FLOATS.vectorShape());

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

    /** The lower half of {@link #FLOATS}' lanes: as many as {@link #DOUBLES} has. */
    private static final VectorMask<Float> LOWER_HALF = VectorMask.fromLong(FLOATS, (1L << DOUBLES.length()) - 1);

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
        int half = DOUBLES.length();
        for (int bound = FLOATS.loopBound(n); i < bound; i += FLOATS.length()) {
            // Each half of the float vector's lanes widened as part 0 of a whole float vector, the upper half read
            // and written through a mask. Not as part 1 (nor narrowed back as part -1): the Vector API moves such
            // parts with a slice, which C2 left as boxing Java code when it compiled this loop into CpuDevice's
            // prefill epilogue (-XX:+PrintIntrinsics "unbox failed"; about 170 young collections a second through
            // Q4_K_M pp512, 175 against 155 tokens/s, 2026-12-07). Not through half-width float vectors either:
            // every kernel's vectors pass the Vector API's mul and intoArray, and compiled code that had guessed
            // the kernels' class there failed on half-width ones; C2 compiles such a site in kernels compiled after
            // that as a call that boxes (Q6KColumns#section).
            DoubleVector g = (DoubleVector) FloatVector.fromArray(FLOATS, gate, go + i)
                    .convertShape(VectorOperators.F2D, DOUBLES, 0);
            DoubleVector h = (DoubleVector) FloatVector.fromArray(FLOATS, gate, go + i + half, LOWER_HALF)
                    .convertShape(VectorOperators.F2D, DOUBLES, 0);
            DoubleVector z = ExpOps.exp2(g.abs().mul(-ExpOps.LOG2E_D));
            DoubleVector y = ExpOps.exp2(h.abs().mul(-ExpOps.LOG2E_D));
            DoubleVector silu = g.mul(z.blend(1.0, g.compare(VectorOperators.GE, 0.0))).div(z.add(1.0));
            DoubleVector silu2 = h.mul(y.blend(1.0, h.compare(VectorOperators.GE, 0.0))).div(y.add(1.0));
            ((FloatVector) silu.convertShape(VectorOperators.D2F, FLOATS, 0))
                    .mul(FloatVector.fromArray(FLOATS, up, uo + i)).intoArray(gate, go + i, LOWER_HALF);
            ((FloatVector) silu2.convertShape(VectorOperators.D2F, FLOATS, 0))
                    .mul(FloatVector.fromArray(FLOATS, up, uo + i + half, LOWER_HALF))
                    .intoArray(gate, go + i + half, LOWER_HALF);
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
     * outputs wide) and six activation rows packed to a K step ({@code x[xo + 6 * t + j]} is row {@code j}'s element
     * {@code t}; {@link CpuDevice} packs a GEMM's rows once): six rows times four vectors of outputs, 24 accumulators in
     * registers, no horizontal sums; each step loads 4 weight vectors and broadcasts 6 activations, from 24 consecutive
     * bytes, for 24 FMAs. Each output is accumulated over k in order with FMA, so results do not depend on the JIT.
     * Writes {@code out[oo + j * outStride + i]}, j &lt; 6, i &lt; 4L; with {@code add}, continues from the sums
     * already there (the next slice of K), so slicing K keeps the bits. Read from the rows where they are (six rows
     * {@code K} floats apart), the same FMAs ran slower in the model: F16 pp512 at 62.4-71.4% of the FMA peak
     * measured right before each run against 66.4-74.7% packed, in thirteen alternating pairs over three forms of the
     * change, twelve in favour of packing (2026-12-05, Zen 5 VM; docs/performance-notes.md, Kernels).
     */
    static void kernel6x4(float[] wt, int wo, int k, float[] x, int xo, float[] out, int oo, int outStride,
                          boolean add) {
        int l = FLOATS.length();
        float[] s = add ? out : ZEROS;
        int so = add ? oo : 0;
        int ss = add ? outStride : 0;
        int stride = 4 * l;
        FloatVector c00 = start(s, so + 0 * ss + 0 * l), c01 = start(s, so + 0 * ss + 1 * l), c02 = start(s, so + 0 * ss + 2 * l), c03 = start(s, so + 0 * ss + 3 * l);
        FloatVector c10 = start(s, so + 1 * ss + 0 * l), c11 = start(s, so + 1 * ss + 1 * l), c12 = start(s, so + 1 * ss + 2 * l), c13 = start(s, so + 1 * ss + 3 * l);
        FloatVector c20 = start(s, so + 2 * ss + 0 * l), c21 = start(s, so + 2 * ss + 1 * l), c22 = start(s, so + 2 * ss + 2 * l), c23 = start(s, so + 2 * ss + 3 * l);
        FloatVector c30 = start(s, so + 3 * ss + 0 * l), c31 = start(s, so + 3 * ss + 1 * l), c32 = start(s, so + 3 * ss + 2 * l), c33 = start(s, so + 3 * ss + 3 * l);
        FloatVector c40 = start(s, so + 4 * ss + 0 * l), c41 = start(s, so + 4 * ss + 1 * l), c42 = start(s, so + 4 * ss + 2 * l), c43 = start(s, so + 4 * ss + 3 * l);
        FloatVector c50 = start(s, so + 5 * ss + 0 * l), c51 = start(s, so + 5 * ss + 1 * l), c52 = start(s, so + 5 * ss + 2 * l), c53 = start(s, so + 5 * ss + 3 * l);
        for (int t = 0; t < k; t++) {
            int w = wo + t * stride;
            FloatVector w0 = FloatVector.fromArray(FLOATS, wt, w);
            FloatVector w1 = FloatVector.fromArray(FLOATS, wt, w + l);
            FloatVector w2 = FloatVector.fromArray(FLOATS, wt, w + 2 * l);
            FloatVector w3 = FloatVector.fromArray(FLOATS, wt, w + 3 * l);
            FloatVector x0 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 0]);
            c00 = w0.fma(x0, c00);
            c01 = w1.fma(x0, c01);
            c02 = w2.fma(x0, c02);
            c03 = w3.fma(x0, c03);
            FloatVector x1 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 1]);
            c10 = w0.fma(x1, c10);
            c11 = w1.fma(x1, c11);
            c12 = w2.fma(x1, c12);
            c13 = w3.fma(x1, c13);
            FloatVector x2 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 2]);
            c20 = w0.fma(x2, c20);
            c21 = w1.fma(x2, c21);
            c22 = w2.fma(x2, c22);
            c23 = w3.fma(x2, c23);
            FloatVector x3 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 3]);
            c30 = w0.fma(x3, c30);
            c31 = w1.fma(x3, c31);
            c32 = w2.fma(x3, c32);
            c33 = w3.fma(x3, c33);
            FloatVector x4 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 4]);
            c40 = w0.fma(x4, c40);
            c41 = w1.fma(x4, c41);
            c42 = w2.fma(x4, c42);
            c43 = w3.fma(x4, c43);
            FloatVector x5 = FloatVector.broadcast(FLOATS, x[xo + 6 * t + 5]);
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
     * Lane permutes and blend masks of {@link #transpose8}'s stages, for block size {@code b}: {@code UP_b} moves lane
     * {@code l - b} to lane {@code l}, {@code DOWN_b} lane {@code l + b} to lane {@code l} (each where that lane exists),
     * and {@code SECOND_b} marks the lanes with {@code l & b != 0}. Fields, so that the JIT sees constants.
     */
    private static final VectorShuffle<Float> UP_4 = blockShuffle(4, true);
    private static final VectorShuffle<Float> UP_2 = blockShuffle(2, true);
    private static final VectorShuffle<Float> UP_1 = blockShuffle(1, true);
    private static final VectorShuffle<Float> DOWN_4 = blockShuffle(4, false);
    private static final VectorShuffle<Float> DOWN_2 = blockShuffle(2, false);
    private static final VectorShuffle<Float> DOWN_1 = blockShuffle(1, false);
    private static final VectorMask<Float> SECOND_4 = blockMask(4);
    private static final VectorMask<Float> SECOND_2 = blockMask(2);
    private static final VectorMask<Float> SECOND_1 = blockMask(1);

    private static VectorShuffle<Float> blockShuffle(int b, boolean up) {
        if (FLOATS.length() != 8) {
            return null;
        }
        return VectorShuffle.fromOp(FLOATS, l -> up ? ((l & b) != 0 ? l - b : l) : ((l & b) == 0 ? l + b : l));
    }

    private static VectorMask<Float> blockMask(int b) {
        if (FLOATS.length() != 8) {
            return null;
        }
        boolean[] second = new boolean[8];
        for (int l = 0; l < 8; l++) {
            second[l] = (l & b) != 0;
        }
        return VectorMask.fromArray(FLOATS, second, 0);
    }

    /**
     * Transposes an 8 x 8 tile, as {@link #transpose16} does a 16 x 16 one, for 8 float lanes (AVX2): three stages
     * that swap the off-diagonal blocks of every row pair (block size 4, 2, 1), each output row one lane permute and
     * one blend, since AVX2 has no two-vector permute: 24 permutes and 24 blends a tile, where a gather per column
     * took eight gathers a tile.
     * pp512 on the 1B files against the gathers, the two in one process in ABBA order, medians of 7 rounds, the same
     * logits: F16 1.078x, Q4_0 1.055x, Q8_0 1.01x (Zen 3 VM, 2 threads).
     */
    static void transpose8(float[] src, int srcOff, int srcStride, float[] dst, int dstOff, int dstStride) {
        FloatVector v0 = FloatVector.fromArray(FLOATS, src, srcOff);
        FloatVector v1 = FloatVector.fromArray(FLOATS, src, srcOff + srcStride);
        FloatVector v2 = FloatVector.fromArray(FLOATS, src, srcOff + 2 * srcStride);
        FloatVector v3 = FloatVector.fromArray(FLOATS, src, srcOff + 3 * srcStride);
        FloatVector v4 = FloatVector.fromArray(FLOATS, src, srcOff + 4 * srcStride);
        FloatVector v5 = FloatVector.fromArray(FLOATS, src, srcOff + 5 * srcStride);
        FloatVector v6 = FloatVector.fromArray(FLOATS, src, srcOff + 6 * srcStride);
        FloatVector v7 = FloatVector.fromArray(FLOATS, src, srcOff + 7 * srcStride);
        // block size 4: rows (0, 4), (1, 5), (2, 6), (3, 7)
        FloatVector t0 = v0.blend(v4.rearrange(UP_4), SECOND_4);
        v4 = v0.rearrange(DOWN_4).blend(v4, SECOND_4);
        FloatVector t1 = v1.blend(v5.rearrange(UP_4), SECOND_4);
        v5 = v1.rearrange(DOWN_4).blend(v5, SECOND_4);
        FloatVector t2 = v2.blend(v6.rearrange(UP_4), SECOND_4);
        v6 = v2.rearrange(DOWN_4).blend(v6, SECOND_4);
        FloatVector t3 = v3.blend(v7.rearrange(UP_4), SECOND_4);
        v7 = v3.rearrange(DOWN_4).blend(v7, SECOND_4);
        // block size 2: rows (0, 2), (1, 3), (4, 6), (5, 7)
        v0 = t0.blend(t2.rearrange(UP_2), SECOND_2);
        v2 = t0.rearrange(DOWN_2).blend(t2, SECOND_2);
        v1 = t1.blend(t3.rearrange(UP_2), SECOND_2);
        v3 = t1.rearrange(DOWN_2).blend(t3, SECOND_2);
        t0 = v4.blend(v6.rearrange(UP_2), SECOND_2);
        v6 = v4.rearrange(DOWN_2).blend(v6, SECOND_2);
        v4 = t0;
        t1 = v5.blend(v7.rearrange(UP_2), SECOND_2);
        v7 = v5.rearrange(DOWN_2).blend(v7, SECOND_2);
        v5 = t1;
        // block size 1: rows (0, 1), (2, 3), (4, 5), (6, 7); row i now holds column i
        v0.blend(v1.rearrange(UP_1), SECOND_1).intoArray(dst, dstOff);
        v0.rearrange(DOWN_1).blend(v1, SECOND_1).intoArray(dst, dstOff + dstStride);
        v2.blend(v3.rearrange(UP_1), SECOND_1).intoArray(dst, dstOff + 2 * dstStride);
        v2.rearrange(DOWN_1).blend(v3, SECOND_1).intoArray(dst, dstOff + 3 * dstStride);
        v4.blend(v5.rearrange(UP_1), SECOND_1).intoArray(dst, dstOff + 4 * dstStride);
        v4.rearrange(DOWN_1).blend(v5, SECOND_1).intoArray(dst, dstOff + 5 * dstStride);
        v6.blend(v7.rearrange(UP_1), SECOND_1).intoArray(dst, dstOff + 6 * dstStride);
        v6.rearrange(DOWN_1).blend(v7, SECOND_1).intoArray(dst, dstOff + 7 * dstStride);
    }

    /**
     * {@link #transpose8} over the tiles of eight rows of {@code src} (from {@code srcOff}, rows {@code srcStride}
     * apart) from column 0, as far as whole tiles reach within {@code len} columns: column {@code t} becomes {@code
     * dst[dstOff + t * dstStride ..]}, 8 floats. One loop here rather than in the caller, so that the JIT keeps the
     * permutes' constants in registers across the tiles.
     *
     * @return the first column not transposed
     */
    static int transpose8Columns(float[] src, int srcOff, int srcStride, int len, float[] dst, int dstOff,
                                 int dstStride) {
        int t = 0;
        for (; t + 8 <= len; t += 8) {
            transpose8(src, srcOff + t, srcStride, dst, dstOff + t * dstStride, dstStride);
        }
        return t;
    }

    /**
     * Index vectors of {@link #transpose16}'s stages, for block size {@code b}: {@code LOW_b} takes lane {@code l} of
     * the first row where {@code l & b == 0} and lane {@code l - b} of the second elsewhere; {@code HIGH_b} lane
     * {@code l + b} of the first and lane {@code l} of the second (indices 16 and up name the second vector). Fields,
     * not an array, so that the JIT sees constants.
     */
    private static final FloatVector LOW_8 = transposeIndices(8, true);
    private static final FloatVector LOW_4 = transposeIndices(4, true);
    private static final FloatVector LOW_2 = transposeIndices(2, true);
    private static final FloatVector LOW_1 = transposeIndices(1, true);
    private static final FloatVector HIGH_8 = transposeIndices(8, false);
    private static final FloatVector HIGH_4 = transposeIndices(4, false);
    private static final FloatVector HIGH_2 = transposeIndices(2, false);
    private static final FloatVector HIGH_1 = transposeIndices(1, false);

    private static FloatVector transposeIndices(int b, boolean low) {
        if (FLOATS.length() != 16) {
            return null;
        }
        float[] idx = new float[16];
        for (int l = 0; l < 16; l++) {
            idx[l] = low ? ((l & b) == 0 ? l : 16 + l - b) : ((l & b) == 0 ? l + b : 16 + l);
        }
        return FloatVector.fromArray(FLOATS, idx, 0);
    }

    /**
     * Transposes a 16 x 16 tile: row {@code i} of {@code src} ({@code src[srcOff + i * srcStride ..]}, 16 floats)
     * becomes column {@code i} of {@code dst} (lane {@code i} of {@code dst[dstOff + j * dstStride ..]}, row {@code j}).
     * Four stages of two-vector lane permutes, each swapping the off-diagonal blocks of every block pair (block size 8,
     * 4, 2, 1): 64 permutes a tile, where a gather per column read 16 cache lines for each vector. For 16 float
     * lanes only.
     */
    static void transpose16(float[] src, int srcOff, int srcStride, float[] dst, int dstOff, int dstStride) {
        FloatVector v0 = FloatVector.fromArray(FLOATS, src, srcOff + 0 * srcStride);
        FloatVector v1 = FloatVector.fromArray(FLOATS, src, srcOff + 1 * srcStride);
        FloatVector v2 = FloatVector.fromArray(FLOATS, src, srcOff + 2 * srcStride);
        FloatVector v3 = FloatVector.fromArray(FLOATS, src, srcOff + 3 * srcStride);
        FloatVector v4 = FloatVector.fromArray(FLOATS, src, srcOff + 4 * srcStride);
        FloatVector v5 = FloatVector.fromArray(FLOATS, src, srcOff + 5 * srcStride);
        FloatVector v6 = FloatVector.fromArray(FLOATS, src, srcOff + 6 * srcStride);
        FloatVector v7 = FloatVector.fromArray(FLOATS, src, srcOff + 7 * srcStride);
        FloatVector v8 = FloatVector.fromArray(FLOATS, src, srcOff + 8 * srcStride);
        FloatVector v9 = FloatVector.fromArray(FLOATS, src, srcOff + 9 * srcStride);
        FloatVector v10 = FloatVector.fromArray(FLOATS, src, srcOff + 10 * srcStride);
        FloatVector v11 = FloatVector.fromArray(FLOATS, src, srcOff + 11 * srcStride);
        FloatVector v12 = FloatVector.fromArray(FLOATS, src, srcOff + 12 * srcStride);
        FloatVector v13 = FloatVector.fromArray(FLOATS, src, srcOff + 13 * srcStride);
        FloatVector v14 = FloatVector.fromArray(FLOATS, src, srcOff + 14 * srcStride);
        FloatVector v15 = FloatVector.fromArray(FLOATS, src, srcOff + 15 * srcStride);
        // block size 8
        FloatVector t0_0 = LOW_8.selectFrom(v0, v8);
        v8 = HIGH_8.selectFrom(v0, v8);
        v0 = t0_0;
        FloatVector t0_1 = LOW_8.selectFrom(v1, v9);
        v9 = HIGH_8.selectFrom(v1, v9);
        v1 = t0_1;
        FloatVector t0_2 = LOW_8.selectFrom(v2, v10);
        v10 = HIGH_8.selectFrom(v2, v10);
        v2 = t0_2;
        FloatVector t0_3 = LOW_8.selectFrom(v3, v11);
        v11 = HIGH_8.selectFrom(v3, v11);
        v3 = t0_3;
        FloatVector t0_4 = LOW_8.selectFrom(v4, v12);
        v12 = HIGH_8.selectFrom(v4, v12);
        v4 = t0_4;
        FloatVector t0_5 = LOW_8.selectFrom(v5, v13);
        v13 = HIGH_8.selectFrom(v5, v13);
        v5 = t0_5;
        FloatVector t0_6 = LOW_8.selectFrom(v6, v14);
        v14 = HIGH_8.selectFrom(v6, v14);
        v6 = t0_6;
        FloatVector t0_7 = LOW_8.selectFrom(v7, v15);
        v15 = HIGH_8.selectFrom(v7, v15);
        v7 = t0_7;
        // block size 4
        FloatVector t1_0 = LOW_4.selectFrom(v0, v4);
        v4 = HIGH_4.selectFrom(v0, v4);
        v0 = t1_0;
        FloatVector t1_1 = LOW_4.selectFrom(v1, v5);
        v5 = HIGH_4.selectFrom(v1, v5);
        v1 = t1_1;
        FloatVector t1_2 = LOW_4.selectFrom(v2, v6);
        v6 = HIGH_4.selectFrom(v2, v6);
        v2 = t1_2;
        FloatVector t1_3 = LOW_4.selectFrom(v3, v7);
        v7 = HIGH_4.selectFrom(v3, v7);
        v3 = t1_3;
        FloatVector t1_8 = LOW_4.selectFrom(v8, v12);
        v12 = HIGH_4.selectFrom(v8, v12);
        v8 = t1_8;
        FloatVector t1_9 = LOW_4.selectFrom(v9, v13);
        v13 = HIGH_4.selectFrom(v9, v13);
        v9 = t1_9;
        FloatVector t1_10 = LOW_4.selectFrom(v10, v14);
        v14 = HIGH_4.selectFrom(v10, v14);
        v10 = t1_10;
        FloatVector t1_11 = LOW_4.selectFrom(v11, v15);
        v15 = HIGH_4.selectFrom(v11, v15);
        v11 = t1_11;
        // block size 2
        FloatVector t2_0 = LOW_2.selectFrom(v0, v2);
        v2 = HIGH_2.selectFrom(v0, v2);
        v0 = t2_0;
        FloatVector t2_1 = LOW_2.selectFrom(v1, v3);
        v3 = HIGH_2.selectFrom(v1, v3);
        v1 = t2_1;
        FloatVector t2_4 = LOW_2.selectFrom(v4, v6);
        v6 = HIGH_2.selectFrom(v4, v6);
        v4 = t2_4;
        FloatVector t2_5 = LOW_2.selectFrom(v5, v7);
        v7 = HIGH_2.selectFrom(v5, v7);
        v5 = t2_5;
        FloatVector t2_8 = LOW_2.selectFrom(v8, v10);
        v10 = HIGH_2.selectFrom(v8, v10);
        v8 = t2_8;
        FloatVector t2_9 = LOW_2.selectFrom(v9, v11);
        v11 = HIGH_2.selectFrom(v9, v11);
        v9 = t2_9;
        FloatVector t2_12 = LOW_2.selectFrom(v12, v14);
        v14 = HIGH_2.selectFrom(v12, v14);
        v12 = t2_12;
        FloatVector t2_13 = LOW_2.selectFrom(v13, v15);
        v15 = HIGH_2.selectFrom(v13, v15);
        v13 = t2_13;
        // block size 1
        FloatVector t3_0 = LOW_1.selectFrom(v0, v1);
        v1 = HIGH_1.selectFrom(v0, v1);
        v0 = t3_0;
        FloatVector t3_2 = LOW_1.selectFrom(v2, v3);
        v3 = HIGH_1.selectFrom(v2, v3);
        v2 = t3_2;
        FloatVector t3_4 = LOW_1.selectFrom(v4, v5);
        v5 = HIGH_1.selectFrom(v4, v5);
        v4 = t3_4;
        FloatVector t3_6 = LOW_1.selectFrom(v6, v7);
        v7 = HIGH_1.selectFrom(v6, v7);
        v6 = t3_6;
        FloatVector t3_8 = LOW_1.selectFrom(v8, v9);
        v9 = HIGH_1.selectFrom(v8, v9);
        v8 = t3_8;
        FloatVector t3_10 = LOW_1.selectFrom(v10, v11);
        v11 = HIGH_1.selectFrom(v10, v11);
        v10 = t3_10;
        FloatVector t3_12 = LOW_1.selectFrom(v12, v13);
        v13 = HIGH_1.selectFrom(v12, v13);
        v12 = t3_12;
        FloatVector t3_14 = LOW_1.selectFrom(v14, v15);
        v15 = HIGH_1.selectFrom(v14, v15);
        v14 = t3_14;
        v0.intoArray(dst, dstOff + 0 * dstStride);
        v1.intoArray(dst, dstOff + 1 * dstStride);
        v2.intoArray(dst, dstOff + 2 * dstStride);
        v3.intoArray(dst, dstOff + 3 * dstStride);
        v4.intoArray(dst, dstOff + 4 * dstStride);
        v5.intoArray(dst, dstOff + 5 * dstStride);
        v6.intoArray(dst, dstOff + 6 * dstStride);
        v7.intoArray(dst, dstOff + 7 * dstStride);
        v8.intoArray(dst, dstOff + 8 * dstStride);
        v9.intoArray(dst, dstOff + 9 * dstStride);
        v10.intoArray(dst, dstOff + 10 * dstStride);
        v11.intoArray(dst, dstOff + 11 * dstStride);
        v12.intoArray(dst, dstOff + 12 * dstStride);
        v13.intoArray(dst, dstOff + 13 * dstStride);
        v14.intoArray(dst, dstOff + 14 * dstStride);
        v15.intoArray(dst, dstOff + 15 * dstStride);
    }

    /**
     * {@link #kernel6x4} for machines of 16 vector registers (AVX2): four activation rows times two vectors of outputs,
     * 8 accumulators, the two weight vectors and the four broadcasts that C2 schedules ahead of the FMAs, 14 registers
     * (with six rows, 12 accumulators, C2 kept some of them on the stack in some compilations: 5 of the 12 in a GEMM
     * harness, where this kernel ran 1.28x and 1.59x the six-row one on the gate GEMM and 1.20-1.21x on whole pp512,
     * alternating in ABBA order; the six-row one was faster on the down projection alone, see
     * docs/performance-notes.md, Kernels). Same order of accumulation and {@code add} as {@link #kernel6x4}; the panel
     * is {@code wt[wo + t * 2L + i]}.
     */
    static void kernel4x2(float[] wt, int wo, int k, float[] x, int xo, int xStride, float[] out, int oo,
                          int outStride, boolean add) {
        int l = FLOATS.length();
        float[] s = add ? out : ZEROS;
        int so = add ? oo : 0;
        int ss = add ? outStride : 0;
        int stride = 2 * l;
        FloatVector c00 = start(s, so + 0 * ss), c01 = start(s, so + 0 * ss + l);
        FloatVector c10 = start(s, so + 1 * ss), c11 = start(s, so + 1 * ss + l);
        FloatVector c20 = start(s, so + 2 * ss), c21 = start(s, so + 2 * ss + l);
        FloatVector c30 = start(s, so + 3 * ss), c31 = start(s, so + 3 * ss + l);
        for (int t = 0; t < k; t++) {
            int w = wo + t * stride;
            FloatVector w0 = FloatVector.fromArray(FLOATS, wt, w);
            FloatVector w1 = FloatVector.fromArray(FLOATS, wt, w + l);
            FloatVector x0 = FloatVector.broadcast(FLOATS, x[xo + 0 * xStride + t]);
            c00 = w0.fma(x0, c00);
            c01 = w1.fma(x0, c01);
            FloatVector x1 = FloatVector.broadcast(FLOATS, x[xo + 1 * xStride + t]);
            c10 = w0.fma(x1, c10);
            c11 = w1.fma(x1, c11);
            FloatVector x2 = FloatVector.broadcast(FLOATS, x[xo + 2 * xStride + t]);
            c20 = w0.fma(x2, c20);
            c21 = w1.fma(x2, c21);
            FloatVector x3 = FloatVector.broadcast(FLOATS, x[xo + 3 * xStride + t]);
            c30 = w0.fma(x3, c30);
            c31 = w1.fma(x3, c31);
        }
        c00.intoArray(out, oo + 0 * outStride);
        c01.intoArray(out, oo + 0 * outStride + l);
        c10.intoArray(out, oo + 1 * outStride);
        c11.intoArray(out, oo + 1 * outStride + l);
        c20.intoArray(out, oo + 2 * outStride);
        c21.intoArray(out, oo + 2 * outStride + l);
        c30.intoArray(out, oo + 3 * outStride);
        c31.intoArray(out, oo + 3 * outStride + l);
    }

    /**
     * {@link #kernel6x4} in double precision, for {@link CpuDevice#matmulExact}'s prefill form: six activation rows
     * (floats, each widened to double as it is broadcast) times a transposed panel of four vectors of doubles ({@code
     * wt[wo + t * 4D + i]}, D double lanes), 24 double accumulators. A product of two floats is exact in double, and
     * each output is accumulated over k in order with FMA, so the result is the double-precision dot product however
     * the JIT compiles it. Writes {@code acc[ao + j * accStride + i]}; with {@code add}, continues from the sums
     * already there (the next slice of K). Written out beside {@link #kernel6x4} rather than shared with it: float
     * and double vectors meet only in their common supertype, through which C2 would box them.
     */
    static void kernel6x4Exact(double[] wt, int wo, int k, float[] x, int xo, int xStride, double[] acc, int ao,
                               int accStride, boolean add) {
        int l = DOUBLES.length();
        double[] s = add ? acc : DOUBLE_ZEROS;
        int so = add ? ao : 0;
        int ss = add ? accStride : 0;
        int stride = 4 * l;
        DoubleVector c00 = startExact(s, so + 0 * ss + 0 * l), c01 = startExact(s, so + 0 * ss + 1 * l), c02 = startExact(s, so + 0 * ss + 2 * l), c03 = startExact(s, so + 0 * ss + 3 * l);
        DoubleVector c10 = startExact(s, so + 1 * ss + 0 * l), c11 = startExact(s, so + 1 * ss + 1 * l), c12 = startExact(s, so + 1 * ss + 2 * l), c13 = startExact(s, so + 1 * ss + 3 * l);
        DoubleVector c20 = startExact(s, so + 2 * ss + 0 * l), c21 = startExact(s, so + 2 * ss + 1 * l), c22 = startExact(s, so + 2 * ss + 2 * l), c23 = startExact(s, so + 2 * ss + 3 * l);
        DoubleVector c30 = startExact(s, so + 3 * ss + 0 * l), c31 = startExact(s, so + 3 * ss + 1 * l), c32 = startExact(s, so + 3 * ss + 2 * l), c33 = startExact(s, so + 3 * ss + 3 * l);
        DoubleVector c40 = startExact(s, so + 4 * ss + 0 * l), c41 = startExact(s, so + 4 * ss + 1 * l), c42 = startExact(s, so + 4 * ss + 2 * l), c43 = startExact(s, so + 4 * ss + 3 * l);
        DoubleVector c50 = startExact(s, so + 5 * ss + 0 * l), c51 = startExact(s, so + 5 * ss + 1 * l), c52 = startExact(s, so + 5 * ss + 2 * l), c53 = startExact(s, so + 5 * ss + 3 * l);
        for (int t = 0; t < k; t++) {
            int w = wo + t * stride;
            DoubleVector w0 = DoubleVector.fromArray(DOUBLES, wt, w);
            DoubleVector w1 = DoubleVector.fromArray(DOUBLES, wt, w + l);
            DoubleVector w2 = DoubleVector.fromArray(DOUBLES, wt, w + 2 * l);
            DoubleVector w3 = DoubleVector.fromArray(DOUBLES, wt, w + 3 * l);
            DoubleVector x0 = DoubleVector.broadcast(DOUBLES, x[xo + 0 * xStride + t]);
            c00 = w0.fma(x0, c00);
            c01 = w1.fma(x0, c01);
            c02 = w2.fma(x0, c02);
            c03 = w3.fma(x0, c03);
            DoubleVector x1 = DoubleVector.broadcast(DOUBLES, x[xo + 1 * xStride + t]);
            c10 = w0.fma(x1, c10);
            c11 = w1.fma(x1, c11);
            c12 = w2.fma(x1, c12);
            c13 = w3.fma(x1, c13);
            DoubleVector x2 = DoubleVector.broadcast(DOUBLES, x[xo + 2 * xStride + t]);
            c20 = w0.fma(x2, c20);
            c21 = w1.fma(x2, c21);
            c22 = w2.fma(x2, c22);
            c23 = w3.fma(x2, c23);
            DoubleVector x3 = DoubleVector.broadcast(DOUBLES, x[xo + 3 * xStride + t]);
            c30 = w0.fma(x3, c30);
            c31 = w1.fma(x3, c31);
            c32 = w2.fma(x3, c32);
            c33 = w3.fma(x3, c33);
            DoubleVector x4 = DoubleVector.broadcast(DOUBLES, x[xo + 4 * xStride + t]);
            c40 = w0.fma(x4, c40);
            c41 = w1.fma(x4, c41);
            c42 = w2.fma(x4, c42);
            c43 = w3.fma(x4, c43);
            DoubleVector x5 = DoubleVector.broadcast(DOUBLES, x[xo + 5 * xStride + t]);
            c50 = w0.fma(x5, c50);
            c51 = w1.fma(x5, c51);
            c52 = w2.fma(x5, c52);
            c53 = w3.fma(x5, c53);
        }
        c00.intoArray(acc, ao + 0 * accStride + 0 * l);
        c01.intoArray(acc, ao + 0 * accStride + 1 * l);
        c02.intoArray(acc, ao + 0 * accStride + 2 * l);
        c03.intoArray(acc, ao + 0 * accStride + 3 * l);
        c10.intoArray(acc, ao + 1 * accStride + 0 * l);
        c11.intoArray(acc, ao + 1 * accStride + 1 * l);
        c12.intoArray(acc, ao + 1 * accStride + 2 * l);
        c13.intoArray(acc, ao + 1 * accStride + 3 * l);
        c20.intoArray(acc, ao + 2 * accStride + 0 * l);
        c21.intoArray(acc, ao + 2 * accStride + 1 * l);
        c22.intoArray(acc, ao + 2 * accStride + 2 * l);
        c23.intoArray(acc, ao + 2 * accStride + 3 * l);
        c30.intoArray(acc, ao + 3 * accStride + 0 * l);
        c31.intoArray(acc, ao + 3 * accStride + 1 * l);
        c32.intoArray(acc, ao + 3 * accStride + 2 * l);
        c33.intoArray(acc, ao + 3 * accStride + 3 * l);
        c40.intoArray(acc, ao + 4 * accStride + 0 * l);
        c41.intoArray(acc, ao + 4 * accStride + 1 * l);
        c42.intoArray(acc, ao + 4 * accStride + 2 * l);
        c43.intoArray(acc, ao + 4 * accStride + 3 * l);
        c50.intoArray(acc, ao + 5 * accStride + 0 * l);
        c51.intoArray(acc, ao + 5 * accStride + 1 * l);
        c52.intoArray(acc, ao + 5 * accStride + 2 * l);
        c53.intoArray(acc, ao + 5 * accStride + 3 * l);
    }

    /** Zeros {@link #kernel6x4Exact} starts from when it does not continue partial sums, as {@link #ZEROS}. */
    private static final double[] DOUBLE_ZEROS = new double[4 * DOUBLES.length()];

    /** {@link #start} for the double kernels: always a load, for the reason given there. */
    private static DoubleVector startExact(double[] s, int i) {
        return DoubleVector.fromArray(DOUBLES, s, i);
    }

    /** Zeros a micro-kernel's accumulators start from when it does not continue partial sums ({@link #start}). */
    private static final float[] ZEROS = new float[4 * FLOATS.length()];

    /**
     * {@return an accumulator a micro-kernel starts from: {@code s[i..]}, where {@code s} is {@code out} to continue
     * the partial sums there ({@code add}) or {@link #ZEROS}} Always a load, so that the choice is of an array and an
     * offset, not of a vector: with {@code add ? load : zero}, when both arms were compiled (C2 keeps the arms a
     * method's profile has seen, and when a kernel is compiled depends on what ran first) the kernel's vectors met in
     * a merge that C2 did not scalarize; kernel4x2 then compiled to 684 instructions with 231 stack accesses and 23
     * calls instead of 386, 86 and 14, and pp512 on the 1B Q4_0 file ran at a median of 0.88x (eight alternating
     * pairs of processes).
     */
    private static FloatVector start(float[] s, int i) {
        return FloatVector.fromArray(FLOATS, s, i);
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

    /** Floats in vectors of half the size: each converts into one vector of {@link #DOUBLES}. */
    private static final VectorSpecies<Float> HALF_FLOATS = VectorSpecies.of(float.class,
            VectorShape.forBitSize(FLOATS.vectorBitSize() / 2));

    /**
     * {@code sum a[ao+i] * b[bo+i]} accumulated in double: every float product is exact in double, so the result is
     * the exact dot product up to double rounding (1e-16 relative), rounded to float once. Four sums, each over
     * vectors of half as many floats widened to doubles, added in a fixed order, then the lanes in fixed order.
     * With one sum over whole float vectors (two conversions each), a decode step of the 1B F16 file with {@code
     * --activations quantized} ran at 4.0-4.7 tok/s.
     */
    static float dotExact(float[] a, int ao, float[] b, int bo, int n, double[] lanes) {
        int h = HALF_FLOATS.length();
        int i = 0;
        DoubleVector acc0 = DoubleVector.zero(DOUBLES);
        DoubleVector acc1 = acc0;
        DoubleVector acc2 = acc0;
        DoubleVector acc3 = acc0;
        for (; i + 4 * h <= n; i += 4 * h) {
            acc0 = widened(a, ao + i).fma(widened(b, bo + i), acc0);
            acc1 = widened(a, ao + i + h).fma(widened(b, bo + i + h), acc1);
            acc2 = widened(a, ao + i + 2 * h).fma(widened(b, bo + i + 2 * h), acc2);
            acc3 = widened(a, ao + i + 3 * h).fma(widened(b, bo + i + 3 * h), acc3);
        }
        for (; i + h <= n; i += h) {
            acc0 = widened(a, ao + i).fma(widened(b, bo + i), acc0);
        }
        acc0.add(acc1).add(acc2.add(acc3)).intoArray(lanes, 0);
        double s = 0;
        for (int q = 0; q < lanes.length; q++) {
            s += lanes[q];
        }
        for (; i < n; i++) {
            s += (double) a[ao + i] * b[bo + i];
        }
        return (float) s;
    }

    /** {@return {@code a[i..]}, half a float vector, widened to a vector of doubles} */
    private static DoubleVector widened(float[] a, int i) {
        return (DoubleVector) FloatVector.fromArray(HALF_FLOATS, a, i).convertShape(VectorOperators.F2D, DOUBLES, 0);
    }

    /**
     * Twelve independent FMA chains for {@code iterations} steps: the peak-FLOP/s calibration loop. Each chain is
     * the addend ({@code a += m * c}, as in the GEMM kernels), so x86's {@code vfmadd231ps} updates it in place; with
     * the chain as the multiplicand ({@code a = a * m + c}) C2 copied {@code c} into a fresh register for every FMA
     * and, with AVX2's 16 registers, spilled chains to the stack: 60-82 GFLOP/s per core against 89-100 of the same
     * loop in C on the same (Zen 3) core, so the percentages of peak came out too high.
     */
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
            a0 = m.fma(c, a0);
            a1 = m.fma(c, a1);
            a2 = m.fma(c, a2);
            a3 = m.fma(c, a3);
            a4 = m.fma(c, a4);
            a5 = m.fma(c, a5);
            a6 = m.fma(c, a6);
            a7 = m.fma(c, a7);
            a8 = m.fma(c, a8);
            a9 = m.fma(c, a9);
            a10 = m.fma(c, a10);
            a11 = m.fma(c, a11);
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
