package dev.prefill4j.engine;

import dev.prefill4j.api.Api;

/**
 * The result of {@link Session#generateWithBursts}.
 *
 * @param generation     ids, text and timings (decode time covers all verification passes)
 * @param passes         forward passes after the prompt (each verifies one pending token and its drafts)
 * @param draftsProposed draft tokens proposed
 * @param draftsAccepted draft tokens accepted
 * @since 0.1
 */
@Api.Stable
public record BurstGeneration(Generation generation, int passes, int draftsProposed, int draftsAccepted) {
    /** {@return accepted / proposed drafts, 0 when none were proposed} */
    public double acceptanceRate() {
        return draftsProposed == 0 ? 0 : (double) draftsAccepted / draftsProposed;
    }

    /** {@return generated tokens per forward pass (1 without bursts)} */
    public double tokensPerPass() {
        return passes == 0 ? 0 : (double) generation.generatedIds().length / passes;
    }
}
