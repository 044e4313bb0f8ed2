package dev.prefill4j.tests;

import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.SplittableRandom;

/**
 * Runs every format's kernels until C2 has compiled them, for {@link KernelInliningTest}, which runs this in a child
 * JVM with {@code -XX:+PrintInlining}: per format and row length (2,048 and 8,192 elements, the 1B geometry's), 64
 * rows of random weights encoded by the format, then {@code dotPreparedRows} over all rows (the decode product) and
 * {@code dotPrepared} of single rows (the one-row form: a run's odd row, each row of a decode step of two or three
 * activation rows; with the grouping kernels alone, a Q4_K helper that C2 refused to inline went unseen here),
 * {@code decode} of one row (prefill's panels) and, where the format has one, {@code dotEncoded} against
 * activations encoded in its activation format ({@code --activations quantized}); then the default backend's
 * products over those rows (decode's fused dots, prefill's GEMM, the fused gate/up pair), RMSNorm and RoPE.
 *
 * <p>After each format's and row length's workout it prints {@code allocated <format> <elements> <bytes> windows
 * <count>}: what this thread allocated per further {@code dotPreparedRows} call over the 64 rows and {@code
 * dotPrepared} of one, in the quietest of the windows of {@link #MEASURED_CALLS} calls measured. Windows follow one
 * another until one allocates nothing or {@link #MEASURED_NANOS} have passed: a window in which a kernel still runs
 * C1's code (which boxes every vector) allocates, and how long C2's compilations take to arrive depends on how busy
 * its queue is (a count of windows would end too early on a loaded machine), while a kernel whose C2 code boxes a
 * vector allocates in every window until the deadline.
 *
 * <p>Arguments: iterations at 2,048 elements (a quarter as many at 8,192), then format ids.
 */
final class KernelWorkout {
    /** Calls (64 rows' {@code dotPreparedRows} and one {@code dotPrepared}) a window whose allocation is measured. */
    static final int MEASURED_CALLS = 200;
    /**
     * How long windows are measured per format and row length at most, while none has allocated nothing: 20 s, where
     * the workout takes about 17 s in all and C2's compilations arrive within milliseconds to a fraction of a second.
     */
    static final long MEASURED_NANOS = 20_000_000_000L;
    /**
     * How long the whole workout waits for quiet windows at most (after its first window each format and row length
     * gets the rest of this, up to {@link #MEASURED_NANOS}): 60 s, so that kernels boxing in many formats fail the test
     * with their allocations listed before the test's 300 s limit for the child JVM ends it.
     */
    static final long WAIT_BUDGET_NANOS = 60_000_000_000L;
    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();

    private KernelWorkout() {
    }

