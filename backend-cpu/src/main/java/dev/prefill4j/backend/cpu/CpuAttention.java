package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.AttentionRequest;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVPage;
import java.util.ArrayDeque;
import java.util.Arrays;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

/**
 * Causal grouped-query attention over KV pages with an online softmax (running maximum, running sum, rescaled
 * accumulator), so a page is read once per pass over it and the context is never held whole. One kernel serves
 * prefill, decode and bursts of K queries, whichever store holds the pages.
 *
 * <p>The unit of work is one page against a set of query rows (a row is one query position and one head) that
 * share a KV head: the page's K slice of that head is decoded transposed ({@code kT[d][j]}) and its V slice
 * row-major; scores for eight rows at a time come from a register-blocked kernel (one K vector load feeds eight
 * FMAs, no horizontal sums); the weights are exponentiated in place by {@link ExpOps}; values are accumulated for eight
 * rows at a time with the accumulators in registers.
 *
 * <p>Two schedules. Many queries (prefill): tasks are (KV head, block of 32 queries), each walking the pages it
 * needs. Few queries over many pages (decode, bursts up to {@value #SPLIT_MAX_QUERIES}): tasks are fixed chunks of
 * consecutive pages, taken in ascending order (so a store that reads ahead streams them in file order), each holding
 * every row's partial softmax state; finished chunks are merged strictly in chunk order. Chunk boundaries depend only
 * on the number of pages, and every row's arithmetic is independent of the other rows in its pass, so a query's
 * output is bit-identical whether it is decoded alone or verified in a burst.
 */
public final class CpuAttention implements Attention {
    private static final int QUERY_BLOCK = 32;
    /** Up to this many queries, long contexts are split across pages instead of heads. */
    private static final int SPLIT_MAX_QUERIES = 64;
    /** Most page chunks in the split schedule (bounds the partial states kept at once). */
    private static final int MAX_CHUNKS = 64;
    private static final int L = VectorOps.FLOATS.length();
    /** Query rows per micro-kernel call (with two vectors each: sixteen accumulators of the 32 vector registers). */
    private static final int GROUP = 8;

