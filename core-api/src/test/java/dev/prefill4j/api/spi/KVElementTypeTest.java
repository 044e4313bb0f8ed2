package dev.prefill4j.api.spi;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The KV cache's element codecs against their definitions, computed here without them: F16 as rounding to 11
 * significant bits, ties to even (in FP64); Q8_0 as llama.cpp's reference encoder of a block (FORMATS.md §1: {@code d =
 * max|x| / 127} in float, stored as F16; {@code q = round(x * (1 / d))}, half away from zero), its bytes read back
 * directly. The FP64 reference check rounds K and V through these codecs, so they are checked on their own here.
 */
class KVElementTypeTest {
    private static final ValueLayout.OfShort LE_SHORT = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** Values over many magnitudes, signs mixed, with a block of 32 zeros at {@code [32, 64)}. */
    private static float[] row(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = i >= 32 && i < 64 ? 0f : (float) (r.nextGaussian() * Math.pow(10, r.nextDouble(-6, 4)));
        }
        return x;
    }

    /** {@code x} rounded to binary16's 11 significant bits, ties to even; subnormal below 2^-14; no overflow here. */
    private static double half(double x) {
        double ulp = Math.abs(x) < 0x1p-14 ? 0x1p-24 : Math.scalb(1.0, Math.getExponent(x) - 10);
        return Math.rint(x / ulp) * ulp; // x / ulp and the product are exact: ulp is a power of two
    }

    private static float[] roundTrip(KVElementType type, float[] x) {
        MemorySegment cell = MemorySegment.ofArray(new byte[(int) type.rowBytes(x.length)]);
        type.encode(x, 0, x.length, cell, 0);
        float[] back = new float[x.length];
        type.decode(cell, 0, 0, x.length, back, 0);
        return back;
    }

    @Test
    void f32KeepsEveryBit() {
        float[] x = row(128, 1);
        assertArrayEquals(x, roundTrip(KVElementType.F32, x));
    }

    @Test
    void f16RoundsToElevenSignificantBitsTiesToEven() {
        float[] x = row(4096, 2);
        x[0] = 1 + 0x1p-11f; // a tie: stays 1 (even)
        x[1] = 1 + 3 * 0x1p-11f; // a tie: goes up to 1 + 2^-9 (even)
        x[2] = 65504f; // the largest half
        x[3] = 0x1p-24f; // the smallest subnormal half
        float[] back = roundTrip(KVElementType.F16, x);
        for (int i = 0; i < x.length; i++) {
            if (Math.abs(x[i]) <= 65504) {
                assertEquals(half(x[i]), back[i], 0.0, "element " + i + ": " + x[i]);
            }
        }
        assertEquals(1f, back[0]);
        assertEquals(1 + 0x1p-9f, back[1]);
    }

    @Test
    void q8_0BlocksFollowTheReferenceEncoder() {
        float[] x = row(256, 3);
        MemorySegment cell = MemorySegment.ofArray(new byte[(int) KVElementType.Q8_0.rowBytes(x.length)]);
        assertEquals(8 * 34, cell.byteSize());
        KVElementType.Q8_0.encode(x, 0, x.length, cell, 0);
        float[] back = new float[x.length];
        KVElementType.Q8_0.decode(cell, 0, 0, x.length, back, 0);
        for (int b = 0; b < x.length / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) {
                amax = Math.max(amax, Math.abs(x[32 * b + j]));
            }
            float d = amax / 127;
            float stored = Float.float16ToFloat(cell.get(LE_SHORT, 34L * b));
            assertEquals(half(d), stored, 0.0, "block " + b + " scale");
            for (int j = 0; j < 32; j++) {
                float v = x[32 * b + j] * (d != 0 ? 1 / d : 0);
                int q = (int) Math.copySign(Math.floor(Math.abs((double) v) + 0.5), v);
                assertEquals(q, cell.get(ValueLayout.JAVA_BYTE, 34L * b + 2 + j), "block " + b + " element " + j);
                assertEquals(q * stored, back[32 * b + j], 0.0);
                // In FP64: within half a step of the value, plus the scale's own F16 rounding (half an F16 step:
                // 2^-11 of it, or 2^-25 where it is subnormal) over up to 127 steps.
                double scaleError = Math.max(d * 0x1p-11, 0x1p-25);
                assertTrue(Math.abs((double) back[32 * b + j] - x[32 * b + j]) <= (0.5 * d + 127 * scaleError)
                        * (1 + 1e-6), "block " + b + " element " + j);
            }
            if (b == 1) { // the zero block: a zero scale, zero codes
                assertEquals(0f, stored);
            }
        }
    }

    /** Decoding a span that starts and ends inside blocks gives the same values as decoding the whole row. */
    @ParameterizedTest
    @EnumSource(KVElementType.class)
    void aSpanDecodesAsTheWholeRowDoes(KVElementType type) {
        float[] x = row(128, 4);
        float[] whole = roundTrip(type, x);
        MemorySegment cell = MemorySegment.ofArray(new byte[(int) type.rowBytes(x.length)]);
        type.encode(x, 0, x.length, cell, 0);
        for (int[] span : new int[][] {{0, 128}, {5, 40}, {31, 2}, {33, 95}, {96, 32}}) {
            float[] part = new float[span[1] + 3];
            type.decode(cell, 0, span[0], span[1], part, 3);
            assertArrayEquals(Arrays.copyOfRange(whole, span[0], span[0] + span[1]),
                    Arrays.copyOfRange(part, 3, part.length), type + " from " + span[0]);
        }
    }
}
