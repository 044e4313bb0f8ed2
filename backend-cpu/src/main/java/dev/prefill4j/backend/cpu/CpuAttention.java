package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.AttentionRequest;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVPage;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicBoolean;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

/**
 * Causal grouped-query attention over KV pages with an online softmax (running maximum, running sum, rescaled
 * accumulator), so a page is read once per pass over it and the context is never held whole. One kernel serves
 * prefill, decode and bursts of K queries, whichever store holds the pages.
 *
 * <p>Query rows lie in vector lanes. A row is one query position and one head; the rows that share a KV head are
 * kept transposed ({@code qT[d][row]}), as are their accumulators ({@code acc[d][row]}), so every step of the
 * softmax is plain lane arithmetic: a tile's maximum is a lane-wise maximum over positions, its weights are one vector
 * exponential per position (base 2: the queries' scale includes {@code log2(e)}, see {@link ExpOps}), its sum one
 * vector addition per position; nothing is reduced across lanes and no key is transposed. The unit of work is one
 * tile of a page (K and V of one KV head decoded row-major into L1-sized buffers) against blocks of one or two
 * vectors of rows: scores for eight positions at a time and weighted values for eight elements of the head dimension
 * at a time come from register-blocked micro-kernels whose broadcast operand is the decoded K or V.
 *
 * <p>Every lane does the same operations in the same order whatever the other lanes hold: score
 * {@code fma} chains over the head dimension, the tile maximum, {@link ExpOps}' exponential, sums and weighted values
 * in position order. Positions a row must not see (beyond its own position, or padding) get weight +0, which adds
 * nothing exactly. So a row's result does not depend on which rows share its pass.
 *
 * <p>Two schedules. Many queries (prefill): tasks are (KV head, block of {@value #QUERY_BLOCK} queries), each walking
 * the pages it needs. Few queries over many pages (decode, bursts up to {@value #SPLIT_MAX_QUERIES}): tasks are fixed
 * chunks of consecutive pages, taken in ascending order (so a store that reads ahead streams them in file order),
 * each holding every row's partial softmax state; finished chunks are merged strictly in chunk order. Chunk
 * boundaries depend only on the number of pages, so a query's output is bit-identical whether it is decoded alone or
 * verified in a burst.
 */
public final class CpuAttention implements Attention {
    private static final int QUERY_BLOCK = 32;
    /** Up to this many queries, long contexts are split across pages instead of heads. */
    private static final int SPLIT_MAX_QUERIES = 64;
    /** Most page chunks in the split schedule (bounds the partial states kept at once). */
    private static final int MAX_CHUNKS = 64;
    private static final int L = VectorOps.FLOATS.length();
    /**
     * Positions per scores micro-kernel call, head-dimension elements per values call (eight accumulator pairs), and
     * so the chunk of the values' layout ({@link KvRows#decodeBlocked}).
     */
    private static final int STEP = KvRows.CHUNK;
    /**
     * Tile positions times head dimension: K and V tiles of 16 KiB each, and the weights beside them, fit in L1.
     * At depth 65,536 with 64 queries, tiles of 2,048 to 16,384 elements measured within the machine's noise.
     */
    private static final int TILE_ELEMENTS = 4096;

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
        /** A tile's keys of one KV head, row-major {@code [position][d]}. */
        float[] k = new float[0];
        /**
         * The tile's values in blocks of {@value #STEP} elements of the head dimension, each contiguous over the
         * positions: {@code v[(d / STEP) * span * STEP + j * STEP + d % STEP]}.
         */
        float[] v = new float[0];
        /**
         * Scores, then weights, of a block of rows, one vector of lanes after the other:
         * {@code w[u * span * L + j * L + lane]}.
         */
        float[] w = new float[0];
        /** A tile's rows of one head decoded before {@link KvRows#decodeBlocked} lays them out. */
        float[] rows = new float[0];
        /** A tile's F16 elements of one head, staged for {@link KvRows}. */
        short[] halves = new short[0];
        /** Per lane of a block: how far into the tile the row sees (last visible position - tile start). */
        final float[] last = new float[2 * L];
        /** Per lane of a block: the tile's rescaling of the row's accumulator. */
        final float[] corr = new float[2 * L];
        /**
         * A task's query rows and their positions ({@link #rows}), reused: allocated for every task, they were most of
         * what prefill allocated (JFR, pp512 of the 1B Q4_0 file: about 520 MB a run with {@link #state}'s arrays,
         * and a young collection every few milliseconds).
         */
        float[] qT = new float[0];
        int[] pos = new int[0];
        /** A task's online-softmax state ({@link #blocks}), reused while its size stays the same. */
        State state;

