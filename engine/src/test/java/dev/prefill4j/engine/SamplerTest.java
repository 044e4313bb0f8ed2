package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

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

    @Test
    void badSettingsAreRefused() {
        assertThrows(PrefillException.class, () -> new SamplerConfig(-1f, 0, 1f, 0));
        assertThrows(PrefillException.class, () -> new SamplerConfig(1f, 0, 0f, 0));
    }
}
