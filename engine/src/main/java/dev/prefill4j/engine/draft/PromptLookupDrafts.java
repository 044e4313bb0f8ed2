package dev.prefill4j.engine.draft;

import dev.prefill4j.api.Api;
import java.util.Arrays;

/**
 * Prompt-lookup drafting: finds the most recent earlier occurrence of the last {@code n} tokens (trying
 * {@code n = maxNgram} down to {@code minNgram}) and proposes the tokens that followed it. Effective wherever
 * output repeats its context (code edits, summaries, extraction, loops).
 *
 * @since 0.1
 */
@Api.Stable
public final class PromptLookupDrafts implements DraftSource {
    private final int maxNgram;
    private final int minNgram;

    /**
     * @param maxNgram longest suffix to match, at least {@code minNgram}
     * @param minNgram shortest suffix to match, at least 1
     */
    public PromptLookupDrafts(int maxNgram, int minNgram) {
        if (minNgram < 1 || maxNgram < minNgram) {
            throw new IllegalArgumentException("need 1 <= minNgram <= maxNgram, got " + minNgram + ", " + maxNgram);
        }
        this.maxNgram = maxNgram;
        this.minNgram = minNgram;
    }

    /** {@return n-grams of 3 down to 1} */
    public static PromptLookupDrafts defaults() {
        return new PromptLookupDrafts(3, 1);
    }

    @Override
    public int[] propose(int[] history, int length, int max) {
        for (int n = Math.min(maxNgram, length - 1); n >= minNgram; n--) {
            // Most recent earlier occurrence of history[length - n .. length).
            for (int start = length - n - 1; start >= 0; start--) {
                if (Arrays.equals(history, start, start + n, history, length - n, length)) {
                    int from = start + n;
                    int count = Math.min(max, length - from);
                    if (count > 0) {
                        return Arrays.copyOfRange(history, from, from + count);
                    }
                }
            }
        }
        return new int[0];
    }
}
