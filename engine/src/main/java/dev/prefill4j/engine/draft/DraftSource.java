package dev.prefill4j.engine.draft;

import dev.prefill4j.api.Api;

/**
 * Proposes likely next tokens for burst verification. Proposals cost nothing if wrong (the model rejects them) and
 * save passes over the KV cache when right, so a source may be cheap and speculative. Implement it to plug in a
 * draft model or any other predictor.
 *
 * @since 0.1
 */
@Api.Stable
@FunctionalInterface
public interface DraftSource {
    /**
     * Proposes up to {@code max} tokens to follow {@code history[0 .. length)}.
     *
     * @param history the tokens so far (prompt and accepted output); read only
     * @param length  how many entries of {@code history} are valid
     * @param max     the most tokens to propose
     * @return the proposal, possibly empty, at most {@code max} long
     */
    int[] propose(int[] history, int length, int max);
}