        State state(int lanes, int hd) {
            if (state == null || state.max.length != lanes || state.acc.length != lanes * hd) {
                state = new State(lanes, hd);
            } else {
                state.reset();
            }
            return state;
        }

        void ensure(int positions, int hd) {
            int blocked = (hd + STEP - 1) / STEP * STEP;
            if (k.length < positions * hd || v.length < positions * blocked) {
                k = new float[positions * hd];
                v = new float[positions * blocked];
            }
            if (rows.length < positions * hd) {
                rows = new float[positions * hd];
                halves = new short[positions * hd];
            }
            if (w.length < positions * 2 * L) {
                w = new float[positions * 2 * L];
            }
        }
    }

    /**
     * Query rows sharing one KV head, padded to whole vectors ({@code padded} lanes) and taken in blocks of up to two
     * vectors ({@link #block}): row {@code i} of the block at lane {@code x0} (width {@code w}) has its scaled query at
     * {@code qT[x0 * hd + d * w + i - x0]}, so the micro-kernels step through it with a constant stride, and sees
     * positions up to {@code pos[i]}. Padding rows have a zero query and the last row's position: they never make a
     * block take the masked path, and their results are never read.
     */
    private record Rows(int count, int padded, float[] qT, int[] pos) {
        int lastPos() {
            int m = -1;
            for (int i = 0; i < count; i++) {
                m = Math.max(m, pos[i]);
            }
            return m;
        }
    }

    /**
     * Online-softmax state of several row sets of {@code padded} lanes each: running maximum and sum per lane, and
     * the unnormalized weighted values transposed per set ({@code acc[set * padded * hd + d * padded + lane]}).
     */
    private static final class State {
        final float[] max;
        final float[] sum;
        final float[] acc;

        State(int lanes, int hd) {
            max = new float[lanes];
            sum = new float[lanes];
            acc = new float[lanes * hd];
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
        if (!ONE_ROW_READY.get() && ONE_ROW_READY.compareAndSet(false, true)) {
            readyOneRowKernels(r.headDim(), cache.config().elementType(), cache.config().kvDim());
        }
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

    /**
     * The rows of KV head {@code kvh} for queries {@code [t0, t1)}: row {@code (t - t0) * group + (h - kvh * group)};
     * in {@code s}'s arrays (valid until its next call) or, with {@code s} null, in new ones.
     */
    private static Rows rows(AttentionRequest r, int kvh, int t0, int t1, Scratch s) {
        int hd = r.headDim();
        int group = r.heads() / r.kvHeads();
        int n = (t1 - t0) * group;
        int padded = (n + L - 1) / L * L;
        float[] qT;
        int[] pos;
        if (s == null) {
            qT = new float[hd * padded];
            pos = new int[padded];
        } else {
            if (s.qT.length < hd * padded) {
                s.qT = new float[hd * padded];
            } else {
                Arrays.fill(s.qT, 0, hd * padded, 0f); // padding rows have a zero query
            }
            if (s.pos.length < padded) {
                s.pos = new int[padded]; // every lane is written below
            }
            qT = s.qT;
            pos = s.pos;
        }
        float scale = r.scale() * ExpOps.LOG2E; // scores in base-2 units, for ExpOps.exp2
        for (int t = t0; t < t1; t++) {
            for (int g = 0; g < group; g++) {
                int i = (t - t0) * group + g;
                int qo = (t * r.heads() + kvh * group + g) * hd;
                int x0 = i / (2 * L) * (2 * L);
                int w = block(padded, x0);
                for (int d = 0; d < hd; d++) {
                    qT[x0 * hd + d * w + i - x0] = r.q()[qo + d] * scale;
                }
                pos[i] = r.startPos() + t;
            }
        }
        Arrays.fill(pos, n, padded, pos[n - 1]);
        return new Rows(n, padded, qT, pos);
    }

    /** {@return the width of the block of rows that starts at lane {@code x0}: two vectors, or one at the end} */
    private static int block(int padded, int x0) {
        return Math.min(2 * L, padded - x0);
    }

    /** Writes {@code acc / sum} of the rows, whose state starts at lane {@code base} of {@code st}, to the output. */
    private static void output(AttentionRequest r, int kvh, int t0, State st, int base, Rows rows) {
        int hd = r.headDim();
        int group = r.heads() / r.kvHeads();
        for (int i = 0; i < rows.count(); i++) {
            int t = t0 + i / group;
            int h = kvh * group + i % group;
            float inv = 1f / st.sum[base + i];
            int oo = (t * r.heads() + h) * hd;
            for (int d = 0; d < hd; d++) {
                r.out()[oo + d] = st.acc[base * hd + d * rows.padded() + i] * inv;
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
            Scratch s = scratch.get();
            Rows rows = rows(r, kvh, t0, t1, s);
            State st = s.state(rows.padded(), r.headDim());
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
            rows[kvh] = rows(r, kvh, 0, r.queries(), null); // shared by the tasks: arrays of their own
        }
        int perHead = rows[0].padded();
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
                        merge(total, next, perHead);
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

    /**
     * Folds a chunk's partial softmax states into the running total, lane by lane ({@code padded} lanes per row set,
     * accumulators transposed per set).
     */
    private static void merge(State total, State part, int padded) {
        int lanes = total.max.length;
        int hd = total.acc.length / lanes;
        for (int i = 0; i < lanes; i++) {
            float pm = part.max[i];
            if (pm == Float.NEGATIVE_INFINITY) {
                continue; // the chunk held nothing this lane sees
            }
            float tm = total.max[i];
            float m = Math.max(tm, pm);
            float a = tm == Float.NEGATIVE_INFINITY ? 0f : ExpOps.exp2(tm - m);
            float b = ExpOps.exp2(pm - m);
            total.sum[i] = total.sum[i] * a + part.sum[i] * b;
            total.max[i] = m;
            int o = i / padded * padded * hd + i % padded;
            for (int d = 0; d < hd; d++) {
                int x = o + d * padded;
                total.acc[x] = Math.fma(part.acc[x], b, total.acc[x] * a);
            }
        }
    }

    /** Whether {@link #readyOneRowKernels} has run in this process. */
    private static final AtomicBoolean ONE_ROW_READY = new AtomicBoolean();
    /** Tiles {@link #readyOneRowKernels} runs: {@link #scores1} and {@link #values1} past C2's thresholds. */
    private static final int READY_TILES = 700;

    /**
     * Runs {@link #tile} over a tile of zeros for one vector of query rows, as a decode step's does, so that C2
     * compiles the one-vector kernels ({@link #scores1}, {@link #values1}) and that arm of {@code tile} at the first
     * attention call, a prompt's first layer, while little of the model is resident. Left to the first decode step,
     * those compilations came after the whole model had come in, their arenas (10.4 MB for {@code values1}, 7.0 and
     * 5.4 for {@code scores1}, {@code -XX:CompileCommand=MemStat}) on top of it, and {@code tile}, compiled from
     * prompts' profiles that had never taken the one-vector arm, was compiled again.
     *
     * @param hd     head dimension
     * @param type   the cache's element type (its decoding is the one compiled already)
     * @param kvDim  the cache's row width
     */
    private static void readyOneRowKernels(int hd, KVElementType type, int kvDim) {
        int n = tile(hd);
        // Native memory, as the stores' pages are: a heap segment here would put a second segment class in the
        // profiles that the KV rows' decoding is compiled from.
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment zeros = arena.allocate(type.rowBytes(kvDim) * n);
            KVPage page = new KVPage(0, n, zeros, zeros, type, kvDim);
            Scratch s = new Scratch();
            State st = new State(L, hd);
            float[] qT = new float[hd * L];
            int[] pos = new int[L];
            for (int i = 0; i < READY_TILES; i++) {
                // Whole tiles, and tiles the rows see only part of (a decode step's last), alternately.
                Arrays.fill(pos, (i & 1) == 0 ? n - 1 : n - 4);
                tile(s, page, 0, n, 0, hd, new Rows(4, L, qT, pos), st, 0);
            }
        }
    }

    /**
     * Tile length for head dimension {@code hd}: {@link #TILE_ELEMENTS} / hd positions, a multiple of {@link #STEP}.
     */
    private static int tile(int hd) {
        return Math.max(STEP, TILE_ELEMENTS / hd / STEP * STEP);
    }

    /**
     * One page against the rows of KV head {@code kvh}: updates lanes {@code [base, base + rows.padded)} of
     * {@code st}, one tile of positions at a time (an online-softmax step per tile and row).
     */
    private static void page(Scratch s, KVPage page, int kvh, int hd, Rows rows, State st, int base) {
        int used = Math.min(page.positions(), rows.lastPos() - page.firstPosition() + 1);
        int tile = tile(hd);
        for (int t0 = 0; t0 < used; t0 += tile) {
            tile(s, page, t0, Math.min(tile, used - t0), kvh, hd, rows, st, base);
        }
    }

    /** Positions {@code [t0, t0 + n)} of a page against the rows, a block of one or two vectors of rows at a time. */
    private static void tile(Scratch s, KVPage page, int t0, int n, int kvh, int hd, Rows rows, State st, int base) {
        int first = page.firstPosition() + t0;
        int span = (n + STEP - 1) / STEP * STEP;
        s.ensure(span, hd);
        KvRows.decode(page.keys(), page, t0, n, kvh * hd, hd, s.k, s.halves);
        KvRows.decodeBlocked(page.values(), page, t0, n, kvh * hd, hd, s.v, span, s.rows, s.halves);
        Arrays.fill(s.k, n * hd, span * hd, 0f);
        for (int b = 0; b < (hd + STEP - 1) / STEP; b++) {
            Arrays.fill(s.v, (b * span + n) * STEP, (b + 1) * span * STEP, 0f);
        }
        int padded = rows.padded();
        for (int x0 = 0; x0 < padded; x0 += 2 * L) {
            int width = block(padded, x0);
            int lo = Integer.MAX_VALUE;
            int hi = -1;
            for (int x = 0; x < width; x++) {
                int p = rows.pos()[x0 + x];
                lo = Math.min(lo, p);
                hi = Math.max(hi, p);
                s.last[x] = Math.max(-1, Math.min(n - 1, p - first));
            }
            if (hi < first) {
                continue; // no row of the block sees this tile
            }
            int m = (Math.min(n, hi - first + 1) + STEP - 1) / STEP * STEP;
            boolean whole = lo - first + 1 >= m && n >= m; // every lane sees every computed position
            for (int j = 0; j < m; j += STEP) {
                if (width == 2 * L) {
                    scores2(rows.qT(), x0 * hd, s.k, hd, j, s.w, span);
                } else {
                    scores1(rows.qT(), x0 * hd, s.k, hd, j, s.w);
                }
            }
            int lane = base + x0;
            for (int u = 0; u < width / L; u++) {
                softmax(s, u, span, m, whole, st, lane + u * L);
            }
            int acc = base * hd + x0;
            for (int d = 0; d < hd; d += STEP) {
                if (width == 2 * L) {
                    values2(s.w, span, s.v, hd, d, m, st.acc, acc, padded, s.corr);
                } else {
                    values1(s.w, span, s.v, hd, d, m, st.acc, acc, padded, s.corr);
                }
            }
        }
    }

    /**
     * The online-softmax step of vector {@code u} of a block of rows over the tile's scores
     * {@code s.w[u * span * L + j * L ..]}, {@code j < m}: new running maximum and sum in the state, weights in place
     * of the scores (+0 where a lane must not see), the accumulator's rescaling in {@code s.corr}.
     */
    private static void softmax(Scratch s, int u, int span, int m, boolean whole, State st, int lane) {
        var sp = VectorOps.FLOATS;
        float[] w = s.w;
        int wo = u * span * L;
        FloatVector last = FloatVector.fromArray(sp, s.last, u * L);
        FloatVector tileMax = FloatVector.broadcast(sp, Float.NEGATIVE_INFINITY);
        for (int j = 0; j < m; j++) {
            FloatVector x = FloatVector.fromArray(sp, w, wo + j * L);
            if (!whole) {
                x = x.blend(Float.NEGATIVE_INFINITY, last.compare(VectorOperators.LT, j));
            }
            tileMax = tileMax.blend(x, x.compare(VectorOperators.GT, tileMax)); // cheaper than max(), see ExpOps
        }
        FloatVector old = FloatVector.fromArray(sp, st.max, lane);
        FloatVector max = old.max(tileMax);
        // A lane that has seen nothing yet keeps a maximum of -inf; shift it by 0 instead (its weights are all +0).
        FloatVector shift = max.blend(0f, max.compare(VectorOperators.EQ, Float.NEGATIVE_INFINITY));
        FloatVector corr = ExpOps.exp2(old.sub(shift));
        FloatVector sum = FloatVector.zero(sp);
        for (int j = 0; j < m; j++) {
            FloatVector e = ExpOps.exp2(FloatVector.fromArray(sp, w, wo + j * L).sub(shift));
            if (!whole) {
                e = e.blend(0f, last.compare(VectorOperators.LT, j));
            }
            e.intoArray(w, wo + j * L);
            sum = sum.add(e);
        }
        FloatVector.fromArray(sp, st.sum, lane).mul(corr).add(sum).intoArray(st.sum, lane);
        max.intoArray(st.max, lane);
        corr.intoArray(s.corr, u * L);
    }

    /**
     * Scores of a block of two vectors of rows (queries from {@code qT[qb + d * 2L ..]}) at positions
     * {@code [j0, j0 + STEP)} into {@code w[u * span * L + j * L + lane]}: {@code sum_d q[d][lane] * k[j][d]}, an fma
     * chain over {@code d} per lane. Sixteen accumulators stay in registers; each step loads two query vectors and
     * broadcasts eight key elements. Every array index steps by a constant, so the JIT drops the bounds checks from
     * the loop (measured 1.2x faster than a stride of {@code padded}).
     */
    private static void scores2(float[] qT, int qb, float[] k, int hd, int j0, float[] w, int span) {
        var sp = VectorOps.FLOATS;
        // Written out on purpose: vectors kept in an array or a loop are not register-allocated by C2.
        FloatVector a0 = FloatVector.zero(sp), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        FloatVector c0 = a0, c1 = a0, c2 = a0, c3 = a0, c4 = a0, c5 = a0, c6 = a0, c7 = a0;
        int k0 = j0 * hd;
        for (int d = 0; d < hd; d++) {
            int qo = qb + d * 2 * L;
            FloatVector x = FloatVector.fromArray(sp, qT, qo);
            FloatVector y = FloatVector.fromArray(sp, qT, qo + L);
            int kd = k0 + d;
            FloatVector b = FloatVector.broadcast(sp, k[kd]);
            a0 = x.fma(b, a0);
            c0 = y.fma(b, c0);
            b = FloatVector.broadcast(sp, k[kd + hd]);
            a1 = x.fma(b, a1);
            c1 = y.fma(b, c1);
            b = FloatVector.broadcast(sp, k[kd + 2 * hd]);
            a2 = x.fma(b, a2);
            c2 = y.fma(b, c2);
            b = FloatVector.broadcast(sp, k[kd + 3 * hd]);
            a3 = x.fma(b, a3);
            c3 = y.fma(b, c3);
            b = FloatVector.broadcast(sp, k[kd + 4 * hd]);
            a4 = x.fma(b, a4);
            c4 = y.fma(b, c4);
            b = FloatVector.broadcast(sp, k[kd + 5 * hd]);
            a5 = x.fma(b, a5);
            c5 = y.fma(b, c5);
            b = FloatVector.broadcast(sp, k[kd + 6 * hd]);
            a6 = x.fma(b, a6);
            c6 = y.fma(b, c6);
            b = FloatVector.broadcast(sp, k[kd + 7 * hd]);
            a7 = x.fma(b, a7);
            c7 = y.fma(b, c7);
        }
        int o = j0 * L;
        int p = span * L + j0 * L;
        a0.intoArray(w, o);
        c0.intoArray(w, p);
        a1.intoArray(w, o + L);
        c1.intoArray(w, p + L);
        a2.intoArray(w, o + 2 * L);
        c2.intoArray(w, p + 2 * L);
        a3.intoArray(w, o + 3 * L);
        c3.intoArray(w, p + 3 * L);
        a4.intoArray(w, o + 4 * L);
        c4.intoArray(w, p + 4 * L);
        a5.intoArray(w, o + 5 * L);
        c5.intoArray(w, p + 5 * L);
        a6.intoArray(w, o + 6 * L);
        c6.intoArray(w, p + 6 * L);
        a7.intoArray(w, o + 7 * L);
        c7.intoArray(w, p + 7 * L);
    }

    /** {@link #scores2} for one vector of rows (queries at {@code qT[qb + d * L ..]}): the same fma chain per lane. */
    private static void scores1(float[] qT, int qb, float[] k, int hd, int j0, float[] w) {
        var sp = VectorOps.FLOATS;
        FloatVector a0 = FloatVector.zero(sp), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        int k0 = j0 * hd;
        for (int d = 0; d < hd; d++) {
            FloatVector x = FloatVector.fromArray(sp, qT, qb + d * L);
            int kd = k0 + d;
            a0 = x.fma(FloatVector.broadcast(sp, k[kd]), a0);
            a1 = x.fma(FloatVector.broadcast(sp, k[kd + hd]), a1);
            a2 = x.fma(FloatVector.broadcast(sp, k[kd + 2 * hd]), a2);
            a3 = x.fma(FloatVector.broadcast(sp, k[kd + 3 * hd]), a3);
            a4 = x.fma(FloatVector.broadcast(sp, k[kd + 4 * hd]), a4);
            a5 = x.fma(FloatVector.broadcast(sp, k[kd + 5 * hd]), a5);
            a6 = x.fma(FloatVector.broadcast(sp, k[kd + 6 * hd]), a6);
            a7 = x.fma(FloatVector.broadcast(sp, k[kd + 7 * hd]), a7);
        }
        int o = j0 * L;
        a0.intoArray(w, o);
        a1.intoArray(w, o + L);
        a2.intoArray(w, o + 2 * L);
        a3.intoArray(w, o + 3 * L);
        a4.intoArray(w, o + 4 * L);
        a5.intoArray(w, o + 5 * L);
        a6.intoArray(w, o + 6 * L);
        a7.intoArray(w, o + 7 * L);
    }

    /**
     * Weighted values of two vectors of rows for head-dimension elements {@code [d0, d0 + STEP)}:
     * {@code acc[d][lane] = acc[d][lane] * corr[lane] + sum_{j < m} w[j][lane] * v[j][d]}, positions in order
     * (accumulator of element {@code d} at {@code acc[ao + d * padded ..]}; values blocked as in {@link Scratch#v}).
     * Elements past the head dimension repeat the last one and are stored first, so the real one is stored last.
     */
    private static void values2(float[] w, int span, float[] v, int hd, int d0, int m, float[] acc, int ao,
                                int padded, float[] corr) {
        var sp = VectorOps.FLOATS;
        int d1 = Math.min(d0 + 1, hd - 1), d2 = Math.min(d0 + 2, hd - 1), d3 = Math.min(d0 + 3, hd - 1);
        int d4 = Math.min(d0 + 4, hd - 1), d5 = Math.min(d0 + 5, hd - 1), d6 = Math.min(d0 + 6, hd - 1);
        int d7 = Math.min(d0 + 7, hd - 1);
        int o0 = ao + d0 * padded, o1 = ao + d1 * padded, o2 = ao + d2 * padded, o3 = ao + d3 * padded;
        int o4 = ao + d4 * padded, o5 = ao + d5 * padded, o6 = ao + d6 * padded, o7 = ao + d7 * padded;
        FloatVector s0 = FloatVector.fromArray(sp, corr, 0);
        FloatVector s1 = FloatVector.fromArray(sp, corr, L);
        FloatVector a0 = FloatVector.fromArray(sp, acc, o0).mul(s0), c0 = FloatVector.fromArray(sp, acc, o0 + L).mul(s1);
        FloatVector a1 = FloatVector.fromArray(sp, acc, o1).mul(s0), c1 = FloatVector.fromArray(sp, acc, o1 + L).mul(s1);
        FloatVector a2 = FloatVector.fromArray(sp, acc, o2).mul(s0), c2 = FloatVector.fromArray(sp, acc, o2 + L).mul(s1);
        FloatVector a3 = FloatVector.fromArray(sp, acc, o3).mul(s0), c3 = FloatVector.fromArray(sp, acc, o3 + L).mul(s1);
        FloatVector a4 = FloatVector.fromArray(sp, acc, o4).mul(s0), c4 = FloatVector.fromArray(sp, acc, o4 + L).mul(s1);
        FloatVector a5 = FloatVector.fromArray(sp, acc, o5).mul(s0), c5 = FloatVector.fromArray(sp, acc, o5 + L).mul(s1);
        FloatVector a6 = FloatVector.fromArray(sp, acc, o6).mul(s0), c6 = FloatVector.fromArray(sp, acc, o6 + L).mul(s1);
        FloatVector a7 = FloatVector.fromArray(sp, acc, o7).mul(s0), c7 = FloatVector.fromArray(sp, acc, o7 + L).mul(s1);
        int vb = d0 * span; // d0 is a multiple of STEP: the start of its block of values
        int e1 = d1 - d0, e2 = d2 - d0, e3 = d3 - d0, e4 = d4 - d0, e5 = d5 - d0, e6 = d6 - d0, e7 = d7 - d0;
        for (int j = 0; j < m; j++) {
            FloatVector x = FloatVector.fromArray(sp, w, j * L);
            FloatVector y = FloatVector.fromArray(sp, w, span * L + j * L);
            int vj = vb + j * STEP;
            FloatVector b = FloatVector.broadcast(sp, v[vj]);
            a0 = x.fma(b, a0);
            c0 = y.fma(b, c0);
            b = FloatVector.broadcast(sp, v[vj + e1]);
            a1 = x.fma(b, a1);
            c1 = y.fma(b, c1);
            b = FloatVector.broadcast(sp, v[vj + e2]);
            a2 = x.fma(b, a2);
            c2 = y.fma(b, c2);
            b = FloatVector.broadcast(sp, v[vj + e3]);
            a3 = x.fma(b, a3);
            c3 = y.fma(b, c3);
            b = FloatVector.broadcast(sp, v[vj + e4]);
            a4 = x.fma(b, a4);
            c4 = y.fma(b, c4);
            b = FloatVector.broadcast(sp, v[vj + e5]);
            a5 = x.fma(b, a5);
            c5 = y.fma(b, c5);
            b = FloatVector.broadcast(sp, v[vj + e6]);
            a6 = x.fma(b, a6);
            c6 = y.fma(b, c6);
            b = FloatVector.broadcast(sp, v[vj + e7]);
            a7 = x.fma(b, a7);
            c7 = y.fma(b, c7);
        }
        a7.intoArray(acc, o7);
        c7.intoArray(acc, o7 + L);
        a6.intoArray(acc, o6);
        c6.intoArray(acc, o6 + L);
        a5.intoArray(acc, o5);
        c5.intoArray(acc, o5 + L);
        a4.intoArray(acc, o4);
        c4.intoArray(acc, o4 + L);
        a3.intoArray(acc, o3);
        c3.intoArray(acc, o3 + L);
        a2.intoArray(acc, o2);
        c2.intoArray(acc, o2 + L);
        a1.intoArray(acc, o1);
        c1.intoArray(acc, o1 + L);
        a0.intoArray(acc, o0);
        c0.intoArray(acc, o0 + L);
    }

    /** {@link #values2} for one vector of rows: the same operations per lane. */
    private static void values1(float[] w, int span, float[] v, int hd, int d0, int m, float[] acc, int ao,
                                int padded, float[] corr) {
        var sp = VectorOps.FLOATS;
        int d1 = Math.min(d0 + 1, hd - 1), d2 = Math.min(d0 + 2, hd - 1), d3 = Math.min(d0 + 3, hd - 1);
        int d4 = Math.min(d0 + 4, hd - 1), d5 = Math.min(d0 + 5, hd - 1), d6 = Math.min(d0 + 6, hd - 1);
        int d7 = Math.min(d0 + 7, hd - 1);
        int o0 = ao + d0 * padded, o1 = ao + d1 * padded, o2 = ao + d2 * padded, o3 = ao + d3 * padded;
        int o4 = ao + d4 * padded, o5 = ao + d5 * padded, o6 = ao + d6 * padded, o7 = ao + d7 * padded;
        FloatVector s0 = FloatVector.fromArray(sp, corr, 0);
        FloatVector a0 = FloatVector.fromArray(sp, acc, o0).mul(s0), a1 = FloatVector.fromArray(sp, acc, o1).mul(s0);
        FloatVector a2 = FloatVector.fromArray(sp, acc, o2).mul(s0), a3 = FloatVector.fromArray(sp, acc, o3).mul(s0);
        FloatVector a4 = FloatVector.fromArray(sp, acc, o4).mul(s0), a5 = FloatVector.fromArray(sp, acc, o5).mul(s0);
        FloatVector a6 = FloatVector.fromArray(sp, acc, o6).mul(s0), a7 = FloatVector.fromArray(sp, acc, o7).mul(s0);
        int vb = d0 * span;
        int e1 = d1 - d0, e2 = d2 - d0, e3 = d3 - d0, e4 = d4 - d0, e5 = d5 - d0, e6 = d6 - d0, e7 = d7 - d0;
        for (int j = 0; j < m; j++) {
            FloatVector x = FloatVector.fromArray(sp, w, j * L);
            int vj = vb + j * STEP;
            a0 = x.fma(FloatVector.broadcast(sp, v[vj]), a0);
            a1 = x.fma(FloatVector.broadcast(sp, v[vj + e1]), a1);
            a2 = x.fma(FloatVector.broadcast(sp, v[vj + e2]), a2);
            a3 = x.fma(FloatVector.broadcast(sp, v[vj + e3]), a3);
            a4 = x.fma(FloatVector.broadcast(sp, v[vj + e4]), a4);
            a5 = x.fma(FloatVector.broadcast(sp, v[vj + e5]), a5);
            a6 = x.fma(FloatVector.broadcast(sp, v[vj + e6]), a6);
            a7 = x.fma(FloatVector.broadcast(sp, v[vj + e7]), a7);
        }
        a7.intoArray(acc, o7);
        a6.intoArray(acc, o6);
        a5.intoArray(acc, o5);
        a4.intoArray(acc, o4);
        a3.intoArray(acc, o3);
        a2.intoArray(acc, o2);
        a1.intoArray(acc, o1);
        a0.intoArray(acc, o0);
    }

}