    @Override public String id() { return "cpu-paged"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String backendId() { return "cpu"; }
    @Override public int priority() { return 100; }
    @Override public String description() { return "paged causal GQA attention, online softmax, CPU"; }

    @Override
    public AttentionKernel create(ComputeDevice device) {
        ThreadLocal<Scratch> scratch = ThreadLocal.withInitial(Scratch::new);
        return request -> attend(device, scratch, request);
    }

    /** Per-thread buffers, grown as needed. */
    private static final class Scratch {
        float[] kT = new float[0];
        float[] v = new float[0];
        float[] tmp = new float[0];
        float[] scores = new float[0];
        final float[] lanes = new float[L];
        final float[] corr = new float[GROUP];
        final int[] limit = new int[GROUP];

        void ensure(int stride, int hd) {
            if (kT.length < stride * hd) {
                kT = new float[stride * hd];
                v = new float[stride * hd];
                scores = new float[GROUP * stride];
            }
            if (tmp.length < L * hd) {
                tmp = new float[L * hd];
            }
        }
    }

    /**
     * Query rows sharing one KV head: row {@code i} has its scaled query at {@code q[i * hd ..]} and sees positions up
     * to {@code pos[i]}.
     */
    private record Rows(int count, float[] q, int[] pos) {
        int lastPos() {
            int m = -1;
            for (int i = 0; i < count; i++) {
                m = Math.max(m, pos[i]);
            }
            return m;
        }
    }

    /** Online-softmax state of some rows: running maximum, running sum, unnormalized weighted values. */
    private static final class State {
        final float[] max;
        final float[] sum;
        final float[] acc;

        State(int rows, int hd) {
            max = new float[rows];
            sum = new float[rows];
            acc = new float[rows * hd];
            reset();
        }

        void reset() {
            Arrays.fill(max, Float.NEGATIVE_INFINITY);
            Arrays.fill(sum, 0f);
            Arrays.fill(acc, 0f);
        }
    }

    private static void attend(ComputeDevice device, ThreadLocal<Scratch> scratch, AttentionRequest r) {
        KVCache cache = r.cache();
        if (cache.length(r.layer()) < r.startPos() + r.queries()) {
            throw new IllegalStateException("layer " + r.layer() + " holds " + cache.length(r.layer())
                    + " positions, attention needs " + (r.startPos() + r.queries()));
        }
        int pageSize = cache.config().pageSize();
        int pages = (r.startPos() + r.queries() + pageSize - 1) / pageSize;
        if (r.queries() <= SPLIT_MAX_QUERIES && pages >= 2 * device.threads()) {
            split(device, scratch, r, pages);
        } else {
            blocks(device, scratch, r);
        }
    }

    /** The rows of KV head {@code kvh} for queries {@code [t0, t1)}: row {@code (t - t0) * group + (h - kvh * group)}. */
    private static Rows rows(AttentionRequest r, int kvh, int t0, int t1) {
        int hd = r.headDim();
        int group = r.heads() / r.kvHeads();
        int n = (t1 - t0) * group;
        float[] q = new float[n * hd];
        int[] pos = new int[n];
        for (int t = t0; t < t1; t++) {
            for (int g = 0; g < group; g++) {
                int i = (t - t0) * group + g;
                int h = kvh * group + g;
                int qo = (t * r.heads() + h) * hd;
                for (int d = 0; d < hd; d++) {
                    q[i * hd + d] = r.q()[qo + d] * r.scale();
                }
                pos[i] = r.startPos() + t;
            }
        }
        return new Rows(n, q, pos);
    }

    /** Writes {@code acc / sum} of rows {@code [from, from + rows.count)} of {@code st} to the output. */
    private static void output(AttentionRequest r, int kvh, int t0, State st, int from, Rows rows) {
        int hd = r.headDim();
        int group = r.heads() / r.kvHeads();
        for (int i = 0; i < rows.count(); i++) {
            int t = t0 + i / group;
            int h = kvh * group + i % group;
            float inv = 1f / st.sum[from + i];
            int oo = (t * r.heads() + h) * hd;
            for (int d = 0; d < hd; d++) {
                r.out()[oo + d] = st.acc[(from + i) * hd + d] * inv;
            }
        }
    }

    /** Many queries: tasks (KV head, block of queries), each over the pages its block needs. */
    private static void blocks(ComputeDevice device, ThreadLocal<Scratch> scratch, AttentionRequest r) {
        int blocks = (r.queries() + QUERY_BLOCK - 1) / QUERY_BLOCK;
        KVCache cache = r.cache();
        int pageSize = cache.config().pageSize();
        device.parallelFor(r.kvHeads() * blocks, task -> {
            int kvh = task % r.kvHeads();
            int b = task / r.kvHeads();
            int t0 = b * QUERY_BLOCK;
            int t1 = Math.min(r.queries(), t0 + QUERY_BLOCK);
            Rows rows = rows(r, kvh, t0, t1);
            State st = new State(rows.count(), r.headDim());
            Scratch s = scratch.get();
            for (int p = 0; p <= rows.lastPos() / pageSize; p++) {
                KVPage page = cache.page(r.layer(), p);
                try {
                    page(s, page, kvh, r.headDim(), rows, st, 0);
                } finally {
                    cache.release(page);
                }
            }
            output(r, kvh, t0, st, 0, rows);
        });
    }

    /**
     * Few queries over many pages: fixed chunks of consecutive pages, taken in ascending order; each chunk's partial
     * states are merged into the total strictly in chunk order, so results do not depend on thread timing.
     */
    private static void split(ComputeDevice device, ThreadLocal<Scratch> scratch, AttentionRequest r, int pages) {
        int hd = r.headDim();
        int kvHeads = r.kvHeads();
        KVCache cache = r.cache();
        Rows[] rows = new Rows[kvHeads];
        for (int kvh = 0; kvh < kvHeads; kvh++) {
            rows[kvh] = rows(r, kvh, 0, r.queries());
        }
        int perHead = rows[0].count();
        int chunkPages = Math.max(1, (pages + MAX_CHUNKS - 1) / MAX_CHUNKS);
        int chunks = (pages + chunkPages - 1) / chunkPages;
        State total = new State(perHead * kvHeads, hd);
        State[] finished = new State[chunks];
        ArrayDeque<State> spare = new ArrayDeque<>();
        int[] merged = {0};
        cache.readAhead(r.layer(), 0, pages);
        try {
            device.parallelFor(chunks, c -> {
                State st;
                synchronized (finished) {
                    st = spare.isEmpty() ? new State(perHead * kvHeads, hd) : spare.pop();
                }
                st.reset();
                Scratch s = scratch.get();
                int p1 = Math.min(pages, (c + 1) * chunkPages);
                for (int p = c * chunkPages; p < p1; p++) {
                    KVPage page = cache.page(r.layer(), p);
                    try {
                        for (int kvh = 0; kvh < kvHeads; kvh++) {
                            page(s, page, kvh, hd, rows[kvh], st, kvh * perHead);
                        }
                    } finally {
                        cache.release(page);
                    }
                }
                synchronized (finished) {
                    finished[c] = st;
                    while (merged[0] < chunks && finished[merged[0]] != null) {
                        State next = finished[merged[0]];
                        merge(total, next, hd);
                        finished[merged[0]++] = null;
                        spare.push(next);
                    }
                }
            });
        } finally {
            cache.readAhead(r.layer(), 0, 0); // the layer is done (or failed): end the announcement
        }
        for (int kvh = 0; kvh < kvHeads; kvh++) {
            output(r, kvh, 0, total, kvh * perHead, rows[kvh]);
        }
    }

    /** Folds a chunk's partial softmax states into the running total. */
    private static void merge(State total, State part, int hd) {
        for (int i = 0; i < total.max.length; i++) {
            float pm = part.max[i];
            if (pm == Float.NEGATIVE_INFINITY) {
                continue;
            }
            float tm = total.max[i];
            float m = Math.max(tm, pm);
            float a = tm == Float.NEGATIVE_INFINITY ? 0f : ExpOps.exp(tm - m);
            float b = ExpOps.exp(pm - m);
            total.sum[i] = total.sum[i] * a + part.sum[i] * b;
            total.max[i] = m;
            int o = i * hd;
            for (int d = 0; d < hd; d++) {
                total.acc[o + d] = Math.fma(part.acc[o + d], b, total.acc[o + d] * a);
            }
        }
    }

    /**
     * Positions per tile for head dimension {@code hd}: 256 for 32-wide heads (a tile's transposed K and its V, 32 KiB
     * each, reused by every row group). The per-row softmax work is per tile, so longer tiles cost less of it; shorter
     * ones keep the tile in L1. Measured at depth 65,536 with 64 queries, minimum of four alternating runs: 64
     * positions slower than 128, 256 11% faster than 128, 512 no faster than 256 and slower for one query.
     */
    private static int tile(int hd) {
        return Math.max(2 * L, 8192 / hd / (2 * L) * (2 * L));
    }

    /**
     * One page against the rows of KV head {@code kvh}: updates states {@code [base, base + rows.count)} of
     * {@code st}, one tile of positions at a time (an online-softmax step per tile and row).
     */
    private static void page(Scratch s, KVPage page, int kvh, int hd, Rows rows, State st, int base) {
        int used = Math.min(page.positions(), rows.lastPos() - page.firstPosition() + 1);
        int tile = tile(hd);
        for (int t0 = 0; t0 < used; t0 += tile) {
            tile(s, page, t0, Math.min(tile, used - t0), kvh, hd, rows, st, base);
        }
    }

    /** Positions {@code [t0, t0 + n)} of a page against the rows. */
    private static void tile(Scratch s, KVPage page, int t0, int n, int kvh, int hd, Rows rows, State st, int base) {
        int first = page.firstPosition() + t0;
        int stride = (n + 2 * L - 1) / (2 * L) * (2 * L);
        s.ensure(stride, hd);
        KvRows.keysTransposed(page, t0, n, kvh * hd, hd, s.kT, stride, s.tmp);
        KvRows.values(page, t0, n, kvh * hd, hd, s.v);
        for (int i = 0; i < rows.count(); i += GROUP) {
            int g = Math.min(GROUP, rows.count() - i);
            int most = 0;
            int least = Integer.MAX_VALUE;
            for (int x = 0; x < g; x++) {
                int lim = Math.max(0, Math.min(n, rows.pos()[i + x] - first + 1));
                s.limit[x] = lim;
                most = Math.max(most, lim);
                least = Math.min(least, lim);
            }
            if (most == 0) {
                continue;
            }
            scores(s.kT, stride, hd, rows.q(), i, g, (most + 2 * L - 1) / (2 * L) * (2 * L), s.scores);
            for (int x = 0; x < g; x++) {
                int row = base + i + x;
                int lim = s.limit[x];
                if (lim == 0) {
                    s.corr[x] = 1f;
                    continue;
                }
                float m = st.max[row];
                float tileMax = max(s.scores, x * stride, lim);
                float newMax = Math.max(m, tileMax);
                float corr = m == Float.NEGATIVE_INFINITY ? 0f : ExpOps.exp(m - newMax);
                float tileSum = ExpOps.expInPlace(s.scores, x * stride, lim, newMax, s.lanes);
                st.sum[row] = st.sum[row] * corr + tileSum;
                st.max[row] = newMax;
                s.corr[x] = corr;
            }
            if (hd % L == 0) {
                values(s, stride, hd, st.acc, (base + i) * hd, g, least);
            } else {
                for (int x = 0; x < g; x++) {
                    int ao = (base + i + x) * hd;
                    for (int d = 0; d < hd; d++) {
                        st.acc[ao + d] *= s.corr[x];
                    }
                    for (int j = 0; j < s.limit[x]; j++) {
                        float w = s.scores[x * stride + j];
                        for (int d = 0; d < hd; d++) {
                            st.acc[ao + d] = Math.fma(w, s.v[j * hd + d], st.acc[ao + d]);
                        }
                    }
                }
            }
        }
    }

    private static float max(float[] a, int o, int n) {
        int bound = VectorOps.FLOATS.loopBound(n);
        float m = Float.NEGATIVE_INFINITY;
        int j = 0;
        if (bound > 0) {
            FloatVector acc = FloatVector.fromArray(VectorOps.FLOATS, a, o);
            for (j = L; j < bound; j += L) {
                acc = acc.max(FloatVector.fromArray(VectorOps.FLOATS, a, o + j));
            }
            m = acc.reduceLanes(VectorOperators.MAX);
        }
        for (; j < n; j++) {
            m = Math.max(m, a[o + j]);
        }
        return m;
    }

    /**
     * Scores of rows {@code [i, i + g)} (g &lt;= {@value #GROUP}) over positions {@code [0, n)} ({@code n} a multiple of
     * two vector lengths) into {@code out[x * stride + j]}: {@code sum_d q[(i + x) * hd + d] * kT[d * stride + j]}.
     */
    private static void scores(float[] kT, int stride, int hd, float[] q, int i, int g, int n, float[] out) {
        for (int j = 0; j < n; j += 2 * L) {
            kernel(kT, j, stride, q, i * hd, hd, hd, out, j, stride, g, null);
        }
    }

    /**
     * {@code acc[x] = acc[x] * corr[x] + sum_j w[x][j] * v[j]} for rows {@code x < g} (weights in {@code s.scores},
     * limits in {@code s.limit}): pairs of vectors of the head dimension through the micro-kernel over the positions
     * every row sees, then each row's remaining positions; an odd last vector row by row. Every row's additions happen
     * in position order either way.
     */
    private static void values(Scratch s, int stride, int hd, float[] acc, int ao, int g, int least) {
        int c = 0;
        if (hd % (2 * L) == 0) {
            for (; c < hd; c += 2 * L) {
                kernel(s.v, c, hd, s.scores, 0, stride, least, acc, ao + c, hd, g, s.corr);
                rowTails(s, stride, hd, acc, ao, g, least, c, 2);
            }
        }
        for (; c < hd; c += L) {
            for (int x = 0; x < g; x++) {
                int o = ao + x * hd + c;
                FloatVector.fromArray(VectorOps.FLOATS, acc, o).mul(s.corr[x]).intoArray(acc, o);
            }
            rowTails(s, stride, hd, acc, ao, g, 0, c, 1);
        }
    }

    /**
     * The register-blocked micro-kernel of both products: for rows {@code x < g} (at most {@value #GROUP}) and two
     * vectors {@code u}, {@code out[o + x * outStride + u * L ..] = init + sum_{k < inner} a[ao + k * aStep + u * L ..]
     * * b[b0 + x * bStride + k]}, where {@code init} is zero, or the previous output times {@code scale[x]} when
     * {@code scale} is given. Sixteen accumulators stay in registers: more independent FMA chains than the FMA latency
     * needs, and each step loads two vectors of {@code a} and eight elements of {@code b} for sixteen FMAs (eight rows
     * measured 15% faster than six at 64 queries, six faster than four). Missing rows
     * repeat the last one and are not stored.
     */
    private static void kernel(float[] a, int ao, int aStep, float[] b, int b0, int bStride, int inner,
                               float[] out, int o, int outStride, int g, float[] scale) {
        var sp = VectorOps.FLOATS;
        int r1 = Math.min(1, g - 1), r2 = Math.min(2, g - 1), r3 = Math.min(3, g - 1);
        int r4 = Math.min(4, g - 1), r5 = Math.min(5, g - 1), r6 = Math.min(6, g - 1), r7 = Math.min(7, g - 1);
        int p1 = b0 + r1 * bStride, p2 = b0 + r2 * bStride, p3 = b0 + r3 * bStride;
        int p4 = b0 + r4 * bStride, p5 = b0 + r5 * bStride, p6 = b0 + r6 * bStride, p7 = b0 + r7 * bStride;
        int o1 = o + r1 * outStride, o2 = o + r2 * outStride, o3 = o + r3 * outStride;
        int o4 = o + r4 * outStride, o5 = o + r5 * outStride, o6 = o + r6 * outStride, o7 = o + r7 * outStride;
        // Written out row by row on purpose: vectors kept in an array or a loop over rows are not register-allocated
        // by C2 (they would be boxed), which is the whole point of this kernel.
        FloatVector a0 = FloatVector.zero(sp), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        FloatVector c0 = a0, c1 = a0, c2 = a0, c3 = a0, c4 = a0, c5 = a0, c6 = a0, c7 = a0;
        if (scale != null) {
            a0 = FloatVector.fromArray(sp, out, o).mul(scale[0]);
            c0 = FloatVector.fromArray(sp, out, o + L).mul(scale[0]);
            a1 = FloatVector.fromArray(sp, out, o1).mul(scale[r1]);
            c1 = FloatVector.fromArray(sp, out, o1 + L).mul(scale[r1]);
            a2 = FloatVector.fromArray(sp, out, o2).mul(scale[r2]);
            c2 = FloatVector.fromArray(sp, out, o2 + L).mul(scale[r2]);
            a3 = FloatVector.fromArray(sp, out, o3).mul(scale[r3]);
            c3 = FloatVector.fromArray(sp, out, o3 + L).mul(scale[r3]);
            a4 = FloatVector.fromArray(sp, out, o4).mul(scale[r4]);
            c4 = FloatVector.fromArray(sp, out, o4 + L).mul(scale[r4]);
            a5 = FloatVector.fromArray(sp, out, o5).mul(scale[r5]);
            c5 = FloatVector.fromArray(sp, out, o5 + L).mul(scale[r5]);
            a6 = FloatVector.fromArray(sp, out, o6).mul(scale[r6]);
            c6 = FloatVector.fromArray(sp, out, o6 + L).mul(scale[r6]);
            a7 = FloatVector.fromArray(sp, out, o7).mul(scale[r7]);
            c7 = FloatVector.fromArray(sp, out, o7 + L).mul(scale[r7]);
        }
        for (int k = 0; k < inner; k++) {
            int ak = ao + k * aStep;
            FloatVector x = FloatVector.fromArray(sp, a, ak);
            FloatVector y = FloatVector.fromArray(sp, a, ak + L);
            FloatVector w = FloatVector.broadcast(sp, b[b0 + k]);
            a0 = x.fma(w, a0);
            c0 = y.fma(w, c0);
            w = FloatVector.broadcast(sp, b[p1 + k]);
            a1 = x.fma(w, a1);
            c1 = y.fma(w, c1);
            w = FloatVector.broadcast(sp, b[p2 + k]);
            a2 = x.fma(w, a2);
            c2 = y.fma(w, c2);
            w = FloatVector.broadcast(sp, b[p3 + k]);
            a3 = x.fma(w, a3);
            c3 = y.fma(w, c3);
            w = FloatVector.broadcast(sp, b[p4 + k]);
            a4 = x.fma(w, a4);
            c4 = y.fma(w, c4);
            w = FloatVector.broadcast(sp, b[p5 + k]);
            a5 = x.fma(w, a5);
            c5 = y.fma(w, c5);
            w = FloatVector.broadcast(sp, b[p6 + k]);
            a6 = x.fma(w, a6);
            c6 = y.fma(w, c6);
            w = FloatVector.broadcast(sp, b[p7 + k]);
            a7 = x.fma(w, a7);
            c7 = y.fma(w, c7);
        }
        // Stored from the last row down: a repeated row then ends up holding its own (identical) result.
        a7.intoArray(out, o7);
        c7.intoArray(out, o7 + L);
        a6.intoArray(out, o6);
        c6.intoArray(out, o6 + L);
        a5.intoArray(out, o5);
        c5.intoArray(out, o5 + L);
        a4.intoArray(out, o4);
        c4.intoArray(out, o4 + L);
        a3.intoArray(out, o3);
        c3.intoArray(out, o3 + L);
        a2.intoArray(out, o2);
        c2.intoArray(out, o2 + L);
        a1.intoArray(out, o1);
        c1.intoArray(out, o1 + L);
        a0.intoArray(out, o);
        c0.intoArray(out, o + L);
    }

    /**
     * The positions of rows {@code x < g} beyond {@code from} (the part of their limit not shared by the whole group), for
     * {@code width} vectors of the head dimension at {@code c}.
     */
    private static void rowTails(Scratch s, int stride, int hd, float[] acc, int ao, int g, int from, int c, int width) {
        var sp = VectorOps.FLOATS;
        for (int x = 0; x < g; x++) {
            for (int u = 0; u < width; u++) {
                int o = ao + x * hd + c + u * L;
                if (from >= s.limit[x]) {
                    continue;
                }
                FloatVector a = FloatVector.fromArray(sp, acc, o);
                for (int jj = from; jj < s.limit[x]; jj++) {
                    a = FloatVector.fromArray(sp, s.v, jj * hd + c + u * L).fma(FloatVector.broadcast(sp, s.scores[x * stride + jj]), a);
                }
                a.intoArray(acc, o);
            }
        }
    }
}
