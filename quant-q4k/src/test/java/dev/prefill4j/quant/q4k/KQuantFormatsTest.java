package dev.prefill4j.quant.q4k;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import org.junit.jupiter.api.Test;

class KQuantFormatsTest {
    @Test
    void q4_kWorkedExample() {
        // FORMATS.md §2: d = 1.0, dmin = 0.5, scales 81 02 03 C4 05 06 07 48 9A 0B 0C 0D, qs[0] = 0x7A, qs[32] = 0x3F.
        MemorySegment b = Arena.ofAuto().allocate(144);
        Blocks.fp16(b, 0, 1.0f);
        Blocks.fp16(b, 2, 0.5f);
        int[] sc = {0x81, 0x02, 0x03, 0xC4, 0x05, 0x06, 0x07, 0x48, 0x9A, 0x0B, 0x0C, 0x0D};
        for (int i = 0; i < 12; i++) {
            b.set(Blocks.I8, 4 + i, (byte) sc[i]);
        }
        b.set(Blocks.I8, 16, (byte) 0x7A);
        b.set(Blocks.I8, 16 + 32, (byte) 0x3F);
        int[][] expect = {{1, 5}, {2, 6}, {3, 7}, {4, 8}, {42, 9}, {11, 0}, {12, 0}, {61, 16}};
        byte[] bytes = b.toArray(Blocks.I8);
        for (int j = 0; j < 8; j++) {
            assertEquals(expect[j][0], KQuants.scale(bytes, 0, j), "scale " + j);
            assertEquals(expect[j][1], KQuants.min(bytes, 0, j), "min " + j);
        }
        float[] y = new float[256];
        new Q4KQuantizer().decode(b, 0, y, 0, 256);
        assertEquals(7.5f, y[0]);
        assertEquals(11.0f, y[32]);
        assertEquals(41.5f, y[64]);
        assertEquals(8.0f, y[96]);
    }

    @Test
    void q6_kWorkedExample() {
        // FORMATS.md §2: d = 0.25, sc[0] = 2, sc[2] = -1, sc[4] = 3, sc[6] = 1, ql[0] = 0x5A, ql[32] = 0, qh[0] = 0xE4.
        MemorySegment b = Arena.ofAuto().allocate(210);
        Blocks.fp16(b, 208, 0.25f);
        b.set(Blocks.I8, 192, (byte) 2);
        b.set(Blocks.I8, 194, (byte) -1);
        b.set(Blocks.I8, 196, (byte) 3);
        b.set(Blocks.I8, 198, (byte) 1);
        b.set(Blocks.I8, 0, (byte) 0x5A);
        b.set(Blocks.I8, 128, (byte) 0xE4);
        float[] y = new float[256];
        new Q6KQuantizer().decode(b, 0, y, 0, 256);
        assertEquals(-11.0f, y[0]);
        assertEquals(4.0f, y[32]);
        assertEquals(3.75f, y[64]);
        assertEquals(4.0f, y[96]);
    }

