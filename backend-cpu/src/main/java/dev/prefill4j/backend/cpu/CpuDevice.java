package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.IntConsumer;
import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

/**
 * The CPU device: the calling thread plus {@code threads - 1} daemon workers ({@link WorkerPool}: they spin between
 * parallel loops, so a decode step's hundred-odd loops do not each wait for a thread to wake). Each thread runs a
 * contiguous share of a loop's tasks, so it streams one stretch of a weight matrix, then helps with what is left of
 * the others', so a thread that starts late only takes fewer tasks.
 *
 * <p>GEMM has three shapes. Prefill (six or more activation rows, outputs a multiple of {@link #PANEL}): a task decodes
 * a panel of weight rows once, transposes it K-major into an L2-resident buffer and runs every block of six rows,
 * packed six to a K step once per GEMM (once for all the matrices of one {@link #matmulAll}), through {@link
 * VectorOps#kernel6x4} (24 accumulators, no horizontal sums; 16-lane vectors), or every block of four through {@link
 * VectorOps#kernel4x2} (8 accumulators, for AVX2's 16 registers). Decode steps (up to three rows): the format's fused
 * {@code dot}, weights read straight from the model file. Otherwise (odd shapes): weight tiles decoded row-major and
 * dot products four rows at a time, with lane sums in a fixed order. All accumulate each output in a fixed order, so
 * results do not depend on JIT warm-up.
 */
final class CpuDevice implements ComputeDevice {
    /** Bytes of decoded weights per tile: small enough to stay in L2 while all activation rows pass over it. */
    private static final int TILE_BYTES = 128 * 1024;
    /**
     * Floats of a transposed prefill panel that every group of activation rows runs over before the kernels move on
     * along K: 512 KiB, which stays in L2 beside the streaming activations. A whole panel of the FFN's down projection
     * (K = 8,192) is 2 MiB, the L2 of a core here, and was read from L3 once per row group: sliced, that GEMM took
     * 0.73-0.77x the time (in-process A/B, 2,048 x 8,192 Q4_0, 512 rows, same output bits). Slices of L1 size (32 KiB)
     * were slower (1.1-1.4x); K = 2,048 panels are one slice, as before.
     */
    static final int PANEL_SLICE_FLOATS = 128 * 1024;
    /**
     * Floats (one cache line) added to the stride of the rows a prefill panel is transposed from. Rows 2,048 or 8,192
     * floats apart all start in the same L1 set, so the 16 lines a column gather reads evicted each other and every
     * gather went to L2: the transposition took about a fifth of an F16 pp512.
     */
    private static final int ROW_PAD = 16;
    /** Up to this many activation rows, GEMM is a fused dot product per output (decode steps). */
    private static final int DOT_MAX_ROWS = 3;
    /**
     * Rows at least this long go through {@link dev.prefill4j.api.spi.Quantizer#dotPreparedRows} in one-row decode
     * steps, gate and up included. It was 4,096 (the down projection only) while the four-row dots boxed vectors at
     * the end of every group (C2's node-count inlining cutoff, since fixed), which cost short rows the most; at 2,048
     * (every projection of a 1B model), alternating processes, {@code bench -p 16 -n 32 -r 2 --profile}: Q8_0 tg32
     * 16.88, 17.22, 17.82 -> 20.64, 19.27, 19.78 tok/s (gate+up 21.3-22.1 -> 26.1-28.1 GB/s), F16 three pairs one
     * faster (12.37 -> 15.36) and two even, Q4_0, Q4_K_M and TQ2_0 even against their output matrix in the same
     * process (2026-12-04, Zen 5 VM).
     */
    private static final int ROWS_MIN_COLS = 2048;
    /**
     * Fused dot products {@link #warmUp} runs per format: past what HotSpot's tiered policy counts before it compiles a
     * method with C2 (its defaults: 5,000 invocations and 15,000 invocations plus loop back-edges,
     * {@code Tier4InvocationThreshold}/{@code Tier4CompileThreshold}).
     */
    private static final int WARM_UP_DOTS = 8192;
    /** Weight rows {@link #warmUp} reads of each matrix: a few pages, so it makes little of the model resident. */
    private static final int WARM_UP_ROWS = 64;
    /**
     * Outputs of a prefill panel: four vectors ({@link VectorOps#kernel6x4}'s 24 accumulators) where vectors have 16
     * lanes, which on x86 means AVX-512 and its 32 registers; two ({@link VectorOps#kernel4x2}) with narrower
     * vectors, where AVX2 has 16 registers and 6x4's accumulators spilled. System property {@code
     * dev.prefill4j.cpu.panelVectors} (2 or 4) overrides it, to compare the two on one machine.
     */
    static final int PANEL = panelVectors() * VectorOps.FLOATS.length();

    private final int threads;
    private final WorkerPool pool;
    /** Elements per SwiGLU task. */
    private static final int SWIGLU_CHUNK = 8192;
    private final ThreadLocal<float[]> tileBuffer = new ThreadLocal<>();
    /** Per thread: the up product of a panel, for SwiGLU in the GEMM's epilogue. */
    private final ThreadLocal<float[]> epilogueBuffer = new ThreadLocal<>();
    /** Per calling thread: the activations a decode product's format prepares ({@link #prepare}), and up's. */
    private final ThreadLocal<float[]> preparedBuffer = new ThreadLocal<>();
    private final ThreadLocal<float[]> upPreparedBuffer = new ThreadLocal<>();
    /** Per thread: a one-row decode step's activations on a cache-line boundary ({@link #alignedRow}). */
    private final ThreadLocal<float[]> rowBuffer = new ThreadLocal<>();
    /** Per worker thread: a decode task's up products, before SwiGLU joins them to the gate's. */
    private final ThreadLocal<float[]> upRowsBuffer = new ThreadLocal<>();
    /** {@link #exactPanel}'s transposed panel of doubles and its rows' double sums. */
    private final ThreadLocal<double[]> exactPanelBuffer = new ThreadLocal<>();
    private final ThreadLocal<double[]> exactSumBuffer = new ThreadLocal<>();

    /**
     * Whether one-row products (decode steps: {@link #matmul}, {@link #matmulSwiGLU} and {@link #matmulEncoded} of one
     * activation row) read a copy of the matrix its format laid out for them ({@link Quantizer#packForDecode}) where
     * it offers one (or a view of its own bytes that the format checked once: F16); a copy costs its size in memory,
     * except where it stands in for a file's matrix in every float32 product, prompts' included ({@link #promptCopy}:
     * the ternary formats), and takes the place of the file's pages. System property {@value #PACKED_PROPERTY}
     * ({@code false}) turns it off, to save that memory or to compare the two on one machine.
     */
    static final String PACKED_PROPERTY = "dev.prefill4j.cpu.packedDecode";
    static final boolean PACKED = !"false".equals(System.getProperty(PACKED_PROPERTY));
    /**
     * The packed copies, made at a matrix's first decode step (or its first product, {@link #promptCopy}), each in an
     * arena of its own, kept until {@link #close} (the warm-up's, of a few rows, until its end); null where a matrix's
     * format has none.
     */
    private final Map<WeightMatrix, Packed> packed = new IdentityHashMap<>();

    private record Packed(PackedMatrix matrix, Arena arena) {
    }

    /**
     * System property that turns on {@link #resident}'s copies of a file's matrices on huge pages: {@code true}. Off by
     * default: decode ran 5-14% faster with them on the Intel Xeon VM (Q8_0, Q4_K_M and Q4_0; F16 within its noise),
     * but bench's peak resident memory rose by up to 45 MiB, past the aim for Q4_K_M by 3-9 MiB in three runs
     * of four (docs/performance-notes.md, 2026-12-07). Taken only where {@link HugePageArena#available}: on 4 KiB pages
     * a copy reads no faster than the file's mapping (a plain read of either, 26-28 GB/s there).
     */
    static final String RESIDENT_PROPERTY = "dev.prefill4j.cpu.residentCopies";
    /**
     * Whether the packed decode copies lie on huge pages ({@link HugePageArena}): where they are available, by default
     * on Intel processors only, or as system property {@value HugePageArena#PROPERTY} says ({@code true} or {@code
     * false}). On the Intel Xeon VM Q4_0's decode ran a median 1.06x faster with them (six pairs, 2026-12-07); on the
     * Zen 5 VM the K-quants' copies on huge pages decoded slower in three pairs of three (tg16 23.88, 22.74, 30.40
     * against 24.70, 26.15, 33.22 tok/s, 2026-12-06; docs/performance-notes.md).
     */
    static final boolean HUGE_COPIES = HugePageArena.available()
            && ("true".equals(System.getProperty(HugePageArena.PROPERTY)) || System.getProperty(HugePageArena.PROPERTY)
                    == null && "GenuineIntel".equals(Blocks.CPU_VENDOR));
    /** Whether this device makes {@link #resident}'s copies. */
    private final boolean residentCopies;
    /** Each matrix {@link #resident} was asked for, and what products of it read; kept until {@link #close}. */
    private final Map<WeightMatrix, WeightMatrix> homes = new IdentityHashMap<>();
    /** The arenas of {@link #resident}'s copies. */
    private final List<Arena> residentArenas = new ArrayList<>();

    /** The calling thread's prepared activations of a packed product ({@link PackedMatrix#prepareActivations}). */
    private byte[] packedPrepared = new byte[0];
    /** The same for float32 activations ({@link PackedMatrix#prepareFloats}), and up's in a SwiGLU product. */
    private float[] packedFloats = new float[0];
    private float[] upPackedFloats = new float[0];

    CpuDevice(int threads) {
        this(threads, "true".equals(System.getProperty(RESIDENT_PROPERTY)));
    }

    /**
     * A device of {@code threads} threads.
     *
     * @param residentCopies whether {@link #resident} copies a file's matrices onto huge pages (where {@link
     *                       HugePageArena#available}); package-private: tests take both
     */
    CpuDevice(int threads, boolean residentCopies) {
        this.residentCopies = residentCopies && HugePageArena.available();
        this.threads = threads;
        this.pool = new WorkerPool(threads);
        // The C library call LineAlignment makes is linked and run once now, so that a product's first call does not
        // pay for linking it (the JDK loads and generates code for a downcall when it is linked).
        LineAlignment.floatsToLine(new float[LineAlignment.SLACK]);
    }

    @Override
    public String description() {
        return "cpu: " + threads + " thread(s), Vector API " + VectorOps.FLOATS.vectorBitSize() + "-bit, "
                + (LineAlignment.known() ? "buffers on cache lines"
                        : "buffers where the JVM put them (grant --enable-native-access=dev.prefill4j.backend.cpu)")
                + ", decode rows " + (Blocks.ONE_ROW_MAX_COUNT == 0 ? "in groups"
                        : "alone up to " + Blocks.ONE_ROW_MAX_COUNT + " elements")
                + " (-D" + Blocks.ONE_ROW_MAX_COUNT_PROPERTY + "), packed decode copies where formats offer them "
                + (PACKED ? "on" : "off") + " (-D" + PACKED_PROPERTY + "), huge pages under them "
                + (HUGE_COPIES ? "on" : "off") + " (" + HugePageArena.status() + "; -D" + HugePageArena.PROPERTY
                + "=true|false, by default on Intel processors), the other matrices copied onto huge pages "
                + (residentCopies ? "on" : "off") + " (-D" + RESIDENT_PROPERTY + "=true)";
    }

