package dev.prefill4j.quant.q4k;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
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
