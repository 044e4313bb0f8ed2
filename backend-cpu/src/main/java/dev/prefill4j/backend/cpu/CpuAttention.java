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
        int pages = (r.startPos() + r.queries() + pageSize - 1) / pageSize;
        if (r.queries() <= SPLIT_MAX_QUERIES && pages >= 2 * device.threads()) {
            splitPages(device, scratch, r, pages);
            return;
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
                    pageStep(s, r.q(), (t * heads + h) * hd, r.scale(), hd, pageSize, limit, s.max, s.sum, qi, s.acc,
                            qi * hd);
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

    /** Up to this many queries (decode steps, small bursts), long contexts are split across pages instead of heads. */
    private static final int SPLIT_MAX_QUERIES = 64;

    /**
     * Split-K attention for few queries over long contexts: tasks take contiguous ranges of pages and handle every head
     * and query for each page they read, so each page is read once per layer, not once per head; the partial softmax
     * states (max, sum, weighted values) of the ranges are then merged in range order.
     */
    private static void splitPages(ComputeDevice device, ThreadLocal<Scratch> scratch, AttentionRequest r, int pages) {
        int heads = r.heads();
        int hd = r.headDim();
        int group = heads / r.kvHeads();
        int nq = r.queries();
        KVCache cache = r.cache();
        int pageSize = cache.config().pageSize();
        int ranges = Math.min(pages, 4 * device.threads());
        int states = nq * heads;
        float[] max = new float[ranges * states];
        float[] sum = new float[ranges * states];
        float[] acc = new float[ranges * states * hd];
        Arrays.fill(max, Float.NEGATIVE_INFINITY);
        int lastPos = r.startPos() + nq - 1;
        device.parallelFor(ranges, c -> {
            Scratch s = scratch(scratch, pageSize, hd, 1);
            int p0 = (int) ((long) pages * c / ranges);
            int p1 = (int) ((long) pages * (c + 1) / ranges);
            for (int p = p0; p < p1; p++) {
                KVPage page = cache.page(r.layer(), p);
                int first = page.firstPosition();
                int rows = Math.min(page.positions(), lastPos - first + 1);
                for (int kvh = 0; kvh < r.kvHeads(); kvh++) {
                    for (int j = 0; j < rows; j++) {
                        page.key(j, kvh * hd, hd, s.row, 0);
                        for (int d = 0; d < hd; d++) {
                            s.kT[d * pageSize + j] = s.row[d];
                        }
                        page.value(j, kvh * hd, hd, s.v, j * hd);
                    }
                    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                        for (int t = 0; t < nq; t++) {
                            int limit = Math.min(rows, r.startPos() + t - first + 1);
                            if (limit > 0) {
                                int st = c * states + t * heads + h;
                                pageStep(s, r.q(), (t * heads + h) * hd, r.scale(), hd, pageSize, limit, max, sum, st,
                                        acc, st * hd);
                            }
                        }
                    }
                }
            }
        });
        for (int t = 0; t < nq; t++) {
            for (int h = 0; h < heads; h++) {
                int st = t * heads + h;
                float m = Float.NEGATIVE_INFINITY;
                for (int c = 0; c < ranges; c++) {
                    m = Math.max(m, max[c * states + st]);
                }
                float total = 0;
                int oo = (t * heads + h) * hd;
                Arrays.fill(r.out(), oo, oo + hd, 0f);
                for (int c = 0; c < ranges; c++) {
                    int cs = c * states + st;
                    if (max[cs] == Float.NEGATIVE_INFINITY) {
                        continue;
                    }
                    float w = (float) StrictMath.exp(max[cs] - m);
                    total += sum[cs] * w;
                    VectorOps.axpy(w, acc, cs * hd, r.out(), oo, hd);
                }
                VectorOps.scale(r.out(), oo, 1f / total, hd);
            }
        }
    }

    /**
     * One query over one page's first {@code limit} keys (transposed in {@code s.kT}) and values (in {@code s.v}):
     * scores, then the online-softmax update of state {@code (max[st], sum[st], acc[ao..ao+hd))}.
     */
    private static void pageStep(Scratch s, float[] q, int qo, float scale, int hd, int pageSize, int limit,
                                 float[] max, float[] sum, int st, float[] acc, int ao) {
        Arrays.fill(s.scores, 0, limit, 0f);
        for (int d = 0; d < hd; d++) {
            VectorOps.axpy(q[qo + d] * scale, s.kT, d * pageSize, s.scores, 0, limit);
        }
        float m = max[st];
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
        sum[st] = sum[st] * correction + pageSum;
        max[st] = newMax;
        VectorOps.scale(acc, ao, correction, hd);
        for (int j = 0; j < limit; j++) {
            VectorOps.axpy(s.scores[j], s.v, j * hd, acc, ao, hd);
        }
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