    private static int panelVectors() {
        String v = System.getProperty("dev.prefill4j.cpu.panelVectors");
        if (v == null) {
            return VectorOps.FLOATS.length() >= 16 ? 4 : 2;
        }
        return switch (v) {
            case "2" -> 2;
            case "4" -> 4;
            default -> throw new IllegalArgumentException("dev.prefill4j.cpu.panelVectors must be 2 or 4");
        };
    }

    @Override
    public int threads() {
        return threads;
    }

    @Override
    public void parallelFor(int tasks, IntConsumer task) {
        pool.run(tasks, task);
    }

    @Override
    public void matmul(WeightMatrix matrix, float[] x, int rows, float[] out) {
        WeightMatrix w = home(matrix);
        int panel = PANEL;
        if (rows >= 6 && w.rows() % panel == 0) {
            matmulPanels(w, x, rows, out, panel);
            return;
        }
        if (rows <= DOT_MAX_ROWS) {
            matmulDots(w, x, rows, out);
            return;
        }
        PackedMatrix copy = promptCopy(w);
        if (copy != null) {
            packedProduct(copy, x, rows, out);
            return;
        }
        int n = w.rows();
        int k = w.cols();
        long rowBytes = w.rowBytes();
        int tile = Math.max(4, Math.min(64, TILE_BYTES / (4 * k)) & ~3);
        // Enough tiles for every thread to get several, so uneven rows still balance.
        int balanced = Math.max(4, (n / (4 * threads)) & ~3);
        tile = Math.min(tile, balanced);
        int tileRows = tile;
        int tiles = (n + tileRows - 1) / tileRows;
        parallelFor(tiles, ti -> {
            int o0 = ti * tileRows;
            int o1 = Math.min(n, o0 + tileRows);
            float[] buf = buffer(tileRows * k);
            float[] lanes = new float[VectorOps.FLOATS.length()];
            for (int o = o0; o < o1; o++) {
                w.format().decode(w.data(), rowBytes * o, buf, (o - o0) * k, k);
            }
            int r = 0;
            for (; r + 4 <= rows; r += 4) {
                int o = o0;
                for (; o + 4 <= o1; o += 4) {
                    VectorOps.dot4x4(buf, (o - o0) * k, k, x, r * k, out, r * n + o, n, lanes);
                }
                for (; o < o1; o++) {
                    for (int j = r; j < r + 4; j++) {
                        out[j * n + o] = VectorOps.dot(buf, (o - o0) * k, x, j * k, k, lanes);
                    }
                }
            }
            for (; r < rows; r++) {
                int xo = r * k;
                int oo = r * n;
                int o = o0;
                for (; o + 4 <= o1; o += 4) {
                    VectorOps.dot4(buf, (o - o0) * k, k, x, xo, out, oo + o, lanes);
                }
                for (; o < o1; o++) {
                    out[oo + o] = VectorOps.dot(buf, (o - o0) * k, x, xo, k, lanes);
                }
            }
        });
    }

    /**
     * Prompts' rows (six or more) by matrices whose outputs are whole panels go through {@link #matmulPanels} together;
     * anything else one {@link #matmul} at a time.
     */
    @Override
    public void matmulAll(WeightMatrix[] matrices, float[] x, int rows, float[]... outs) {
        WeightMatrix[] ws = new WeightMatrix[matrices.length];
        Arrays.setAll(ws, m -> home(matrices[m]));
        boolean together = rows >= 6 && ws.length > 1 && ws.length == outs.length;
        for (WeightMatrix w : ws) {
            together &= w.rows() % PANEL == 0 && w.cols() == ws[0].cols();
        }
        if (together) {
            matmulPanels(ws, x, rows, outs, PANEL);
        } else {
            ComputeDevice.super.matmulAll(ws, x, rows, outs);
        }
    }

    @Override
    public void matmulExact(WeightMatrix matrix, float[] x, int rows, float[] out) {
        WeightMatrix w = home(matrix);
        if (rows >= 6 && VectorOps.FLOATS.length() == 16 && w.rows() % EXACT_PANEL == 0) {
            matmulExactPanels(w, x, rows, out);
            return;
        }
        int n = w.rows();
        int k = w.cols();
        long rowBytes = w.rowBytes();
        int tileRows = Math.max(1, Math.min(n, TILE_BYTES / (4 * k)));
        int tiles = (n + tileRows - 1) / tileRows;
        parallelFor(tiles, ti -> {
            int o0 = ti * tileRows;
            int o1 = Math.min(n, o0 + tileRows);
            float[] buf = buffer(tileRows * k);
            double[] lanes = new double[VectorOps.DOUBLES.length()];
            for (int o = o0; o < o1; o++) {
                w.format().decode(w.data(), rowBytes * o, buf, (o - o0) * k, k);
            }
            for (int r = 0; r < rows; r++) {
                for (int o = o0; o < o1; o++) {
                    out[r * n + o] = VectorOps.dotExact(buf, (o - o0) * k, x, r * k, k, lanes);
                }
            }
        });
    }

    /** Outputs of {@link #matmulExact}'s prefill panels: four vectors of doubles (32 with AVX-512). */
    private static final int EXACT_PANEL = 4 * VectorOps.DOUBLES.length();
    /** Doubles of a transposed exact panel per K slice: 512 KiB, the float panels' size. */
    private static final int EXACT_PANEL_SLICE_DOUBLES = 64 * 1024;

    /**
     * {@link #matmulExact} for prompts (six or more rows; 16 float lanes, whose 32 registers hold the 24 double
     * accumulators): the float GEMM's plan ({@link #matmulPanels}) in double precision. A task decodes its
     * {@link #EXACT_PANEL} weight rows a K slice at a time, widens them to doubles in a K-major panel (a gather per
     * column of eight rows), and runs every six activation rows over it with {@link VectorOps#kernel6x4Exact}; the
     * slices' sums stay in doubles until the last, then each output is rounded to float once. The quantized
     * activation modes use it for formats without an integer dot product; one dot product an output and row
     * ({@link VectorOps#dotExact}) took pp512 on the 1B F16 file with {@code --activations quantized} to 13.8 tok/s.
     */
    private void matmulExactPanels(WeightMatrix w, float[] x, int rows, float[] out) {
        if (exactKernelsReady.compareAndSet(false, true)) {
            readyExactKernels();
        }
        int panel = EXACT_PANEL;
        int block = w.format().blockSize();
        int slice = Math.max(block, EXACT_PANEL_SLICE_DOUBLES / panel / block * block);
        int rowStride = Math.min(slice, w.cols()) + ROW_PAD;
        int[] rowStarts = new int[VectorOps.DOUBLES.length()];
        for (int i = 0; i < rowStarts.length; i++) {
            rowStarts[i] = i * rowStride;
        }
        parallelFor(w.rows() / panel, pi -> exactPanel(w, x, rows, pi * panel, slice, rowStride, rowStarts, out));
    }

    /** Whether {@link #readyExactKernels} has run on this device. */
    private final AtomicBoolean exactKernelsReady = new AtomicBoolean();
    /** Short calls of each kernel {@link #readyExactKernels} and {@link #readyPanelKernels} make, half continuing sums. */
    private static final int EXACT_WARM_UP_CALLS = 2000;

    /**
     * Runs the exact kernel in short calls (16 steps of K), with and without continued sums, so that C2 compiles it
     * whole and with both arms of {@code add} as the first prompt starts, while little of the model is resident. Left
     * to the prompt's own calls (2,048 steps each), C2 compiled {@code kernel6x4Exact} three times, with arenas of
     * 24-34 MB each ({@code -XX:CompileCommand=MemStat}), the last well into the first prompt; readied here, twice,
     * both at its start.
     */
    private static void readyExactKernels() {
        int k = 16;
        double[] wt = new double[k * EXACT_PANEL];
        float[] x = warmUpRows(k);
        double[] acc = new double[6 * EXACT_PANEL];
        for (int i = 0; i < EXACT_WARM_UP_CALLS; i++) {
            VectorOps.kernel6x4Exact(wt, 0, k, x, 0, k, acc, 0, EXACT_PANEL, (i & 1) == 1);
        }
    }

    /** {@return six activation rows of {@code k} distinct values, for the warm-up calls} */
    private static float[] warmUpRows(int k) {
        float[] x = new float[6 * k];
        for (int i = 0; i < x.length; i++) {
            x[i] = i;
        }
        return x;
    }

    /** Whether {@link #readyPanelKernels} has run on this device. */
    private final AtomicBoolean panelKernelsReady = new AtomicBoolean();

    /**
     * {@link #readyExactKernels} for the float micro-kernel {@link #panelProduct} runs ({@link VectorOps#kernel6x4},
     * or with 8 lanes {@link VectorOps#kernel4x2}), at the first panel of a prompt. Left to the prompt's own calls, C2
     * compiled it from a profile in which only the first K slice (which starts from zero) had run; the down
     * projection's second slice then hit the untaken arm of {@code add} ({@code -Xlog:deoptimization}: {@code
     * unstable_if}), and it was compiled again in every process, with 21-35 MB of compiler arena, with the whole of a
     * synthetic model resident (2026-12-06).
     * Choosing the start without a branch (a loaded accumulator masked to zero) put {@code kernel6x4} past C2's node
     * count for inlining, and its vectors were boxed: 50 times slower ({@code KernelInliningTest} caught it).
     */
    private static void readyPanelKernels() {
        int k = 16;
        int panel = PANEL;
        float[] wt = new float[k * panel];
        float[] x = warmUpRows(k);
        float[] out = new float[6 * panel];
        for (int i = 0; i < EXACT_WARM_UP_CALLS; i++) {
            boolean add = (i & 1) == 1;
            if (panel == 4 * VectorOps.FLOATS.length()) {
                VectorOps.kernel6x4(wt, 0, k, x, 0, out, 0, panel, add);
            } else {
                VectorOps.kernel4x2(wt, 0, k, x, 0, k, out, 0, panel, add);
            }
        }
    }

    /**
     * Runs {@link VectorOps#swiglu} on its own until C2 compiles it, at the first panel of a prompt. Prompts' panels
     * run it inlined into their epilogue; decode steps call it on its own ({@link #swiglu(float[], int, float[], int)}),
     * and left to them its compilations (19.8 and 20.4 MB of arena, {@code -XX:CompileCommand=MemStat}) came at the
     * first decode step, on top of the whole resident model.
     */
    private static void readySwiGLU() {
        float[] gate = warmUpRows(64);
        float[] up = warmUpRows(64);
        for (int i = 0; i < 4 * EXACT_WARM_UP_CALLS; i++) {
            System.arraycopy(up, 0, gate, 0, 64);
            VectorOps.swiglu(gate, 0, up, 0, 64);
        }
    }

