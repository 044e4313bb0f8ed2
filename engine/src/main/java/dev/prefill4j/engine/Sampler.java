package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * Picks tokens from logits as its {@link SamplerConfig} says. Not thread-safe (it owns a random generator).
 *
 * @since 0.1
 */
@Api.Stable
public final class Sampler {
    private final SamplerConfig config;
    private final SplittableRandom random;
    private long draws;

    /** @param config the settings */
    public Sampler(SamplerConfig config) {
        this(config, 0);
    }

    /**
     * A sampler that continues another's random sequence: the same settings, {@code draws} numbers already drawn.
     *
     * @param config the settings
     * @param draws  random numbers the continued sampler had drawn ({@link #draws()})
     */
    public Sampler(SamplerConfig config, long draws) {
        this.config = config;
        this.random = new SplittableRandom(config.seed());
        for (long i = 0; i < draws; i++) {
            random.nextDouble();
        }
        this.draws = draws;
    }

    /** {@return the settings} */
    public SamplerConfig config() {
        return config;
    }

    /** {@return random numbers drawn so far (one per non-greedy sample)} */
    public long draws() {
        return draws;
    }

    /** {@return the index of the highest logit; the lowest index wins ties} @param logits the logits */
    public static int argmax(float[] logits) {
        int best = 0;
        for (int i = 1; i < logits.length; i++) {
            if (logits[i] > logits[best]) {
                best = i;
            }
        }
        return best;
    }

    /** {@return the next token} @param logits the logits of the last position (not modified) */
    public int sample(float[] logits) {
        if (config.temperature() == 0) {
            return argmax(logits);
        }
        int n = logits.length;
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) {
            order[i] = i;
        }
        // Highest first; equal logits by lower id, so the order (and a seeded run) is deterministic.
        Arrays.sort(order, (a, b) -> logits[a] != logits[b] ? Float.compare(logits[b], logits[a]) : a - b);
        int keep = config.topK() == 0 ? n : Math.min(config.topK(), n);
        double max = logits[order[0]] / config.temperature();
        double[] p = new double[keep];
        double sum = 0;
        for (int i = 0; i < keep; i++) {
            p[i] = Math.exp(logits[order[i]] / config.temperature() - max);
            sum += p[i];
        }
        if (config.topP() < 1) {
            double mass = 0;
            int cut = keep;
            for (int i = 0; i < keep; i++) {
                mass += p[i] / sum;
                if (mass >= config.topP()) {
                    cut = i + 1;
                    break;
                }
            }
            keep = cut;
            sum = 0;
            for (int i = 0; i < keep; i++) {
                sum += p[i];
            }
        }
        draws++;
        double r = random.nextDouble() * sum;
        for (int i = 0; i < keep; i++) {
            r -= p[i];
            if (r < 0) {
                return order[i];
            }
        }
        return order[keep - 1];
    }
}
