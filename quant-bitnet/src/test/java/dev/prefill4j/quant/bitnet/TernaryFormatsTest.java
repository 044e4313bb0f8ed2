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
     * equal the FP64 dot of the decoded weights to float accumulation error (1e-5 of sum |w x|).
     */
    @Test
    void bothFormatsDotToTheSameBits() {
        SplittableRandom r = new SplittableRandom(5);
        int n = 256 * 8;
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
            assertEquals(ref, dots[f], 1e-5 * mag, formats[f].id());
        }
        assertEquals(Float.floatToIntBits(dots[0]), Float.floatToIntBits(dots[1]), dots[0] + " vs " + dots[1]);
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
}