    /** Per worker thread: {@link #exactTailRows}' group of rows and its sums. */
    private final ThreadLocal<float[]> exactTailRowsBuffer = new ThreadLocal<>();
    private final ThreadLocal<double[]> exactTailSumBuffer = new ThreadLocal<>();

    /**
     * Rows {@code r0 .. r1} (fewer than six) of an exact panel's K slice from {@code t0}, through {@link
     * VectorOps#kernel6x4Exact} in a group of six whose other rows are zero, as {@link #tailRows} runs the float
     * GEMM's: the same sums in the same order as in a full group, and no one-row kernel for C2 to compile apart.
     */
    private void exactTailRows(double[] wt, int len, float[] x, int k, int t0, int r0, int r1, double[] acc,
                               boolean add) {
        int panel = EXACT_PANEL;
        int m = r1 - r0;
        float[] rows = buffer(exactTailRowsBuffer, 6 * len);
        double[] sums = doubles(exactTailSumBuffer, 6 * panel);
        for (int j = 0; j < 6; j++) {
            if (j < m) {
                System.arraycopy(x, (r0 + j) * k + t0, rows, j * len, len);
                if (add) {
                    System.arraycopy(acc, (r0 + j) * panel, sums, j * panel, panel);
                }
            } else {
                Arrays.fill(rows, j * len, (j + 1) * len, 0f);
            }
        }
        VectorOps.kernel6x4Exact(wt, 0, len, rows, 0, len, sums, 0, panel, add);
        System.arraycopy(sums, 0, acc, r0 * panel, m * panel);
    }

