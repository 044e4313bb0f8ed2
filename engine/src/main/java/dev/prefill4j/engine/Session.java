package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.AttentionRequest;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.draft.DraftSource;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import dev.prefill4j.engine.model.LlamaConfig;
import dev.prefill4j.engine.model.LlamaModel;
import java.util.Arrays;
import java.util.Optional;
import java.util.StringJoiner;
import java.util.function.IntConsumer;

/**
 * One conversation with a model: a KV cache and a position. Runs the Llama forward pass:
 * embedding; per layer RMSNorm, Q/K/V projections (one GEMM each over the whole chunk), RoPE, KV append,
 * paged causal attention, output projection and residual, RMSNorm, gate/up projections, SwiGLU, down projection
 * and residual; final RMSNorm and logits only for the rows asked for. Prefill runs in chunks of
 * {@link SessionOptions#chunkSize()} tokens so activation memory stays bounded for long prompts.
 *
 * <p>Every layer's output is checked for NaN/Inf; the first one found fails with {@code P4J-NONFINITE} naming
 * the layer and position. Not thread-safe; close it to free the KV cache. Closing also hands its activation buffers
 * to the next session its engine opens with the same shape, so a closed session is not used again: its methods then
 * throw {@link IllegalStateException}.
 *
 * @since 0.1
 */
@Api.Stable
public final class Session implements AutoCloseable {
    private final LlamaModel model;
    private final LlamaConfig c;
    private final ComputeDevice device;
    private final AttentionKernel attention;
    private final KVCache cache;
    private final int capacity;
    private final int chunk;
    private int position;
    /** Tokens whose K/V the cache holds, in order ({@code [0, position)}); -1 for synthetic positions. */
    private int[] history = new int[256];
    /** The next token to feed: already handed to the caller, not yet in the cache; -1 if none. */
    private int pending = -1;
    /** Where each step's time is added ({@link #profile}); {@code null} when not profiling. */
    private OpProfile profile;
    /** The sampler of the last generation, kept with a persistent cache so a resumed session draws on. */
    private Sampler sampler;
    // Activation buffers: the workspace's, taken at the first forward pass and grown (replaced) when a pass needs more
    // rows than it has, up to a chunk (reserve); handed on to the next session at close.
    private final Workspace.Pool workspaces;
    /** The workspace's sizes per row. */
    private final Workspace.Shape shape;
    /** {@code null} until the first forward pass. */
    private Workspace workspace;
    private boolean closed;
    private float[] x;
    private float[] xb;
    private float[] q;
    private float[] k;
    private float[] v;
    private float[] gate;
    /** The FFN's output where it runs in blocks of hidden columns ({@code null} otherwise). */
    private float[] ffnOut;
    /** The up projection, for quantized activations only ({@code null} otherwise). */
    private float[] up;
    /** Weight format -> the format its input activations are rounded to; empty for float32 activations. */
    private final Map<Quantizer, Quantizer> activationFormats;
    /** Activation rows decoded from {@link #encoded}, for formats without an encoded dot product. */
    private float[] quantized;
    /** Activation rows encoded in an activation format, a pass's worth. */
    private MemorySegment encoded;

    /**
     * The model's {@link #fingerprint()} where the cache is kept or resumed, else 0: taken as the session opens, before
     * its first products, which may copy the embedding and let the file's pages go (the CPU device's packed copies);
     * taken at close, it brought the whole embedding back into memory (the 1B Q8_0 file's, 266 MB: {@code run -m
     * 1b-q8_0.gguf -p "Once upon a time" -n 8 --temp 0 --kv ssd --kv-keep story} peaked at 1,632.7 and 1,636.4 MiB
     * against 1,364.5-1,371.6 in three runs taken here; {@code /usr/bin/time -v}, Intel Xeon VM, 2026-12-07).
     */
    private final long modelFingerprint;

    Session(LlamaModel model, ComputeDevice device, AttentionKernel attention, KVCache cache, int capacity,
            int chunk, Map<Quantizer, Quantizer> activationFormats, Workspace.Pool workspaces) {
        this.model = model;
        this.c = model.config();
        this.device = device;
        this.attention = attention;
        this.cache = cache;
        this.capacity = capacity;
        this.chunk = chunk;
        this.activationFormats = Map.copyOf(activationFormats);
        this.workspaces = workspaces;
        this.shape = Workspace.Shape.of(c, 0, activationFormats, feedForwardBlock(model, device));
        Optional<byte[]> saved = cache.savedState();
        this.modelFingerprint = cache.persistent() || saved.isPresent() ? fingerprint() : 0;
        saved.ifPresent(this::restore);
    }

