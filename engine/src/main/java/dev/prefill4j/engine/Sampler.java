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
        int keep = config.topK() == 0 ? n : Math.min(config.topK(), n);
        long[] order = ranked(logits, keep);
        double max = logits[id(order[0])] / config.temperature();
        if (weights.length < keep) {
            weights = new double[keep];
        }
        double[] p = weights;
        double sum = 0;
        for (int i = 0; i < keep; i++) {
            p[i] = Math.exp(logits[id(order[i])] / config.temperature() - max);
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
                return id(order[i]);
            }
        }
        return id(order[keep - 1]);
    }

    /**
     * Rank keys of the last {@link #ranked} call and the kept tokens' weights; reused, so that a decode step allocates
     * no vocabulary-sized array (1 MiB each at top-k 0 over 128,256 tokens; the launcher's young generation is 4 MiB).
     */
    private long[] keys = new long[0];
    private double[] weights = new double[0];

    /**
     * The {@code keep} highest logits' {@link #rankKey}s, highest first (equal logits by lower id): the whole
     * vocabulary sorted where {@code keep} is all of it, else a bounded heap's pass over it and a sort of the kept.
     * Primitive keys, where a sort of boxed ids with a comparator took about 25 ms a token over a 128,256-token
     * vocabulary (a Q4_0 1B decode step is about 60 ms; docs/performance-notes.md, Kernels).
     */
    private long[] ranked(float[] logits, int keep) {
        int n = logits.length;
        if (keys.length < keep) {
            keys = new long[keep];
        }
        long[] heap = keys;
        if (keep == n) {
            for (int i = 0; i < n; i++) {
                heap[i] = rankKey(logits[i], i);
            }
        } else { // a max-heap of the best keep keys seen so far: its root is the one to drop next
            for (int i = 0; i < keep; i++) {
                heap[i] = rankKey(logits[i], i);
                for (int c = i; c > 0 && heap[(c - 1) / 2] < heap[c]; c = (c - 1) / 2) {
                    long t = heap[c];
                    heap[c] = heap[(c - 1) / 2];
                    heap[(c - 1) / 2] = t;
                }
            }
            for (int i = keep; i < n; i++) {
                long key = rankKey(logits[i], i);
                if (key < heap[0]) {
                    siftDown(heap, keep, key);
                }
            }
        }
        Arrays.sort(heap, 0, keep);
        return heap;
    }

    /** Replaces the root of the max-heap {@code heap[0 .. size)} with {@code key} and restores the heap. */
    private static void siftDown(long[] heap, int size, long key) {
        int at = 0;
        while (true) {
            int c = 2 * at + 1;
            if (c >= size) {
                break;
            }
            if (c + 1 < size && heap[c + 1] > heap[c]) {
                c++;
            }
            if (heap[c] <= key) {
                break;
            }
            heap[at] = heap[c];
            at = c;
        }
        heap[at] = key;
    }

    /**
     * A key whose ascending order is the sampler's ranking: higher logit first, the lower id first among equal logits
     * ({@code -0.0} equal to {@code 0.0}, as {@code ==} has them). The float's bits, made to order as signed ints,
     * inverted, above the id.
     */
    static long rankKey(float logit, int id) {
        int bits = Float.floatToRawIntBits(logit + 0f); // -0.0 + 0.0 is 0.0
        int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
        return ((long) ~ascending << 32) | (id & 0xffffffffL);
    }

    /** {@return the token id of a {@link #rankKey}} */
    private static int id(long key) {
        return (int) key;
    }
}
