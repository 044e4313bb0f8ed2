package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;

/** What TQ1_0 and TQ2_0 share: 256-element blocks with one fp16 scale {@code d = max|x|} and trits {@code t} in 0..2. */
final class Ternary {
    static final int QK = 256;

    private Ternary() {
    }

    /** {@code max|x|} of the block at {@code base}: the scale both formats store. */
    static float absMax(float[] x, int base) {
        float amax = 0;
        for (int j = 0; j < QK; j++) {
            amax = Math.max(amax, Math.abs(x[base + j]));
        }
        return amax;
    }

    /** The trit (0, 1, 2 for -1, 0, +1) of {@code v} at reciprocal scale {@code id}: {@code lroundf(v * id) + 1}. */
    static int trit(float v, float id) {
        return Blocks.roundHalfAway(v * id) + 1;
    }
}