    public static void main(String[] args) {
        PluginRegistry registry = PluginRegistry.load();
        int iterations = Integer.parseInt(args[0]);
        double sink = 0;
        long waitBudget = WAIT_BUDGET_NANOS;
        for (int a = 1; a < args.length; a++) {
            String id = args[a];
            Quantizer q = registry.quantizer(id).orElseThrow(() -> new IllegalArgumentException("no format " + id));
            Quantizer activations = q.hasEncodedDot() ? registry.quantizer(q.activationFormat()).orElseThrow(
                    () -> new IllegalStateException(id + ": no activation format " + q.activationFormat())) : null;
            for (int k : new int[] {2048, 8192}) {
                int rows = 64;
                SplittableRandom random = new SplittableRandom(k);
                float[] w = new float[rows * k];
                for (int i = 0; i < w.length; i++) {
                    w[i] = (float) random.nextGaussian();
                }
                long rowBytes = q.byteSize(k);
                MemorySegment data = Arena.ofAuto().allocate(rows * rowBytes, 64);
                for (int r = 0; r < rows; r++) {
                    q.encode(w, r * k, k, data, r * rowBytes);
                }
                float[] x = new float[k];
                for (int i = 0; i < k; i++) {
                    x[i] = (float) random.nextGaussian();
                }
                float[] prepared = new float[q.preparedActivations(k)];
                q.prepareActivations(x, 0, k, prepared, 0);
                MemorySegment act = null;
                if (activations != null) {
                    act = Arena.ofAuto().allocate(activations.byteSize(k), 64);
                    activations.encode(x, 0, k, act, 0);
                }
                float[] out = new float[rows];
                float[] decoded = new float[k];
                for (int it = 0, n = iterations * 2048 / k; it < n; it++) {
                    q.dotPreparedRows(data, 0, rowBytes, rows, x, 0, prepared, 0, k, out, 0);
                    // The one-row form twice an iteration: called once (as a 63-row run's odd row), Q8_0's dot still
                    // ran C1's code (only its loop compiled by C2, on stack) through every window below in one process
                    // of three, allocating 50,016 bytes a call.
                    sink += q.dotPrepared(data, (it % rows) * rowBytes, x, 0, prepared, 0, k)
                            + q.dotPrepared(data, ((it + 1) % rows) * rowBytes, x, 0, prepared, 0, k);
                    q.decode(data, (it % rows) * rowBytes, decoded, 0, k);
                    sink += out[it % rows] + decoded[it % k];
                    if (act != null) {
                        sink += q.dotEncoded(data, (it % rows) * rowBytes, act, 0, k);
                    }
                }
                // Once compiled, the decode product allocates nothing: a vector C2 left boxed shows up here, in
                // every window. Windows go on until one allocates nothing or the deadline passes, so that windows in
                // which a method still runs C1's code (a recompilation after a trap, or a compilation still queued)
                // do not count; the quietest is printed.
                long least = Long.MAX_VALUE;
                int windows = 0;
                long start = System.nanoTime();
                for (long deadline = start + Math.min(MEASURED_NANOS, waitBudget); least > 0
                        && (windows == 0 || System.nanoTime() - deadline < 0); windows++) {
                    long before = THREADS.getCurrentThreadAllocatedBytes();
                    for (int c = 0; c < MEASURED_CALLS; c++) {
                        q.dotPreparedRows(data, 0, rowBytes, rows, x, 0, prepared, 0, k, out, 0);
                        sink += out[c % rows] + q.dotPrepared(data, (c % rows) * rowBytes, x, 0, prepared, 0, k);
                    }
                    least = Math.min(least, THREADS.getCurrentThreadAllocatedBytes() - before);
                }
                if (windows > 1) {
                    waitBudget = Math.max(0, waitBudget - (System.nanoTime() - start));
                }
                System.out.println("allocated " + id + " " + k + " " + least / MEASURED_CALLS + " windows " + windows);
                sink += device(registry, new WeightMatrix("w", q, mapped(data), rows, k), iterations / 50);
            }
        }
        System.out.println(sink); // keeps the results live
    }

    /**
     * {@return {@code data}'s bytes as a read-only mapping of a temporary file, as a model file's matrices are}: the CPU
     * device makes the packed copies that stand in for a matrix (Q4_0's, the ternary formats') only for such
     * mappings, so their kernels run here only so.
     */
    private static MemorySegment mapped(MemorySegment data) {
        try {
            Path file = Files.createTempFile("kernel-workout", ".bin");
            file.toFile().deleteOnExit();
            Files.write(file, data.toArray(ValueLayout.JAVA_BYTE));
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                return ch.map(FileChannel.MapMode.READ_ONLY, 0, data.byteSize(), Arena.ofAuto());
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * The default backend's products over {@code w}: one activation row (decode: the fused dots) and 24 (prefill: the
     * GEMM's panels and micro-kernels), plain and as the fused gate/up SwiGLU pair, then RMSNorm and RoPE.
     */
    private static double device(PluginRegistry registry, WeightMatrix w, int iterations) {
        double sink = 0;
        try (ComputeDevice device = registry.selectBackend(null).create(new BackendContext(2))) {
            int rows = 24;
            float[] x = new float[rows * w.cols()];
            for (int i = 0; i < x.length; i++) {
                x[i] = (float) Math.sin(i);
            }
            float[] out = new float[rows * w.rows()];
            float[] norm = new float[w.cols()];
            java.util.Arrays.fill(norm, 1f);
            float[] normed = new float[x.length];
            for (int it = 0; it < iterations; it++) {
                device.matmul(w, x, 1, out);
                device.matmul(w, x, rows, out);
                device.matmulSwiGLU(w, w, x, 1, out);
                device.matmulSwiGLU(w, w, x, rows, out);
                device.rmsNorm(x, rows, norm, 1e-5f, normed);
                device.rope(normed, rows, w.cols() / 64, 64, 64, it, 10000f);
                sink += out[it % out.length] + normed[it % normed.length];
            }
        }
        return sink;
    }
}