    /** One panel of {@link #matmulExactPanels}: outputs {@code [o0, o0 + EXACT_PANEL)} for every row. */
    private void exactPanel(WeightMatrix w, float[] x, int rows, int o0, int slice, int rowStride, int[] rowStarts,
            float[] out) {
        int panel = EXACT_PANEL;
        int k = w.cols();
        int n = w.rows();
        int lanes = VectorOps.DOUBLES.length();
        long rowBytes = w.rowBytes();
        float[] rowBuf = buffer(lanes * rowStride);
        double[] wt = doubles(exactPanelBuffer, panel * Math.min(slice, k));
        double[] acc = doubles(exactSumBuffer, rows * panel);
        for (int t0 = 0; t0 < k; t0 += slice) {
            int len = Math.min(slice, k - t0);
            long from = w.format().byteSize(t0);
            for (int i0 = 0; i0 < panel; i0 += lanes) {
                for (int i = 0; i < lanes; i++) {
                    w.format().decode(w.data(), rowBytes * (o0 + i0 + i) + from, rowBuf, i * rowStride, len);
                }
                for (int t = 0; t < len; t++) {
                    ((DoubleVector) FloatVector.fromArray(FloatVector.SPECIES_256, rowBuf, t, rowStarts, 0)
                            .convertShape(VectorOperators.F2D, VectorOps.DOUBLES, 0)).intoArray(wt, t * panel + i0);
                }
            }
            int r = 0;
            for (; r + 6 <= rows; r += 6) {
                VectorOps.kernel6x4Exact(wt, 0, len, x, r * k + t0, k, acc, r * panel, panel, t0 > 0);
            }
            if (r < rows) {
                exactTailRows(wt, len, x, k, t0, r, rows, acc, t0 > 0);
            }
        }
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < panel; i++) {
                out[r * n + o0 + i] = (float) acc[r * panel + i];
            }
        }
    }

    /**
     * Decode steps (at most {@value #DOT_MAX_ROWS} activation rows): the format's fused {@link Quantizer#dotPrepared}
     * per output and row, each activation row prepared once ({@link #prepare}; for most formats nothing, and their
     * {@code dotPrepared} is their {@code dot}), so the weights are read once, straight from the model file, and never
     * written out as floats. Tasks are runs of consecutive output rows, several per thread.
     */
    private void matmulDots(WeightMatrix w, float[] x, int rows, float[] out) {
        int n = w.rows();
        int k = w.cols();
        long rowBytes = w.rowBytes();
        var format = w.format();
        var data = w.data();
        PackedMatrix pm = rows == 1 && PACKED ? packed(w) : promptCopy(w);
        if (pm != null && pm.preparedFloats() > 0) {
            packedProduct(pm, x, rows, out);
            return;
        }
        int pl = format.preparedActivations(k);
        Aligned p = prepare(preparedBuffer, format, x, rows, k);
        float[] prepared = p.data();
        int at = p.at();
        if (rows == 1 && k >= ROWS_MIN_COLS) {
            // A task's long rows in one call, which a format may multiply several at a time (Quantizer.dotPreparedRows).
            int run = rowsRun(n, rowBytes);
            Aligned row = alignedRow(x, k);
            float[] xa = row.data();
            int xat = row.at();
            parallelFor((n + run - 1) / run, t -> {
                int o = t * run;
                format.dotPreparedRows(data, rowBytes * o, rowBytes, Math.min(run, n - o), xa, xat, prepared, at, k, out,
                        o);
            });
            return;
        }
        eachOutput(n, o -> {
            for (int r = 0; r < rows; r++) {
                out[r * n + o] = format.dotPrepared(data, rowBytes * o, x, r * k, prepared, at + r * pl, k);
            }
        });
    }

    /**
     * Runs the decode steps' fused dot products ({@link #matmulDots}, the path a one-row {@link #matmul} takes) on the
     * first {@value #WARM_UP_ROWS} rows of each matrix, and the format's one-row form ({@code dotPrepared}) on its
     * first row, until C2 has been asked to compile them. Its arena for one format's dot takes 13–42 MB (the packed
     * Q6_K dot the most); compiled during the first output projection, as they were before, that memory came on top of
     * the whole mapped model and set the process's peak resident size.
     * The activations are a fixed pseudo-random sequence in [-1, 1), so the profile C2 compiles from is a decode
     * step's: the real row length, every block taken.
     */
    @Override
    public void warmUp(List<WeightMatrix> matrices) {
        for (WeightMatrix matrix : matrices) {
            WeightMatrix w = home(matrix);
            int rows = Math.min(WARM_UP_ROWS, w.rows());
            var head = new WeightMatrix(w.name(), w.format(), w.data().asSlice(0, w.rowBytes() * rows), rows, w.cols());
            float[] x = new float[w.cols()];
            SplittableRandom random = new SplittableRandom(rows);
            for (int i = 0; i < x.length; i++) {
                x[i] = (float) (random.nextDouble() * 2 - 1);
            }
            float[] out = new float[rows];
            for (int done = 0; done < WARM_UP_DOTS; done += rows) {
                matmulDots(head, x, 1, out);
            }
            unpack(head);
            // The one-row form too (a run's odd row, each row of a decode step of two or three activation rows): where
            // every row is grouped (Blocks.ONE_ROW_MAX_COUNT 0) the loop above never reaches it, and Q4_K's one-row
            // kernel was compiled during the first generated tokens, its arena on top of the whole mapped model:
            // bench -m 1b-q4_k_m.gguf -p 512 -n 16 -r 2 peaked at 900.6-902.6 MiB (aim 898.7) against 890.7-891.0
            // with this (Intel Xeon VM, 2026-12-05). Called directly, half as many times (past C2's thresholds for
            // rows of 2,048 weights and more): `run -n 1` of that file took 3.73-3.87 s against 3.90-4.05 with this;
            // with a one-row matmulDots a call, WARM_UP_DOTS times, 4.01-4.27.
            var format = w.format();
            float[] prepared = new float[format.preparedActivations(w.cols())];
            format.prepareActivations(x, 0, w.cols(), prepared, 0);
            for (int done = 0; done < WARM_UP_DOTS / 2; done++) {
                format.dotPrepared(head.data(), 0, x, 0, prepared, 0, w.cols());
            }
        }
    }

    /**
     * Floats in a thread's buffer from index {@code at}, which starts a cache line where {@link LineAlignment} knows
     * addresses: a decode step's prepared activations (row {@code r}'s at {@code at + r * preparedActivations(k)}), or
     * a copy of its activation row ({@link #alignedRow}).
     */
    private record Aligned(float[] data, int at) {
    }

    /**
     * {@return a one-row decode step's activations {@code x[0..k)} copied into this thread's buffer from a cache-line
     * boundary, or {@code x} itself where addresses are not known}: formats whose decode kernels read the activations
     * themselves (F16, Q8_0, Q4_0's long rows) then load one line a vector, as from prepared activations ({@link
     * #prepare}). The copy, 8-32 KiB, is a few microseconds against a product's hundreds.
     */
    private Aligned alignedRow(float[] x, int k) {
        if (!LineAlignment.known()) {
            return new Aligned(x, 0);
        }
        float[] b = buffer(rowBuffer, k + LineAlignment.SLACK);
        int at = LineAlignment.floatsToLine(b);
        System.arraycopy(x, 0, b, at, k);
        return new Aligned(b, at);
    }

    /**
     * {@return what {@code format} derives from each of {@code rows} activation rows of {@code k} elements: once for
     * all weight rows, in this thread's buffer of {@code perThread}, from its first element on a cache-line boundary
     * where that is known ({@link LineAlignment}: the 16-lane kernels' loads of it then read one line each). A decode
     * step allocates no array here (a new one a call was 8-32 KiB a product for the Q6_K dot on 8 lanes, which
     * prepares a copy of the activations)}
     */
    private static Aligned prepare(ThreadLocal<float[]> perThread, Quantizer format, float[] x, int rows, int k) {
        int pl = format.preparedActivations(k);
        float[] prepared = buffer(perThread, rows * pl + LineAlignment.SLACK);
        int at = pl > 0 ? LineAlignment.floatsToLine(prepared) : 0;
        for (int r = 0; pl > 0 && r < rows; r++) {
            format.prepareActivations(x, r * k, k, prepared, at + r * pl);
        }
        return new Aligned(prepared, at);
    }

    /**
     * Products with activations still encoded ({@link dev.prefill4j.api.spi.Quantizer#dotEncoded}), for any number of
     * rows, never decoded to floats, in tiles the format computes in one call ({@link
     * dev.prefill4j.api.spi.Quantizer#dotEncodedRows}): decode steps with long rows hand a task's run of rows over
     * with the one activation row, as {@link #matmulDots} does; otherwise a task's run of outputs ({@value
     * #ENCODED_TILE_OUTPUTS} for a prompt's rows) meets the activation rows {@value #ENCODED_ACT_ROWS} at a time, so
     * that both stay in L1 or L2 while they meet.
     */
    @Override
    public void matmulEncoded(WeightMatrix matrix, MemorySegment act, long actRowBytes, int rows, float[] out) {
        WeightMatrix w = home(matrix);
        int n = w.rows();
        int k = w.cols();
        long rowBytes = w.rowBytes();
        PackedMatrix p = rows == 1 && PACKED ? packed(w) : null;
        if (p != null && p.preparedBytes() > 0) {
            if (packedPrepared.length < p.preparedBytes()) {
                packedPrepared = new byte[p.preparedBytes()];
            }
            byte[] prepared = packedPrepared;
            p.prepareActivations(act, 0, prepared);
            int run = packedRun(p);
            parallelFor((n + run - 1) / run, t -> p.dotEncodedRows(t * run, Math.min(run, n - t * run), prepared, out,
                    t * run));
            return;
        }
        int run = rows == 1 && k >= ROWS_MIN_COLS ? rowsRun(n, rowBytes)
                : rows > DOT_MAX_ROWS ? Math.max(1, Math.min(ENCODED_TILE_OUTPUTS, n / (2 * threads)))
                : outputRun(n);
        parallelFor((n + run - 1) / run, t -> {
            int o = t * run;
            int m = Math.min(run, n - o);
            for (int r = 0; r < rows; r += ENCODED_ACT_ROWS) {
                w.format().dotEncodedRows(w.data(), rowBytes * o, rowBytes, m, act, actRowBytes * r, actRowBytes,
                        Math.min(ENCODED_ACT_ROWS, rows - r), k, out, r * n + o, n);
            }
        });
    }

    /**
     * Outputs a task of a prompt's {@link #matmulEncoded} takes (at least two tasks a thread): each call lays its
     * activation rows out once for all of them (K-quants convert their codes to floats in their kernels' order), so
     * longer runs spread that over more weight rows. 128 against the decode steps' 64 ({@link #outputRun}), measured
     * while that layout was a scalar loop, {@code bench -m 1b-q4_k_m.gguf -p 512 -n 0 -r 2 --activations quantized
     * --verify-tokens 0}, alternating in one build: pp512 20.67, 24.77 against 27.10, 33.41 tok/s (256: 27.48, 32.98); runs of about 256
     * KiB of weights instead (39-128 rows): 32.30-32.71 against 31.29-34.33, {@code ffn_down} slower; the 1B TQ2_0
     * file, whose tile lays nothing out, 108.80, 119.39 against 113.53, 119.23 (Zen 5 VM, 2026-12-05).
     */
    private static final int ENCODED_TILE_OUTPUTS = 128;

    /** Activation rows a {@link #matmulEncoded} tile takes: 16 Q8_K rows of 2,048 elements are 37 KiB. */
    private static final int ENCODED_ACT_ROWS = 16;

    /** {@return how many consecutive outputs a decode-step task takes: up to 64, at least eight tasks a thread} */
    private int outputRun(int n) {
        return Math.max(1, Math.min(64, n / (8 * threads)));
    }

    /** The weight bytes a decode task's run of long rows aims at ({@link #rowsRun}). */
    private static final long ROWS_TASK_BYTES = 512 * 1024;

    /**
     * {@return how many consecutive rows of {@code rowBytes} a decode-step task takes through {@code
     * dotPreparedRows}}: about {@value #ROWS_TASK_BYTES} bytes of weights, 64 rows at least and 256 at most, and at
     * least four tasks a thread. Formats that multiply four rows at a time take them a quarter of the run apart, so a
     * run is four streams of a quarter of its rows each; with 64-row runs for every matrix, 2,048-element Q8_0 rows
     * made streams of 35 KiB. In-process harness (rows of the 1B Q8_0 file streamed, two threads, alternating
     * processes): 256-row calls 32.2, 26.6, 26.8 GB/s against 21.8, 18.9, 23.2 for 64-row calls. {@code bench -p 16
     * -n 32 -r 2 --profile}, 64-row runs against this rule, alternating (2026-12-04): Q8_0 tg32 15.55, 15.79, 16.51
     * -> 14.70, 18.13, 18.10 tok/s; F16 11.83, 12.90, 13.16 -> 14.00, 13.36, 15.20 (and 256 rows for every matrix
     * against 64: Q8_0 5 of 8 pairs faster, median 1.08x, its 8,704-byte {@code ffn_down} rows no faster; F16 4 of 7
     * slower, its 16 KiB {@code ffn_down} rows slower: hence bytes, not rows).
     */
    private int rowsRun(int n, long rowBytes) {
        long want = Math.max(64, Math.min(256, ROWS_TASK_BYTES / rowBytes));
        return (int) Math.max(1, Math.min(want, n / (4 * threads)));
    }

    /** Runs {@code perOutput} for outputs {@code 0..n-1} on the workers, in tasks of consecutive outputs, several per thread. */
    private void eachOutput(int n, IntConsumer perOutput) {
        int run = outputRun(n);
        parallelFor((n + run - 1) / run, t -> {
            for (int o = t * run, o1 = Math.min(n, (t + 1) * run); o < o1; o++) {
                perOutput.accept(o);
            }
        });
    }

    /**
     * Prefill GEMM: tasks are panels of {@code panel} outputs; a task decodes its weight rows once, transposes them
     * into a K-major panel that stays in L2, and runs every group of six activation rows ({@link #packRows}) over it
     * with {@link VectorOps#kernel6x4}; the rows after the last group go through it too, packed once as a group padded
     * with zero rows ({@link PackedRows}).
     */
    private void matmulPanels(WeightMatrix w, float[] x, int rows, float[] out, int panel) {
        matmulPanels(new WeightMatrix[] {w}, x, rows, new float[][] {out}, panel);
    }

    /**
     * {@link #matmulPanels} of one input by several matrices of its width: the rows packed once for all of them
     * ({@link #packRows}), every matrix's panels one set of tasks (in order, so a thread's contiguous share streams
     * one stretch of weights), and a wait for the workers once instead of once a matrix.
     */
    private void matmulPanels(WeightMatrix[] ws, float[] x, int rows, float[][] outs, int panel) {
        int k = ws[0].cols();
        PanelPlan[] plans = new PanelPlan[ws.length];
        int[] firstTask = new int[ws.length + 1]; // matrix m's panels are tasks firstTask[m] .. firstTask[m + 1] - 1
        for (int m = 0; m < ws.length; m++) {
            plans[m] = new PanelPlan(ws[m], panel, promptCopy(ws[m]));
            firstTask[m + 1] = firstTask[m] + ws[m].rows() / panel;
        }
        PackedRows packed = packRows(x, rows, k, panel);
        try {
            parallelFor(firstTask[ws.length], task -> {
                int m = 0;
                while (task >= firstTask[m + 1]) {
                    m++;
                }
                int o0 = (task - firstTask[m]) * panel;
                panelProduct(ws[m], plans[m], x, packed, k, rows, o0, outs[m], o0, ws[m].rows(), 0, k);
            });
        } finally {
            unpackRows(packed, x, rows, k);
        }
    }

    /** Per worker thread: one six-row group while {@link #packRows} rearranges it. */
    private final ThreadLocal<float[]> groupBuffer = new ThreadLocal<>();
    /** Per calling thread: the rows after a product's last six-row group, packed as one ({@link PackedRows}). */
    private final ThreadLocal<float[]> rowsTailBuffer = new ThreadLocal<>();
    /** Per calling thread: {@link #feedForward}'s hidden rows after the last six-row group, packed as one. */
    private final ThreadLocal<float[]> hiddenTailBuffer = new ThreadLocal<>();

    /**
     * Activation rows laid out for {@link VectorOps#kernel6x4}: the full six-row groups packed where they are ({@link
     * #packRows}), and the rows after them (fewer than six) packed once more as a group of their own in {@code tail}
     * from {@code tailAt} (a cache-line boundary), {@code 6 * xStride} floats whose missing rows are zero, or {@code
     * tail} null where the rows are whole groups. Every panel's kernel reads that group as it reads a full one, where
     * each panel had packed and padded the tail rows itself, the 1B F16 file's pp512 spending about 1% of its time
     * there ({@code perf}, 2026-12-06).
     */
    private record PackedRows(float[] tail, int tailAt) { }

    /**
     * {@return room for a tail group of {@code xStride} columns in {@code perThread}, zeroed, or a packing without a
     * tail where {@code rows} are whole groups}
     */
    private static PackedRows tailPacking(ThreadLocal<float[]> perThread, int rows, int xStride) {
        if (rows % 6 == 0) {
            return new PackedRows(null, 0);
        }
        float[] tail = buffer(perThread, 6 * xStride + LineAlignment.SLACK);
        int at = LineAlignment.floatsToLine(tail);
        Arrays.fill(tail, at, at + 6 * xStride, 0f);
        return new PackedRows(tail, at);
    }

    /**
     * Rearranges {@code x}'s full groups of six rows ({@code xStride} floats each) in place for {@link
     * VectorOps#kernel6x4}: row {@code 6g + j}'s element {@code t} to {@code 6 * (g * xStride + t) + j}, the group's
     * own span; the rows after the last group stay where they are. One pass across the workers; every panel's kernels
     * then read one stream of activations instead of six. In place, so that it costs no memory beside a group per
     * thread (a copy of the rows took 2-4 MiB more, and the 1B Q4_0 file's peak past its aim); {@link #unpackRows}
     * puts the rows back before the product returns. The rows after the last group are packed into a group of their
     * own beside {@code x} ({@link PackedRows}), by one more task.
     *
     * @return the packing, or null where the six-row kernel does not run (and the rows stay as they are)
     */
    private PackedRows packRows(float[] x, int rows, int xStride, int panel) {
        if (panel != 4 * VectorOps.FLOATS.length() || rows < 6) {
            return null;
        }
        int groups = rows / 6;
        PackedRows packing = tailPacking(rowsTailBuffer, rows, xStride);
        parallelFor(groups + (packing.tail() == null ? 0 : 1), g -> {
            if (g == groups) { // the tail, into its own group
                for (int j = 0; 6 * groups + j < rows; j++) {
                    int at = (6 * groups + j) * xStride;
                    for (int t = 0; t < xStride; t++) {
                        packing.tail()[packing.tailAt() + 6 * t + j] = x[at + t];
                    }
                }
                return;
            }
            int base = 6 * g * xStride; // where the group starts in both layouts
            float[] group = buffer(groupBuffer, 6 * xStride);
            System.arraycopy(x, base, group, 0, 6 * xStride);
            for (int t = 0; t < xStride; t++) {
                x[base + 6 * t] = group[t];
                x[base + 6 * t + 1] = group[xStride + t];
                x[base + 6 * t + 2] = group[2 * xStride + t];
                x[base + 6 * t + 3] = group[3 * xStride + t];
                x[base + 6 * t + 4] = group[4 * xStride + t];
                x[base + 6 * t + 5] = group[5 * xStride + t];
            }
        });
        return packing;
    }

    /** Undoes {@link #packRows} where it {@code packed}: {@code x}'s full six-row groups back to rows. */
    private void unpackRows(PackedRows packed, float[] x, int rows, int xStride) {
        if (packed == null) {
            return;
        }
        parallelFor(rows / 6, g -> {
            int base = 6 * g * xStride;
            float[] group = buffer(groupBuffer, 6 * xStride);
            System.arraycopy(x, base, group, 0, 6 * xStride);
            for (int t = 0; t < xStride; t++) {
                x[base + t] = group[6 * t];
                x[base + xStride + t] = group[6 * t + 1];
                x[base + 2 * xStride + t] = group[6 * t + 2];
                x[base + 3 * xStride + t] = group[6 * t + 3];
                x[base + 4 * xStride + t] = group[6 * t + 4];
                x[base + 5 * xStride + t] = group[6 * t + 5];
            }
        });
    }

    /**
     * How {@link #panelProduct} walks K: slices of {@link #PANEL_SLICE_FLOATS} floats of transposed panel (whole
     * quantization blocks), where each of a vector's rows starts in the buffer it is decoded into, and the packed copy
     * the panels are decoded from instead of the matrix ({@link #promptCopy}), or null.
     */
    private record PanelPlan(int panel, int slice, int width, int rowStride, int[] rowStarts, PackedMatrix copy) {
        PanelPlan(WeightMatrix w, int panel, PackedMatrix copy) {
            this(panel, Math.max(w.format().blockSize(), PANEL_SLICE_FLOATS / panel / w.format().blockSize()
                    * w.format().blockSize()), w.cols(), copy);
        }

        private PanelPlan(int panel, int slice, int k, PackedMatrix copy) {
            this(panel, slice, Math.min(slice, k), Math.min(slice, k) + ROW_PAD, copy);
        }

        private PanelPlan(int panel, int slice, int width, int rowStride, PackedMatrix copy) {
            this(panel, slice, width, rowStride, rowStarts(rowStride), copy);
        }

        private static int[] rowStarts(int rowStride) {
            int[] starts = new int[VectorOps.FLOATS.length()];
            for (int i = 0; i < starts.length; i++) {
                starts[i] = i * rowStride;
            }
            return starts;
        }
    }

    /**
     * One panel of the prefill GEMM: {@code out[oo + r * outStride + i] = x[r] . w[o0 + i]} for {@code i < panel},
     * {@code r < rows}.
     */
    private void panelProduct(WeightMatrix w, PanelPlan plan, float[] x, PackedRows packed, int rows, int o0,
            float[] out, int oo, int outStride) {
        panelProduct(w, plan, x, packed, w.cols(), rows, o0, out, oo, outStride, 0, w.cols());
    }

    /**
     * {@link #panelProduct} over columns {@code [kFrom, kTo)} of {@code w} only ({@code kFrom} a multiple of the
     * plan's slice), from activations that hold just those columns, {@code xStride} floats a row: with {@code kFrom >
     * 0} each output continues the sum already in {@code out}, so running the column ranges of a matrix one after
     * another in order gives the bits of one call over all of them. {@code packed}: how {@code x}'s full six-row
     * groups and the rows after them are packed ({@link #packRows}, with the same {@code xStride}); null where fewer
     * than six rows or the two-vector panels of 8 lanes run, and {@code x} holds plain rows.
     */
    private void panelProduct(WeightMatrix w, PanelPlan plan, float[] x, PackedRows packed, int xStride, int rows,
            int o0, float[] out, int oo, int outStride, int kFrom, int kTo) {
        if (!panelKernelsReady.get() && panelKernelsReady.compareAndSet(false, true)) {
            readyPanelKernels();
            readySwiGLU();
        }
        long rowBytes = w.rowBytes();
        int panel = plan.panel();
        int lanes = VectorOps.FLOATS.length();
        int width = plan.width();
        int rowStride = plan.rowStride();
        float[] rowBuf = buffer(lanes * rowStride + panel * width + LineAlignment.SLACK);
        // The rows being transposed from a cache-line boundary (LineAlignment; the stride is whole lines), the
        // transposed panel after them, so that the kernels' loads of it read one line each.
        int rb = LineAlignment.floatsToLine(rowBuf);
        int wt = rb + lanes * rowStride;
        // The panel is built and used a slice of K at a time, small enough to stay in L2 while every group of rows
        // runs over it; a kernel after the first slice continues the FMA chains from the sums it left in out, so
        // the order (and the bits) of each output's accumulation is that of one pass over K.
        for (int t0 = kFrom; t0 < kTo; t0 += plan.slice()) {
            int len = Math.min(plan.slice(), kTo - t0);
            int xt = t0 - kFrom; // the slice's first column in x
            long from = w.format().byteSize(t0);
            // A vector of rows at a time: decoded, then transposed into the panel 16 x 16 floats at a time by lane
            // permutes (VectorOps.transpose16; F16 pp512 at 76-79% of the FMA peak against 72-75% with a gather per
            // column, which read 16 cache lines for each vector), 8 x 8 with 8 lanes (VectorOps.transpose8); other
            // vector widths and a last partial tile gather a column at a time, one vector store per column where a
            // scalar store per element took a tenth of pp512.
            if (plan.copy() != null) { // already laid out in groups of rows: no transpose
                plan.copy().decodeColumns(o0, panel, t0, len, rowBuf, wt, panel);
            }
            for (int i0 = 0; plan.copy() == null && i0 < panel; i0 += lanes) {
                for (int i = 0; i < lanes; i++) {
                    w.format().decode(w.data(), rowBytes * (o0 + i0 + i) + from, rowBuf, rb + i * rowStride, len);
                }
                int t = 0;
                if (lanes == 16) {
                    for (; t + 16 <= len; t += 16) {
                        VectorOps.transpose16(rowBuf, rb + t, rowStride, rowBuf, wt + t * panel + i0, panel);
                    }
                } else if (lanes == 8) {
                    t = VectorOps.transpose8Columns(rowBuf, rb, rowStride, len, rowBuf, wt + i0, panel);
                }
                for (; t < len; t++) {
                    FloatVector.fromArray(VectorOps.FLOATS, rowBuf, rb + t, plan.rowStarts(), 0)
                            .intoArray(rowBuf, wt + t * panel + i0);
                }
            }
            int r = 0;
            if (panel == 4 * lanes) {
                if (packed != null) { // the rows' full groups of six, then the tail's group
                    for (; r + 6 <= rows; r += 6) {
                        VectorOps.kernel6x4(rowBuf, wt, len, x, r * xStride + 6 * xt, out, oo + r * outStride,
                                outStride, t0 > 0);
                    }
                    if (r < rows) {
                        groupProduct(rowBuf, wt, len, panel, packed.tail(), packed.tailAt() + 6 * xt, r, rows - r,
                                out, oo, outStride, t0 > 0);
                        r = rows;
                    }
                }
            } else {
                for (; r + 4 <= rows; r += 4) {
                    VectorOps.kernel4x2(rowBuf, wt, len, x, r * xStride + xt, xStride, out, oo + r * outStride,
                            outStride, t0 > 0);
                }
            }
            for (; r < rows; r += tailGroup(panel)) {
                tailRows(rowBuf, wt, len, panel, x, xStride, xt, r, Math.min(rows, r + tailGroup(panel)), out, oo,
                        outStride, t0 > 0);
            }
        }
    }

    /** {@return the rows one call of the panel's micro-kernel takes: six with four vectors, four with two} */
    private static int tailGroup(int panel) {
        return panel == 4 * VectorOps.FLOATS.length() ? 6 : 4;
    }

    /** Per worker thread: the rows after a panel's last full group, padded to one ({@link #tailRows}). */
    private final ThreadLocal<float[]> tailBuffer = new ThreadLocal<>();
    /** Per worker thread: the outputs of {@link #groupProduct}'s group. */
    private final ThreadLocal<float[]> groupTileBuffer = new ThreadLocal<>();

    /**
     * {@code m} rows from {@code r0} (fewer than a group) through the panel's micro-kernel ({@link VectorOps#kernel6x4}
     * or {@link VectorOps#kernel4x2}) from a group of activations laid out as it reads one ({@code xg} from {@code xAt},
     * zero where rows are missing), into a tile of outputs that starts from their sums in {@code out} where {@code
     * add}; the results of those rows are copied back and the zero rows' dropped. Each output's FMA chain is the one a
     * full group would give it, so a row has the same bits wherever it falls.
     */
    private void groupProduct(float[] rowBuf, int wt, int len, int panel, float[] xg, int xAt, int r0, int m,
                              float[] out, int oo, int outStride, boolean add) {
        int group = tailGroup(panel);
        float[] b = buffer(groupTileBuffer, group * panel + LineAlignment.SLACK);
        int os = LineAlignment.floatsToLine(b);
        for (int j = 0; add && j < m; j++) {
            System.arraycopy(out, oo + (r0 + j) * outStride, b, os + j * panel, panel);
        }
        if (group == 6) {
            VectorOps.kernel6x4(rowBuf, wt, len, xg, xAt, b, os, panel, add);
        } else {
            VectorOps.kernel4x2(rowBuf, wt, len, xg, xAt, len, b, os, panel, add);
        }
        for (int j = 0; j < m; j++) {
            System.arraycopy(b, os + j * panel, out, oo + (r0 + j) * outStride, panel);
        }
    }

    /**
     * Rows {@code r0 .. r1} (fewer than a group, row-major at {@code x[r * xStride + xt ..]}) through the same
     * micro-kernel as the full groups ({@link VectorOps#kernel6x4}, {@link VectorOps#kernel4x2}): copied into a group
     * of their own whose other rows are zero, laid out as the kernel reads it, then {@link #groupProduct}. Why not a
     * one-row kernel: in about one process in thirty, C2 left such a kernel ({@code kernel1x4}, one row against the
     * panel's four vectors) with its FMAs as calls to the Vector API's Java code, and every prompt of that process ran
     * at a third of its speed (bench's pp128 runs at 36.6-45.9 tok/s against 112-131, its young collections 2,494 a
     * second through the timed runs against about none; {@code jstack}: both threads in {@code kernel1x4} calling
     * {@code FloatVector.lanewiseTemplate}; docs/performance-notes.md, Kernels). The cost is the padding: a 128-row
     * prompt leaves 2 rows, whose group computes 6, and pp128 ran about 4% slower (three alternating pairs, 121.2,
     * 123.8, 130.1 against 118.6, 116.7, 123.1 tok/s); prompts in chunks of 256 leave 4, and pp512 ran even.
     */
    private void tailRows(float[] rowBuf, int wt, int len, int panel, float[] x, int xStride, int xt, int r0, int r1,
                          float[] out, int oo, int outStride, boolean add) {
        int group = tailGroup(panel);
        int m = r1 - r0;
        float[] b = buffer(tailBuffer, group * len + LineAlignment.SLACK);
        int xs = LineAlignment.floatsToLine(b);
        for (int j = 0; j < group; j++) {
            int at = (r0 + j) * xStride + xt;
            if (group == 6) { // packed: element t of row j at 6t + j, as packRows lays a group out
                for (int t = 0; t < len; t++) {
                    b[xs + 6 * t + j] = j < m ? x[at + t] : 0f;
                }
            } else if (j < m) { // row-major, len a row
                System.arraycopy(x, at, b, xs + j * len, len);
            } else {
                Arrays.fill(b, xs + j * len, xs + (j + 1) * len, 0f);
            }
        }
        groupProduct(rowBuf, wt, len, panel, b, xs, r0, m, out, oo, outStride, add);
    }

    /**
     * Gate and up in one pass over the outputs. Prefill: each task runs its gate panel into {@code out}, the same
     * outputs' up panel into a {@code [rows][panel]} tile of its own (128 KiB for 512 rows, in L2), and applies
     * SwiGLU from the tile; decode steps: a task's run of gate rows, then of up rows, through {@code dotPreparedRows}
     * (one activation row, rows of {@link #ROWS_MIN_COLS} or more; else both fused dots of each output), then SwiGLU.
     * Each product is accumulated as {@link #matmul} accumulates it, so the result has the bits of {@code matmul,
     * matmul, swiglu}.
     */
    @Override
    public void matmulSwiGLU(WeightMatrix gateMatrix, WeightMatrix upMatrix, float[] x, int rows, float[] out) {
        WeightMatrix gate = home(gateMatrix);
        WeightMatrix up = home(upMatrix);
        int n = gate.rows();
        int k = gate.cols();
        int panel = PANEL;
        if (up.rows() != n || up.cols() != k || !(rows <= DOT_MAX_ROWS || rows >= 6 && n % panel == 0)) {
            ComputeDevice.super.matmulSwiGLU(gate, up, x, rows, out);
            return;
        }
        PackedMatrix gp1 = rows == 1 && PACKED ? packed(gate) : rows <= DOT_MAX_ROWS ? promptCopy(gate) : null;
        PackedMatrix up1 = gp1 == null ? null : rows == 1 ? packed(up) : promptCopy(up);
        if (up1 != null && gp1.preparedFloats() > 0 && up1.preparedFloats() > 0) {
            packedFloats = atLeast(packedFloats, gp1.preparedFloats());
            upPackedFloats = atLeast(upPackedFloats, up1.preparedFloats());
            float[] u = buffer(upRowsBuffer, n);
            for (int r = 0; r < rows; r++) {
                gp1.prepareFloats(x, r * k, packedFloats);
                up1.prepareFloats(x, r * k, upPackedFloats);
                packedDotRows(gp1, packedFloats, out, r * n);
                packedDotRows(up1, upPackedFloats, u, 0);
                swiglu(out, r * n, u, n);
            }
            return;
        }
        if (rows <= DOT_MAX_ROWS) {
            var gf = gate.format();
            var uf = up.format();
            int gl = gf.preparedActivations(k);
            int ul = uf.preparedActivations(k);
            Aligned gpp = prepare(preparedBuffer, gf, x, rows, k);
            Aligned upp = uf == gf ? gpp : prepare(upPreparedBuffer, uf, x, rows, k);
            float[] gp = gpp.data();
            float[] upr = upp.data();
            int ga = gpp.at();
            int ua = upp.at();
            int run = rows == 1 && k >= ROWS_MIN_COLS ? rowsRun(n, Math.max(gate.rowBytes(), up.rowBytes()))
                    : outputRun(n);
            if (rows == 1 && k >= ROWS_MIN_COLS) {
                Aligned row = alignedRow(x, k);
                float[] xa = row.data();
                int xat = row.at();
                parallelFor((n + run - 1) / run, t -> {
                    int o0 = t * run;
                    int m = Math.min(n, o0 + run) - o0;
                    float[] u = buffer(upRowsBuffer, m);
                    gf.dotPreparedRows(gate.data(), gate.rowBytes() * o0, gate.rowBytes(), m, xa, xat, gp, ga, k, out,
                            o0);
                    uf.dotPreparedRows(up.data(), up.rowBytes() * o0, up.rowBytes(), m, xa, xat, upr, ua, k, u, 0);
                    for (int i = 0; i < m; i++) {
                        out[o0 + i] = VectorOps.swiglu(out[o0 + i], u[i]);
                    }
                });
                return;
            }
            parallelFor((n + run - 1) / run, t -> {
                int o0 = t * run;
                int o1 = Math.min(n, o0 + run);
                for (int o = o0; o < o1; o++) {
                    for (int r = 0; r < rows; r++) {
                        out[r * n + o] = gf.dotPrepared(gate.data(), gate.rowBytes() * o, x, r * k, gp, ga + r * gl, k);
                    }
                }
                for (int o = o0; o < o1; o++) {
                    for (int r = 0; r < rows; r++) {
                        float u = uf.dotPrepared(up.data(), up.rowBytes() * o, x, r * k, upr, ua + r * ul, k);
                        out[r * n + o] = VectorOps.swiglu(out[r * n + o], u);
                    }
                }
            });
            return;
        }
        PanelPlan gatePlan = new PanelPlan(gate, panel, promptCopy(gate));
        PanelPlan upPlan = new PanelPlan(up, panel, promptCopy(up));
        PackedRows packed = packRows(x, rows, k, panel);
        try {
            parallelFor(n / panel, pi -> swiGLUPanel(gate, gatePlan, up, upPlan, x, packed, rows, pi * panel, out,
                    pi * panel, n, null));
        } finally {
            unpackRows(packed, x, rows, k);
        }
    }

    /**
     * One panel of the fused gate/up product: gate's outputs {@code o0..o0+panel} into {@code out} ({@code oo},
     * {@code outStride} a row), up's into the thread's {@code [rows][panel]} tile, then SwiGLU of the two into {@code
     * out}. With {@code packedOut}, gate's outputs go to a second tile and the SwiGLU values into {@code out} as
     * {@link #packRows} lays out {@code [rows][outStride]}: the full six-row groups packed, the rows after them into
     * {@code packedOut}'s tail group.
     */
    private void swiGLUPanel(WeightMatrix gate, PanelPlan gatePlan, WeightMatrix up, PanelPlan upPlan, float[] x,
            PackedRows packed, int rows, int o0, float[] out, int oo, int outStride, PackedRows packedOut) {
        int panel = gatePlan.panel();
        // The tiles from a cache-line boundary (LineAlignment), as the kernels load and store them a line at a time.
        float[] tile = buffer(epilogueBuffer, rows * panel + LineAlignment.SLACK);
        int ta = LineAlignment.floatsToLine(tile);
        if (packedOut == null) {
            panelProduct(gate, gatePlan, x, packed, rows, o0, out, oo, outStride);
            panelProduct(up, upPlan, x, packed, rows, o0, tile, ta, panel);
            for (int r = 0; r < rows; r++) {
                VectorOps.swiglu(out, r * outStride + oo, tile, ta + r * panel, panel);
            }
            return;
        }
        float[] gates = buffer(gateTileBuffer, rows * panel + LineAlignment.SLACK);
        int ga = LineAlignment.floatsToLine(gates);
        panelProduct(gate, gatePlan, x, packed, rows, o0, gates, ga, panel);
        panelProduct(up, upPlan, x, packed, rows, o0, tile, ta, panel);
        int grouped = rows / 6 * 6;
        for (int r = 0; r < rows; r++) {
            VectorOps.swiglu(gates, ga + r * panel, tile, ta + r * panel, panel);
            float[] to = r < grouped ? out : packedOut.tail();
            int base = r < grouped ? 6 * ((r / 6) * outStride + oo) + r % 6
                    : packedOut.tailAt() + 6 * oo + r - grouped;
            for (int i = 0; i < panel; i++) {
                to[base + 6 * i] = gates[ga + r * panel + i];
            }
        }
    }

    /** Per worker thread: a panel's gate products when SwiGLU's values are written packed. */
    private final ThreadLocal<float[]> gateTileBuffer = new ThreadLocal<>();

    /**
     * One K slice of the down matrix's panel plan (2,048 columns with 16 lanes, 8,192 with 8, 16,384 with 4) where
     * the FFN is wider than that and every product of it runs on panels; otherwise the whole width.
     */
    @Override
    public int feedForwardBlock(WeightMatrix gate, WeightMatrix up, WeightMatrix down) {
        int ffn = gate.rows();
        int panel = PANEL;
        int block = new PanelPlan(down, panel, null).slice();
        boolean blocks = block < ffn && ffn % block == 0 && block % panel == 0 && down.rows() % panel == 0
                && up.rows() == ffn && up.cols() == gate.cols() && down.cols() == ffn;
        return blocks ? block : ffn;
    }

    /**
     * Prefill on panels ({@code rows >= 6}): the hidden columns {@link #feedForwardBlock} at a time, each block's gate
     * and up panels as {@link #matmulSwiGLU} runs them (SwiGLU in the epilogue) into {@code hidden}, then the down
     * matrix's panels over that one K slice, each output continuing its sum from the previous block: every weight is
     * still decoded once per call, and each value has the bits of {@code matmulSwiGLU} then {@code matmul}. Fewer
     * rows, or a width that is not blocked, run those two on the whole width.
     */
    @Override
    public void feedForward(WeightMatrix gateMatrix, WeightMatrix upMatrix, WeightMatrix downMatrix, float[] x,
                            int rows, float[] hidden, float[] out) {
        WeightMatrix gate = home(gateMatrix);
        WeightMatrix up = home(upMatrix);
        WeightMatrix down = home(downMatrix);
        int ffn = gate.rows();
        int block = feedForwardBlock(gate, up, down);
        if (block == ffn || rows < 6 || hidden.length >= (long) rows * ffn) {
            ComputeDevice.super.feedForward(gate, up, down, x, rows, hidden, out);
            return;
        }
        if (hidden.length < (long) rows * block) {
            throw new IllegalArgumentException("hidden holds " + hidden.length + " floats, fewer than " + rows
                    + " rows of " + block);
        }
        int panel = PANEL;
        int dim = down.rows();
        PanelPlan gatePlan = new PanelPlan(gate, panel, promptCopy(gate));
        PanelPlan upPlan = new PanelPlan(up, panel, promptCopy(up));
        PanelPlan downPlan = new PanelPlan(down, panel, promptCopy(down));
        // With packing, SwiGLU writes the hidden block packed, the rows after the last six-row group into a group of
        // their own (zero where rows are missing; each block writes the same rows): the down matrix's kernels read
        // both as they are.
        PackedRows packed = packRows(x, rows, gate.cols(), panel);
        PackedRows hiddenPacked = packed == null ? null : tailPacking(hiddenTailBuffer, rows, block);
        try {
            for (int j0 = 0; j0 < ffn; j0 += block) {
                int j = j0;
                parallelFor(block / panel, pi -> swiGLUPanel(gate, gatePlan, up, upPlan, x, packed, rows,
                        j + pi * panel, hidden, pi * panel, block, hiddenPacked));
                parallelFor(dim / panel, pi -> panelProduct(down, downPlan, hidden, hiddenPacked, block, rows,
                        pi * panel, out, pi * panel, dim, j, j + block));
            }
        } finally {
            unpackRows(packed, x, rows, gate.cols());
        }
    }

    private float[] buffer(int size) {
        return buffer(tileBuffer, size);
    }

    /** {@return this thread's buffer of {@code perThread}, grown to at least {@code size} doubles} */
    private static double[] doubles(ThreadLocal<double[]> perThread, int size) {
        double[] b = perThread.get();
        if (b == null || b.length < size) {
            b = new double[size];
            perThread.set(b);
        }
        return b;
    }

    /** {@return this thread's buffer of {@code perThread}, grown to at least {@code size} floats} */
    private static float[] buffer(ThreadLocal<float[]> perThread, int size) {
        float[] b = perThread.get();
        if (b == null || b.length < size) {
            b = new float[size];
            perThread.set(b);
        }
        return b;
    }

    /**
     * Rows across the workers when there are {@value #ROW_TASKS_FROM} or more (a prefill chunk): run on the calling
     * thread alone, the norms and RoPE of a 512-token chunk kept the other threads waiting. Each row is computed as
     * before, so the bits do not depend on the split.
     */
    private static final int ROW_TASKS_FROM = 8;

    /**
     * Each row's sum of squares in ggml's order (one double sum, lane after lane), four rows at a time where there are
     * four: one row's sum is a chain of dependent additions, about four cycles an element, and four rows' chains run
     * side by side in the same time (each row's additions unchanged, so the same bits). On the 1B F16 file ({@code bench
     * -p 512 -n 0 --profile}) the norms had taken 0.6% of a prompt.
     */
    @Override
    public void rmsNorm(float[] x, int rows, float[] weight, float eps, float[] out) {
        int quads = rows / 4;
        if (rows >= ROW_TASKS_FROM) {
            parallelFor(quads + rows % 4, t -> {
                if (t < quads) {
                    rmsNormRows4(x, 4 * t, weight, eps, out);
                } else {
                    rmsNormRow(x, 4 * quads + t - quads, weight, eps, out);
                }
            });
        } else {
            for (int r = 0; r < rows; r++) {
                rmsNormRow(x, r, weight, eps, out);
            }
        }
    }

    private static void rmsNormRow(float[] x, int r, float[] weight, float eps, float[] out) {
        int n = weight.length;
        int o = r * n;
        double ss = 0;
        for (int i = 0; i < n; i++) {
            ss += x[o + i] * x[o + i]; // squared in float, summed in double, as ggml's rms_norm
        }
        scaleRow(x, o, n, rmsScale(ss, n, eps), weight, out);
    }

    /** {@link #rmsNormRow} for rows {@code r .. r + 3}, their sums interleaved. */
    private static void rmsNormRows4(float[] x, int r, float[] weight, float eps, float[] out) {
        int n = weight.length;
        int o0 = r * n;
        int o1 = o0 + n;
        int o2 = o1 + n;
        int o3 = o2 + n;
        double s0 = 0;
        double s1 = 0;
        double s2 = 0;
        double s3 = 0;
        for (int i = 0; i < n; i++) {
            s0 += x[o0 + i] * x[o0 + i];
            s1 += x[o1 + i] * x[o1 + i];
            s2 += x[o2 + i] * x[o2 + i];
            s3 += x[o3 + i] * x[o3 + i];
        }
        scaleRow(x, o0, n, rmsScale(s0, n, eps), weight, out);
        scaleRow(x, o1, n, rmsScale(s1, n, eps), weight, out);
        scaleRow(x, o2, n, rmsScale(s2, n, eps), weight, out);
        scaleRow(x, o3, n, rmsScale(s3, n, eps), weight, out);
    }

    private static float rmsScale(double sumOfSquares, int n, float eps) {
        float mean = (float) (sumOfSquares / n);
        return 1.0f / (float) Math.sqrt(mean + eps);
    }

    private static void scaleRow(float[] x, int o, int n, float scale, float[] weight, float[] out) {
        for (int i = 0; i < n; i++) {
            out[o + i] = (x[o + i] * scale) * weight[i];
        }
    }

    /**
     * The angles' cosines and sines come from {@link RopeAngles}, which a calling thread keeps from one call to the next:
     * a layer's q and k and every layer of a forward pass rotate the same positions, so the {@code Math.cos} and {@code
     * Math.sin} a row needs are computed once a pass instead of twice a layer (the same calls, so the same bits). On
     * the 1B F16 file ({@code bench -p 512 -n 0 --profile}) RoPE had taken 0.4% of a prompt, about 12 ms a pass.
     */
    @Override
    public void rope(float[] x, int rows, int heads, int headDim, int ropeDim, int startPos, float base,
                     float[] divisors) {
        if (divisors != null && divisors.length != ropeDim / 2) {
            throw new IllegalArgumentException("rope divisors: " + divisors.length + " values for " + ropeDim / 2
                    + " pairs");
        }
        float[] table = ROPE_ANGLES.get().table(this, rows, ropeDim, startPos, base, divisors);
        int half = ropeDim / 2;
        if (rows >= ROW_TASKS_FROM) {
            parallelFor(rows, r -> ropeRow(x, r, heads, headDim, half, table));
        } else {
            for (int r = 0; r < rows; r++) {
                ropeRow(x, r, heads, headDim, half, table);
            }
        }
    }

    /** Per calling thread: the last angle table {@link #rope} used. */
    private static final ThreadLocal<RopeAngles> ROPE_ANGLES = ThreadLocal.withInitial(RopeAngles::new);

    /**
     * RoPE's cosines and sines for a run of positions: row {@code r} (position {@code startPos + r}) holds the
     * cosines of its {@code ropeDim / 2} angles, then their sines. Kept for the next call with the same positions.
     */
    private static final class RopeAngles {
        private float[] table = new float[0];
        private int rows = -1;
        private int ropeDim;
        private int startPos;
        private float base;
        private float[] divisors;

        float[] table(CpuDevice device, int rows, int ropeDim, int startPos, float base, float[] divisors) {
            if (rows <= this.rows && ropeDim == this.ropeDim && startPos == this.startPos
                    && Float.floatToRawIntBits(base) == Float.floatToRawIntBits(this.base)
                    && divisors == this.divisors) {
                return table;
            }
            int half = ropeDim / 2;
            // Each pair's frequency once per table: the same Math.pow for every position, so the same angles.
            double[] frequency = new double[half];
            for (int i = 0; i < half; i++) {
                frequency[i] = Math.pow(base, -2.0 * i / ropeDim) / (divisors == null ? 1 : divisors[i]);
            }
            if (table.length < rows * ropeDim) {
                table = new float[rows * ropeDim];
            }
            float[] t = table;
            IntConsumer row = r -> {
                int pos = startPos + r;
                int o = r * ropeDim;
                for (int i = 0; i < half; i++) {
                    double theta = pos * frequency[i];
                    t[o + i] = (float) Math.cos(theta);
                    t[o + half + i] = (float) Math.sin(theta);
                }
            };
            if (rows >= ROW_TASKS_FROM) {
                device.parallelFor(rows, row);
            } else {
                for (int r = 0; r < rows; r++) {
                    row.accept(r);
                }
            }
            this.rows = rows;
            this.ropeDim = ropeDim;
            this.startPos = startPos;
            this.base = base;
            this.divisors = divisors;
            return t;
        }
    }

    private static void ropeRow(float[] x, int r, int heads, int headDim, int half, float[] angles) {
        int a = r * 2 * half;
        int rowOff = r * heads * headDim;
        for (int h = 0; h < heads; h++) {
            int o = rowOff + h * headDim;
            for (int i = 0; i < half; i++) {
                float x0 = x[o + 2 * i];
                float x1 = x[o + 2 * i + 1];
                float cos = angles[a + i];
                float sin = angles[a + half + i];
                x[o + 2 * i] = x0 * cos - x1 * sin;
                x[o + 2 * i + 1] = x0 * sin + x1 * cos;
            }
        }
    }

    /** In chunks of {@value #SWIGLU_CHUNK} across the workers, vectorized in double ({@link VectorOps#swiglu}). */
    @Override
    public void swiglu(float[] gate, float[] up, int n) {
        swiglu(gate, 0, up, n);
    }

    /** {@link #swiglu(float[], float[], int)} on {@code gate[go .. go + n)} with {@code up[0 .. n)}. */
    private void swiglu(float[] gate, int go, float[] up, int n) {
        int tasks = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
        parallelFor(tasks, t -> VectorOps.swiglu(gate, go + t * SWIGLU_CHUNK, up, t * SWIGLU_CHUNK,
                Math.min(n, (t + 1) * SWIGLU_CHUNK) - t * SWIGLU_CHUNK));
    }

    @Override
    public double measurePeakGflops() {
        // Best of a few runs of 12 independent FMA chains per thread: enough chains to cover FMA latency x throughput.
        // Short calls first, so C2 compiles the loop before the timed runs: interpreted, the Vector API allocates.
        for (int i = 0; i < 2_000; i++) {
            VectorOps.fmaChains(100);
        }
        // Each run is many calls, not one: a call that starts before C2 has installed its code runs all of its
        // iterations in the code it started in. With one call of 4M iterations a run, in about two processes in
        // three the first run's calls ran the Vector API's Java fallbacks (jstack: fmaChains calling
        // FloatVector.lanewiseTemplate) for about 2 s, allocating about 6,000 young collections' worth (bench -p 128,
        // young collections counted from -Xlog:gc).
        int calls = 400;
        int perCall = 10_000;
        double best = 0;
        for (int run = 0; run < 7; run++) {
            long t0 = System.nanoTime();
            float[] sink = new float[threads];
            parallelFor(threads, t -> {
                for (int c = 0; c < calls; c++) {
                    sink[t] += VectorOps.fmaChains(perCall);
                }
            });
            long dt = System.nanoTime() - t0;
            double flops = 2.0 * 12 * VectorOps.FLOATS.length() * (double) calls * perCall * threads;
            best = Math.max(best, flops / dt);
            if (Float.isNaN(sink[0])) {
                return Double.NaN; // keeps the loop's result live
            }
        }
        return best;
    }

    @Override
    public double measureReadBandwidth() {
        long bytes = 512L << 20;
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofShared()) {
            java.lang.foreign.MemorySegment buf = arena.allocate(bytes, 64);
            buf.fill((byte) 1);
            for (int i = 0; i < 2_000; i++) {
                VectorOps.sumSegment(buf.asSlice(0, 4096));
            }
            double best = 0;
            for (int run = 0; run < 3; run++) {
                long t0 = System.nanoTime();
                float[] sink = new float[threads];
                long part = bytes / threads;
                // Slices of 16 MiB, several calls, for the reason measurePeakGflops gives (one call a thread: about
                // 600 young collections' worth of boxed vectors in every bench process; slices of 1 MiB measured
                // 3% less, 24.2-24.9 against 25.1-25.9 GB/s in three alternating pairs).
                long slice = 16 << 20;
                parallelFor(threads, t -> {
                    for (long o = t * part, end = o + part; o < end; o += slice) {
                        sink[t] += VectorOps.sumSegment(buf.asSlice(o, Math.min(slice, end - o)));
                    }
                });
                long dt = System.nanoTime() - t0;
                best = Math.max(best, (double) bytes / dt);
                if (Float.isNaN(sink[0])) {
                    return Double.NaN;
                }
            }
            return best;
        }
    }

    /**
     * {@return the packed copy of {@code w} for decode steps, made now if this is its first, or null where its format
     * has none} Where the copy stands in for {@code w} in every float32 product ({@link #promptCopy}), the pages of
     * {@code w}'s mapping are let go once it is made: nothing else that reads float32 activations reads them again,
     * and the copy takes their place in memory instead of adding to it (the 1B TQ2_0 file's ternary matrices are 251
     * MB). Products that read {@code w} itself all the same (a prompt's with encoded activations, the exact ones of
     * the FP64 reference) bring its pages back from the file as they read them. A matrix in memory whose format's
     * copies could stand in for it (a synthetic model's) is not packed: it keeps its bytes, so its copy would only add
     * to them (the default bench run, the synthetic 1B geometry in Q4_0, peaked at 1,467 MiB against an aim of 781 with
     * Q4_0's copies made at its first decode step). Each copy lies on huge pages where {@link #HUGE_COPIES}, which
     * decode steps stream faster there. Synchronized: a device serves one session at a
     * time, but sessions may follow one another from different threads.
     */
    private synchronized PackedMatrix packed(WeightMatrix w) {
        if (w.format().packedCopyDecodes() && !fileMapping(w)) {
            return null;
        }
        if (!packed.containsKey(w)) {
            Arena arena = HUGE_COPIES ? new HugePageArena() : Arena.ofShared();
            Optional<PackedMatrix> p = w.format().packForDecode(w, arena);
            if (p.isEmpty()) {
                arena.close();
            } else if (standsIn(p.get()) && fileMapping(w)) {
                w.data().unload();
            }
            packed.put(w, p.map(m -> new Packed(m, arena)).orElse(null));
        }
        Packed p = packed.get(w);
        return p == null ? null : p.matrix();
    }

    /**
     * {@inheritDoc} Here, where copies were turned on ({@link #RESIDENT_PROPERTY}) and {@code w} is a read-only mapping
     * of a file: a copy of its bytes on huge pages ({@link HugePageArena}), the mapping's pages let go as each 2 MiB is
     * copied, so that resident memory holds one of the two at a time; but {@code w} itself where its format makes a
     * copy that may stand in for it ({@link Quantizer#packedCopyDecodes}: Q4_0's, Q8_0's, and the K-quants' where they
     * are made), which {@link #packed} then makes. Elsewhere, and by default, {@code w} itself. Made at the first product
     * of {@code w} or the first call of this, whichever comes first, so that a model's copies are made as its first
     * prompt reaches each matrix, as the file's pages came in before: the compiler's memory for the first products then
     * adds to part of the model, not to all of it.
     *
     * <p>Why: a decode step streams every weight once, and on a VM each 4 KiB page of the mapping costs the processor
     * a walk through two levels of page tables. The engine reads the token embedding from here too: a format's kernels
     * that read some matrices from the mapping and others from copies ran slower than on either alone (the 1B Q8_0
     * file's decode at 10.8-12.3 tok/s against 15.6 when only the matrices of 2 MiB or more were copied; the class of
     * the segments they read, it seems: with the copies mapped from {@code /dev/shm}, no loss). Measurements:
     * docs/performance-notes.md (Intel Xeon VM, 2026-12-07).
     */
    @Override
    public WeightMatrix resident(WeightMatrix w) {
        return home(w);
    }

    /**
     * {@return what products of {@code w} read ({@link #resident})} A matrix that lies within one already here (a
     * warm-up's first rows) reads the same rows of what that one reads, and adds nothing.
     */
    private WeightMatrix home(WeightMatrix w) {
        if (!residentCopies || !fileMapping(w)) {
            return w;
        }
        synchronized (this) {
            WeightMatrix h = homes.get(w);
            if (h != null) {
                return h;
            }
            for (Map.Entry<WeightMatrix, WeightMatrix> e : homes.entrySet()) {
                long at = w.data().address() - e.getKey().data().address();
                if (at >= 0 && at + w.data().byteSize() <= e.getKey().data().byteSize()) {
                    return e.getValue() == e.getKey() ? w : new WeightMatrix(w.name(), w.format(),
                            e.getValue().data().asSlice(at, w.data().byteSize()), w.rows(), w.cols());
                }
            }
            h = PACKED && w.format().packedCopyDecodes() && packed(w) != null ? w : residentCopy(w);
            homes.put(w, h);
            return h;
        }
    }

    /** {@return {@code w}'s bytes copied onto huge pages, the mapping's pages let go behind the copy} */
    private WeightMatrix residentCopy(WeightMatrix w) {
        long bytes = w.rowBytes() * w.rows();
        HugePageArena arena = new HugePageArena();
        MemorySegment copy = arena.allocate(bytes, LineAlignment.LINE_BYTES);
        MemorySegment from = w.data();
        // A huge page a task: the mapping's pages and the copy's of a task are both resident only while it runs.
        long chunk = HugePageArena.HUGE;
        parallelFor((int) ((bytes + chunk - 1) / chunk), c -> {
            long at = c * chunk;
            long length = Math.min(chunk, bytes - at);
            MemorySegment.copy(from, at, copy, at, length);
            from.asSlice(at, length).unload();
        });
        residentArenas.add(arena);
        return new WeightMatrix(w.name(), w.format(), copy.asReadOnly(), w.rows(), w.cols());
    }

    /**
     * {@return {@code w}'s packed copy where it stands in for {@code w} in every product with float32 activations,
     * prompts' included, made now if this is {@code w}'s first product; otherwise null, and {@code w} is read as
     * before} It stands in where {@link #PACKED}, the format's copies decode ({@link Quantizer#packedCopyDecodes}),
     * they give whole panels ({@link #standsIn}) and {@code w} is a read-only mapping of a file, whose pages {@link
     * #packed} then lets go: a matrix in memory keeps its bytes, so there a copy would only add to them, and none is
     * made ({@link #packed}).
     */
    private PackedMatrix promptCopy(WeightMatrix w) {
        if (!PACKED || !w.format().packedCopyDecodes() || !fileMapping(w)) {
            return null;
        }
        PackedMatrix p = packed(w);
        return p != null && standsIn(p) ? p : null;
    }

    /**
     * {@inheritDoc} Here, where {@code w} has a packed copy standing in for it ({@link #promptCopy}, made at its first
     * product), from the copy: its row group decoded whole ({@link PackedMatrix#decodeColumns}, the format's {@code
     * decode} to the bit) and the row taken out of it. The file's pages under {@code w} were let go when the copy was
     * made, and each lookup in the mapping brought back the pages around its row (the kernel maps cached pages near a
     * fault): with the 1B Q8_0 file's tied embedding and output matrix, 27-28 MiB more of the file with each 512-token
     * prompt of random tokens (Intel Xeon VM, 2026-12-07).
     */
    @Override
    public void decodeRow(WeightMatrix w, int row, float[] dst, int dstOffset) {
        PackedMatrix copy = standingCopy(w);
        if (copy == null) {
            ComputeDevice.super.decodeRow(w, row, dst, dstOffset);
            return;
        }
        int group = copy.rowGroup();
        int first = row / group * group;
        int k = w.cols();
        float[] block = buffer(rowGroupBuffer, group * k);
        copy.decodeColumns(first, group, 0, k, block, 0, group);
        for (int c = 0, at = row - first; c < k; c++, at += group) {
            dst[dstOffset + c] = block[at];
        }
    }

    /** A thread's {@code [cols][rowGroup]} floats of {@link #decodeRow}. */
    private final ThreadLocal<float[]> rowGroupBuffer = new ThreadLocal<>();

    /** {@return {@code w}'s packed copy where one already made stands in for it ({@link #standsIn}), else null} */
    private synchronized PackedMatrix standingCopy(WeightMatrix w) {
        Packed p = packed.get(home(w));
        return p != null && standsIn(p.matrix()) ? p.matrix() : null;
    }

    /** {@return whether {@code w}'s bytes are a read-only mapping of a file} */
    private static boolean fileMapping(WeightMatrix w) {
        return w.data().isMapped() && w.data().isReadOnly();
    }

    /**
     * {@return whether {@code p} can serve every float32 product of its matrix}: its format's copies decode, its row
     * groups tile a prefill panel, and it takes float32 activations
     */
    private static boolean standsIn(PackedMatrix p) {
        return p.source().format().packedCopyDecodes() && PANEL % p.rowGroup() == 0 && p.preparedFloats() > 0;
    }

    /** Frees {@code w}'s packed copy, if it has one. */
    private synchronized void unpack(WeightMatrix w) {
        Packed p = packed.remove(w);
        if (p != null) {
            p.arena().close();
        }
    }

    /** {@return {@code buffer}, or a new one where it holds fewer than {@code size} floats} */
    private static float[] atLeast(float[] buffer, int size) {
        return buffer.length >= size ? buffer : new float[size];
    }

    /**
     * Runs {@code w}'s packed float32 product over all its rows into {@code out} from {@code outIndex}, with
     * activations {@link PackedMatrix#prepareFloats} wrote to {@code prepared}, in tasks of {@link #packedRun} rows.
     */
    private void packedDotRows(PackedMatrix p, float[] prepared, float[] out, int outIndex) {
        int n = p.source().rows();
        int run = packedRun(p);
        parallelFor((n + run - 1) / run, t -> p.dotRows(t * run, Math.min(run, n - t * run), prepared, out,
                outIndex + t * run));
    }

    /**
     * {@code rows} activation rows times the packed copy {@code p}, one row after another, each prepared once
     * ({@link PackedMatrix#prepareFloats}) for all of {@code p}'s rows: decode steps, and prompts too short for the
     * panels where {@code p} stands in for its matrix ({@link #promptCopy}).
     */
    private void packedProduct(PackedMatrix p, float[] x, int rows, float[] out) {
        int n = p.source().rows();
        int k = p.source().cols();
        packedFloats = atLeast(packedFloats, p.preparedFloats());
        for (int r = 0; r < rows; r++) {
            p.prepareFloats(x, r * k, packedFloats);
            packedDotRows(p, packedFloats, out, r * n);
        }
    }

    /**
     * {@return the rows a task of a packed product takes}: about as many bytes as {@link #rowsRun} gives the file's
     * layout, in an even number of row groups (kernels may take two groups a step: {@code TernaryTable}'s integer one
     * does)
     */
    private int packedRun(PackedMatrix p) {
        int pair = 2 * p.rowGroup();
        return Math.max(1, rowsRun(p.source().rows(), p.source().rowBytes()) / pair) * pair;
    }

    @Override
    public void close() {
        pool.close();
        synchronized (this) {
            for (Packed p : packed.values()) {
                if (p != null) {
                    p.arena().close();
                }
            }
            packed.clear();
            homes.clear();
            residentArenas.forEach(Arena::close);
            residentArenas.clear();
        }
    }
}
