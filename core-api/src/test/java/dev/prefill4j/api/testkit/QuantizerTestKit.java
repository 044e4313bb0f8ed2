package dev.prefill4j.api.testkit;

import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Random;
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
 *   <li>the fused {@code dot} equals the FP64 dot of the decoded row within {@code dot * sum|w*x|}, and so does
 *       {@code dotPrepared} for a format that prepares activations ({@code preparedActivations > 0}), with the
 *       prepared data at an offset and nothing written outside it; {@code dotPreparedRows} gives each of eleven rows
 *       the bits of {@code dotPrepared}, for rows of a few hundred elements and of over 8,192; where the format packs
 *       matrices for decode steps with float32 activations too ({@link Quantizer#packForDecode}), the packed products
 *       of 96 rows equal that FP64 dot within the same bound, and where its copies decode ({@link
 *       Quantizer#packedCopyDecodes}) they give back every weight of a block of rows and columns with {@code
 *       decode}'s bits;</li>
 *   <li>GEMM, float and exact accumulation, on every {@link Backend} found by {@link ServiceLoader} equals FP64 over
 *       the decoded weights within the same relative bound, for shapes with one and many activation rows, and one
 *       activation row with rows of at least 8,192 weights;</li>
 *   <li>for a format with {@link Quantizer#hasEncodedDot()}: {@code dotEncoded}, and {@code matmulEncoded} on every
 *       backend (one activation row with rows of at least 8,192 weights among its shapes), equal the FP64 dot of the
 *       decoded weights and the decoded activations within {@link #ENCODED} {@code * sum|w*x|}, for its activation
 *       format and its per-token one (they must be on the test path, found by {@link ServiceLoader});
 *       {@code dotEncodedRows} gives each product of a tile of 11 weight rows and 7 activation rows the bits of
 *       {@code dotEncoded}; where the format packs matrices for decode steps ({@link
 *       Quantizer#packForDecode}), the packed products of 96 rows equal that FP64 dot within the same bound;</li>
 *   <li>for a format whose {@link Quantizer#encodedDotIsExact()} is {@code true}: {@code dotEncoded} with its
 *       activation format within {@link #EXACT} {@code * sum|w*x|} of that FP64 dot, and {@code matmulExact} over
 *       the decoded activations (13 rows, on every backend) giving each output the bits of {@code matmulEncoded}:
 *       what lets the engine run a prompt through the one and its decode steps through the other.</li>
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

    /**
     * Relative bound of the encoded dot products: they are exact within a block; the blocks' scaled sums are added in
     * double, or in float lanes as llama.cpp's x86 kernels add them (one rounding per block and lane: at most 2^-24
     * times the blocks a lane adds, 16 in the kit's rows), while the FP64 reference multiplies activations decoded to
     * float (rounded once, 2^-24 relative) and the GEMM rounds its result to float once more. A wrong code, sign or
     * scale moves the result by about one product, far above this.
     */
    public static final double ENCODED = 0x1p-18;

    /**
     * Relative bound of an encoded dot product that claims {@link Quantizer#encodedDotIsExact()}: the sum of a few
     * hundred terms, each exact in double, rounded in double at each addition (about {@code n * 2^-53}). Blocks added
     * in float lanes are off by about {@code 2^-24}, and a decoder that rounds by as much; both fail it.
     */
    public static final double EXACT = 0x1p-40;

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
        packedFloatDot(q, tol, 23);
        for (Quantizer act : encodedActivationFormats(q)) {
            encodedDot(q, act, 17);
            packedDot(q, act, 19);
        }
        return gemmOnEveryBackend(q, tol, 13);
    }

    /**
     * {@return the formats {@code q}'s encoded dot product reads}: its activation format and its per-token one, if
     * it names one; none without {@link Quantizer#hasEncodedDot()}. Found by {@link ServiceLoader}.
     */
    static List<Quantizer> encodedActivationFormats(Quantizer q) {
        List<Quantizer> formats = new ArrayList<>();
        if (!q.hasEncodedDot()) {
            return formats;
        }
        for (String id : new String[] {q.activationFormat(), q.tokenActivationFormat()}) {
            if (id.equals("f32")) {
                continue;
            }
            Quantizer found = null;
            for (Quantizer candidate : ServiceLoader.load(Quantizer.class)) {
                if (candidate.id().equals(id)) {
                    found = candidate;
                }
            }
            if (found == null) {
                throw new AssertionError(q.id() + ": has an encoded dot product, but its activation format '" + id
                        + "' is not on the test path; add the module that provides it as a test dependency");
            }
            formats.add(found);
        }
        return formats;
    }

    /** Elements of a test row: at least two blocks of either format, a multiple of both. */
    private static int encodedLength(Quantizer q, Quantizer act) {
        return encodedLength(q, act, 512);
    }

    /** Elements of a test row: at least {@code atLeast} and two blocks of either format, a multiple of both. */
    private static int encodedLength(Quantizer q, Quantizer act, int atLeast) {
        int a = q.blockSize();
        int b = act.blockSize();
        int lcm = a / gcd(a, b) * b;
        return lcm * Math.max(2, (atLeast + lcm - 1) / lcm);
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }

    static void encodedDot(Quantizer q, Quantizer act, long seed) {
        int n = encodedLength(q, act);
        encodedDot(q, act, data(n, seed), data(n, seed + 1));
        // Every code at full scale (weights and activations all 1): the largest products a format's integer lanes
        // must hold without wrapping, which Gaussian rows rarely reach.
        float[] ones = new float[n];
        Arrays.fill(ones, 1f);
        encodedDot(q, act, ones, ones);
    }

    private static void encodedDot(Quantizer q, Quantizer act, float[] w, float[] x) {
        int n = w.length;
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n));
        q.encode(w, 0, n, enc, 0);
        // Activations one block in, so a dot that ignores actOffset fails.
        long at = act.blockBytes();
        MemorySegment xEnc = Arena.ofAuto().allocate(at + act.byteSize(n));
        act.encode(x, 0, n, xEnc, at);
        float[] wd = new float[n];
        float[] xd = new float[n];
        q.decode(enc, 0, wd, 0, n);
        act.decode(xEnc, at, xd, 0, n);
        Fp64 ref = Fp64.dot(wd, 0, xd, 0, n);
        double got = q.dotEncoded(enc, 0, xEnc, at, n);
        check(Math.abs(got - ref.sum()) <= ENCODED * ref.magnitude() + 1e-30, q, "dotEncoded = " + got
                + ", FP64 over the decoded " + act.id() + " activations = " + ref.sum());
        boolean exact = q.encodedDotIsExact() && act.id().equals(q.activationFormat());
        if (exact) {
            check(Math.abs(got - ref.sum()) <= EXACT * ref.magnitude() + 1e-300, q, "encodedDotIsExact, but dotEncoded = "
                    + got + " is " + Math.abs(got - ref.sum()) / ref.magnitude() + " of sum|w*x| from FP64 over the decoded "
                    + act.id() + " activations (" + ref.sum() + ")");
        }
        // The same activations in a heap segment, as the engine hands them over (a format may read those through
        // their array, Blocks.heapBytes); a slice 3 bytes into its array, so an offset taken from the array's start
        // instead of the segment's fails.
        MemorySegment heap = MemorySegment.ofArray(new byte[Math.toIntExact(3 + xEnc.byteSize())]).asSlice(3);
        heap.copyFrom(xEnc);
        double fromHeap = q.dotEncoded(enc, 0, heap, at, n);
        check(Math.abs(fromHeap - ref.sum()) <= ENCODED * ref.magnitude() + 1e-30, q, "dotEncoded over heap-backed "
                + act.id() + " activations = " + fromHeap + ", FP64 = " + ref.sum());
        if (exact) {
            check(Math.abs(fromHeap - ref.sum()) <= EXACT * ref.magnitude() + 1e-300, q, "encodedDotIsExact, but "
                    + "dotEncoded over heap-backed activations = " + fromHeap + ", FP64 = " + ref.sum());
        }
        // dotEncodedRows, over either segment: a tile of eleven weight rows (the first this one) and seven
        // activation rows (the first these; kernels that group activation rows: three pairs and one alone, or a group
        // of four and three alone), each product the bits of (float) dotEncoded, and nothing else written.
        int rows = 11;
        int actRows = 7;
        long rowBytes = q.byteSize(n);
        MemorySegment several = Arena.ofAuto().allocate(rows * rowBytes);
        several.copyFrom(enc);
        for (int r = 1; r < rows; r++) {
            q.encode(data(n, 7L * r + n), 0, n, several, r * rowBytes);
        }
        long actBytes = act.byteSize(n);
        MemorySegment xs = Arena.ofAuto().allocate(at + actRows * actBytes);
        xs.asSlice(at, actBytes).copyFrom(xEnc.asSlice(at, actBytes));
        for (int i = 1; i < actRows; i++) {
            act.encode(data(n, 11L * i + n), 0, n, xs, at + i * actBytes);
        }
        MemorySegment xsHeap = MemorySegment.ofArray(new byte[Math.toIntExact(3 + xs.byteSize())]).asSlice(3);
        xsHeap.copyFrom(xs);
        int outStride = rows + 3;
        for (MemorySegment acts : new MemorySegment[] {xs, xsHeap}) {
            float[] products = new float[1 + actRows * outStride];
            Arrays.fill(products, Float.NaN);
            q.dotEncodedRows(several, 0, rowBytes, rows, acts, at, actBytes, actRows, n, products, 1, outStride);
            for (int i = 0; i < actRows; i++) {
                for (int r = 0; r < rows; r++) {
                    float one = (float) q.dotEncoded(several, r * rowBytes, acts, at + i * actBytes, n);
                    float tile = products[1 + i * outStride + r];
                    check(Float.floatToIntBits(tile) == Float.floatToIntBits(one), q, "dotEncodedRows weight row " + r
                            + ", activation row " + i + " (" + (acts.isNative() ? "native" : "heap") + ") = " + tile
                            + ", dotEncoded = " + one);
                }
            }
            for (int j = 0; j < products.length; j++) {
                int r = (j - 1) % outStride;
                check(j == 0 || r >= rows ? Float.isNaN(products[j]) : !Float.isNaN(products[j]), q,
                        "dotEncodedRows wrote outside its " + actRows + " x " + rows + " products (index " + j + ")");
            }
        }
    }

    /**
     * For a format that packs matrices for decode steps ({@link Quantizer#packForDecode}): the packed products of
     * 96 rows (three groups of 32, of those that pack that way) equal FP64 over the decoded weights and activations
     * within {@link #ENCODED} {@code * sum|w*x|}; a run from the second group gives the same bits as the whole; nothing
     * is written outside the run. A format that packs nothing passes.
     */
    static void packedDot(Quantizer q, Quantizer act, long seed) {
        int n = encodedLength(q, act);
        int rows = 96;
        long rowBytes = q.byteSize(n);
        MemorySegment enc = Arena.ofAuto().allocate(rows * rowBytes);
        float[] wd = new float[rows * n];
        float[] w = data(rows * n, seed);
        w[3] = 0; // a zero among the codes of the first row
        for (int r = 0; r < rows; r++) {
            q.encode(w, r * n, n, enc, r * rowBytes);
            q.decode(enc, r * rowBytes, wd, r * n, n);
        }
        try (Arena arena = Arena.ofShared()) {
            PackedMatrix p = q.packForDecode(new WeightMatrix("kit", q, enc, rows, n), arena).orElse(null);
            if (p == null) {
                return;
            }
            int group = p.rowGroup();
            check(group > 0 && rows % group == 0, q, "packForDecode of " + rows
                    + " rows gave groups of " + group);
            if (p.preparedBytes() == 0) { // a copy for float32 activations only: packedFloatDot checks it
                check(p.preparedFloats() > 0, q, "packForDecode gave a copy that takes neither encoded nor float32"
                        + " activations");
                return;
            }
            for (float[] x : new float[][] {data(n, seed + 1), ones(n)}) {
                MemorySegment xEnc = Arena.ofAuto().allocate(act.byteSize(n) + 5).asSlice(5);
                act.encode(x, 0, n, xEnc, 0);
                float[] xd = new float[n];
                act.decode(xEnc, 0, xd, 0, n);
                byte[] prepared = new byte[p.preparedBytes()];
                p.prepareActivations(xEnc, 0, prepared);
                float[] all = new float[rows + 2];
                Arrays.fill(all, Float.NaN);
                p.dotEncodedRows(0, rows, prepared, all, 1);
                check(Float.isNaN(all[0]) && Float.isNaN(all[rows + 1]), q, "packed dotEncodedRows wrote outside its "
                        + rows + " products");
                for (int r = 0; r < rows; r++) {
                    Fp64 ref = Fp64.dot(wd, r * n, xd, 0, n);
                    check(Math.abs(all[1 + r] - ref.sum()) <= ENCODED * ref.magnitude() + 1e-30, q, "packed dotEncodedRows"
                            + " row " + r + " of " + n + " elements = " + all[1 + r] + ", FP64 over the decoded "
                            + act.id() + " activations = " + ref.sum());
                }
                float[] part = new float[rows];
                Arrays.fill(part, Float.NaN);
                p.dotEncodedRows(group, rows - group, prepared, part, 0);
                for (int r = 0; r < rows - group; r++) {
                    check(Float.floatToIntBits(part[r]) == Float.floatToIntBits(all[1 + group + r]), q, "packed "
                            + "dotEncodedRows from row " + group + ": row " + (group + r) + " = " + part[r]
                            + ", from row 0: " + all[1 + group + r]);
                }
                check(Float.isNaN(part[rows - group]), q, "packed dotEncodedRows from row " + group + " wrote past "
                        + "its products");
            }
        }
    }

    /**
     * For a format whose packed copy also takes float32 activations ({@link PackedMatrix#preparedFloats()} not 0):
     * its products of 96 rows of 2,048 elements equal FP64 over the decoded weights within the format's {@code dot}
     * tolerance of {@code sum|w*x|}; a run from the second group gives the same bits; nothing is written outside it.
     */
    static void packedFloatDot(Quantizer q, Tolerance tol, long seed) {
        int n = q.blockSize() * Math.max(1, 2048 / q.blockSize());
        int rows = 96;
        long rowBytes = q.byteSize(n);
        MemorySegment enc = Arena.ofAuto().allocate(rows * rowBytes);
        float[] wd = new float[rows * n];
        float[] w = data(rows * n, seed);
        for (int r = 0; r < rows; r++) {
            q.encode(w, r * n, n, enc, r * rowBytes);
            q.decode(enc, r * rowBytes, wd, r * n, n);
        }
        try (Arena arena = Arena.ofShared()) {
            PackedMatrix p = q.packForDecode(new WeightMatrix("kit", q, enc, rows, n), arena).orElse(null);
            if (p == null || p.preparedFloats() == 0) {
                return;
            }
            int group = p.rowGroup();
            float[] x = data(n + 3, seed + 1);
            float[] prepared = new float[p.preparedFloats()];
            p.prepareFloats(x, 3, prepared);
            float[] all = new float[rows + 2];
            Arrays.fill(all, Float.NaN);
            p.dotRows(0, rows, prepared, all, 1);
            check(Float.isNaN(all[0]) && Float.isNaN(all[rows + 1]), q, "packed dotRows wrote outside its " + rows
                    + " products");
            for (int r = 0; r < rows; r++) {
                Fp64 ref = Fp64.dot(wd, r * n, x, 3, n);
                check(Math.abs(all[1 + r] - ref.sum()) <= tol.dot() * ref.magnitude() + 1e-30, q, "packed dotRows row "
                        + r + " of " + n + " elements = " + all[1 + r] + ", FP64 = " + ref.sum());
            }
            float[] part = new float[rows];
            Arrays.fill(part, Float.NaN);
            p.dotRows(group, rows - group, prepared, part, 0);
            for (int r = 0; r < rows - group; r++) {
                check(Float.floatToIntBits(part[r]) == Float.floatToIntBits(all[1 + group + r]), q, "packed dotRows "
                        + "from row " + group + ": row " + (group + r) + " = " + part[r] + ", from row 0: "
                        + all[1 + group + r]);
            }
            check(Float.isNaN(part[rows - group]), q, "packed dotRows from row " + group + " wrote past its products");
            if (q.packedCopyDecodes()) {
                packedDecode(q, p, wd, n);
            }
        }
    }

    /**
     * For a format whose packed copies decode ({@link Quantizer#packedCopyDecodes()}): {@link
     * PackedMatrix#decodeColumns} from the second row group and the second block on, into a column stride wider than
     * the rows and from an offset, gives each weight the bits of the format's {@code decode} ({@code wd}, {@code n}
     * a row) and writes nothing else.
     */
    private static void packedDecode(Quantizer q, PackedMatrix p, float[] wd, int n) {
        int group = p.rowGroup();
        int rows = p.source().rows() - group;
        int from = q.blockSize();
        int cols = n - from;
        int stride = rows + 3;
        int at = 5;
        float[] dst = new float[at + cols * stride];
        Arrays.fill(dst, Float.NaN);
        p.decodeColumns(group, rows, from, cols, dst, at, stride);
        for (int i = 0; i < dst.length; i++) {
            int c = (i - at) / stride;
            int r = (i - at) % stride;
            if (i < at || r >= rows) {
                check(Float.isNaN(dst[i]), q, "packed decodeColumns wrote element " + i + ", outside its " + rows
                        + " rows of " + cols + " columns");
            } else {
                float want = wd[(group + r) * n + from + c];
                check(Float.floatToIntBits(dst[i]) == Float.floatToIntBits(want), q, "packed decodeColumns row "
                        + (group + r) + " column " + (from + c) + " = " + dst[i] + ", decode gives " + want);
            }
        }
    }

    private static float[] ones(int n) {
        float[] x = new float[n];
        Arrays.fill(x, 1f);
        return x;
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
        // An even and an odd number of blocks: kernels that walk blocks in pairs handle a last one on its own; and
        // rows of over 8,192 elements, which a format's dotPreparedRows may read several at a time where it reads
        // short ones one by one.
        int even = 2 * Math.max(1, 256 / q.blockSize());
        int longer = 2 * Math.max(1, 4096 / q.blockSize()) + 1;
        for (int blocks : new int[] {even, even + 1, longer}) {
            int n = q.blockSize() * blocks;
            float[] w = data(n, seed + blocks);
            float[] x = data(n + 3, seed + 1);
            MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n));
            q.encode(w, 0, n, enc, 0);
            float[] wd = new float[n];
            q.decode(enc, 0, wd, 0, n);
            Fp64 ref = Fp64.dot(wd, 0, x, 3, n);
            float got = q.dot(enc, 0, x, 3, n);
            check(Math.abs(got - ref.sum()) <= tol.dot() * ref.magnitude() + 1e-30, q, "dot over " + blocks + " blocks = "
                    + got + ", FP64 = " + ref.sum());
            int pl = q.preparedActivations(n);
            if (pl > 0) { // prepared at an offset, in an array with room on both sides
                float[] prepared = new float[pl + 9];
                java.util.Arrays.fill(prepared, Float.NaN);
                q.prepareActivations(x, 3, n, prepared, 5);
                float prep = q.dotPrepared(enc, 0, x, 3, prepared, 5, n);
                check(Math.abs(prep - ref.sum()) <= tol.dot() * ref.magnitude() + 1e-30, q, "prepared dot over "
                        + blocks + " blocks = " + prep + ", FP64 = " + ref.sum());
                check(Float.isNaN(prepared[4]) && Float.isNaN(prepared[5 + pl]), q,
                        "prepareActivations wrote outside its " + pl + " floats");
            }
            // dotPreparedRows: each of eleven rows gets the bits dotPrepared gives it, and nothing else is written
            // (kernels that group rows: two groups of four, whether consecutive or interleaved, then a pair and one).
            int rows = 11;
            long rowBytes = q.byteSize(n);
            MemorySegment several = Arena.ofAuto().allocate(rows * rowBytes);
            q.encode(w, 0, n, several, 0);
            for (int r = 1; r < rows; r++) {
                q.encode(data(n, seed + 7 * blocks + r), 0, n, several, r * rowBytes);
            }
            float[] prepared = new float[pl + 9];
            if (pl > 0) {
                q.prepareActivations(x, 3, n, prepared, 5);
            }
            float[] products = new float[rows + 2];
            Arrays.fill(products, Float.NaN);
            q.dotPreparedRows(several, 0, rowBytes, rows, x, 3, prepared, 5, n, products, 1);
            for (int r = 0; r < rows; r++) {
                float one = q.dotPrepared(several, r * rowBytes, x, 3, prepared, 5, n);
                check(Float.floatToIntBits(products[1 + r]) == Float.floatToIntBits(one), q, "dotPreparedRows row " + r
                        + " over " + blocks + " blocks = " + products[1 + r] + ", dotPrepared = " + one);
            }
            check(Float.isNaN(products[0]) && Float.isNaN(products[rows + 1]), q,
                    "dotPreparedRows wrote outside its " + rows + " outputs");
        }
    }

    static List<String> gemmOnEveryBackend(Quantizer q, Tolerance tol, long seed) {
        List<String> ran = new ArrayList<>();
        for (Backend backend : ServiceLoader.load(Backend.class)) {
            if (!backend.availability().available()) {
                continue;
            }
            try (ComputeDevice device = backend.create(new BackendContext(2))) {
                // The third shape has 131 rows of at least 8,192 elements: a decode step's long rows, which the CPU
                // backend hands over a task's run at a time (Quantizer.dotPreparedRows; with two threads, runs of 8
                // rows and a last one of 3, so kernels that group long rows take groups and leftovers).
                for (int[] shape : new int[][] {{1, 7, 0}, {19, 33, 0}, {1, 131, 1}}) {
                    int rows = shape[0];
                    int out = shape[1];
                    int k = shape[2] == 0 ? q.blockSize() * Math.max(2, 256 / q.blockSize())
                            : q.blockSize() * ((8192 + q.blockSize() - 1) / q.blockSize());
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
                            Fp64 ref = Fp64.dot(wd, o * k, x, r * k, k);
                            double got = y[r * out + o];
                            check(Math.abs(got - ref.sum()) <= tol.dot() * ref.magnitude() + 1e-30, q, (exact ? "exact " : "")
                                    + "GEMM on backend '" + backend.id() + "' row " + r + " output " + o + ": " + got
                                    + ", FP64 = " + ref.sum());
                        }
                    }
                    }
                }
                for (Quantizer act : encodedActivationFormats(q)) {
                    encodedGemm(q, act, device, backend.id(), seed);
                    if (q.encodedDotIsExact() && act.id().equals(q.activationFormat())) {
                        exactGemmAgreesWithEncoded(q, act, device, backend.id(), seed);
                    }
                }
            }
            ran.add(backend.id());
        }
        return ran;
    }

    /**
     * {@link ComputeDevice#matmulEncoded} against FP64 over the decoded weights and activations, 1 and 19 rows, and 1
     * row of at least 8,192 elements (a decode step's long rows, which the CPU backend hands over in runs, {@link
     * Quantizer#dotEncodedRows}).
     */
    static void encodedGemm(Quantizer q, Quantizer act, ComputeDevice device, String backend, long seed) {
        encodedGemm(q, act, device, backend, seed, encodedLength(q, act), new int[] {1, 19});
        encodedGemm(q, act, device, backend, seed + 1, encodedLength(q, act, 8192), new int[] {1});
    }

    private static void encodedGemm(Quantizer q, Quantizer act, ComputeDevice device, String backend, long seed, int k,
                                    int[] shapes) {
        // 96 outputs: three groups of 32 rows, where a format packs its matrices for decode steps (PackedMatrix), so
        // that the CPU backend's one-row products go through the packed copy, an odd group included.
        int out = 96;
        float[] w = data(out * k, seed);
        long rowBytes = q.byteSize(k);
        MemorySegment enc = Arena.ofAuto().allocate(out * rowBytes);
        float[] wd = new float[out * k];
        for (int o = 0; o < out; o++) {
            q.encode(w, o * k, k, enc, o * rowBytes);
            q.decode(enc, o * rowBytes, wd, o * k, k);
        }
        long actRow = act.byteSize(k);
        for (int rows : shapes) {
            float[] x = data(rows * k, seed + 200 + rows);
            MemorySegment xEnc = Arena.ofAuto().allocate(rows * actRow);
            float[] xd = new float[rows * k];
            for (int r = 0; r < rows; r++) {
                act.encode(x, r * k, k, xEnc, r * actRow);
                act.decode(xEnc, r * actRow, xd, r * k, k);
            }
            MemorySegment heap = MemorySegment.ofArray(xEnc.toArray(ValueLayout.JAVA_BYTE));
            for (MemorySegment acts : new MemorySegment[] {xEnc, heap}) {
                float[] y = new float[rows * out];
                Arrays.fill(y, Float.NaN);
                device.matmulEncoded(new WeightMatrix("kit", q, enc, out, k), acts, actRow, rows, y);
                for (int r = 0; r < rows; r++) {
                    for (int o = 0; o < out; o++) {
                        Fp64 ref = Fp64.dot(wd, o * k, xd, r * k, k);
                        double got = y[r * out + o];
                        check(Math.abs(got - ref.sum()) <= ENCODED * ref.magnitude() + 1e-30, q, "encoded GEMM on "
                                + "backend '" + backend + "' (" + (acts.isNative() ? "native" : "heap") + " activations) row "
                                + r + " output " + o + " of " + k + " elements: " + got + ", FP64 = " + ref.sum());
                    }
                }
            }
        }
    }

    /**
     * For a format with {@link Quantizer#encodedDotIsExact()}: {@code matmulExact} over the decoded activations gives
     * every output the bits {@code matmulEncoded} gives it (13 activation rows times 64 outputs, so that a GEMM of
     * six-row groups and a leftover row is what runs on the CPU backend). Both are the exact products rounded to
     * float after sums in double; they could differ only where an exact value lies within a few double ulps of a
     * float rounding boundary, which these fixed rows do not meet. Blocks added in float lanes fail it.
     */
    static void exactGemmAgreesWithEncoded(Quantizer q, Quantizer act, ComputeDevice device, String backend, long seed) {
        int out = 64;
        int rows = 13;
        int k = encodedLength(q, act, 1024);
        float[] w = data(out * k, seed + 300);
        long rowBytes = q.byteSize(k);
        MemorySegment enc = Arena.ofAuto().allocate(out * rowBytes);
        for (int o = 0; o < out; o++) {
            q.encode(w, o * k, k, enc, o * rowBytes);
        }
        float[] x = data(rows * k, seed + 301);
        long actRow = act.byteSize(k);
        byte[] codes = new byte[Math.toIntExact(rows * actRow)];
        MemorySegment heap = MemorySegment.ofArray(codes);
        float[] xd = new float[rows * k];
        for (int r = 0; r < rows; r++) {
            act.encode(x, r * k, k, heap, r * actRow);
            act.decode(heap, r * actRow, xd, r * k, k);
        }
        WeightMatrix m = new WeightMatrix("kit", q, enc, out, k);
        float[] encoded = new float[rows * out];
        float[] exact = new float[rows * out];
        device.matmulEncoded(m, heap, actRow, rows, encoded);
        device.matmulExact(m, xd, rows, exact);
        for (int i = 0; i < encoded.length; i++) {
            check(Float.floatToIntBits(encoded[i]) == Float.floatToIntBits(exact[i]), q, "encodedDotIsExact, but on "
                    + "backend '" + backend + "' matmulExact over the decoded " + act.id() + " activations gives row "
                    + i / out + " output " + i % out + " " + exact[i] + " where matmulEncoded gives " + encoded[i]);
        }
    }

    /** An FP64 dot product and the sum of its terms' magnitudes, the scale of its rounding error. */
    private record Fp64(double sum, double magnitude) {
        static Fp64 dot(float[] a, int ao, float[] b, int bo, int n) {
            double sum = 0;
            double magnitude = 0;
            for (int i = 0; i < n; i++) {
                double p = (double) a[ao + i] * b[bo + i];
                sum += p;
                magnitude += Math.abs(p);
            }
            return new Fp64(sum, magnitude);
        }
    }

    /** Makes a format's packed copy of a matrix in either of its layouts: pairs of row groups interleaved or not. */
    @FunctionalInterface
    public interface Packer {
        /**
         * @param w      the matrix
         * @param arena  where the copy goes
         * @param paired whether pairs of row groups interleave their blocks
         * @return the copy, or empty where the format does not pack {@code w}
         */
        Optional<PackedMatrix> pack(WeightMatrix w, Arena arena, boolean paired);
    }

    /**
     * Checks a format's packed copies of a matrix made from chosen bytes, for formats whose blocks start with an
     * fp16 scale that the copy converts itself: {@code rows} rows of {@code blocks} blocks, the blocks' scales of
     * every kind (zeros of both signs, subnormals, normals of both signs, the largest finite) in rotating order and
     * the rest of each block random bytes; each layout through {@link #checkPackedCopy}; then the same matrix with one
     * scale infinite or NaN must not be packed ({@link Quantizer#packForDecode} empty).
     *
     * @param q      the format
     * @param rows   rows of the matrix (a multiple of the copies' row group)
     * @param blocks blocks a row
     * @param pack   the format's packing, in both layouts
     * @param random the bytes' and activations' source
     */
    public static void checkPackedCopyScales(Quantizer q, int rows, int blocks, Packer pack, Random random) {
        int n = q.blockSize() * blocks;
        int bytes = q.blockBytes();
        var fp16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN);
        short[] scales = {0x0000, (short) 0x8000, 0x0001, (short) 0x8001, 0x03FF, 0x0400, 0x3C00, (short) 0xBC00,
            0x1234, (short) 0xC321, 0x7BFF, (short) 0xFBFF, 0x2E66, (short) 0x83FF, 0x0200, (short) 0xABCD};
        MemorySegment m = Arena.ofAuto().allocate((long) bytes * blocks * rows);
        for (int r = 0; r < rows; r++) {
            for (int k = 0; k < blocks; k++) {
                long o = (long) bytes * (r * blocks + k);
                m.set(fp16, o, scales[(r + 3 * k) % scales.length]);
                for (int j = 2; j < bytes; j++) {
                    m.set(ValueLayout.JAVA_BYTE, o + j, (byte) random.nextInt());
                }
            }
        }
        float[] w = new float[rows * n];
        q.decode(m, 0, w, 0, rows * n);
        for (boolean paired : new boolean[] {true, false}) {
            try (Arena arena = Arena.ofShared()) {
                PackedMatrix p = pack.pack(new WeightMatrix("scales", q, m, rows, n), arena, paired).orElse(null);
                check(p != null, q, "a matrix of finite scales was not packed");
                checkPackedCopy(p, w, rows, n, random, paired ? " (pairs interleaved)" : " (groups in order)");
            }
        }
        try (Arena arena = Arena.ofShared()) {
            for (short d : new short[] {0x7C00, (short) 0xFC00, 0x7E00}) {
                m.set(fp16, (long) bytes * (17 * blocks + 2), d);
                check(q.packForDecode(new WeightMatrix("scales", q, m, rows, n), arena).isEmpty(), q,
                        String.format("a scale 0x%04X was packed", d & 0xFFFF));
            }
        }
    }

    /**
     * Checks a packed copy {@code p} of {@code rows} rows of {@code n} weights ({@code w}, the format's {@code decode}
     * of them, row after row), for formats' own tests of copies made from chosen bytes: its panel ({@link
     * PackedMatrix#decodeColumns}) has each weight's bits; its products ({@link PackedMatrix#dotRows}) with random
     * activations equal FP64 over {@code w} within {@code 1e-5} of {@code sum|w*x|}; runs from each later row group
     * give the same bits as the whole, products and panels alike.
     *
     * @param p      the copy, of floats
     * @param w      the decoded weights
     * @param rows   rows of the copy
     * @param n      weights a row
     * @param random activations' source
     * @param layout said in failures (which layout of the copy this is)
     */
    public static void checkPackedCopy(PackedMatrix p, float[] w, int rows, int n, Random random,
                                       String layout) {
        Quantizer q = p.source().format();
        float[] panel = new float[n * rows];
        p.decodeColumns(0, rows, 0, n, panel, 0, rows);
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < n; c++) {
                check(Float.floatToRawIntBits(w[r * n + c]) == Float.floatToRawIntBits(panel[c * rows + r]), q, "row "
                        + r + " column " + c + ": " + panel[c * rows + r] + ", decode " + w[r * n + c] + layout);
            }
        }
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = random.nextFloat() * 2 - 1;
        }
        float[] prepared = new float[p.preparedFloats()];
        p.prepareFloats(x, 0, prepared);
        float[] out = new float[rows];
        p.dotRows(0, rows, prepared, out, 0);
        for (int r = 0; r < rows; r++) {
            Fp64 ref = Fp64.dot(w, r * n, x, 0, n);
            check(Math.abs(out[r] - ref.sum()) <= 1e-5 * ref.magnitude(), q, "row " + r + ": " + out[r] + ", FP64 "
                    + ref.sum() + layout);
        }
        int group = p.rowGroup();
        for (int from = group; from < rows; from += group) {
            float[] part = new float[rows - from];
            p.dotRows(from, rows - from, prepared, part, 0);
            float[] partPanel = new float[n * part.length];
            p.decodeColumns(from, part.length, 0, n, partPanel, 0, part.length);
            for (int r = 0; r < part.length; r++) {
                check(Float.floatToIntBits(out[from + r]) == Float.floatToIntBits(part[r]), q, "row " + (from + r)
                        + " of a run from row " + from + layout);
                for (int c = 0; c < n; c++) {
                    check(Float.floatToRawIntBits(panel[c * rows + from + r])
                            == Float.floatToRawIntBits(partPanel[c * part.length + r]), q, "panel row " + (from + r)
                            + " column " + c + " of a run from row " + from + layout);
                }
            }
        }
    }

    private static void check(boolean ok, Quantizer q, String what) {
        if (!ok) {
            throw new AssertionError(q.id() + ": " + what);
        }
    }
}