    /** {@return the most hidden columns the device computes at a time in any layer's FFN} */
    private static int feedForwardBlock(LlamaModel model, ComputeDevice device) {
        int block = 0;
        for (int l = 0; l < model.config().layers(); l++) {
            LlamaModel.Layer w = model.layer(l);
            block = Math.max(block, device.feedForwardBlock(w.gate(), w.up(), w.down()));
        }
        return block;
    }

    /**
     * Makes the activation buffers hold {@code n} rows: the workspace is taken at the first pass (the engine's idle
     * one if it is large enough) and replaced by a larger one when a pass needs more rows, so a session that decodes
     * after a short prompt does not hold a whole chunk's buffers (13 MiB for the 1B geometry at 256 tokens: {@code
     * bench -m 1b-q4_0.gguf -p 16 -n 64 -r 2} peaked at 859.6-863.5 MiB with them, over its aim of 858.3, and at
     * 846.1-850.6 without).
     */
    private void reserve(int n) {
        if (workspace != null && workspace.shape.rows() >= n) {
            return;
        }
        workspace = workspaces.take(shape.withRows(Workspace.Shape.rowsFor(n, chunk)));
        x = workspace.x;
        xb = workspace.xb;
        q = workspace.gate; // the queries live in the FFN's buffer until the FFN needs it (Workspace#gate)
        k = workspace.k;
        v = workspace.v;
        gate = workspace.gate;
        ffnOut = workspace.ffnOut;
        up = workspace.up;
        quantized = workspace.quantized;
        encoded = workspace.encoded;
    }

    /** {@return positions processed so far} */
    public int position() {
        return position;
    }

    /** {@return the maximum positions this session holds} */
    public int capacity() {
        return capacity;
    }

    /**
     * Times every step of the forward passes from now on into {@code profile} (see {@link OpProfile}), or stops
     * timing with {@code null}.
     *
     * @param profile where the times go, or {@code null}
     * @since 1.1
     */
    @Api.Experimental
    public void profile(OpProfile profile) {
        this.profile = profile;
    }

    /** {@return now, if profiling ({@link #profile}), with the step's start marked in the profile; 0 otherwise} */
    private long tick() {
        if (profile == null) {
            return 0;
        }
        profile.start();
        return System.nanoTime();
    }

    /** Adds the time since {@code t0} ({@link #tick}) to {@code operation}, a step that reads no weights. */
    private void tock(String operation, long t0) {
        tock(operation, t0, 0, 0);
    }

    /** Adds the time since {@code t0} to {@code operation} with the weight bytes it read and its FLOPs, if profiling. */
    private void tock(String operation, long t0, long weightBytes, long flops) {
        if (profile != null) {
            profile.add(operation, System.nanoTime() - t0, weightBytes, flops);
        }
    }

    /** {@return the bytes of {@code w}'s weights} */
    private static long bytes(WeightMatrix w) {
        return w.rowBytes() * w.rows();
    }

    /** {@return the FLOPs of {@code rows} activation rows times {@code w}: two per multiply-add} */
    private static long flops(WeightMatrix w, int rows) {
        return 2L * rows * w.rows() * w.cols();
    }

    /** {@return the KV cache (for its statistics)} */
    public KVCache cache() {
        return cache;
    }

