package dev.prefill4j.quant.bitnet;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class TernaryFormatsTest {
    /** FORMATS.md §6.1: trits (2,0,1,2,1) -> v = 178 -> byte 188 (0xBC); decoding gives the trits back. */
    @Test
    void tq1_0WorkedExample() {
        int[] trits = {2, 0, 1, 2, 1};
        int v = 0;
        for (int t : trits) {
            v = v * 3 + t;
        }
        assertEquals(178, v);
        assertEquals(188, (v * 256 + 242) / 243);
        for (int n = 0; n < 5; n++) {
            assertEquals(trits[n], TQ1_0Quantizer.trit(188, n), "trit " + n);
        }
    }

    /**
     * Ternary data (values in {-d, 0, d}) survive a round trip exactly in both formats, and the two formats decode
     * to the same floats: the property that makes TQ1_0 and TQ2_0 files give bit-identical logits.
     */
    @Test
    void ternaryDataRoundTripsExactlyAndBothFormatsAgree() {
        SplittableRandom r = new SplittableRandom(3);
        int n = 256 * 4;
        float[] x = new float[n];
        for (int b = 0; b < 4; b++) {
            float d = 0.25f * (b + 1);
            for (int j = 0; j < 256; j++) {
                x[256 * b + j] = (r.nextInt(3) - 1) * d;
            }
            x[256 * b] = d; // make sure max|x| = d
        }
        float[] y1 = roundTrip(new TQ1_0Quantizer(), x);
        float[] y2 = roundTrip(new TQ2_0Quantizer(), x);
        assertArrayEquals(x, y1);
        assertArrayEquals(x, y2);
    }

    /**
     * The fused dot products (decode steps) of the two formats give the same bits for the same trits and scales, and
     * equal the FP64 dot of the decoded weights to float accumulation error (1e-5 of sum |w x|): for rows of 2,048
     * (with 16 float lanes the packed dot, TQ1_0's trits rewritten in TQ2_0's layout) and of 8,192 (the lane permute
     * dot).
     */
    @Test
    void bothFormatsDotToTheSameBits() {
        SplittableRandom r = new SplittableRandom(5);
        for (int n : new int[] {256 * 8, 256 * 32}) {
            float[] w = new float[n];
            float[] a = new float[n + 1];
            for (int i = 0; i < n; i++) {
                w[i] = (float) r.nextGaussian();
                a[i + 1] = (float) r.nextGaussian();
            }
            float[] dots = new float[2];
            dev.prefill4j.api.spi.Quantizer[] formats = {new TQ1_0Quantizer(), new TQ2_0Quantizer()};
            for (int f = 0; f < 2; f++) {
                MemorySegment seg = Arena.ofAuto().allocate(formats[f].byteSize(n));
                formats[f].encode(w, 0, n, seg, 0);
                float[] decoded = new float[n];
                formats[f].decode(seg, 0, decoded, 0, n);
                double ref = 0;
                double mag = 0;
                for (int i = 0; i < n; i++) {
                    ref += (double) decoded[i] * a[i + 1];
                    mag += Math.abs((double) decoded[i] * a[i + 1]);
                }
                dots[f] = formats[f].dot(seg, 0, a, 1, n);
                assertEquals(ref, dots[f], 1e-5 * mag, formats[f].id() + " at " + n);
            }
            assertEquals(Float.floatToIntBits(dots[0]), Float.floatToIntBits(dots[1]),
                    dots[0] + " vs " + dots[1] + " at " + n);
        }
    }

    /**
     * Decode steps' packed copies ({@link TernaryTable}): with 32 short lanes both formats pack (64 rows of 2,048), and
     * their products are the same bits for the same trits and scales, with one activation scale a row (per-token),
     * one a block (Q8_K's layout) or float32 activations; a TQ2_0
     * matrix with a trit code of 3 (which no quantizer writes, and whose pair sums could leave int16) is not packed.
     * Without 32 short lanes nothing packs. The products' values are the kit's check ({@link #bothPassTheKit}).
     */
    @Test
    void bothFormatsPackToTheSameBits() {
        int n = 2048;
        int rows = 64;
        SplittableRandom r = new SplittableRandom(9);
        float[] w = new float[rows * n];
        float[] x = new float[n];
        for (int i = 0; i < w.length; i++) {
            w[i] = (float) r.nextGaussian();
        }
        for (int i = 0; i < n; i++) {
            x[i] = (float) r.nextGaussian();
        }
        Q8KTokenQuantizer act = new Q8KTokenQuantizer();
        for (boolean perBlock : new boolean[] {false, true}) {
            MemorySegment a = Arena.ofAuto().allocate(act.byteSize(n));
            act.encode(x, 0, n, a, 0);
            for (int b = 0; perBlock && b < n / 256; b++) { // a scale per block, as Q8_K's (the same layout)
                long at = (long) b * Ternary.Q8K_BYTES;
                a.set(dev.prefill4j.api.spi.Blocks.F32, at, a.get(dev.prefill4j.api.spi.Blocks.F32, at) * (b + 1));
            }
            float[][] out = new float[2][rows];
            float[][] floatOut = new float[2][rows];
            dev.prefill4j.api.spi.Quantizer[] formats = {new TQ1_0Quantizer(), new TQ2_0Quantizer()};
            try (Arena arena = Arena.ofShared()) {
                for (int f = 0; f < 2; f++) {
                    MemorySegment seg = Arena.ofAuto().allocate(formats[f].byteSize(n) * rows);
                    for (int row = 0; row < rows; row++) {
                        formats[f].encode(w, row * n, n, seg, row * formats[f].byteSize(n));
                    }
                    var packed = formats[f].packForDecode(
                            new dev.prefill4j.api.spi.WeightMatrix("w", formats[f], seg, rows, n), arena);
                    assertEquals(Ternary.CODES32, packed.isPresent(), formats[f].id() + " packed");
                    if (packed.isEmpty()) {
                        return;
                    }
                    byte[] prepared = new byte[packed.get().preparedBytes()];
                    packed.get().prepareActivations(a, 0, prepared);
                    packed.get().dotEncodedRows(0, rows, prepared, out[f], 0);
                    float[] floats = new float[packed.get().preparedFloats()];
                    packed.get().prepareFloats(x, 0, floats);
                    packed.get().dotRows(0, rows, floats, floatOut[f], 0);
                }
            }
            for (int row = 0; row < rows; row++) {
                assertEquals(Float.floatToIntBits(floatOut[0][row]), Float.floatToIntBits(floatOut[1][row]),
                        "float32 activations, row " + row + ": " + floatOut[0][row] + " vs " + floatOut[1][row]);
                assertEquals(Float.floatToIntBits(out[0][row]), Float.floatToIntBits(out[1][row]),
                        "scale per " + (perBlock ? "block" : "token") + ", row " + row + ": " + out[0][row] + " vs "
                        + out[1][row]);
            }
        }
        TQ2_0Quantizer tq2 = new TQ2_0Quantizer();
        MemorySegment seg = Arena.ofAuto().allocate(tq2.byteSize(n) * rows);
        for (int row = 0; row < rows; row++) {
            tq2.encode(w, row * n, n, seg, row * tq2.byteSize(n));
        }
        seg.set(java.lang.foreign.ValueLayout.JAVA_BYTE, 5 * tq2.byteSize(n) + 17, (byte) 0xFF); // four codes of 3
        try (Arena arena = Arena.ofShared()) {
            assertEquals(false, tq2.packForDecode(
                    new dev.prefill4j.api.spi.WeightMatrix("w", tq2, seg, rows, n), arena).isPresent());
        }
    }

    private static float[] roundTrip(dev.prefill4j.api.spi.Quantizer q, float[] x) {
        MemorySegment seg = Arena.ofAuto().allocate(q.byteSize(x.length));
        q.encode(x, 0, x.length, seg, 0);
        float[] y = new float[x.length];
        q.decode(seg, 0, y, 0, x.length);
        return y;
    }

    /**
     * The kit. Round trip of Gaussian data: a ternary code with d = max|x| rounds x/d to -1, 0, 1, so the error is
     * up to half the scale, 0.5 max|x| (plus fp16 rounding of d).
     */
    @Test
    void bothPassTheKit() {
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new TQ1_0Quantizer(), new QuantizerTestKit.Tolerance(0.501, 1e-5)));
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(new TQ2_0Quantizer(), new QuantizerTestKit.Tolerance(0.501, 1e-5)));
    }

    /**
     * Per-token activations: one scale for the whole row (every block carries {@code max|x| / 127}), codes within half
     * a step of {@code x}, the largest element at +-127, group sums equal to their codes' sums, and ties rounded to
     * even: with {@code max|x| = 127} the step is 1, so 2.5 and -2.5 round to 2 and -2, 3.5 to 4.
     */
    @Test
    void perTokenActivationsShareOneScaleAndRoundTiesToEven() {
        Q8KTokenQuantizer q = new Q8KTokenQuantizer();
        SplittableRandom r = new SplittableRandom(9);
        int n = 256 * 4;
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = (float) (r.nextGaussian() * Math.pow(10, i / 256 - 2)); // blocks 100x apart in magnitude
        }
        MemorySegment enc = Arena.ofAuto().allocate(q.byteSize(n));
        q.encode(x, 0, n, enc, 0);
        float amax = 0;
        for (float v : x) {
            amax = Math.max(amax, Math.abs(v));
        }
        float[] back = new float[n];
        q.decode(enc, 0, back, 0, n);
        int peak = 0;
        for (int b = 0; b < n / 256; b++) {
            long o = (long) b * 292;
            assertEquals(amax / 127f, enc.get(dev.prefill4j.api.spi.Blocks.F32, o), "block " + b + " scale");
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) {
                    int code = enc.get(dev.prefill4j.api.spi.Blocks.I8, o + 4 + 16 * g + j);
                    sum += code;
                    peak = Math.max(peak, Math.abs(code));
                }
                assertEquals(sum, enc.get(dev.prefill4j.api.spi.Blocks.I16, o + 260 + 2L * g), "block " + b + " group " + g);
            }
        }
        assertEquals(127, peak);
        for (int i = 0; i < n; i++) {
            assertEquals(x[i], back[i], 0.5 * amax / 127 * (1 + 1e-6), "element " + i);
        }
        float[] ties = new float[256];
        ties[0] = 127;
        ties[1] = 2.5f;
        ties[2] = -2.5f;
        ties[3] = 3.5f;
        MemorySegment t = Arena.ofAuto().allocate(q.byteSize(256));
        q.encode(ties, 0, 256, t, 0);
        assertArrayEquals(new byte[] {127, 2, -2, 4}, t.asSlice(4, 4).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
    }
}
