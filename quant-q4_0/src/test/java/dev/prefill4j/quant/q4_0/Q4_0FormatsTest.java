package dev.prefill4j.quant.q4_0;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.testkit.QuantizerTestKit;
import static org.junit.jupiter.api.Assumptions.assumeTrue;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class Q4_0FormatsTest {
    @Test
    void q4_0WorkedExample() {
        // FORMATS.md §1: x_j = (j - 16) / 4 -> d = 0.5, bytes 00 38 | 80 91 91 A2 A2 B3 B3 C4 C4 D5 D5 E6 E6 F7 F7 F8.
        float[] x = new float[32];
        for (int j = 0; j < 32; j++) {
            x[j] = (j - 16) / 4f;
        }
        MemorySegment b = Arena.ofAuto().allocate(18);
        new Q4_0Quantizer().encode(x, 0, 32, b, 0);
        byte[] expected = {0x00, 0x38, (byte) 0x80, (byte) 0x91, (byte) 0x91, (byte) 0xA2, (byte) 0xA2, (byte) 0xB3,
            (byte) 0xB3, (byte) 0xC4, (byte) 0xC4, (byte) 0xD5, (byte) 0xD5, (byte) 0xE6, (byte) 0xE6, (byte) 0xF7,
            (byte) 0xF7, (byte) 0xF8};
        assertArrayEquals(expected, b.toArray(ValueLayout.JAVA_BYTE));
        float[] y = new float[32];
        new Q4_0Quantizer().decode(b, 0, y, 0, 32);
        assertEquals(-4.0f, y[0]);
        assertEquals(0.0f, y[16]);
        assertEquals(0.0f, y[15]);
        assertEquals(3.5f, y[31]);
    }

    /** Kit tolerances: half a level of 15 (Q4_0: d = max/8, levels -8..7) plus fp16 rounding of d; 31 for Q5_0. */
    @Test
    void q4_0PassesTheKit() {
        List<String> backends = QuantizerTestKit.verify(new Q4_0Quantizer(), new QuantizerTestKit.Tolerance(1.01 / 16, 1e-5));
        assertEquals(List.of("cpu"), backends);
    }

    /** Q5_1: half a level of 31 levels over [min, max] (up to 2 max|x|): 1/31 of max|x|, plus fp16 rounding. */
    @Test
    void q5_1PassesTheKit() {
        List<String> backends = QuantizerTestKit.verify(new Q5_1Quantizer(), new QuantizerTestKit.Tolerance(1.02 / 31, 1e-5));
        assertEquals(List.of("cpu"), backends);
    }

    @Test
    void q5_0PassesTheKit() {
        List<String> backends = QuantizerTestKit.verify(new Q5_0Quantizer(), new QuantizerTestKit.Tolerance(1.01 / 32, 1e-5));
        assertEquals(List.of("cpu"), backends);
    }

    /**
     * The packed copy ({@link Q4_0Columns}) converts the 16 rows' fp16 scales in int lanes too: 48 rows of 4 blocks,
     * each block's 16 rows given scales of every kind (zeros of both signs, subnormals, normals of both signs, the
     * largest finite) in rotating order; its panels equal {@code decode} bit for bit and its products FP64 over the
     * decoded weights within 1e-5 of the products' magnitudes. Three groups of 16 rows: a pair and a last group
     * alone; products and panels of runs from the second and the third group (a run taking groups of two pairs, and
     * the lone one alone) give the same bits as the whole. Both layouts: pairs' blocks interleaved and groups' blocks
     * in order ({@link Q4_0Columns#PAIRED}). A matrix with one infinite or NaN scale is not packed. Skipped without 16
     * float lanes, where nothing is packed.
     */
    @Test
    void packedCopyKeepsEveryKindOfScale() {
        assumeTrue(Q4_0Quantizer.FLOATS.length() == Q4_0Columns.GROUP, "no 16 float lanes here: Q4_0 packs nothing");
        QuantizerTestKit.checkPackedCopyScales(new Q4_0Quantizer(), 48, 4, Q4_0Columns::pack, new Random(11));
    }

    /**
     * The 16-lane dot converts each block's fp16 {@code d} by bit moves and a multiply, not by {@code
     * Float.float16ToFloat}: a row of 35 blocks (four steps of eight and a tail) for each kind of {@code d} (zeros,
     * subnormals, normals of both signs, the largest finite) checked against FP64 over the decoded weights, within
     * 1e-5 of the sum of the products' magnitudes; and a row with one infinite or NaN {@code d} gives a non-finite
     * product, as its decoded weights do.
     */
    @Test
    void preparedDotKeepsEveryKindOfScale() {
        var q = new Q4_0Quantizer();
        int blocks = 35;
        int n = 32 * blocks;
        var fp16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        Random random = new Random(7);
        float[] x = new float[n];
        for (int i = 0; i < n; i++) {
            x[i] = random.nextFloat() * 2 - 1;
        }
        float[] prepared = new float[Math.max(1, q.preparedActivations(n))];
        q.prepareActivations(x, 0, n, prepared, 0);
        short[] scales = {0x0000, (short) 0x8000, 0x0001, (short) 0x8001, 0x03FF, 0x0400, 0x3C00, (short) 0xBC00,
            0x1234, (short) 0xC321, 0x7BFF, (short) 0xFBFF};
        for (short d : scales) {
            MemorySegment row = Arena.ofAuto().allocate(18L * blocks);
            for (int k = 0; k < blocks; k++) {
                row.set(fp16, 18L * k, d);
                for (int j = 0; j < 16; j++) {
                    row.set(ValueLayout.JAVA_BYTE, 18L * k + 2 + j, (byte) random.nextInt());
                }
            }
            float[] w = new float[n];
            q.decode(row, 0, w, 0, n);
            double ref = 0;
            double magnitude = 0;
            for (int i = 0; i < n; i++) {
                ref += (double) w[i] * x[i];
                magnitude += Math.abs((double) w[i] * x[i]);
            }
            float got = q.dotPrepared(row, 0, x, 0, prepared, 0, n);
            assertTrue(Math.abs(got - ref) <= 1e-5 * magnitude, String.format(
                    "d = 0x%04X: dotPrepared %s, FP64 %s", d & 0xFFFF, got, ref));
        }
        for (short d : new short[] {0x7C00, (short) 0xFC00, 0x7E00}) {
            MemorySegment row = Arena.ofAuto().allocate(18L * blocks);
            for (int k = 0; k < blocks; k++) {
                row.set(fp16, 18L * k, k == 5 ? d : 0x3C00);
                for (int j = 0; j < 16; j++) {
                    row.set(ValueLayout.JAVA_BYTE, 18L * k + 2 + j, (byte) random.nextInt());
                }
            }
            float got = q.dotPrepared(row, 0, x, 0, prepared, 0, n);
            assertFalse(Float.isFinite(got), String.format("d = 0x%04X in one block: dotPrepared %s", d & 0xFFFF, got));
        }
    }
}
