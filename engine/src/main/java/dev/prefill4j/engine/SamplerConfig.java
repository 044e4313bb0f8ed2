package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.Api;

/**
 * How to pick the next token. Temperature 0 is greedy: the highest logit, the lowest id among equal logits.
 * Otherwise logits are divided by the temperature, cut to the {@code topK} highest (0 = all), then to the
 * smallest set whose probability reaches {@code topP} (1 = all), and sampled with a generator seeded by
 * {@code seed}, so a seed reproduces a run.
 *
 * @param temperature 0 for greedy, else positive
 * @param topK        keep this many highest logits; 0 keeps all
 * @param topP        nucleus mass in (0, 1]
 * @param seed        random seed
 * @since 0.1
 */
@Api.Stable
public record SamplerConfig(float temperature, int topK, float topP, long seed) {
    /** Validates the values. */
    public SamplerConfig {
        if (!(temperature >= 0) || topK < 0 || !(topP > 0 && topP <= 1)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "bad sampling settings: temperature "
                    + temperature + " (>= 0), top-k " + topK + " (>= 0), top-p " + topP + " (0 < p <= 1)");
        }
    }

    /** {@return greedy decoding} */
    public static SamplerConfig greedy() {
        return new SamplerConfig(0f, 0, 1f, 0);
    }
}
