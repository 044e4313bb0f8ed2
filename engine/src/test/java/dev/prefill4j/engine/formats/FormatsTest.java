package dev.prefill4j.engine.formats;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Built-in formats against the worked examples of FORMATS.md and a scalar FP64 reference. */
class FormatsTest {
    static Quantizer format(String id) {
        return switch (id) {
            case "f32" -> new F32Quantizer();
            case "f16" -> new F16Quantizer();
            case "bf16" -> new BF16Quantizer();
            case "q8_0" -> new Q8_0Quantizer();
            case "q8_0-activations" -> new Q8_0ActivationQuantizer();
            default -> throw new IllegalArgumentException(id);
        };
    }

    /**
     * Activation rounding as llama.cpp's x86 code does it, against the reference rounding, on blocks whose values are
     * small multiples of one step (as activations from a quantized embedding are), so that {@code x * 127 / max} often
     * lands on or next to a tie (4 steps of a maximum of 8 give 63.5). Each encoder must produce exactly what its
     * formula gives (reference: {@code x * (1 / (max / 127))} rounded half away from zero; x86: {@code x * (127 /
     * max)} rounded half to even, both in float), and the two must differ somewhere in the 10,000 blocks, or the test
     * could not tell them apart.
     */
    @Test
    void q8_0ActivationRoundingIsLlamaCppsX86Rounding() {
        Quantizer ref = new Q8_0Quantizer();
        Quantizer x86 = new Q8_0ActivationQuantizer();
        SplittableRandom rnd = new SplittableRandom(11);
        MemorySegment a = Arena.ofAuto().allocate(34);
        MemorySegment b = Arena.ofAuto().allocate(34);
        int differing = 0;
        for (int trial = 0; trial < 10_000; trial++) {
            float step = (float) (0.001 + rnd.nextDouble());
            float[] x = new float[32];
            for (int j = 0; j < 32; j++) {
                x[j] = rnd.nextInt(-8, 9) * step;
            }
            x[0] = 8 * step;
            ref.encode(x, 0, 32, a, 0);
            x86.encode(x, 0, 32, b, 0);
            float amax = 0;
            for (float v : x) {
                amax = Math.max(amax, Math.abs(v));
            }
            float idRef = 1f / (amax / 127f);
            float idX86 = 127f / amax;
            for (int j = 0; j < 32; j++) {
                float r = x[j] * idRef;
                float s = x[j] * idX86;
                int wantRef = (int) Math.signum(r) * (int) Math.floor(Math.abs(r) + 0.5f);
                int wantX86 = (int) Math.rint(s);
                assertEquals(wantRef, a.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 2 + j), "reference, element " + j);
                assertEquals(wantX86, b.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 2 + j), "x86, element " + j);
                if (wantRef != wantX86) {
                    differing++;
                }
            }
        }
        assertTrue(differing > 0, "the two roundings never differed: the test data has no ties");
    }

    @Test
    void q8_0WorkedExample() {
        // FORMATS.md §1: x = [0.5, -1.27, 0.003, 1.0, 0...] -> d = fp16 0x211F, qs = [50, -127, 0, 100].
        float[] x = new float[32];
        x[0] = 0.5f;
        x[1] = -1.27f;
        x[2] = 0.003f;
        x[3] = 1.0f;
        MemorySegment block = Arena.ofAuto().allocate(34);
        new Q8_0Quantizer().encode(x, 0, 32, block, 0);
        assertEquals((short) 0x211F, block.get(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0));
        assertArrayEquals(new byte[] {50, -127, 0, 100, 0}, block.asSlice(2, 5).toArray(ValueLayout.JAVA_BYTE));
        float[] y = new float[32];
        new Q8_0Quantizer().decode(block, 0, y, 0, 32);
        assertEquals(0.500107f, y[0], 1e-6f);
        assertEquals(-1.270271f, y[1], 1e-6f);
        assertEquals(1.000214f, y[3], 1e-6f);
    }

    @Test
    void q8_0RoundsHalfAwayFromZero() {
        // amax 127 -> d = 1 exactly, so x*id is x: 2.5 -> 3 and -2.5 -> -3 (roundf), where rint would give 2 and -2.
        float[] x = new float[32];
        x[0] = 127f;
        x[1] = 2.5f;
        x[2] = -2.5f;
        MemorySegment block = Arena.ofAuto().allocate(34);
        new Q8_0Quantizer().encode(x, 0, 32, block, 0);
        assertArrayEquals(new byte[] {127, 3, -3}, block.asSlice(2, 3).toArray(ValueLayout.JAVA_BYTE));
    }

    /**
     * F16 decoding against {@link Float#float16ToFloat}, bit for bit, for every one of the 65,536 half-precision values
     * (zeros, subnormals, normals, infinities, NaN payloads) at an odd length and output offset, so that any vector
     * form of the decoder is held to the scalar conversion (a form in int lanes, tried, passed it but ran at a third
     * of the speed of the plain loop).
     */
    @Test
    void f16DecodesEveryHalfExactly() {
        int n = 65536 + 7;
        MemorySegment seg = Arena.ofAuto().allocate(2L * n);
        for (int i = 0; i < n; i++) {
            seg.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 2L * i, (short) (i % 65536));
        }
        float[] out = new float[n + 3];
        new F16Quantizer().decode(seg, 0, out, 3, n);
        for (int i = 0; i < n; i++) {
            int expected = Float.floatToRawIntBits(Float.float16ToFloat((short) (i % 65536)));
            assertEquals(expected, Float.floatToRawIntBits(out[3 + i]), "half 0x" + Integer.toHexString(i % 65536));
        }
    }

    /**
     * The F16 dot product reads its weights in place with a conversion of its own ({@link FusedDot#f16}); it must
     * see every finite half exactly as {@link Float#float16ToFloat} does: rows of 69 weights (vector part and scalar
     * tail alike) hold all 63,488 finite halves in turn, and a one-hot activation picks each weight out, so the dot
     * is that weight (tolerance 0). A row holding an infinity or a NaN, in the vector part or the tail, must give
     * infinity or NaN as the scalar reference does (the in-place conversion alone would make them finite); and on
     * random rows the dot is bit for bit the dot of the decoded row.
     */
    @Test
    void f16DotSeesEveryHalfAsTheScalarConversion() {
        Quantizer f16 = new F16Quantizer();
        int n = 69;
        MemorySegment row = Arena.ofAuto().allocate(2L * n + 1).asSlice(1); // unaligned on purpose
        float[] x = new float[n];
        var halves = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        int h = 0;
        int checked = 0;
        while (h < 65536) {
            short[] bits = new short[n];
            for (int i = 0; i < n; i++) {
                while (h < 65536 && (h & 0x7C00) == 0x7C00) {
                    h++; // infinities and NaNs: below
                }
                bits[i] = (short) (h < 65536 ? h++ : 0);
                row.set(halves, 2L * i, bits[i]);
            }
            for (int i = 0; i < n; i++) {
                Arrays.fill(x, 0);
                x[i] = 1;
                assertEquals(Float.float16ToFloat(bits[i]), f16.dot(row, 0, x, 0, n), 0.0,
                        "half 0x" + Integer.toHexString(bits[i] & 0xFFFF) + " at " + i);
                checked++;
            }
        }
        assertTrue(checked >= 63488, "every finite half checked: " + checked);
        Arrays.fill(x, 1);
        for (int at : new int[] {0, 40, 68}) { // first vector, a later one, the scalar tail
            for (short special : new short[] {(short) 0x7C00, (short) 0xFC00, (short) 0x7E00}) {
                for (int i = 0; i < n; i++) {
                    row.set(halves, 2L * i, Float.floatToFloat16(0.25f));
                }
                row.set(halves, 2L * at, special);
                float expected = Float.float16ToFloat(special);
                float got = f16.dot(row, 0, x, 0, n);
                assertEquals(expected, got, "0x" + Integer.toHexString(special & 0xFFFF) + " at " + at);
                // Such a row as the third of five taken together, in rows long enough to be grouped (four rows at
                // a time where vectors have 16 lanes; the special value at the same place, the tail's at the end):
                // it alone comes out infinite or NaN, the others as their own dot gives them.
                int m = FusedDot.F16_ONE_ROW_MAX_COUNT + n;
                int place = at == n - 1 ? m - 1 : at;
                MemorySegment five = Arena.ofAuto().allocate(5 * 2L * m);
                for (int i = 0; i < 5 * m; i++) {
                    five.set(halves, 2L * i, Float.floatToFloat16(0.25f));
                }
                for (int r = 0; r < 5; r++) {
                    five.set(halves, r * 2L * m + 2L * place, r == 2 ? special : Float.floatToFloat16(r));
                }
                float[] ones = new float[m];
                Arrays.fill(ones, 1);
                float[] products = new float[5];
                f16.dotPreparedRows(five, 0, 2L * m, 5, ones, 0, new float[0], 0, m, products, 0);
                for (int r = 0; r < 5; r++) {
                    float alone = f16.dot(five, r * 2L * m, ones, 0, m);
                    assertEquals(r == 2 ? expected : 0.25f * (m - 1) + r, alone, "row " + r);
                    assertEquals(Float.floatToRawIntBits(alone), Float.floatToRawIntBits(products[r]),
                            "row " + r + " of five, 0x" + Integer.toHexString(special & 0xFFFF) + " at " + place);
                }
            }
        }
        SplittableRandom rnd = new SplittableRandom(11);
        for (int len : new int[] {64, 2048 + 13}) {
            MemorySegment w = Arena.ofAuto().allocate(2L * len);
            float[] a = new float[len];
            for (int i = 0; i < len; i++) {
                w.set(halves, 2L * i, Float.floatToFloat16((float) rnd.nextGaussian()));
                a[i] = (float) rnd.nextGaussian();
            }
            assertEquals(Float.floatToRawIntBits(FusedDot.byDecoding(f16, w, 0, a, 0, len)),
                    Float.floatToRawIntBits(f16.dot(w, 0, a, 0, len)), "length " + len);
        }
    }

    @Test
    void bf16RoundsToNearestEven() {
        // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to the even mantissa, 1.0.
        assertEquals(1.0f, BF16Quantizer.toFloat(BF16Quantizer.fromFloat(1f + 0x1p-8f)));
        assertEquals(1f + 0x1p-6f, BF16Quantizer.toFloat(BF16Quantizer.fromFloat(1f + 0x1p-7f + 0x1p-8f)));
        assertEquals(1f + 0x1p-7f, BF16Quantizer.toFloat(BF16Quantizer.fromFloat(1f + 0x1p-8f + 0x1p-12f)));
        assertEquals(Float.NaN, BF16Quantizer.toFloat(BF16Quantizer.fromFloat(Float.NaN)));
    }

    /**
     * Round trip and dot against FP64 on fresh random data. Tolerances: the decoded value may differ from the input
     * by the format's rounding step (f32 exact; f16 2^-11 relative; bf16 2^-8 relative; q8_0 half a step of
     * max|x|/127 per block); the fused dot must equal the FP64 dot of the <em>decoded</em> row to float
     * accumulation error (1e-5 relative to sum|w*x|).
     */
    @ParameterizedTest
    @ValueSource(strings = {"f32", "f16", "bf16", "q8_0", "q8_0-activations"})
    void roundTripAndDotAgainstFp64(String id) {
        Quantizer q = format(id);
        SplittableRandom rnd = new SplittableRandom(7);
        int n = 32 * 37;
        float[] x = new float[n];
        float[] a = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = (float) (rnd.nextGaussian() * 3);
            a[i] = (float) rnd.nextGaussian();
        }
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n) + 3).asSlice(3); // unaligned on purpose
        q.encode(x, 0, n, enc, 0);
        float[] y = new float[n + 2];
        Arrays.fill(y, Float.NaN); // poisoned: an unwritten element fails
        q.decode(enc, 0, y, 1, n);
        assertEquals(Float.NaN, y[0]);
        assertEquals(Float.NaN, y[n + 1]);
        for (int b = 0; b < n / 32; b++) {
            double amax = 0;
            for (int j = 0; j < 32; j++) {
                amax = Math.max(amax, Math.abs(x[b * 32 + j]));
            }
            for (int j = 0; j < 32; j++) {
                int i = b * 32 + j;
                double tol = switch (id) {
                    case "f32" -> 0;
                    case "f16" -> Math.abs(x[i]) * 0x1p-11;
                    case "bf16" -> Math.abs(x[i]) * 0x1p-8;
                    default -> amax / 127 * 0.5 * 1.001 + Math.abs(x[i]) * 0x1p-10; // + fp16 rounding of d
                };
                assertEquals(x[i], y[i + 1], tol, id + " element " + i);
            }
        }
        double ref = 0;
        double mag = 0;
        for (int i = 0; i < n; i++) {
            ref += (double) y[i + 1] * a[i];
            mag += Math.abs((double) y[i + 1] * a[i]);
        }
        assertEquals(ref, q.dot(enc, 0, a, 0, n), mag * 1e-5, id + " dot");
    }

    /**
     * The plugin kit on Q8_0: round trip, dot, and the encoded dot product over {@code q8_0-activations} (native and
     * heap-backed) against FP64. Tolerances: half a level (d = max/127) plus the fp16 rounding of d (up to 2^-11 of
     * max at level 127). No backend is on this module's test path, so the kit's GEMM checks run in the tests module
     * (BuiltInFormatsKitTest).
     */
    @Test
    void q8_0PassesTheKit() {
        assertEquals(List.of(), QuantizerTestKit.verify(new Q8_0Quantizer(), new QuantizerTestKit.Tolerance(1.13 / 254, 1e-5)));
    }

    /**
     * The packed copy ({@link Q8_0Columns}) converts the 16 rows' fp16 scales in int lanes: 48 rows of 3 blocks
     * through the kit's {@code checkPackedCopyScales} (scales of every kind, codes over the whole int8 range, panels
     * equal {@code decode} bit for bit, products FP64 within 1e-5 of the products' magnitudes, both layouts of {@link
     * Q8_0Columns#PAIRED}; a matrix with one infinite or NaN scale is not packed). Skipped without 16 float lanes,
     * where nothing is packed.
     */
    @Test
    void q8_0PackedCopyKeepsEveryKindOfScale() {
        org.junit.jupiter.api.Assumptions.assumeTrue(FusedDot.FLOATS.length() == Q8_0Columns.GROUP,
                "no 16 float lanes here: Q8_0 packs nothing");
        QuantizerTestKit.checkPackedCopyScales(new Q8_0Quantizer(), 48, 3, Q8_0Columns::pack,
                new java.util.Random(13));
    }

    /**
     * The plugin kit on F16, whose decode-step kernel groups rows ({@code dotPreparedRows}, checked bit for bit
     * against the one-row dot). Round trip: float16 keeps 11 significant bits, so an element is off by at most 2^-11
     * of its own magnitude (the kit's data are normal float16 values).
     */
    @Test
    void f16PassesTheKit() {
        assertEquals(List.of(), QuantizerTestKit.verify(new F16Quantizer(), new QuantizerTestKit.Tolerance(0x1p-11, 1e-5)));
    }

    /**
     * F16's decode-step view ({@link FiniteF16Rows}, which leaves out the per-vector infinity check and takes the
     * activations times 2^112) gives each row the bits of {@link F16Quantizer#dot}: 11 rows (two groups of four and
     * three alone) of 2,048 + 13 and of 64 elements, weights drawn over every finite half (subnormals, zeros and
     * +-65504 included), with activations of ordinary size, with subnormal ones, and with one of 2^16 (which cannot be
     * scaled exactly, so the row goes the file path's way). A run from row 5 gives the same bits. A matrix with an
     * infinity or a NaN anywhere gets no view, so its rows keep the check.
     */
    @Test
    void finiteF16RowsGiveTheDotsBits() {
        F16Quantizer f16 = new F16Quantizer();
        var halves = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        SplittableRandom rnd = new SplittableRandom(29);
        int rows = 11;
        for (int n : new int[] {2048 + 13, 64}) {
            MemorySegment data = Arena.ofAuto().allocate(2L * rows * n);
            for (int i = 0; i < rows * n; i++) {
                int h;
                do {
                    h = rnd.nextInt(65536);
                } while ((h & 0x7C00) == 0x7C00);
                data.set(halves, 2L * i, (short) h);
            }
            WeightMatrix w = new WeightMatrix("w", f16, data, rows, n);
            PackedMatrix view = f16.packForDecode(w, Arena.global()).orElseThrow();
            assertEquals(0, view.byteSize());
            for (String kind : new String[] {"ordinary", "subnormal", "unscalable"}) {
                float[] x = new float[n];
                for (int i = 0; i < n; i++) {
                    x[i] = (float) rnd.nextGaussian() * (kind.equals("subnormal") ? 0x1p-130f : 1f);
                }
                if (kind.equals("unscalable")) {
                    x[n / 2] = 0x1p16f;
                }
                float[] prepared = new float[view.preparedFloats()];
                view.prepareFloats(x, 0, prepared);
                float[] got = new float[rows];
                view.dotRows(0, rows, prepared, got, 0);
                float[] part = new float[rows - 5];
                view.dotRows(5, rows - 5, prepared, part, 0);
                for (int r = 0; r < rows; r++) {
                    float expected = f16.dot(data, r * 2L * n, x, 0, n);
                    assertEquals(Float.floatToRawIntBits(expected), Float.floatToRawIntBits(got[r]),
                            kind + " activations, " + n + " elements, row " + r + ": " + got[r] + " against " + expected);
                    if (r >= 5) {
                        assertEquals(Float.floatToRawIntBits(got[r]), Float.floatToRawIntBits(part[r - 5]),
                                "row " + r + " in a run from row 5");
                    }
                }
            }
            for (short special : new short[] {(short) 0x7C00, (short) 0xFC00, (short) 0x7E01}) {
                short kept = data.get(halves, 2L * (rows * n - 1));
                data.set(halves, 2L * (rows * n - 1), special); // the last element: the scan's scalar tail for n = 2061
                assertFalse(f16.packForDecode(w, Arena.global()).isPresent(), "a view over 0x"
                        + Integer.toHexString(special & 0xFFFF));
                data.set(halves, 2L * (rows * n - 1), kept);
                data.set(halves, 2L * 7, special);
                assertFalse(f16.packForDecode(w, Arena.global()).isPresent(), "a view over 0x"
                        + Integer.toHexString(special & 0xFFFF) + " in the vector part");
                data.set(halves, 2L * 7, (short) 0);
            }
        }
    }
}