    /**
     * Processes tokens at the current position.
     *
     * @param tokens    token ids
     * @param allLogits whether to return logits of every token ({@code [n][vocab]}) or only the last ({@code [vocab]})
     * @return the logits
     * @throws PrefillException ({@code P4J-CONTEXT}) if the tokens do not fit, ({@code P4J-NONFINITE}) on NaN/Inf
     */
    public float[] prefill(int[] tokens, boolean allLogits) {
        requireOpen();
        if (tokens.length == 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "nothing to prefill: the prompt has no tokens");
        }
        if ((long) position + tokens.length > capacity) {
            throw new PrefillException(PrefillException.Code.CONTEXT, tokens.length + " tokens at position "
                    + position + " exceed the context of " + capacity + " positions; shorten the prompt or raise "
                    + "the context length (-c)");
        }
        for (int id : tokens) {
            if (id < 0 || id >= c.vocab()) {
                throw new PrefillException(PrefillException.Code.ARGUMENT,
                        "token id " + id + " is outside the vocabulary of " + c.vocab());
            }
        }
        float[] logits = new float[(allLogits ? tokens.length : 1) * c.vocab()];
        for (int start = 0; start < tokens.length; start += chunk) {
            int n = Math.min(chunk, tokens.length - start);
            boolean last = start + n == tokens.length;
            remember(tokens, start, n);
            forward(tokens, start, n);
            if (allLogits) {
                logits(0, n, logits, start);
            } else if (last) {
                logits(n - 1, 1, logits, 0);
            }
        }
        return logits;
    }

    /**
     * Processes one token; {@code prefill(new int[] {token}, false)}.
     *
     * @param token the token id
     * @return the logits of that position
     */
    public float[] decode(int token) {
        return prefill(new int[] {token}, false);
    }

    /**
     * Encodes a prompt ({@link dev.prefill4j.engine.tokenizer.Tokenizer#encode(String)}: BOS as the vocabulary asks,
     * special pieces written in it read as their tokens), prefills it, then samples {@code maxTokens} tokens (stopping
     * early at EOS, or at another token that {@linkplain dev.prefill4j.engine.tokenizer.Tokenizer#endsGeneration ends
     * a generation}, unless {@code ignoreEos}). It starts a text: on a session that holds one already, the prompt
     * follows it as a new text (BOS included) and the last generated token is not fed; {@link #continueWith} goes on
     * with the text instead.
     *
     * @param prompt      the text
     * @param maxTokens   tokens to generate
     * @param sampler     how to pick them
     * @param ignoreEos   keep going after EOS
     * @param keepLogits  return the logits of every prompt position
     * @param onToken     called with each generated id as soon as it is known; may be {@code null}
     * @return ids, text and timings
     */
    public Generation generate(String prompt, int maxTokens, Sampler sampler, boolean ignoreEos, boolean keepLogits,
                               IntConsumer onToken) {
        requireOpen();
        checkMaxTokens(maxTokens);
        return sample(model.tokenizer().encode(prompt), maxTokens, sampler, ignoreEos, keepLogits, onToken);
    }

    /** Prefills {@code ids}, then samples up to {@code maxTokens} tokens from the last position on. */
    private Generation sample(int[] ids, int maxTokens, Sampler sampler, boolean ignoreEos, boolean keepLogits,
                              IntConsumer onToken) {
        if ((long) position + ids.length + maxTokens > capacity) {
            throw new PrefillException(PrefillException.Code.CONTEXT, "the prompt (" + ids.length + " tokens) plus "
                    + maxTokens + " to generate exceed the context of " + capacity + " positions; shorten the prompt, "
                    + "lower -n or raise -c");
        }
        long t0 = System.nanoTime();
        float[] logits = prefill(ids, keepLogits);
        long t1 = System.nanoTime();
        float[] last = keepLogits ? Arrays.copyOfRange(logits, (ids.length - 1) * c.vocab(), ids.length * c.vocab())
                : logits;
        int[] out = new int[maxTokens];
        int produced = 0;
        // The session's state (pending token, sampler) is kept whole at every onToken call, so that a caller that
        // stops there by throwing (a reader that went away) leaves a kept cache that resumes where it stopped.
        this.sampler = sampler;
        pending = -1;
        for (int i = 0; i < maxTokens; i++) {
            int next = sampler.sample(last);
            out[produced++] = next;
            pending = next;
            if (onToken != null) {
                onToken.accept(next);
            }
            if ((model.tokenizer().endsGeneration(next) && !ignoreEos) || i == maxTokens - 1) {
                break;
            }
            last = decode(next);
        }
        long t2 = System.nanoTime();
        int[] gen = Arrays.copyOf(out, produced);
        return new Generation(ids, gen, model.tokenizer().decode(gen), keepLogits ? logits : null, t1 - t0, t2 - t1,
                Math.max(0, produced - 1));
    }

    /**
     * Continues generating after the last generated token: feeds it, samples the next, and so on, {@code maxTokens}
     * times. The output is what an uninterrupted {@link #generate} with {@code maxTokens} more tokens would have
     * produced, also across processes when the session was reopened from a kept KV cache.
     *
     * @param maxTokens tokens to generate
     * @param sampler   how to pick them; {@code null} continues with the sampler of the last generation (restored
     *                  with its position in the random sequence for a reopened session; greedy if there was none)
     * @param ignoreEos keep going after EOS
     * @param onToken   called with each generated id; may be {@code null}
     * @return the new ids and timings (no prompt)
     * @throws PrefillException ({@code P4J-ARG}) if no generated token is waiting to be fed
     */
    public Generation resume(int maxTokens, Sampler sampler, boolean ignoreEos, IntConsumer onToken) {
        requireOpen();
        checkMaxTokens(maxTokens);
        requirePending(maxTokens);
        Sampler use = samplerOr(sampler);
        int[] out = new int[maxTokens];
        int produced = 0;
        long t0 = System.nanoTime();
        while (produced < maxTokens) {
            int next = use.sample(decode(pending));
            out[produced++] = next;
            pending = next;
            if (onToken != null) {
                onToken.accept(next);
            }
            if (model.tokenizer().endsGeneration(next) && !ignoreEos) {
                break;
            }
        }
        long t1 = System.nanoTime();
        this.sampler = use;
        int[] gen = Arrays.copyOf(out, produced);
        return new Generation(new int[0], gen, model.tokenizer().decode(gen), null, 0, t1 - t0, produced);
    }

    /**
     * Adds text to the session's text, then generates: feeds the pending token (the last one generated, not yet in
     * the KV cache) if there is one, then {@code text} encoded without BOS (special pieces read as their tokens), in
     * one prefill, and samples {@code maxTokens} tokens as {@link #generate} does. This is how a conversation goes on
     * (a chat's next user turn, {@link dev.prefill4j.engine.tokenizer.ChatFormat#nextTurn}), also in a session reopened
     * from a kept KV cache. On an empty session it is {@link #generate} (with BOS as the vocabulary asks).
     *
     * @param text      the text to add
     * @param maxTokens tokens to generate
     * @param sampler   how to pick them; {@code null} continues with the sampler of the last generation (restored for
     *                  a reopened session; greedy if there was none)
     * @param ignoreEos keep going after EOS (or another token that ends a generation)
     * @param onToken   called with each generated id as soon as it is known; may be {@code null}
     * @return the ids fed (the pending token first, if there was one), the generated ids, text and timings
     * @throws PrefillException ({@code P4J-CONTEXT}) if the context cannot hold the text and the tokens
     */
    public Generation continueWith(String text, int maxTokens, Sampler sampler, boolean ignoreEos,
                                   IntConsumer onToken) {
        requireOpen();
        checkMaxTokens(maxTokens);
        Sampler use = samplerOr(sampler);
        if (position == 0 && pending < 0) {
            return generate(text, maxTokens, use, ignoreEos, false, onToken);
        }
        int[] textIds = model.tokenizer().encode(text, false);
        int[] ids = new int[(pending >= 0 ? 1 : 0) + textIds.length];
        if (pending >= 0) {
            ids[0] = pending;
        }
        System.arraycopy(textIds, 0, ids, ids.length - textIds.length, textIds.length);
        if (ids.length == 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "nothing to continue with: the text is empty "
                    + "and no generated token is waiting");
        }
        return sample(ids, maxTokens, use, ignoreEos, false, onToken);
    }

    /** {@return {@code given}, else the last generation's sampler, else a greedy one} */
    private Sampler samplerOr(Sampler given) {
        return given != null ? given : sampler != null ? sampler : new Sampler(SamplerConfig.greedy());
    }

    /** {@return the last generated token, not yet fed to the KV cache, or -1 if there is none} */
    public int pendingToken() {
        return pending;
    }

    private void requirePending(int maxTokens) {
        if (pending < 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "nothing to continue: no generated token is "
                    + "waiting (generate at least one token first, or resume a kept session that did)");
        }
        if ((long) position + maxTokens + 1 > capacity) {
            throw new PrefillException(PrefillException.Code.CONTEXT, maxTokens + " more tokens at position " + position
                    + " exceed the context of " + capacity + " positions; lower -n");
        }
    }

    /**
     * Greedy generation with burst verification: each pass feeds the pending token plus up to {@code burst - 1}
     * tokens proposed by {@code drafts}, computes logits for all of them in one forward pass (one read of the KV
     * cache per layer), accepts the longest prefix of drafts that greedy decoding would itself have produced, and
     * forgets the KV positions of the rejected ones. The output equals {@link #generate} with a greedy sampler; only
     * the number of passes changes.
     *
     * @param prompt    the text
     * @param maxTokens tokens to generate
     * @param burst     tokens verified per pass, at least 1 (1 = no drafting)
     * @param drafts    where proposals come from
     * @param ignoreEos keep going after EOS
     * @param onToken   called with each accepted id in order; may be {@code null}
     * @return the generation and the drafting statistics
     */
    public BurstGeneration generateWithBursts(String prompt, int maxTokens, int burst,
                                              DraftSource drafts, boolean ignoreEos,
                                              IntConsumer onToken) {
        requireOpen();
        checkMaxTokens(maxTokens);
        checkBurst(burst);
        int[] ids = model.tokenizer().encode(prompt);
        if ((long) position + ids.length + maxTokens + burst > capacity) {
            throw new PrefillException(PrefillException.Code.CONTEXT, "the prompt (" + ids.length + " tokens) plus "
                    + maxTokens + " to generate and a burst of " + burst + " exceed the context of " + capacity
                    + " positions; shorten the prompt, lower -n or raise -c");
        }
        long t0 = System.nanoTime();
        int first = Sampler.argmax(prefill(ids, false));
        long t1 = System.nanoTime();
        return bursts(ids, first, false, maxTokens, burst, drafts, ignoreEos, onToken, t1 - t0);
    }

    /**
     * {@link #resume} with burst verification: greedy, the same output as {@code resume} with a greedy sampler.
     *
     * @param maxTokens tokens to generate
     * @param burst     tokens verified per pass, at least 1
     * @param drafts    where proposals come from
     * @param ignoreEos keep going after EOS
     * @param onToken   called with each accepted id in order; may be {@code null}
     * @return the generation (no prompt) and the drafting statistics
     */
    public BurstGeneration resumeWithBursts(int maxTokens, int burst, DraftSource drafts, boolean ignoreEos,
                                            IntConsumer onToken) {
        requireOpen();
        checkMaxTokens(maxTokens);
        checkBurst(burst);
        requirePending(maxTokens + burst);
        return bursts(new int[0], pending, true, maxTokens, burst, drafts, ignoreEos, onToken, 0);
    }

    /** A closed session's buffers may already serve another session of the engine: refuse, rather than share them. */
    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("the session is closed; open another with Engine.newSession");
        }
    }

    private static void checkMaxTokens(int maxTokens) {
        if (maxTokens < 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "tokens to generate must be at least 0, got "
                    + maxTokens);
        }
    }

    private static void checkBurst(int burst) {
        if (burst < 1) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--burst must be at least 1, got " + burst);
        }
    }

    /**
     * The verification loop. {@code next} is the greedy token to feed first; {@code emitted} says whether the caller
     * has it already (a resumed session) or it is the first output. At the end the last output token is pending:
     * handed out, not yet in the cache.
     */
    private BurstGeneration bursts(int[] promptIds, int next, boolean emitted, int maxTokens, int burst,
                                   DraftSource drafts, boolean ignoreEos, IntConsumer onToken, long prefillNanos) {
        int[] out = new int[maxTokens];
        int produced = 0;
        int passes = 0;
        int proposed = 0;
        int accepted = 0;
        int vocab = c.vocab();
        long t0 = System.nanoTime();
        int pend = next;
        boolean skipEmit = emitted;
        // As in generate, the state is whole at every onToken call: the pending token out of the cache, the accepted
        // drafts in it (emitted only after the rejected ones are cut), the greedy sampler.
        sampler = new Sampler(SamplerConfig.greedy());
        pending = pend;
        while (produced < maxTokens) {
            if (!skipEmit) {
                out[produced++] = pend;
                if (onToken != null) {
                    onToken.accept(pend);
                }
                if (produced == maxTokens || (model.tokenizer().endsGeneration(pend) && !ignoreEos)) {
                    break;
                }
            }
            skipEmit = false;
            // Drafts look at everything the model has seen plus the pending token.
            ensureHistory(position + 1);
            history[position] = pend;
            int[] draft = drafts.propose(history, position + 1, Math.min(burst - 1, maxTokens - produced));
            int[] batch = new int[1 + draft.length];
            batch[0] = pend;
            System.arraycopy(draft, 0, batch, 1, draft.length);
            int base = position;
            float[] logits = prefill(batch, true);
            passes++;
            proposed += draft.length;
            int a = 0;
            boolean stop = false;
            while (a < draft.length && Sampler.argmax(slice(logits, a, vocab)) == draft[a]) {
                int token = draft[a++];
                if (produced + a == maxTokens || (model.tokenizer().endsGeneration(token) && !ignoreEos)) {
                    stop = true;
                    break;
                }
            }
            accepted += a;
            if (stop) {
                // The last output token is left pending (out of the cache), as after generate.
                cut(base + a);
                pend = draft[a - 1];
            } else {
                // Keep the KV of the pending token and the accepted drafts; forget the rejected drafts.
                cut(base + 1 + a);
                pend = Sampler.argmax(slice(logits, a, vocab));
            }
            pending = pend;
            for (int i = 0; i < a; i++) {
                out[produced++] = draft[i];
                if (onToken != null) {
                    onToken.accept(draft[i]);
                }
            }
            if (stop) {
                break;
            }
        }
        long t1 = System.nanoTime();
        pending = produced > 0 || emitted ? pend : -1;
        int[] gen = Arrays.copyOf(out, produced);
        Generation g = new Generation(promptIds, gen, model.tokenizer().decode(gen), null, prefillNanos, t1 - t0,
                emitted ? produced : Math.max(0, produced - 1));
        return new BurstGeneration(g, passes, proposed, accepted);
    }

    private static float[] slice(float[] logits, int row, int vocab) {
        return Arrays.copyOfRange(logits, row * vocab, (row + 1) * vocab);
    }

    /**
     * Fills the KV cache with {@code positions} rows of synthetic K and V (Gaussian, seeded) in every layer, for
     * measuring attention and KV streaming at a depth that would take hours to prefill. The cache then holds no
     * real context: outputs after it are meaningless, and benchmarks that use it say "synthetic KV".
     *
     * @param positions rows to append, starting at the current position
     * @param seed      random seed
     * @param progress  fraction done, or {@code null}
     */
    public void fillSyntheticKv(int positions, long seed, java.util.function.DoubleConsumer progress) {
        requireOpen();
        if ((long) position + positions > capacity) {
            throw new PrefillException(PrefillException.Code.CONTEXT, positions + " synthetic positions at " + position
                    + " exceed the context of " + capacity);
        }
        int kvDim = c.kvDim();
        int step = Math.max(1, Math.min(4096, positions));
        float[] kb = new float[step * kvDim];
        float[] vb = new float[step * kvDim];
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(seed);
        for (int done = 0; done < positions; done += step) {
            int n = Math.min(step, positions - done);
            for (int l = 0; l < c.layers(); l++) {
                for (int i = 0; i < n * kvDim; i++) {
                    kb[i] = (float) rnd.nextGaussian();
                    vb[i] = (float) rnd.nextGaussian();
                }
                cache.append(l, position + done, n, kb, vb);
            }
            ensureHistory(position + done + n);
            Arrays.fill(history, position + done, position + done + n, -1);
            if (progress != null) {
                progress.accept((double) (done + n) / positions);
            }
        }
        position += positions;
    }

    /**
     * Forgets every position at or after {@code length} (rejected draft tokens).
     *
     * @param length positions kept, at most {@link #position()}
     */
    public void truncate(int length) {
        requireOpen();
        cut(length);
        pending = -1;
    }

    private void cut(int length) {
        if (length < 0 || length > position) {
            throw new IllegalArgumentException("cannot truncate " + position + " positions to " + length);
        }
        cache.truncate(length);
        position = length;
    }

    private void ensureHistory(int n) {
        if (history.length < n) {
            history = Arrays.copyOf(history, Math.max(n, 2 * history.length));
        }
    }

    /** Records the tokens about to be fed at the current position. */
    private void remember(int[] tokens, int start, int n) {
        ensureHistory(position + n);
        System.arraycopy(tokens, start, history, position, n);
    }

    private void forward(int[] tokens, int start, int n) {
        reserve(n);
        int dim = c.dim();
        WeightMatrix emb = model.embedding();
        long t = tick();
        for (int i = 0; i < n; i++) {
            device.decodeRow(emb, tokens[start + i], x, i * dim);
        }
        tock("embedding", t, n * emb.rowBytes(), 0);
        int pos = position;
        for (int l = 0; l < c.layers(); l++) {
            LlamaModel.Layer w = model.layer(l);
            t = tick();
            device.rmsNorm(x, n, w.attnNorm(), c.rmsEps(), xb);
            tock("rms_norm", t);
            project(xb, n, new WeightMatrix[] {w.wq(), w.wk(), w.wv()}, q, k, v);
            t = tick();
            device.rope(q, n, c.heads(), c.headDim(), c.ropeDim(), pos, c.ropeBase(), model.ropeDivisors());
            device.rope(k, n, c.kvHeads(), c.headDim(), c.ropeDim(), pos, c.ropeBase(), model.ropeDivisors());
            tock("rope", t);
            t = tick();
            cache.append(l, pos, n, k, v);
            tock("kv_append", t);
            t = tick();
            attention.attend(new AttentionRequest(q, n, pos, cache, l, c.heads(), c.kvHeads(), c.headDim(),
                    (float) (1.0 / Math.sqrt(c.headDim())), xb));
            tock("attention", t);
            // Attention's output in xb (free since the projections read it), the output projection's in q (free
            // since attention read it; q is the start of gate, which the FFN overwrites next): no buffers of their own.
            project(xb, n, new WeightMatrix[] {w.wo()}, q);
            t = tick();
            addInPlace(x, q, n * dim);
            tock("residual_add", t);
            t = tick();
            device.rmsNorm(x, n, w.ffnNorm(), c.rmsEps(), xb);
            tock("rms_norm", t);
            float[] ffn = xb;
            if (activationFormats.containsKey(w.gate().format()) || activationFormats.containsKey(w.up().format())) {
                project(xb, n, new WeightMatrix[] {w.gate(), w.up()}, gate, up);
                t = tick();
                device.swiglu(gate, up, n * c.ffnDim());
                tock("swiglu", t);
                project(gate, n, new WeightMatrix[] {w.down()}, xb);
            } else if ((long) n * c.ffnDim() > gate.length) {
                // The hidden columns a block at a time (ComputeDevice#feedForward): gate holds one block, and the
                // output goes to a buffer of its own, since every block reads xb.
                t = tick();
                device.feedForward(w.gate(), w.up(), w.down(), xb, n, gate, ffnOut);
                tock("ffn (gate, up, down)", t, bytes(w.gate()) + bytes(w.up()) + bytes(w.down()),
                        flops(w.gate(), n) + flops(w.up(), n) + flops(w.down(), n));
                ffn = ffnOut;
            } else {
                t = tick();
                device.matmulSwiGLU(w.gate(), w.up(), xb, n, gate); // SwiGLU in the GEMM's epilogue: no up tensor
                tock("ffn_gate+up", t, bytes(w.gate()) + bytes(w.up()), flops(w.gate(), n) + flops(w.up(), n));
                project(gate, n, new WeightMatrix[] {w.down()}, xb);
            }
            t = tick();
            addInPlace(x, ffn, n * dim);
            tock("residual_add", t);
            t = tick();
            checkFinite(x, n, dim, "output of layer " + l, pos);
            tock("finite_check", t);
        }
        position = pos + n;
    }

    /** Final norm and output projection for rows {@code [from, from+rows)} of the last chunk. */
    private void logits(int from, int rows, float[] out, int outRow) {
        int dim = c.dim();
        int vocab = c.vocab();
        float[] normed = new float[rows * dim];
        System.arraycopy(x, from * dim, normed, 0, rows * dim);
        long t = tick();
        device.rmsNorm(normed, rows, model.outputNorm(), c.rmsEps(), normed);
        tock("rms_norm", t);
        float[] result = outRow == 0 && out.length == rows * vocab ? out : new float[rows * vocab];
        project(normed, rows, new WeightMatrix[] {model.output()}, result);
        if (result != out) {
            System.arraycopy(result, 0, out, outRow * vocab, rows * vocab);
        }
        t = tick();
        checkFinite(result, rows, vocab, "logits", position - (from == 0 && rows > 1 ? rows : 1));
        tock("finite_check", t);
    }

    /**
     * Projections of one input: {@code outs[i] = x * ws[i]}. A prompt's products with float activations go to the
     * device together ({@link ComputeDevice#matmulAll}: the CPU device lays the rows out for its micro-kernel once for
     * a layer's query, key and value matrices, and runs their panels as one set of tasks). With quantized activations
     * each input row is first encoded in the weights' activation format (once per format, not once per matrix, so Q/K/V
     * and gate/up share it). A decode step's row, and a prompt's rows before formats whose integer products are not
     * exact ({@link Quantizer#encodedDotIsExact()}: K-quants and ternary formats, whose Q8_K activation scale is a
     * float32), go encoded to the integer products ({@link ComputeDevice#matmulEncoded}); otherwise the rows are
     * decoded back to floats ({@link #decodesPrompts}). Formats without an integer dot product, and a prompt's rows
     * before a format whose integer products are exact (Q4_0, Q8_0), then accumulate exactly ({@link
     * ComputeDevice#matmulExact}, a GEMM in double on the CPU device): numerically the integer products, up to double
     * rounding, so a prompt's logits do not depend on how it is split into chunks. Prompts of the 1B Q4_0 and Q8_0
     * files ran at 25-28 tok/s (pp512, Zen 5 VM) through the integer products and at 69-77 through the exact GEMM.
     * Per-token activations (BitNet b1.58's rounding, {@link SessionOptions.Activations#PER_TOKEN}) of more than one
     * row, a prompt's, go decoded to the float GEMM ({@link ComputeDevice#matmul}): the same rounded activations times
     * the same weights, the sums in float instead of exact integers, at the GEMM's speed. Through the integer products
     * a prompt ran at 39-86 tok/s (pp512, 1B TQ2_0 file, Zen 5 VM; 22-106 in a four-row form C2 compiled unevenly),
     * through the GEMM at 126-150, about the float mode's speed; decode steps keep the integer products, faster than
     * the float dots there (tg64 38-47 against 29-33).
     */
    private void project(float[] x, int rows, WeightMatrix[] ws, float[]... outs) {
        if (rows > 1 && ws.length > 1 && Arrays.stream(ws).noneMatch(w -> activationFormats.containsKey(w.format()))) {
            // A prompt's float products of one input together (ComputeDevice#matmulAll), timed as one operation.
            long t = tick();
            device.matmulAll(ws, x, rows, outs);
            if (profile != null) {
                long bytes = 0;
                long flops = 0;
                StringJoiner op = new StringJoiner("+");
                for (WeightMatrix w : ws) {
                    bytes += bytes(w);
                    flops += flops(w, rows);
                    op.add(profile.operationOf(w.name()).replace(".weight", ""));
                }
                tock(op.toString(), t, bytes, flops);
            }
            return;
        }
        Quantizer encodedAs = null;
        boolean decoded = false;
        for (int i = 0; i < ws.length; i++) {
            WeightMatrix w = ws[i];
            long t = tick();
            Quantizer act = activationFormats.get(w.format());
            if (act == null) {
                device.matmul(w, x, rows, outs[i]);
                if (profile != null) {
                    tock(profile.operationOf(w.name()), t, bytes(w), flops(w, rows));
                }
                continue;
            }
            int cols = w.cols();
            long rowBytes = act.byteSize(cols);
            if (act != encodedAs) {
                for (int r = 0; r < rows; r++) {
                    act.encode(x, r * cols, cols, encoded, r * rowBytes);
                }
                encodedAs = act;
                decoded = false;
                tock("activation_encode", t);
                t = tick();
            }
            if (rows == 1 ? w.format().hasEncodedDot() : !decodesPrompts(w.format(), act)) {
                device.matmulEncoded(w, encoded, rowBytes, rows, outs[i]);
            } else {
                if (!decoded) {
                    for (int r = 0; r < rows; r++) {
                        act.decode(encoded, r * rowBytes, quantized, r * cols, cols);
                    }
                    decoded = true;
                    tock("activation_encode", t);
                    t = tick();
                }
                if (rows > 1 && perToken(w.format(), act)) {
                    device.matmul(w, quantized, rows, outs[i]);
                } else {
                    device.matmulExact(w, quantized, rows, outs[i]);
                }
            }
            if (profile != null) {
                tock(profile.operationOf(w.name()), t, bytes(w), flops(w, rows));
            }
        }
    }

    /**
     * {@return whether a prompt's rows (more than one) rounded to {@code act} reach {@code weights} decoded to floats}
     * rather than encoded ({@link #project}): where {@code weights} has no integer dot product, where {@code act} is
     * its per-token format (the float GEMM), and where its integer products are exact, so that {@link
     * ComputeDevice#matmulExact} over the decoded rows computes them.
     */
    static boolean decodesPrompts(Quantizer weights, Quantizer act) {
        return !weights.hasEncodedDot() || perToken(weights, act)
                || weights.encodedDotIsExact() && act.id().equals(weights.activationFormat());
    }

    /** {@return whether {@code act} is the per-token activation format of {@code weights}} (BitNet's rounding) */
    private static boolean perToken(Quantizer weights, Quantizer act) {
        return act.id().equals(weights.tokenActivationFormat());
    }

    private static void addInPlace(float[] a, float[] b, int n) {
        for (int i = 0; i < n; i++) {
            a[i] += b[i];
        }
    }

    private static void checkFinite(float[] a, int rows, int width, String what, int firstPos) {
        for (int r = 0; r < rows; r++) {
            for (int i = r * width, end = i + width; i < end; i++) {
                if (!Float.isFinite(a[i])) {
                    throw new PrefillException(PrefillException.Code.NON_FINITE, (Float.isNaN(a[i]) ? "NaN" : "Inf")
                            + " in " + what + " at position " + (firstPos + r) + ", element " + (i - r * width)
                            + "; the model's weights or the input are broken");
                }
            }
        }
    }

    /**
     * Frees the KV cache; a persistent one (for example {@code --kv-keep}) is closed with this session's state (its
     * tokens, the pending token, the sampler and a fingerprint of the model) so that a later session can reopen it
     * and {@link #resume} where this one stopped.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            if (cache.persistent()) {
                cache.saveState(new SessionState(modelFingerprint, Arrays.copyOf(history, position), pending, sampler)
                        .encode());
            }
        } finally {
            try {
                cache.close();
            } finally {
                if (workspace != null) {
                    workspaces.give(workspace);
                }
            }
        }
    }

    /** Takes over the state of the session that kept this cache; refuses one made with another model. */
    private void restore(byte[] bytes) {
        SessionState st = SessionState.decode(bytes);
        if (st.fingerprint() != modelFingerprint) {
            cache.close();
            throw new PrefillException(PrefillException.Code.ARGUMENT, "the kept KV cache was made with another model "
                    + "(its fingerprint differs from " + model.source() + "); resume it with the model that made it");
        }
        for (int l = 0; l < c.layers(); l++) {
            if (cache.length(l) != st.tokens().length) {
                cache.close();
                throw new PrefillException(PrefillException.Code.IO, "the kept KV cache holds " + cache.length(l)
                        + " positions in layer " + l + " but its session state says " + st.tokens().length
                        + "; it is damaged: delete it and start over");
            }
        }
        position = st.tokens().length;
        ensureHistory(position + 1);
        System.arraycopy(st.tokens(), 0, history, 0, position);
        pending = st.pending();
        sampler = st.sampler();
    }

    /** A fingerprint of the model: its geometry and the bytes of its token embedding (CRC32C). */
    private long fingerprint() {
        java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
        crc.update(c.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8));
        crc.update(device.resident(model.embedding()).data().asByteBuffer()); // the same bytes, not the file's pages
        return crc.getValue();
    }
}
