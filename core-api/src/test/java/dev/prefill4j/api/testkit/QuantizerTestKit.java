package dev.prefill4j.api.testkit;

import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.ServiceLoader;
import java.util.SplittableRandom;

/**
 * The plugin author's test kit: checks a {@link Quantizer} the way the engine uses it, on fresh random data,
 * against scalar FP64 references, with outputs poisoned (NaN) before every call so an unwritten element fails.
 *
 * <p>It throws {@link AssertionError} with a message naming the format, the check and the element, so it works
 * under any test framework. Typical use in a format module's tests:
 *
 * <pre>{@code
 * @Test void kit() {
 *     QuantizerTestKit.verify(new MyQuantizer(), new QuantizerTestKit.Tolerance(0.5 / 7, 1e-5));
 * }
 * }</pre>
 *
 * <p>What {@link #verify} checks:
 * <ol>
 *   <li>metadata: id, API version, block geometry, {@code byteSize};</li>
 *   <li>round trip: {@code decode(encode(x))} is within {@code roundTrip * max|x|} of {@code x}, block by block
 *       (for a format with {@code 2^b} levels that is about half a level: {@code 0.5 / (2^(b-1) - 1)});</li>
 *   <li>decode at unaligned offsets and into the middle of an array touches exactly its elements;</li>
 *   <li>the fused {@code dot} equals the FP64 dot of the decoded row within {@code dot * sum|w*x|};</li>
 *   <li>GEMM, float and exact accumulation, on every {@link Backend} found by {@link ServiceLoader} equals FP64 over
 *       the decoded weights within the same relative bound, for shapes with one and many activation rows.</li>
 * </ol>
 */
public final class QuantizerTestKit {
    /**
     * Tolerances of a format.
     *
     * @param roundTrip largest |decode(encode(x)) - x| as a fraction of the block's max |x|
     * @param dot       largest |dot - FP64 dot| as a fraction of sum |w * x| (float accumulation error)
     */
    public record Tolerance(double roundTrip, double dot) {
    }

    private QuantizerTestKit() {
    }

    /**
     * Runs every check.
     *
     * @param q   the format
     * @param tol its tolerances
     * @return the backends the GEMM check ran on (never empty when a backend module is on the test path)
     */
    public static List<String> verify(Quantizer q, Tolerance tol) {
        metadata(q);
        roundTrip(q, tol, 7);
        decodeIsExact(q);
        dot(q, tol, 11);
        return gemmOnEveryBackend(q, tol, 13);
    }

    static void metadata(Quantizer q) {
        check(q.id() != null && q.id().matches("[a-z0-9][a-z0-9_.-]*"), q, "id '" + q.id() + "' is not lower case");
        check(q.blockSize() > 0 && q.blockBytes() > 0, q, "block geometry must be positive");
        check(q.byteSize(q.blockSize() * 3L) == 3L * q.blockBytes(), q, "byteSize of 3 blocks");
        try {
            q.byteSize(q.blockSize() + 1L);
            check(q.blockSize() == 1, q, "byteSize accepted a partial block");
        } catch (IllegalArgumentException expected) {
            // a partial block is refused
        }
    }

