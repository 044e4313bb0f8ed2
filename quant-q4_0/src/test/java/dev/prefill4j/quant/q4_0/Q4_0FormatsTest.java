package dev.prefill4j.quant.q4_0;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
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
}
