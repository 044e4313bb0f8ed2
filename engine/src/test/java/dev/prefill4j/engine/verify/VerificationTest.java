package dev.prefill4j.engine.verify;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The comparison at the heart of the reference check: the session's logits are compared row by row as they come
 * ({@link Verification#largestDifference}), so a difference, an infinity or a NaN in any row must survive into the
 * result and fail the label.
 */
class VerificationTest {
    @Test
    void largestDifferenceSeesEveryRowAndKeepsNaN() {
        float[] ref = {1f, -2f, 3f, 4f, 5f, 6f};
        // Only the window [at, at + count) of the reference is compared with got[0..count).
        assertEquals(0.5, Verification.largestDifference(new float[] {3.25f, 4.5f}, ref, 2, 2), 0.0);
        assertEquals(0.0, Verification.largestDifference(new float[] {1f, -2f}, ref, 0, 2), 0.0);
        // A NaN anywhere, before or after the largest difference, makes the result NaN (a Math.max would too).
        assertTrue(Double.isNaN(Verification.largestDifference(new float[] {Float.NaN, 100f}, ref, 0, 2)));
        assertTrue(Double.isNaN(Verification.largestDifference(new float[] {100f, Float.NaN}, ref, 0, 2)));
        assertEquals(Double.POSITIVE_INFINITY,
                Verification.largestDifference(new float[] {1f, Float.NEGATIVE_INFINITY}, ref, 0, 2), 0.0);
        // Such a result fails the check (NaN <= tolerance is false) and says so.
        double nan = Verification.largestDifference(new float[] {Float.NaN}, ref, 0, 1);
        Verification v = new Verification(nan <= 1e-3, nan, 1e-3, 7);
        assertTrue(v.label().startsWith("FAILED against the FP64 reference"), v.label());
    }
}