    /**
     * Q8_K's encoder (16 elements at a time with AVX-512) against ggml's {@code quantize_row_q8_K_ref} written out in
     * scalar code here: {@code iscale = -127 / max} (the first value of largest magnitude, sign kept), {@code q =
     * min(127, nearest_int(iscale * x))} with ties to even, group sums of 16, {@code d = 1 / iscale}; byte for byte.
     * Blocks that make ties: halves of the scale ({@code x = (k + 0.5) * max / 127}), {@code +m} and {@code -m} in one
     * block (either first), all zero, and random Gaussian ones.
     */
    @Test
    void q8_kEncodesAsGgmlsReference() {
        int blocks = 6;
        float[] x = new float[256 * blocks];
        java.util.SplittableRandom random = new java.util.SplittableRandom(8);
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) random.nextGaussian();
        }
        for (int j = 0; j < 256; j++) { // block 1: ties at every half step of the scale
            x[256 + j] = (j % 255 - 127 + 0.5f) * 3f / 127f;
        }
        x[256] = -3f;
        x[512 + 7] = 9f; // block 2: +m first, then -m
        x[512 + 100] = -9f;
        x[768 + 3] = -9f; // block 3: -m first, then +m
        x[768 + 200] = 9f;
        java.util.Arrays.fill(x, 1024, 1280, 0f); // block 4: zeros
        Q8KQuantizer q = new Q8KQuantizer();
        MemorySegment got = Arena.ofAuto().allocate(q.byteSize(x.length));
        q.encode(x, 0, x.length, got, 0);
        for (int b = 0; b < blocks; b++) {
            long o = (long) b * Q8KQuantizer.BYTES;
            float max = 0;
            float amax = 0;
            for (int j = 0; j < 256; j++) {
                float ax = Math.abs(x[256 * b + j]);
                if (ax > amax) {
                    amax = ax;
                    max = x[256 * b + j];
                }
            }
            if (amax == 0) {
                for (int i = 0; i < Q8KQuantizer.BYTES; i++) {
                    assertEquals(0, got.get(Blocks.I8, o + i), "block " + b + " byte " + i);
                }
                continue;
            }
            float iscale = -127f / max;
            assertEquals(1 / iscale, got.get(Blocks.F32, o), "block " + b + " d");
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 16 * g; j < 16 * g + 16; j++) {
                    int code = Math.min(127, (int) Math.rint(iscale * x[256 * b + j]));
                    sum += code;
                    assertEquals(code, got.get(Blocks.I8, o + 4 + j), "block " + b + " element " + j);
                }
                assertEquals(sum, got.get(Blocks.I16, o + 260 + 2L * g), "block " + b + " group " + g);
            }
        }
    }

    /**
     * The packed copy ({@link Q4KColumns}) converts the 16 rows' fp16 {@code d} and {@code dmin} in int lanes and
     * splits the 6-bit scales and mins into low and high bits: 48 rows of 4 super-blocks, their {@code d} and {@code
     * dmin} of every kind (zeros of both signs, subnormals, normals of both signs, the largest finite) in rotating
     * order, random scale bytes and nibbles; its panels equal {@code decode} bit for bit and its products FP64 over the
     * decoded weights within 1e-5 of the products' magnitudes ({@link QuantizerTestKit#checkPackedCopy}: three groups,
     * a pair and a last group alone, runs from the second and third group too). A matrix with one infinite or NaN
     * {@code d} or {@code dmin} is not packed. Skipped without 16 float lanes, where nothing is packed.
     */
    @Test
    void q4kPackedCopyKeepsEveryKindOfFactor() {
        checkEveryKindOfFactor(new Q4KQuantizer(), Q4KColumns::pack, 0, 2);
    }

    /**
     * Q6_K's packed copy ({@link Q6KColumns}) as Q4_K's above: every kind of fp16 {@code d}, random bytes for the
     * levels and int8 scales (-128 included), so every level 0-63 in every slot of the three ints, the split sixteenth
     * too.
     */
    @Test
    void q6kPackedCopyKeepsEveryKindOfFactor() {
        checkEveryKindOfFactor(new Q6KQuantizer(), Q6KColumns::pack, 208);
    }

    /**
     * Q6_K packs rows longer than {@link Q6KQuantizer#LONG_ROW} elements only: a matrix of 2,048-element rows is not
     * packed, one of 4,352 is, and its products and panels pass {@link QuantizerTestKit#checkPackedCopy} (the kit's
     * own packed checks, on 2,048-element rows, find nothing packed); neither is packed where the machine reads several
     * streams a thread ({@link KQuants#PACK_FOR_DECODE} false: the test run with rows grouped, and Intel processors).
     */
    @Test
    void q6kPacksLongRowsOnly() {
        assumeTrue(KQuants.FLOATS.length() == KColumns.GROUP, "no 16 float lanes here: Q6_K packs nothing");
        var q = new Q6KQuantizer();
        Random random = new Random(5);
        int rows = 48;
        for (int n : new int[] {2048, Q6KQuantizer.LONG_ROW + Q6KQuantizer.QK}) {
            float[] x = new float[rows * n];
            for (int i = 0; i < x.length; i++) {
                x[i] = (float) random.nextGaussian();
            }
            MemorySegment m = Arena.ofAuto().allocate(q.byteSize(n) * rows);
            for (int r = 0; r < rows; r++) {
                q.encode(x, r * n, n, m, r * q.byteSize(n));
            }
            float[] w = new float[rows * n];
            q.decode(m, 0, w, 0, rows * n);
            try (Arena arena = Arena.ofShared()) {
                Optional<PackedMatrix> p = q.packForDecode(new WeightMatrix("rows", q, m, rows, n), arena);
                assertEquals(KQuants.PACK_FOR_DECODE && n > Q6KQuantizer.LONG_ROW, p.isPresent(),
                        n + "-element rows packed: " + p.isPresent());
                if (p.isPresent()) {
                    QuantizerTestKit.checkPackedCopy(p.get(), w, rows, n, random, " (" + n + "-element rows)");
                }
            }
        }
    }

    /** A format's packing of 16 rows side by side. */
    private interface Packer {
        Optional<PackedMatrix> pack(WeightMatrix w, Arena arena);
    }

    /**
     * 48 rows of 4 super-blocks of {@code q}, the fp16 factors at {@code fields} of each of every kind in rotating
     * order, all other bytes random: packed, {@link QuantizerTestKit#checkPackedCopy}; one infinite
     * or NaN factor anywhere, nothing packed.
     */
    private static void checkEveryKindOfFactor(Quantizer q, Packer packer, int... fields) {
        assumeTrue(KQuants.FLOATS.length() == KColumns.GROUP, "no 16 float lanes here: " + q.id() + " packs nothing");
        int rows = 48;
        int blocks = 4;
        int bytes = q.blockBytes();
        int n = q.blockSize() * blocks;
        short[] kinds = {0x0000, (short) 0x8000, 0x0001, (short) 0x8001, 0x03FF, 0x0400, 0x3C00, (short) 0xBC00,
            0x1234, (short) 0xC321, 0x7BFF, (short) 0xFBFF, 0x2E66, (short) 0x83FF, 0x0200, (short) 0xABCD};
        Random random = new Random(12);
        MemorySegment m = Arena.ofAuto().allocate((long) bytes * blocks * rows);
        for (int i = 0; i < m.byteSize(); i++) {
            m.set(Blocks.I8, i, (byte) random.nextInt());
        }
        for (int r = 0; r < rows; r++) {
            for (int k = 0; k < blocks; k++) {
                for (int f = 0; f < fields.length; f++) {
                    m.set(Blocks.I16, (long) bytes * (r * blocks + k) + fields[f],
                            kinds[(r + (3 + 2 * f) * k + 7 * f) % kinds.length]);
                }
            }
        }
        float[] w = new float[rows * n];
        q.decode(m, 0, w, 0, rows * n);
        try (Arena arena = Arena.ofShared()) {
            PackedMatrix p = packer.pack(new WeightMatrix("factors", q, m, rows, n), arena).orElseThrow();
            QuantizerTestKit.checkPackedCopy(p, w, rows, n, random, "");
        }
        try (Arena arena = Arena.ofShared()) {
            for (int field : fields) {
                long o = (long) bytes * (33 * blocks + 2) + field;
                short kept = m.get(Blocks.I16, o);
                for (short special : new short[] {0x7C00, (short) 0xFC00, 0x7E00}) {
                    m.set(Blocks.I16, o, special);
                    assertTrue(packer.pack(new WeightMatrix("factors", q, m, rows, n), arena).isEmpty(),
                            String.format("%s: a factor at byte %d of 0x%04X was packed", q.id(), field,
                                    special & 0xFFFF));
                }
                m.set(Blocks.I16, o, kept);
            }
        }
    }

    /**
     * Kit tolerances: Q4_K's levels are 0..15 over [min, max] with 6-bit scales, so about one level of 15 over the
     * block range (up to 2 max|x|), 0.14 max|x|; Q5_K the same with 31 levels, 0.07; Q6_K half a level of 32 plus 8-bit scale rounding, 0.03; Q8_K half a
     * level of 127, 0.004.
     */
    @Test
    void kQuantsPassTheKit() {
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new Q4KQuantizer(), new QuantizerTestKit.Tolerance(0.14, 1e-5)));
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new Q5KQuantizer(), new QuantizerTestKit.Tolerance(0.07, 1e-5)));
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new Q6KQuantizer(), new QuantizerTestKit.Tolerance(0.03, 1e-5)));
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new Q8KQuantizer(), new QuantizerTestKit.Tolerance(0.004, 1e-5)));
    }

    /**
     * The vector unpacking of a super-block's eight 6-bit scales and mins against the scalar one ({@code scale},
     * {@code min}), bit for bit, on random bytes (every bit pattern of the 12 packed bytes reachable) and random
     * {@code d}/{@code dmin}.
     */
    @Test
    void scalesAndMinsMatchTheScalarUnpacking() {
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(11);
        byte[] b = new byte[144];
        float[] out = new float[16];
        for (int trial = 0; trial < 2000; trial++) {
            for (int i = 0; i < 16; i++) {
                b[i] = (byte) rnd.nextInt(256);
            }
            b[1] &= 0x3B; // keep d and dmin finite
            b[3] &= 0x3B;
            KQuants.scalesAndMins(b, 0, out);
            float d = Blocks.fp16(b, 0);
            float dmin = Blocks.fp16(b, 2);
            for (int j = 0; j < 8; j++) {
                assertEquals(d * KQuants.scale(b, 0, j), out[j], 0f, "scale " + j);
                assertEquals(-dmin * KQuants.min(b, 0, j), out[8 + j], 0f, "min " + j);
            }
        }
    }
}
