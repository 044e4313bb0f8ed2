package com.example.q4_1;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import org.junit.jupiter.api.Test;

class Q4_1QuantizerTest {
    /** Hand-made block: d = 0.5, m = -1, qs[0] = 0x3A -> element 0 = 10*0.5 - 1 = 4, element 16 = 3*0.5 - 1 = 0.5. */
    @Test
    void decodesAHandMadeBlock() {
        MemorySegment b = Arena.ofAuto().allocate(20);
        Blocks.fp16(b, 0, 0.5f);
        Blocks.fp16(b, 2, -1f);
        b.set(Blocks.I8, 4, (byte) 0x3A);
        float[] y = new float[32];
        new Q4_1Quantizer().decode(b, 0, y, 0, 32);
        assertEquals(4f, y[0]);
        assertEquals(0.5f, y[16]);
        assertEquals(-1f, y[1]);
    }

    /**
     * The kit: 16 levels over [min, max] give at most half a level of error, (max - min) / 30 <= max|x| / 15, plus the
     * fp16 rounding of d and m.
     */
    @Test
    void passesThePluginTestKit() {
        List<String> backends = QuantizerTestKit.verify(new Q4_1Quantizer(), new QuantizerTestKit.Tolerance(1.02 / 15, 1e-5));
        assertTrue(backends.contains("cpu"), backends.toString());
    }
}
