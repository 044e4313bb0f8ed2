package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class SamplerTest {
    @Test
    void greedyTakesTheLowestIdAmongEqualLogits() {
        assertEquals(1, Sampler.argmax(new float[] {0f, 3f, 1f, 3f}));
        assertEquals(1, new Sampler(SamplerConfig.greedy()).sample(new float[] {0f, 3f, 1f, 3f}));
    }

    @Test
    void aSeedReproducesARun() {
        float[] logits = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f};
        Sampler a = new Sampler(new SamplerConfig(1f, 0, 1f, 42));
        Sampler b = new Sampler(new SamplerConfig(1f, 0, 1f, 42));
        for (int i = 0; i < 50; i++) {
            assertEquals(a.sample(logits), b.sample(logits));
        }
    }

    @Test
    void topKOneAndTinyTopPAreGreedy() {
        float[] logits = {0.1f, 2f, 1.9f, -1f};
        Sampler k1 = new Sampler(new SamplerConfig(5f, 1, 1f, 1));
        Sampler p = new Sampler(new SamplerConfig(1f, 0, 1e-6f, 1));
        for (int i = 0; i < 20; i++) {
            assertEquals(1, k1.sample(logits));
            assertEquals(1, p.sample(logits));
        }
    }

    /**
     * Frequencies over 200,000 draws match softmax(logits / T) within 5 standard errors
     * (sqrt(p(1-p)/n) is at most 0.0011 here), and top-k removes the excluded tokens entirely.
     */
    @Test
    void samplingFollowsTheTemperedSoftmax() {
        float[] logits = {1f, 2f, 0f, 0.5f};
        float t = 0.7f;
        double[] expected = new double[4];
        double z = 0;
        for (int i = 0; i < 4; i++) {
            expected[i] = Math.exp(logits[i] / t);
            z += expected[i];
        }
        int n = 200_000;
        int[] counts = new int[4];
        Sampler s = new Sampler(new SamplerConfig(t, 0, 1f, 3));
        for (int i = 0; i < n; i++) {
            counts[s.sample(logits)]++;
        }
        for (int i = 0; i < 4; i++) {
            double p = expected[i] / z;
            assertEquals(p, counts[i] / (double) n, 5 * Math.sqrt(p * (1 - p) / n), "token " + i);
        }
        Sampler k2 = new Sampler(new SamplerConfig(t, 2, 1f, 3));
        for (int i = 0; i < 1000; i++) {
            int id = k2.sample(logits);
            assertEquals(true, id == 0 || id == 1);
        }
    }

    /**
     * The ranking by primitive keys picks what a sort of all ids by (logit descending, id ascending) picks, draw for
     * draw from one seed, at top-k 1, 40, all and more than all, with and without top-p: over a vocabulary of 128,256
     * whose highest logits stand out, and over a flat one of 3,000 where every token has a say, both with many equal
     * logits and {@code -0.0} beside {@code 0.0}, so that ties decide the order. The reference below is that sort,
     * boxed, as plainly as it can be written.
     */
    @Test
    void rankingByKeysPicksWhatAFullSortPicks() {
        for (int n : new int[] {128_256, 3_000}) {
            SplittableRandom data = new SplittableRandom(7);
            float[] logits = new float[n];
            for (int i = 0; i < n; i++) {
                // Steps of 1/8: many equal logits; the flat vocabulary's are mostly within 1 of 0.
                logits[i] = (float) Math.round(data.nextGaussian() * (n > 10_000 ? 40 : 4)) / 8f;
                if (logits[i] == 0f && data.nextBoolean()) {
                    logits[i] = -0f;
                }
            }
            if (n > 10_000) { // the highest value twice, far apart
                logits[5] = 30f;
                logits[n - 2] = 30f;
            }
            boolean large = n > 10_000; // fewer cases there: the reference's boxed sort takes about 20 ms a draw
            int draws = large ? 10 : 40;
            for (int topK : large ? new int[] {1, 40, 0} : new int[] {1, 40, 0, n + 5}) {
                for (float topP : large ? new float[] {1f, 0.95f} : new float[] {1f, 0.95f, 0.3f}) {
                    for (float t : large ? new float[] {0.8f} : new float[] {0.8f, 3f}) {
                        SamplerConfig c = new SamplerConfig(t, topK, topP, 11);
                        Sampler s = new Sampler(c);
                        SplittableRandom ref = new SplittableRandom(11);
                        for (int draw = 0; draw < draws; draw++) {
                            logits[draw * 61] += 0.125f; // a different distribution each draw
                            assertEquals(reference(logits, c, ref), s.sample(logits), "vocabulary " + n + ", top-k "
                                    + topK + ", top-p " + topP + ", T " + t + ", draw " + draw);
                        }
                        assertEquals(draws, s.draws());
                    }
                }
            }
        }
    }

    /** The sampling rule of {@link SamplerConfig}, by a full sort of boxed ids. */
    private static int reference(float[] logits, SamplerConfig c, SplittableRandom random) {
        Integer[] ids = new Integer[logits.length];
        Arrays.setAll(ids, i -> i);
        Arrays.sort(ids, (a, b) -> logits[a] == logits[b] ? Integer.compare(a, b) : Float.compare(logits[b], logits[a]));
        int keep = c.topK() == 0 ? ids.length : Math.min(c.topK(), ids.length);
        double max = logits[ids[0]] / c.temperature();
        double[] p = new double[keep];
        double sum = 0;
        for (int i = 0; i < keep; i++) {
            p[i] = Math.exp(logits[ids[i]] / c.temperature() - max);
            sum += p[i];
        }
        if (c.topP() < 1) {
            double mass = 0;
            for (int i = 0; i < keep; i++) {
                mass += p[i] / sum;
                if (mass >= c.topP()) {
                    keep = i + 1;
                    break;
                }
            }
            sum = 0;
            for (int i = 0; i < keep; i++) {
                sum += p[i];
            }
        }
        double r = random.nextDouble() * sum;
        for (int i = 0; i < keep; i++) {
            r -= p[i];
            if (r < 0) {
                return ids[i];
            }
        }
        return ids[keep - 1];
    }

    @Test
    void badSettingsAreRefused() {
        assertThrows(PrefillException.class, () -> new SamplerConfig(-1f, 0, 1f, 0));
        assertThrows(PrefillException.class, () -> new SamplerConfig(1f, 0, 0f, 0));
    }
}
