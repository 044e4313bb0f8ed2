package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.AttentionRequest;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVPage;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Map;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** CPU kernels against scalar FP64 references on fresh random data, with outputs poisoned (NaN) beforehand. */
class CpuKernelsTest {
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** Plain float32 rows: the kernels' behaviour is tested here, formats are tested by their own modules. */
    static final class TestF32 implements Quantizer {
        @Override public String id() { return "test-f32"; }
        @Override public String apiVersion() { return ApiVersion.CURRENT; }
        @Override public int blockSize() { return 1; }
        @Override public int blockBytes() { return 4; }
        @Override public OptionalInt ggufType() { return OptionalInt.empty(); }
        @Override public void decode(MemorySegment s, long o, float[] d, int off, int n) { MemorySegment.copy(s, F32, o, d, off, n); }
        @Override public void encode(float[] s, int so, int n, MemorySegment d, long o) { MemorySegment.copy(s, so, d, F32, o, n); }
        @Override public float dot(MemorySegment s, long o, float[] x, int xo, int n) {
            float sum = 0;
            for (int i = 0; i < n; i++) {
                sum += s.get(F32, o + 4L * i) * x[xo + i];
            }
            return sum;
        }
    }

    static float[] random(SplittableRandom r, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            a[i] = (float) r.nextGaussian();
        }
        return a;
    }

    /**
     * Tolerance: float32 accumulation over k terms of unit-variance products: 1e-5 relative to sum|w*x| (the
     * accumulated rounding error bound k * 2^-24 * sum|w*x| is far above what appears in practice, but tight
     * enough to catch a wrong element, a skipped tail or a misplaced row).
     */
    @ParameterizedTest
    @CsvSource({"1,1,7,1", "1,5,64,2", "13,37,172,2", "64,256,256,2", "3,9,31,1", "130,68,100,2", "6,64,33,1",
        "13,128,172,2", "7,192,256,2",
        // K above one panel slice (2,048 steps of a 64-wide panel): kernels continue from the sums of the slice before.
        "13,64,4500,2",
        // Two panels of 16 lanes over K in two slices, rows packed six to a K step and one left over.
        "7,128,2100,1"})
    void matmulMatchesFp64(int rows, int n, int k, int threads) {
        SplittableRandom rnd = new SplittableRandom(rows * 31L + n * 7L + k);
        float[] w = random(rnd, n * k);
        float[] x = random(rnd, rows * k);
        MemorySegment data = Arena.ofAuto().allocate(4L * n * k);
        MemorySegment.copy(w, 0, data, F32, 0, w.length);
        float[] out = new float[rows * n];
        Arrays.fill(out, Float.NaN);
        float[] given = x.clone();
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            d.matmul(new WeightMatrix("w", new TestF32(), data, n, k), x, rows, out);
        }
        assertArrayEquals(given, x, "the activations as they were given (prefill packs rows in place, then back)");
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < n; o++) {
                double ref = 0;
                double mag = 0;
                for (int i = 0; i < k; i++) {
                    ref += (double) w[o * k + i] * x[r * k + i];
                    mag += Math.abs((double) w[o * k + i] * x[r * k + i]);
                }
                assertEquals(ref, out[r * n + o], 1e-5 * mag + 1e-30, "row " + r + " out " + o);
            }
        }
    }

    /**
     * The rows after a prompt's last full group of the panel kernel (six rows, or four with 8 lanes) go through that
     * kernel too, padded with zero rows: each gets the bits it gets as a row of a full group. Prompts of 7 to 11 rows
     * (tails of 1 to 5) against one of 12, over two panels, with K in one slice and in three (the tail's outputs
     * continuing from their sums).
     */
    @ParameterizedTest
    @CsvSource({"172", "4500"})
    void rowsAfterTheLastGroupHaveTheBitsOfAFullGroup(int k) {
        int n = 128;
        SplittableRandom rnd = new SplittableRandom(k);
        float[] w = random(rnd, n * k);
        float[] x = random(rnd, 12 * k);
        MemorySegment data = Arena.ofAuto().allocate(4L * n * k);
        MemorySegment.copy(w, 0, data, F32, 0, w.length);
        WeightMatrix m = new WeightMatrix("w", new TestF32(), data, n, k);
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(2))) {
            float[] all = new float[12 * n];
            d.matmul(m, x, 12, all);
            for (int rows = 7; rows <= 11; rows++) {
                float[] part = new float[rows * n];
                d.matmul(m, Arrays.copyOf(x, rows * k), rows, part);
                assertArrayEquals(Arrays.copyOf(all, rows * n), part, rows + " rows against 12");
            }
        }
    }

    /**
     * {@code matmulAll} of one input by three matrices (as a layer's query, key and value) against FP64, with the
     * tolerance of {@link #matmulMatchesFp64}, and bit for bit against one {@code matmul} each on the same device;
     * the input left as it was given. Shapes: outputs in whole panels (the rows packed once for all three, their
     * panels one set of tasks: a prompt's six or more rows, with K in one slice and in three, and rows after the last
     * group), one matrix not in whole panels, and too few rows (both one {@code matmul} at a time).
     */
    @ParameterizedTest
    @CsvSource({"13,128,64,172,2", "40,192,128,4500,2", "6,64,64,33,1", "13,128,37,172,2", "3,128,64,172,2"})
    void matmulAllHasTheBitsOfOneMatmulEach(int rows, int nq, int nkv, int k, int threads) {
        SplittableRandom rnd = new SplittableRandom(rows * 131L + nq * 17L + nkv * 5L + k);
        int[] ns = {nq, nkv, nkv};
        float[][] ws = new float[3][];
        WeightMatrix[] ms = new WeightMatrix[3];
        for (int m = 0; m < 3; m++) {
            ws[m] = random(rnd, ns[m] * k);
            MemorySegment data = Arena.ofAuto().allocate(4L * ns[m] * k);
            MemorySegment.copy(ws[m], 0, data, F32, 0, ws[m].length);
            ms[m] = new WeightMatrix("w" + m, new TestF32(), data, ns[m], k);
        }
        float[] x = random(rnd, rows * k);
        float[] given = x.clone();
        float[][] outs = new float[3][];
        for (int m = 0; m < 3; m++) {
            outs[m] = new float[rows * ns[m]];
            Arrays.fill(outs[m], Float.NaN);
        }
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            d.matmulAll(ms, x, rows, outs);
            assertArrayEquals(given, x, "the activations as they were given");
            for (int m = 0; m < 3; m++) {
                float[] one = new float[rows * ns[m]];
                d.matmul(ms[m], x, rows, one);
                assertArrayEquals(one, outs[m], "matrix " + m + " against its own matmul");
                for (int r = 0; r < rows; r++) {
                    for (int o = 0; o < ns[m]; o++) {
                        double ref = 0;
                        double mag = 0;
                        for (int i = 0; i < k; i++) {
                            ref += (double) ws[m][o * k + i] * x[r * k + i];
                            mag += Math.abs((double) ws[m][o * k + i] * x[r * k + i]);
                        }
                        assertEquals(ref, outs[m][r * ns[m] + o], 1e-5 * mag + 1e-30,
                                "matrix " + m + " row " + r + " out " + o);
                    }
                }
            }
        }
    }

    /**
     * Gate/up with SwiGLU in the epilogue, on shapes that take each of its paths (dots for 1-3 rows, runs of rows
     * through {@code dotPreparedRows} for one row of 2,048 or more, a last run shorter than the others, panels for six
     * or more rows and outputs a multiple of the panel, including K past one slice, and the unfused fallback): against
     * FP64 ({@code silu(g) * u} of FP64 dot products; tolerance: the products' 1e-5 bound of
     * {@link #matmulMatchesFp64} carried through, silu's slope being at most 1.1), and bit for bit against
     * {@code matmul} of each matrix followed by {@code swiglu} on the same device.
     */
    @ParameterizedTest
    @CsvSource({"1,64,172,2", "1,150,2048,2", "3,37,100,2", "5,64,64,2", "13,128,172,2", "6,64,33,1", "13,64,4500,2",
            "7,37,64,2"})
    void matmulSwiGLUIsMatmulsThenSwiGLU(int rows, int n, int k, int threads) {
        SplittableRandom rnd = new SplittableRandom(rows * 13L + n * 5L + k);
        float[] g = random(rnd, n * k);
        float[] u = random(rnd, n * k);
        float[] x = random(rnd, rows * k);
        MemorySegment gd = Arena.ofAuto().allocate(4L * n * k);
        MemorySegment ud = Arena.ofAuto().allocate(4L * n * k);
        MemorySegment.copy(g, 0, gd, F32, 0, g.length);
        MemorySegment.copy(u, 0, ud, F32, 0, u.length);
        WeightMatrix gate = new WeightMatrix("gate", new TestF32(), gd, n, k);
        WeightMatrix up = new WeightMatrix("up", new TestF32(), ud, n, k);
        float[] fused = new float[rows * n];
        float[] separate = new float[rows * n];
        float[] upOut = new float[rows * n];
        Arrays.fill(fused, Float.NaN);
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            d.matmulSwiGLU(gate, up, x, rows, fused);
            d.matmul(gate, x, rows, separate);
            d.matmul(up, x, rows, upOut);
            d.swiglu(separate, upOut, rows * n);
        }
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < n; o++) {
                double eg = 0, eu = 0, mg = 0, mu = 0;
                for (int i = 0; i < k; i++) {
                    eg += (double) g[o * k + i] * x[r * k + i];
                    eu += (double) u[o * k + i] * x[r * k + i];
                    mg += Math.abs((double) g[o * k + i] * x[r * k + i]);
                    mu += Math.abs((double) u[o * k + i] * x[r * k + i]);
                }
                double silu = eg / (1 + Math.exp(-eg));
                double tol = 1e-5 * (1.1 * mg * Math.abs(eu) + Math.abs(silu) * mu) + 1e-30;
                int i = r * n + o;
                assertEquals(silu * eu, fused[i], tol, "row " + r + " out " + o);
                assertEquals(Float.floatToRawIntBits(separate[i]), Float.floatToRawIntBits(fused[i]),
                        "row " + r + " out " + o + ": " + fused[i] + " fused vs " + separate[i]);
            }
        }
    }

    /**
     * The FFN in blocks of hidden columns, from a {@code hidden} buffer of only {@code rows * feedForwardBlock} floats,
     * gives the bits of {@code matmulSwiGLU} into a whole-width buffer then {@code matmul} of the down matrix (both
     * held to FP64 above): on panels (six rows or more) the down product's sums continue from block to block; with
     * fewer rows the device takes the whole width in a temporary. A block is one K slice of a panel: 2,048 columns
     * with 16 lanes, 8,192 with 8 and 16,384 with 4 (the narrow-vector runs), so ffn 32,768 is blocked at every width.
     */
    @ParameterizedTest
    @CsvSource({"13,64,8192,2", "6,128,8192,1", "3,64,8192,2", "1,64,8192,2", "7,64,4096,2", "13,64,32768,2"})
    void feedForwardInBlocksIsMatmulSwiGLUThenMatmul(int rows, int dim, int ffn, int threads) {
        SplittableRandom rnd = new SplittableRandom(rows * 31L + dim * 7L + ffn);
        WeightMatrix gate = f32Matrix("gate", random(rnd, ffn * dim), ffn, dim);
        WeightMatrix up = f32Matrix("up", random(rnd, ffn * dim), ffn, dim);
        WeightMatrix down = f32Matrix("down", random(rnd, dim * ffn), dim, ffn);
        float[] x = random(rnd, rows * dim);
        float[] blocked = new float[rows * dim];
        float[] expected = new float[rows * dim];
        Arrays.fill(blocked, Float.NaN);
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            int block = d.feedForwardBlock(gate, up, down);
            int slice = CpuDevice.PANEL_SLICE_FLOATS / CpuDevice.PANEL;
            assertEquals(slice < ffn ? slice : ffn, block, "one K slice of the down matrix's panels");
            float[] hidden = new float[rows * block];
            Arrays.fill(hidden, Float.NaN);
            float[] given = x.clone();
            d.feedForward(gate, up, down, x, rows, hidden, blocked);
            assertArrayEquals(given, x, "the activations as they were given");
            float[] whole = new float[rows * ffn];
            d.matmulSwiGLU(gate, up, x, rows, whole);
            d.matmul(down, whole, rows, expected);
            assertThrows(IllegalArgumentException.class,
                    () -> d.feedForward(gate, up, down, x, rows, new float[rows * block - 1], blocked));
        }
        for (int i = 0; i < expected.length; i++) {
            assertEquals(Float.floatToRawIntBits(expected[i]), Float.floatToRawIntBits(blocked[i]),
                    "row " + i / dim + " out " + i % dim + ": " + blocked[i] + " in blocks vs " + expected[i]);
        }
    }

    private static WeightMatrix f32Matrix(String name, float[] values, int rows, int cols) {
        MemorySegment data = Arena.ofAuto().allocate(4L * values.length);
        MemorySegment.copy(values, 0, data, F32, 0, values.length);
        return new WeightMatrix(name, new TestF32(), data, rows, cols);
    }

    /**
     * The exact variant: the FP64 dot product rounded once, so within one float ulp of the FP64 value. The last two
     * shapes take the prefill panels (with 16 float lanes): two groups of six rows and a leftover one, two panels of
     * outputs, and K in three slices, the last one partial; a float accumulation misses by many ulps there.
     */
    @ParameterizedTest
    @CsvSource({"1,5,64,2", "13,37,172,2", "6,9,31,1", "13,64,4163,2", "6,96,300,1"})
    void matmulExactIsTheCorrectlyRoundedDotProduct(int rows, int n, int k, int threads) {
        SplittableRandom rnd = new SplittableRandom(rows * 17L + n + k);
        float[] w = random(rnd, n * k);
        float[] x = random(rnd, rows * k);
        MemorySegment data = Arena.ofAuto().allocate(4L * n * k);
        MemorySegment.copy(w, 0, data, F32, 0, w.length);
        float[] out = new float[rows * n];
        Arrays.fill(out, Float.NaN);
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            d.matmulExact(new WeightMatrix("w", new TestF32(), data, n, k), x, rows, out);
        }
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < n; o++) {
                double ref = 0;
                for (int i = 0; i < k; i++) {
                    ref += (double) w[o * k + i] * x[r * k + i];
                }
                assertTrue(Math.abs(out[r * n + o] - ref) <= Math.ulp((float) ref), "row " + r + " out " + o);
            }
        }
    }

    /**
     * Row counts from 8 up take the parallel paths (norms four rows at a time, with a tail; RoPE's angle table, which a
     * thread keeps between calls), below 8 the calling thread's.
     */
    @ParameterizedTest
    @CsvSource({"3,2,8,8,0,10000,1", "2,4,16,8,5,500000,1", "1,8,64,64,1000,10000,1", "13,2,8,8,7,10000,2",
            "10,4,16,8,3,500000,1"})
    void normsRopeAndSwigluMatchFp64(int rows, int heads, int headDim, int ropeDim, int startPos, float base,
                                     int threads) {
        SplittableRandom rnd = new SplittableRandom(5);
        int width = heads * headDim;
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            float[] x = random(rnd, rows * width);
            float[] g = random(rnd, width);
            float[] out = new float[rows * width];
            Arrays.fill(out, Float.NaN);
            d.rmsNorm(x, rows, g, 1e-5f, out);
            for (int r = 0; r < rows; r++) {
                double ss = 0;
                for (int i = 0; i < width; i++) {
                    ss += (double) x[r * width + i] * x[r * width + i];
                }
                double s = 1 / Math.sqrt(ss / width + 1e-5);
                for (int i = 0; i < width; i++) {
                    assertEquals(x[r * width + i] * s * g[i], out[r * width + i], 1e-5 * Math.abs(x[r * width + i] * s * g[i]) + 1e-6);
                }
            }
            // Then the same positions again (the kept table), fewer of them, and positions one further on.
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos, base, null);
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos, base, null);
            assertRope(d, x, Math.max(1, rows - 1), heads, headDim, ropeDim, startPos, base, null);
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos + 1, base, null);
            // Frequency divisors (Llama 3.1's factors run from 1 to 8 across the pairs), then none again at the same
            // positions and other divisors: a kept table must not serve a call with other divisors.
            float[] divisors = new float[ropeDim / 2];
            float[] others = new float[ropeDim / 2];
            for (int i = 0; i < divisors.length; i++) {
                divisors[i] = 1 + 7f * i / Math.max(1, divisors.length - 1);
                others[i] = 4;
            }
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos + 1, base, divisors);
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos + 1, base, null);
            assertRope(d, x, rows, heads, headDim, ropeDim, startPos + 1, base, others);
            float[] gate = x.clone();
            float[] up = random(rnd, x.length);
            d.swiglu(gate, up, x.length);
            for (int i = 0; i < x.length; i++) {
                double e = x[i] / (1 + Math.exp(-x[i])) * up[i];
                assertEquals(e, gate[i], 1e-6 * Math.abs(e) + 1e-7);
            }
        }
    }

    private static void assertRope(ComputeDevice d, float[] x, int rows, int heads, int headDim, int ropeDim,
                                   int startPos, float base, float[] divisors) {
        int width = heads * headDim;
        float[] q = x.clone();
        if (divisors == null) {
            d.rope(q, rows, heads, headDim, ropeDim, startPos, base);
        } else {
            d.rope(q, rows, heads, headDim, ropeDim, startPos, base, divisors);
        }
        for (int r = 0; r < rows; r++) {
            for (int h = 0; h < heads; h++) {
                for (int i = 0; i < headDim / 2; i++) {
                    int o = r * width + h * headDim + 2 * i;
                    double x0 = x[o];
                    double x1 = x[o + 1];
                    double e0 = x0;
                    double e1 = x1;
                    if (2 * i < ropeDim) {
                        double theta = (startPos + r) * Math.pow(base, -2.0 * i / ropeDim)
                                / (divisors == null ? 1 : divisors[i]);
                        e0 = x0 * Math.cos(theta) - x1 * Math.sin(theta);
                        e1 = x0 * Math.sin(theta) + x1 * Math.cos(theta);
                    }
                    assertEquals(e0, q[o], 1e-5, "row " + r + " head " + h + " pair " + i);
                    assertEquals(e1, q[o + 1], 1e-5, "row " + r + " head " + h + " pair " + i);
                }
            }
        }
        for (int i = rows * width; i < x.length; i++) {
            assertEquals(x[i], q[i], "rows past " + rows + " untouched");
        }
    }

    /** A minimal paged cache for the kernel test, independent of the engine's store. */
    static final class ArrayCache implements KVCache {
        final KVConfig config;
        final MemorySegment k;
        final MemorySegment v;
        int length;

        ArrayCache(KVConfig config) {
            this.config = config;
            long bytes = config.elementType().rowBytes(config.kvDim()) * config.capacity();
            this.k = Arena.ofAuto().allocate(bytes);
            this.v = Arena.ofAuto().allocate(bytes);
        }

        @Override public KVConfig config() { return config; }
        @Override public int length(int layer) { return length; }
        @Override public void truncate(int n) { length = Math.min(length, n); }
        @Override public long bytesHeld() { return k.byteSize() * 2; }
        @Override public void close() { }

        @Override
        public void append(int layer, int position, int count, float[] kk, float[] vv) {
            long row = config.elementType().rowBytes(config.kvDim());
            for (int i = 0; i < count; i++) {
                config.elementType().encode(kk, i * config.kvDim(), config.kvDim(), k, row * (position + i));
                config.elementType().encode(vv, i * config.kvDim(), config.kvDim(), v, row * (position + i));
            }
            length = position + count;
        }

        @Override
        public KVPage page(int layer, int index) {
            long row = config.elementType().rowBytes(config.kvDim());
            int first = index * config.pageSize();
            int n = Math.min(config.pageSize(), length - first);
            return new KVPage(first, n, k.asSlice(row * first, row * n), v.asSlice(row * first, row * n),
                    config.elementType(), config.kvDim());
        }
    }

    /**
     * Causal GQA attention against a two-pass FP64 softmax over the same (decoded) K/V. Tolerance 2e-5 absolute:
     * outputs are convex combinations of unit-scale values, computed in float with an online softmax.
     */
    @ParameterizedTest
    @CsvSource({"5,0,8,4,8,4,F32,2", "70,0,4,2,16,16,F16,2", "1,99,8,2,8,32,F32,1", "40,25,6,3,64,7,F16,2",
        "33,10,8,4,16,16,Q8_0,2", "5,3,8,4,8,4,Q8_0,1", "3,200,8,2,16,16,F16,2", "1,700,4,4,32,8,Q8_0,2",
        // Split schedule: few queries over many pages (more pages than chunks), odd page sizes, wide heads.
        "1,3000,8,4,32,7,Q8_0,2", "64,2000,8,4,32,37,Q8_0,2", "7,1500,4,2,64,100,F16,2", "2,900,8,8,16,3,F32,1",
        "65,300,8,4,32,16,Q8_0,2"})
    void pagedAttentionMatchesFp64(int queries, int startPos, int heads, int kvHeads, int hd, int pageSize,
                                   KVElementType type, int threads) {
        SplittableRandom rnd = new SplittableRandom(queries + startPos);
        int total = startPos + queries;
        int kvDim = kvHeads * hd;
        ArrayCache cache = new ArrayCache(new KVConfig(1, kvDim, total + 3, type, pageSize, Map.of()));
        float[] k = random(rnd, total * kvDim);
        float[] v = random(rnd, total * kvDim);
        cache.append(0, 0, total, k, v);
        // What the kernel sees: the stored (possibly F16-rounded) values.
        float[] ks = new float[k.length];
        float[] vs = new float[v.length];
        long rowBytes = type.rowBytes(kvDim);
        for (int r = 0; r < total; r++) {
            type.decode(cache.k, rowBytes * r, 0, kvDim, ks, r * kvDim);
            type.decode(cache.v, rowBytes * r, 0, kvDim, vs, r * kvDim);
        }
        float[] q = random(rnd, queries * heads * hd);
        float[] out = new float[queries * heads * hd];
        Arrays.fill(out, Float.NaN);
        float scale = (float) (1 / Math.sqrt(hd));
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(threads))) {
            AttentionKernel kernel = new CpuAttention().create(d);
            kernel.attend(new AttentionRequest(q, queries, startPos, cache, 0, heads, kvHeads, hd, scale, out));
        }
        int group = heads / kvHeads;
        for (int t = 0; t < queries; t++) {
            for (int h = 0; h < heads; h++) {
                int kvh = h / group;
                int n = startPos + t + 1;
                double[] s = new double[n];
                double max = Double.NEGATIVE_INFINITY;
                for (int j = 0; j < n; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++) {
                        dot += (double) q[(t * heads + h) * hd + i] * ks[j * kvDim + kvh * hd + i];
                    }
                    s[j] = dot * scale;
                    max = Math.max(max, s[j]);
                }
                double z = 0;
                for (int j = 0; j < n; j++) {
                    s[j] = Math.exp(s[j] - max);
                    z += s[j];
                }
                for (int i = 0; i < hd; i++) {
                    double e = 0;
                    for (int j = 0; j < n; j++) {
                        e += s[j] / z * vs[j * kvDim + kvh * hd + i];
                    }
                    float got = out[(t * heads + h) * hd + i];
                    assertTrue(Math.abs(e - got) <= 2e-5, "query " + t + " head " + h + " dim " + i + ": " + got + " vs " + e);
                }
            }
        }
    }

    /**
     * SwiGLU against FP64 over [-40, 40], on a length that leaves a scalar tail and spans several tasks. Tolerance
     * relative 2.5e-7: the sigmoid product is computed in double and rounded to float once, then multiplied by
     * {@code up} in float. And bit for bit against that computation done with {@code StrictMath.exp} (the version the
     * vectorized one replaced; quantized activations need the same bits).
     */
    @org.junit.jupiter.api.Test
    void swigluMatchesFp64OverItsRange() {
        int n = 3 * 8192 + 5;
        float[] gate = new float[n];
        float[] up = new float[n];
        SplittableRandom rnd = new SplittableRandom(7);
        for (int i = 0; i < n; i++) {
            gate[i] = -40f + 80f * i / (n - 1);
            up[i] = (float) rnd.nextGaussian();
        }
        float[] g = gate.clone();
        try (CpuDevice d = new CpuDevice(2)) {
            d.swiglu(gate, up, n);
        }
        for (int i = 0; i < n; i++) {
            double e = g[i] / (1 + Math.exp(-(double) g[i])) * up[i];
            assertTrue(Math.abs(gate[i] - e) <= 2.5e-7 * Math.abs(e) + 1e-37,
                    "g = " + g[i] + ": " + gate[i] + " vs " + e);
            assertEquals((float) (g[i] / (1.0 + StrictMath.exp(-g[i]))) * up[i], gate[i], 0f, "g = " + g[i]);
        }
    }

    /** The attention's 2^x against StrictMath over its domain: at most 1 ulp apart, scalar and lanes the same bits. */
    @org.junit.jupiter.api.Test
    void exp2IsWithinOneUlpOfStrictMath() {
        int lanes = VectorOps.FLOATS.length();
        float[] x = new float[200_000 / lanes * lanes];
        for (int i = 0; i < x.length; i++) {
            x[i] = -130f * i / (x.length - 1); // past the clamp at -126
        }
        float[] a = new float[x.length];
        for (int i = 0; i < x.length; i += lanes) {
            ExpOps.exp2(jdk.incubator.vector.FloatVector.fromArray(VectorOps.FLOATS, x, i)).intoArray(a, i);
        }
        for (int i = 0; i < a.length; i++) {
            float e = (float) StrictMath.pow(2, Math.max(x[i], ExpOps.FLOOR));
            assertTrue(Math.abs(a[i] - e) <= Math.ulp(e), x[i] + ": " + a[i] + " vs " + e);
            assertEquals(a[i], ExpOps.exp2(x[i]), "scalar and vector lanes agree bit for bit");
        }
    }

    /**
     * A query verified inside a burst gets exactly the output it gets alone (burst verification is lossless only if
     * the attention of a row does not depend on the other rows of its pass).
     */
    @ParameterizedTest
    @CsvSource({"2000,16,Q8_0", "5000,256,F16", "40,4,F32"})
    void aQueryInABurstGetsTheSameOutputAsAlone(int depth, int pageSize, KVElementType type) {
        SplittableRandom rnd = new SplittableRandom(depth);
        int heads = 8, kvHeads = 4, hd = 32, burst = 8;
        int kvDim = kvHeads * hd;
        ArrayCache cache = new ArrayCache(new KVConfig(1, kvDim, depth + burst, type, pageSize, Map.of()));
        cache.append(0, 0, depth + burst, random(rnd, (depth + burst) * kvDim), random(rnd, (depth + burst) * kvDim));
        float[] q = random(rnd, burst * heads * hd);
        float[] all = new float[q.length];
        float scale = (float) (1 / Math.sqrt(hd));
        try (ComputeDevice d = new CpuBackend().create(new BackendContext(2))) {
            AttentionKernel kernel = new CpuAttention().create(d);
            kernel.attend(new AttentionRequest(q, burst, depth, cache, 0, heads, kvHeads, hd, scale, all));
            for (int t = 0; t < burst; t++) {
                float[] one = new float[heads * hd];
                float[] qt = Arrays.copyOfRange(q, t * heads * hd, (t + 1) * heads * hd);
                kernel.attend(new AttentionRequest(qt, 1, depth + t, cache, 0, heads, kvHeads, hd, scale, one));
                for (int i = 0; i < one.length; i++) {
                    assertEquals(Float.floatToRawIntBits(one[i]), Float.floatToRawIntBits(all[t * heads * hd + i]),
                            "query " + t + " element " + i);
                }
            }
        }
    }

    /**
     * Both prefill micro-kernel widths on every machine (a device uses one of them: {@code CpuDevice.PANEL}), the
     * four-row (two vectors) and six-row (four vectors) forms, over a transposed panel against FP64, with the
     * {@code add} continuation from sums left in the output (tolerance of {@link #matmulMatchesFp64}); outputs outside
     * the rows x panel tile stay untouched.
     */
    @ParameterizedTest
    @CsvSource({"2,4", "4,6"})
    void microKernelsOfBothPanelWidthsMatchFp64(int vectors, int rows) {
        int l = VectorOps.FLOATS.length();
        int panel = vectors * l;
        int k = 37;
        int outStride = panel + 5;
        SplittableRandom r = new SplittableRandom(vectors * 10L + rows);
        float[] wt = random(r, 3 + k * panel);
        float[] x = random(r, 2 + rows * (k + 1));
        float[] start = random(r, rows * outStride);
        float[] out = new float[rows * outStride + 1];
        Arrays.fill(out, Float.NaN);
        for (int j = 0; j < rows; j++) {
            System.arraycopy(start, j * outStride, out, j * outStride, panel);
        }
        int xStride = k + 1;
        if (rows == 4) {
            VectorOps.kernel4x2(wt, 3, k, x, 2, xStride, out, 0, outStride, true);
        } else {
            VectorOps.kernel6x4(wt, 3, k, packSix(x, 2, xStride, k, 1), 1, out, 0, outStride, true);
        }
        assertTileMatchesFp64(wt, 3, panel, k, x, 2, xStride, start, out, outStride, rows);
    }

    /**
     * {@code out}'s {@code rows} x {@code panel} tile ({@code outStride} a row) is {@code start} plus the FP64 products
     * of the panel at {@code wt[wo + t * panel + i]} with the rows at {@code x[xo + j * xStride + t]} (tolerance of
     * {@link #matmulMatchesFp64}); the rest of each row is untouched (NaN).
     */
    private static void assertTileMatchesFp64(float[] wt, int wo, int panel, int k, float[] x, int xo, int xStride,
                                              float[] start, float[] out, int outStride, int rows) {
        for (int j = 0; j < rows; j++) {
            for (int i = 0; i < outStride; i++) {
                if (i >= panel) {
                    assertTrue(Float.isNaN(out[j * outStride + i]), "row " + j + " element " + i + " written");
                    continue;
                }
                double ref = start[j * outStride + i];
                double mag = Math.abs(ref);
                for (int t = 0; t < k; t++) {
                    double p = (double) wt[wo + t * panel + i] * x[xo + j * xStride + t];
                    ref += p;
                    mag += Math.abs(p);
                }
                assertEquals(ref, out[j * outStride + i], 1e-5 * mag, "row " + j + " output " + i);
            }
        }
    }

    /** {@code x}'s six rows ({@code xStride} apart from {@code xo}, {@code k} elements) packed six to a K step. */
    private static float[] packSix(float[] x, int xo, int xStride, int k, int at) {
        float[] packed = new float[at + 6 * k];
        for (int j = 0; j < 6; j++) {
            for (int t = 0; t < k; t++) {
                packed[at + 6 * t + j] = x[xo + j * xStride + t];
            }
        }
        return packed;
    }

    /**
     * The six-row kernel over packed rows, starting from zero or continuing from sums in the output, against FP64
     * (tolerance of {@link #matmulMatchesFp64}); outputs outside the tile stay untouched.
     */
    @ParameterizedTest
    @CsvSource({"37,true", "37,false", "300,true", "300,false"})
    void sixRowKernelOverPackedRowsMatchesFp64(int k, boolean add) {
        int l = VectorOps.FLOATS.length();
        int panel = 4 * l;
        int outStride = panel + 3;
        int xStride = k + 5;
        SplittableRandom r = new SplittableRandom(k * 2L + (add ? 1 : 0));
        float[] wt = random(r, 3 + k * panel);
        float[] x = random(r, 6 * xStride);
        float[] start = random(r, 6 * outStride);
        float[] out = start.clone();
        for (int j = 0; j < 6; j++) {
            Arrays.fill(out, j * outStride + panel, (j + 1) * outStride, Float.NaN);
        }
        VectorOps.kernel6x4(wt, 3, k, packSix(x, 1, xStride, k, 2), 2, out, 0, outStride, add);
        assertTileMatchesFp64(wt, 3, panel, k, x, 1, xStride, add ? start : new float[start.length], out, outStride, 6);
    }

    /** A 16 x 16 tile of the prefill panels' transposition lands each element at its mirrored place, no other. */
    @org.junit.jupiter.api.Test
    void transpose16MirrorsATileAndLeavesTheRestAlone() {
        org.junit.jupiter.api.Assumptions.assumeTrue(VectorOps.FLOATS.length() == 16, "16 float lanes only");
        checkTranspose(16, VectorOps::transpose16);
    }

    /** The same for the 8 x 8 tiles of 8 float lanes (AVX2). */
    @org.junit.jupiter.api.Test
    void transpose8MirrorsATileAndLeavesTheRestAlone() {
        org.junit.jupiter.api.Assumptions.assumeTrue(VectorOps.FLOATS.length() == 8, "8 float lanes only");
        checkTranspose(8, VectorOps::transpose8);
    }

    private interface Transpose {
        void apply(float[] src, int srcOff, int srcStride, float[] dst, int dstOff, int dstStride);
    }

    private static void checkTranspose(int n, Transpose transpose) {
        SplittableRandom r = new SplittableRandom(n);
        int srcStride = n * 3 + 5;
        int dstStride = 64;
        float[] src = random(r, n * srcStride + n);
        float[] dst = new float[n * dstStride + n];
        Arrays.fill(dst, Float.NaN);
        transpose.apply(src, 7, srcStride, dst, 3, dstStride);
        for (int j = 0; j < n; j++) {
            for (int lane = 0; lane < n; lane++) {
                assertEquals(src[7 + lane * srcStride + j], dst[3 + j * dstStride + lane], "row " + j + ", lane " + lane);
            }
        }
        for (int i = 0; i < dst.length; i++) {
            int lane = (i - 3) % dstStride;
            if (i < 3 || lane >= n || (i - 3) / dstStride >= n) {
                assertTrue(Float.isNaN(dst[i]), "element " + i + " written outside the tile");
            }
        }
    }
}
