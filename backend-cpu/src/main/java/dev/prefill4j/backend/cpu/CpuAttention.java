package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.AttentionRequest;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVPage;
import java.util.Arrays;

/**
 * Causal grouped-query attention over KV pages with an online softmax (one pass: running maximum, running sum,
 * rescaled accumulator), so a page is read once per block of queries and never all at once.
 *
 * <p>Tasks are (head, block of up to 32 queries); each task decodes a page's K (transposed) and V rows of its KV
 * head into thread-local buffers, then runs every query of its block over them.
 */
public final class CpuAttention implements Attention {
    private static final int QUERY_BLOCK = 32;

    @Override public String id() { return "cpu-paged"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String backendId() { return "cpu"; }
    @Override public int priority() { return 100; }
    @Override public String description() { return "paged causal GQA attention, online softmax, CPU"; }

    @Override
    public AttentionKernel create(ComputeDevice device) {
        ThreadLocal<Scratch> scratch = new ThreadLocal<>();
        return request -> attend(device, scratch, request);
    }

    /** Per-thread buffers, grown as needed. */
    private static final class Scratch {
        float[] kT = new float[0];
        float[] v = new float[0];
        float[] row = new float[0];
        float[] scores = new float[0];
        float[] acc = new float[0];
        float[] max = new float[0];
        float[] sum = new float[0];
    }

    /**
     * Flash-style causal attention, page by page. A task (head, block of queries) decodes the page's keys of its KV
     * head transposed ({@code kT[d][j]}), so each query's scores over the page come from vector FMAs across positions
     * (no horizontal sums); then one running-max update and rescale per page and one exp per score; values are
     * accumulated with vector FMAs across the head dimension.
     */
    private static void attend(ComputeDevice device, ThreadLocal<Scratch> scratch, AttentionRequest r) {
        int heads = r.heads();
        int hd = r.headDim();
        int group = heads / r.kvHeads();
        int blocks = (r.queries() + QUERY_BLOCK - 1) / QUERY_BLOCK;
        KVCache cache = r.cache();
        int pageSize = cache.config().pageSize();
        if (cache.length(r.layer()) < r.startPos() + r.queries()) {
            throw new IllegalStateException("layer " + r.layer() + " holds " + cache.length(r.layer())
                    + " positions, attention needs " + (r.startPos() + r.queries()));
        }
        device.parallelFor(heads * blocks, task -> {
            int h = task % heads;
            int b = task / heads;
            int kvh = h / group;
            int t0 = b * QUERY_BLOCK;
            int t1 = Math.min(r.queries(), t0 + QUERY_BLOCK);
            int nq = t1 - t0;
            Scratch s = scratch(scratch, pageSize, hd, nq);
            Arrays.fill(s.acc, 0, nq * hd, 0f);
            Arrays.fill(s.max, 0, nq, Float.NEGATIVE_INFINITY);
            Arrays.fill(s.sum, 0, nq, 0f);
            int lastPos = r.startPos() + t1 - 1;
            for (int p = 0; p <= lastPos / pageSize; p++) {
                KVPage page = cache.page(r.layer(), p);
                int first = page.firstPosition();
                int rows = Math.min(page.positions(), lastPos - first + 1);
                for (int j = 0; j < rows; j++) {
                    page.key(j, kvh * hd, hd, s.row, 0);
                    for (int d = 0; d < hd; d++) {
                        s.kT[d * pageSize + j] = s.row[d];
                    }
                    page.value(j, kvh * hd, hd, s.v, j * hd);
                }
                for (int t = t0; t < t1; t++) {
                    int limit = Math.min(rows, r.startPos() + t - first + 1);
                    if (limit <= 0) {
                        continue;
                    }
                    int qi = t - t0;
                    int qo = (t * heads + h) * hd;
                    Arrays.fill(s.scores, 0, limit, 0f);
                    for (int d = 0; d < hd; d++) {
                        VectorOps.axpy(r.q()[qo + d] * r.scale(), s.kT, d * pageSize, s.scores, 0, limit);
                    }
                    float m = s.max[qi];
                    float pageMax = Float.NEGATIVE_INFINITY;
                    for (int j = 0; j < limit; j++) {
                        pageMax = Math.max(pageMax, s.scores[j]);
                    }
                    float newMax = Math.max(m, pageMax);
                    // StrictMath: Math.exp's intrinsic may differ by an ulp from the interpreter's (warm-up dependence).
                    float correction = m == Float.NEGATIVE_INFINITY ? 0f : (float) StrictMath.exp(m - newMax);
                    float pageSum = 0;
                    for (int j = 0; j < limit; j++) {
                        float w = (float) StrictMath.exp(s.scores[j] - newMax);
                        s.scores[j] = w;
                        pageSum += w;
                    }
                    s.sum[qi] = s.sum[qi] * correction + pageSum;
                    s.max[qi] = newMax;
                    VectorOps.scale(s.acc, qi * hd, correction, hd);
                    for (int j = 0; j < limit; j++) {
                        VectorOps.axpy(s.scores[j], s.v, j * hd, s.acc, qi * hd, hd);
                    }
                }
            }
            for (int t = t0; t < t1; t++) {
                int qi = t - t0;
                float inv = 1f / s.sum[qi];
                int oo = (t * heads + h) * hd;
                for (int d = 0; d < hd; d++) {
                    r.out()[oo + d] = s.acc[qi * hd + d] * inv;
                }
            }
        });
    }

    private static Scratch scratch(ThreadLocal<Scratch> tl, int pageSize, int hd, int nq) {
        Scratch s = tl.get();
        if (s == null) {
            s = new Scratch();
            tl.set(s);
        }
        if (s.kT.length < pageSize * hd) {
            s.kT = new float[pageSize * hd];
            s.v = new float[pageSize * hd];
            s.scores = new float[pageSize];
        }
        if (s.row.length < hd) {
            s.row = new float[hd];
        }
        if (s.acc.length < nq * hd) {
            s.acc = new float[nq * hd];
        }
        if (s.max.length < nq) {
            s.max = new float[nq];
            s.sum = new float[nq];
        }
        return s;
    }
}