    /** Rows of Gaussian values with a few large outliers, the shape real weights have. */
    static float[] data(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = (float) (r.nextGaussian() * (r.nextInt(50) == 0 ? 8 : 1));
        }
        return x;
    }

    static void roundTrip(Quantizer q, Tolerance tol, long seed) {
        int n = q.blockSize() * Math.max(4, 1024 / q.blockSize());
        float[] x = data(n, seed);
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n));
        q.encode(x, 0, n, enc, 0);
        float[] y = new float[n];
        Arrays.fill(y, Float.NaN);
        q.decode(enc, 0, y, 0, n);
        int bs = q.blockSize();
        for (int b = 0; b < n / bs; b++) {
            double amax = 0;
            for (int j = 0; j < bs; j++) {
                amax = Math.max(amax, Math.abs(x[b * bs + j]));
            }
            for (int j = 0; j < bs; j++) {
                int i = b * bs + j;
                double err = Math.abs((double) y[i] - x[i]);
                check(err <= tol.roundTrip() * amax + 1e-30, q, "round trip element " + i + ": " + x[i] + " -> " + y[i]
                        + " (error " + err + " > " + tol.roundTrip() + " * " + amax + ")");
            }
        }
    }

    static void decodeIsExact(Quantizer q) {
        int blocks = 3;
        int n = blocks * q.blockSize();
        float[] x = data(n, 5);
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n) + 7);
        q.encode(x, 0, n, enc, 3);
        float[] whole = new float[n];
        q.decode(enc, 3, whole, 0, n);
        float[] part = new float[n + 10];
        Arrays.fill(part, Float.NaN);
        q.decode(enc, 3 + q.blockBytes(), part, 5, q.blockSize());
        check(Float.isNaN(part[4]) && Float.isNaN(part[5 + q.blockSize()]), q, "decode wrote outside its range");
        for (int j = 0; j < q.blockSize(); j++) {
            check(Float.floatToIntBits(part[5 + j]) == Float.floatToIntBits(whole[q.blockSize() + j]), q,
                    "decoding one block at an offset differs from decoding the row, element " + j);
        }
    }

    static void dot(Quantizer q, Tolerance tol, long seed) {
        int n = q.blockSize() * Math.max(2, 512 / q.blockSize());
        float[] w = data(n, seed);
        float[] x = data(n + 3, seed + 1);
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n));
        q.encode(w, 0, n, enc, 0);
        float[] wd = new float[n];
        q.decode(enc, 0, wd, 0, n);
        double ref = 0;
        double mag = 0;
        for (int i = 0; i < n; i++) {
            ref += (double) wd[i] * x[i + 3];
            mag += Math.abs((double) wd[i] * x[i + 3]);
        }
        float got = q.dot(enc, 0, x, 3, n);
        check(Math.abs(got - ref) <= tol.dot() * mag + 1e-30, q, "dot = " + got + ", FP64 = " + ref);
    }

    static List<String> gemmOnEveryBackend(Quantizer q, Tolerance tol, long seed) {
        List<String> ran = new ArrayList<>();
        for (Backend backend : ServiceLoader.load(Backend.class)) {
            if (!backend.availability().available()) {
                continue;
            }
            try (ComputeDevice device = backend.create(new BackendContext(2))) {
                for (int[] shape : new int[][] {{1, 7}, {19, 33}}) {
                    int rows = shape[0];
                    int out = shape[1];
                    int k = q.blockSize() * Math.max(2, 256 / q.blockSize());
                    float[] w = data(out * k, seed + rows);
                    MemorySegment enc = Arena.ofAuto().allocate(q.byteSize((long) out * k));
                    for (int o = 0; o < out; o++) {
                        q.encode(w, o * k, k, enc, o * q.byteSize(k));
                    }
                    float[] wd = new float[out * k];
                    for (int o = 0; o < out; o++) {
                        q.decode(enc, o * q.byteSize(k), wd, o * k, k);
                    }
                    float[] x = data(rows * k, seed + 100 + rows);
                    for (boolean exact : new boolean[] {false, true}) {
                    float[] y = new float[rows * out];
                    Arrays.fill(y, Float.NaN);
                    if (exact) {
                        device.matmulExact(new WeightMatrix("kit", q, enc, out, k), x, rows, y);
                    } else {
                        device.matmul(new WeightMatrix("kit", q, enc, out, k), x, rows, y);
                    }
                    for (int r = 0; r < rows; r++) {
                        for (int o = 0; o < out; o++) {
                            double ref = 0;
                            double mag = 0;
                            for (int i = 0; i < k; i++) {
                                ref += (double) wd[o * k + i] * x[r * k + i];
                                mag += Math.abs((double) wd[o * k + i] * x[r * k + i]);
                            }
                            double got = y[r * out + o];
                            check(Math.abs(got - ref) <= tol.dot() * mag + 1e-30, q, (exact ? "exact " : "") + "GEMM on backend '"
                                    + backend.id() + "' row " + r + " output " + o + ": " + got + ", FP64 = " + ref);
                        }
                    }
                    }
                }
            }
            ran.add(backend.id());
        }
        return ran;
    }

    private static void check(boolean ok, Quantizer q, String what) {
        if (!ok) {
            throw new AssertionError(q.id() + ": " + what);
        }
    }
}
