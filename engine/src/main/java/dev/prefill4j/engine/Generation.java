package dev.prefill4j.engine;

import dev.prefill4j.api.Api;

/**
 * The result of {@link Session#generate}.
 *
 * @param promptIds    the prompt's token ids (BOS included)
 * @param generatedIds the generated ids
 * @param text         the generated text
 * @param promptLogits logits of every prompt position {@code [n_prompt][n_vocab]} when asked for, else {@code null}
 * @param prefillNanos time spent in prefill
 * @param decodeNanos  time spent generating (all decode steps)
 * @param decodedTokens generated tokens that took decode time (all but the first of a generation that started with a
 *                     prompt, whose first token comes from prefill; all of a resumed one)
 * @since 0.1
 */
@Api.Stable
public record Generation(int[] promptIds, int[] generatedIds, String text, float[] promptLogits, long prefillNanos,
                         long decodeNanos, int decodedTokens) {
    /** {@return prompt tokens per second} */
    public double prefillTokensPerSecond() {
        return prefillNanos == 0 ? 0 : promptIds.length * 1e9 / prefillNanos;
    }

    /** {@return decoded tokens per second} */
    public double decodeTokensPerSecond() {
        return decodeNanos == 0 ? 0 : decodedTokens * 1e9 / decodeNanos;
    }
}
