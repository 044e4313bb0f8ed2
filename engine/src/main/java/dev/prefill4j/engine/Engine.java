package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVStore;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.gguf.CloseableContent;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.io.InputFiles;
import dev.prefill4j.engine.llama2c.Llama2cCheckpoint;
import dev.prefill4j.engine.model.LlamaConfig;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.DoubleConsumer;

/**
 * The entry point: a plugin registry, an open compute device, an attention kernel and a KV store, chosen once.
 * Load models with it and open {@linkplain Session sessions} on them.
 *
 * <p>Selection follows {@link PluginRegistry}: explicit ids from the {@link Builder}, else system properties,
 * else priority. Thread-safe for loading; each session is used by one thread at a time, and sessions of one
 * engine share its device, so run them one after another. A closed engine loads nothing and opens no session (nor
 * does a closed model): those calls throw {@link IllegalStateException}.
 *
 * @since 0.1
 */
@Api.Stable
public final class Engine implements AutoCloseable {
    private final PluginRegistry registry;
    private final Backend backend;
    private final ComputeDevice device;
    private final Attention attention;
    private final AttentionKernel kernel;
    private final KVStore kvStore;
    private volatile boolean closed;
    /** The activation buffers of the last closed session, for the next one. */
    private final Workspace.Pool workspaces = new Workspace.Pool();
    /**
     * Weight formats and row lengths ({@code "q4_k/8192"}) whose decode products {@link ComputeDevice#warmUp} has
     * readied on this engine's device.
     */
    private final Set<String> warmedUp = ConcurrentHashMap.newKeySet();
    /** Formats whose one-row {@code decode} this engine has run until compiled ({@link #warmUp}). */
    private final Set<Quantizer> decodeWarmedUp = ConcurrentHashMap.newKeySet();
    /**
     * Rows decoded to ready an embedding format's {@code decode}, the first {@value #WARM_UP_EMBEDDING_ROWS} rows
     * over and over: enough calls for C2 to compile it (see {@link #warmUp}).
     */
    private static final int WARM_UP_EMBEDDING_DECODES = 2048;
    private static final int WARM_UP_EMBEDDING_ROWS = 64;

    private Engine(Builder b) {
        this.registry = b.registry != null ? b.registry : PluginRegistry.load();
        this.backend = registry.selectBackend(b.backend);
        this.attention = registry.selectAttention(backend.id(), b.attention);
        this.kvStore = registry.selectKVStore(b.kvStore);
        this.device = backend.create(new BackendContext(b.threads));
        this.kernel = attention.create(device);
    }

    /** {@return a builder} */
    public static Builder builder() {
        return new Builder();
    }

    /** {@return the registry in use} */
    public PluginRegistry registry() {
        return registry;
    }

    /** {@return the selected backend} */
    public Backend backend() {
        return backend;
    }

    /** {@return the open device} */
    public ComputeDevice device() {
        return device;
    }

    /** {@return the selected attention provider} */
    public Attention attention() {
        return attention;
    }

    /** {@return the selected KV store} */
    public KVStore kvStore() {
        return kvStore;
    }

    /**
     * Loads a GGUF file (memory-mapped, not copied).
     *
     * @param model the file
     * @return the model; close it to unmap
     * @throws PrefillException if the file is malformed or needs a format no module provides
     */
    public LlamaModel load(Path model) {
        return load(model, null);
    }

    /**
     * Loads a GGUF file, or a llama2.c checkpoint with its tokenizer (see {@link #openContent}).
     *
     * @param model     the model file
     * @param tokenizer llama2.c {@code tokenizer.bin}, or {@code null} for a GGUF file
     * @return the model; close it to unmap
     * @throws PrefillException as {@link #openContent} does, and if the model needs a format no module provides
     */
    public LlamaModel load(Path model, Path tokenizer) {
        requireOpen();
        CloseableContent content = openContent(model, tokenizer);
        try {
            LlamaModel m = LlamaModel.bind(content, false, registry, content);
            if (content instanceof GgufFile f) {
                f.unloadHeader(); // the tokenizer holds what it needs; metadata look-ups read the file again
            }
            return m;
        } catch (RuntimeException e) {
            content.close();
            throw e;
        }
    }

    /**
     * Opens a model file's content without binding its weights to formats (what {@code inspect} shows): a GGUF file
     * (memory-mapped), or a llama2.c checkpoint when {@code tokenizer} is given.
     *
     * @param model     the model file
     * @param tokenizer llama2.c {@code tokenizer.bin}, or {@code null} for a GGUF file
     * @return the content; close it to unmap
     * @throws PrefillException ({@code P4J-IO}) if a file is missing, a directory or unreadable, naming it;
     *                          ({@code P4J-GGUF}) if it is malformed, or is not GGUF and no tokenizer is given;
     *                          ({@code P4J-ARG}) if a tokenizer is given with a GGUF file
     */
    public static CloseableContent openContent(Path model, Path tokenizer) {
        if (tokenizer != null) {
            return Llama2cCheckpoint.open(model, tokenizer);
        }
        InputFiles.requireReadableFile(model, "the model");
        if (!mayBeGguf(model)) {
            throw new PrefillException(PrefillException.Code.MODEL_FORMAT, model + ": not a GGUF file (no \"GGUF\" "
                    + "magic); for a llama2.c checkpoint also pass its tokenizer.bin (--tokenizer)");
        }
        return GgufFile.open(model);
    }

    /** Whether the file starts with GGUF's magic, or is too short to say (then the GGUF reader says it is truncated). */
    private static boolean mayBeGguf(Path p) {
        try (InputStream in = Files.newInputStream(p)) {
            byte[] magic = in.readNBytes(4);
            return magic.length < 4 || ByteBuffer.wrap(magic).order(ByteOrder.LITTLE_ENDIAN).getInt() == GgufFile.MAGIC;
        } catch (IOException e) {
            throw InputFiles.cannotRead(p, e);
        }
    }

    /**
     * Generates a deterministic synthetic model in memory.
     *
     * @param shape    the geometry
     * @param formatId the weight format id, e.g. {@code f16}
     * @param seed     random seed
     * @param progress fraction done, or {@code null}
     * @return the model, labelled synthetic
     */
    public LlamaModel synthetic(SyntheticLlama.Shape shape, String formatId, long seed, DoubleConsumer progress) {
        requireOpen();
        return bindGenerated(generateSynthetic(registry, shape, formatId, seed, progress));
    }

    /** {@return a model bound to generated content, which it closes} @param s the content, closed on failure */
    private LlamaModel bindGenerated(SyntheticLlama s) {
        try {
            return LlamaModel.bind(s, true, registry, s);
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    /**
     * Readies the kernels that a synthetic model of {@code shape} in {@code formatId} will run, before it is generated:
     * a model of the shape's first layer with a vocabulary of {@value #READY_VOCABULARY} pieces (33 MiB for llama-1b in
     * Q4_0, where the whole model is 663 MiB) prefills a prompt and decodes {@value #READY_STEPS} tokens {@value
     * #READY_PASSES} times in a session of {@code options}, at the chunk the whole model will take, and is closed. That
     * is enough calls for C2 to compile the prefill, attention and decode kernels while little is resident; each
     * compilation takes arenas of up to 34 MB for a moment (the GEMM micro-kernel, {@code -XX:CompileCommand=MemStat}),
     * and made during the whole model's first prompt they set the process's peak. The default {@code bench} run
     * peaked at 787.1-788.0 MiB without this and at 767.1-772.7 with it (aim 781.0; six runs each, 2026-12-06).
     * Nothing here changes a result: the kernels are the same code, compiled earlier.
     *
     * <p>The activation buffers the readying's session used are left to the next session (as any closed session's
     * are), so {@code promptTokens} should be the longest prompt that will be prefilled: a later prompt that needs
     * more rows has buffers made for it, and the smaller ones are garbage the heap keeps resident.
     *
     * @param shape        the geometry of the model to come
     * @param formatId     its weight format id
     * @param options      the options its sessions will be opened with (the activation mode selects kernels)
     * @param promptTokens the prompt to prefill, 1 or more (at most a chunk of it is used: a whole 512-token prompt,
     *                     two chunks, left bench's pp512 peak where one chunk left it)
     * @param progress     fraction done, or {@code null}
     * @throws PrefillException if the format is unknown or {@code promptTokens} is less than 1
     * @since 0.1
     */
    public void readyKernels(SyntheticLlama.Shape shape, String formatId, SessionOptions options, int promptTokens,
                             DoubleConsumer progress) {
        requireOpen();
        if (promptTokens < 1) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "readying kernels needs a prompt of 1 token "
                    + "or more, not " + promptTokens);
        }
        Quantizer format = quantizer(registry, formatId);
        Quantizer f32 = quantizer(registry, "f32");
        long wholeBytes = SyntheticLlama.weightBytes(shape, format, f32);
        try (LlamaModel model = bindGenerated(SyntheticLlama.generate(shape, 1, READY_VOCABULARY, format, f32, 1,
                null))) {
            Map<Quantizer, Quantizer> formats = activationFormats(model, options.activations());
            int chunk = options.chunkSize() != SessionOptions.ENGINE_CHUNK ? options.chunkSize()
                    : defaultChunk(model.config(), wholeBytes, formats);
            int[] prompt = new SplittableRandom(1).ints(Math.min(promptTokens, chunk), 3, READY_VOCABULARY).toArray();
            try (Session s = newSession(model, options.withContextLength(prompt.length + READY_STEPS)
                    .withChunkSize(chunk))) {
                for (int pass = 0; pass < READY_PASSES; pass++) {
                    s.truncate(0);
                    s.prefill(prompt, false);
                    for (int i = 0; i < READY_STEPS; i++) {
                        s.decode(prompt[i % prompt.length]);
                    }
                    if (progress != null) {
                        progress.accept((pass + 1.0) / READY_PASSES);
                    }
                }
            }
        }
    }

    /** The vocabulary of {@link #readyKernels}'s one-layer model. */
    static final int READY_VOCABULARY = 512;
    /** The decode steps {@link #readyKernels} runs after each prompt. */
    static final int READY_STEPS = 16;
    /**
     * How often {@link #readyKernels} runs prompt and steps: after one, C2 had not yet compiled the kernels, and the
     * default bench's peak stayed where it was (787.0 and 786.0 MiB).
     */
    static final int READY_PASSES = 3;

    /**
     * Generates synthetic content with formats from {@code registry} (used by {@code synth} to write a file).
     *
     * @param registry where the formats come from
     * @param shape    the geometry
     * @param formatId weight format id
     * @param seed     random seed
     * @param progress fraction done, or {@code null}
     * @return the content; close it to free its memory
     */
    public static SyntheticLlama generateSynthetic(PluginRegistry registry, SyntheticLlama.Shape shape, String formatId,
                                                   long seed, DoubleConsumer progress) {
        return SyntheticLlama.generate(shape, quantizer(registry, formatId), quantizer(registry, "f32"), seed,
                progress);
    }

    private static Quantizer quantizer(PluginRegistry registry, String formatId) {
        return registry.quantizer(formatId).orElseThrow(() -> formatId.equals("f32")
                ? new PrefillException(PrefillException.Code.PLUGIN,
                        "the built-in f32 format is missing; is module dev.prefill4j.engine intact?")
                : new PrefillException(PrefillException.Code.ARGUMENT, "no weight format '" + formatId + "'; found "
                        + registry.quantizers().keySet() + " (run 'prefill4j plugins')"));
    }

    /**
     * Opens a session with an empty KV cache. The first session of a model whose output matrix is in a format this
     * engine has not met yet also readies its one-row products on the device ({@link ComputeDevice#warmUp}): on the
     * CPU that compiles them, a second or two that the first output projection would otherwise spend; likewise the
     * embedding lookup's row decoding.
     *
     * @param model   the model
     * @param options KV type, context and chunk sizes
     * @return the session; close it to free the KV cache
     */
    public Session newSession(LlamaModel model, SessionOptions options) {
        requireOpen();
        if (model.isClosed()) {
            throw new IllegalStateException(model.source() + " is closed; load it again");
        }
        LlamaConfig c = model.config();
        int capacity = options.contextLength() == 0 ? c.contextLength() : options.contextLength();
        if (!kvStore.elementTypes().contains(options.kvType())) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "KV store '" + kvStore.id() + "' does not hold "
                    + options.kvType() + " elements; it holds " + kvStore.elementTypes());
        }
        int pageSize = options.pageSize() > 0 ? options.pageSize()
                : kvStore.preferredPageSize(options.kvType(), c.kvDim());
        KVConfig kv = new KVConfig(c.layers(), c.kvDim(), capacity, options.kvType(), Math.min(pageSize, capacity),
                options.kvOptions());
        Map<Quantizer, Quantizer> activationFormats = activationFormats(model, options.activations());
        int chunk = chunkSize(model, options, activationFormats);
        warmUp(model, activationFormats);
        return new Session(model, device, kernel, kvStore.open(kv), capacity, chunk, activationFormats, workspaces);
    }

    /**
     * {@return the prefill chunk a session of {@code model} opened with {@code options} runs} The options' chunk, or,
     * where they leave it to the engine ({@link SessionOptions#ENGINE_CHUNK}), {@link SessionOptions#LARGE_CHUNK} when
     * its activation buffers fit the memory allowance and {@link SessionOptions#DEFAULT_CHUNK} otherwise (see {@link
     * #MEMORY_ALLOWANCE}); never more than the session's context.
     *
     * @param model   the model
     * @param options the session's options
     */
    public int chunkSize(LlamaModel model, SessionOptions options) {
        return chunkSize(model, options, activationFormats(model, options.activations()));
    }

    private static int chunkSize(LlamaModel model, SessionOptions options, Map<Quantizer, Quantizer> formats) {
        LlamaConfig c = model.config();
        int capacity = options.contextLength() == 0 ? c.contextLength() : options.contextLength();
        int chunk = options.chunkSize() != SessionOptions.ENGINE_CHUNK ? options.chunkSize()
                : defaultChunk(c, model.weightBytes(), formats);
        return Math.min(chunk, capacity);
    }

    /**
     * The memory the engine allows itself beside the weights it maps: 15% of their bytes, as much as {@code bench}
     * checks its peak resident memory against (model + KV cache + 15%).
     */
    static final double MEMORY_ALLOWANCE = 0.15;

    /**
     * What the runtime itself keeps resident beside the weights, the KV cache and the activation buffers: the JVM's
     * files, heap, code cache, metaspace and compiler arenas. Measured on the 1B Q4_0 file ({@code bench -m
     * 1b-q4_0.gguf -p 512 -n 16 -r 1}, chunk 256, Zen 5 VM, 2026-12-03): peaks of 855.3-858.1 MiB against the model's
     * 730.3 MiB, 16 MiB of KV cache and 13 MiB of activations, 96-99 MiB over them; rounded up.
     */
    static final long RUNTIME_BYTES = 100L << 20;

    /**
     * {@return the chunk for options that leave it to the engine} A larger chunk decodes every weight fewer times per
     * prompt (a 512-token prompt once instead of twice: F16 pp512 at 70.3-75.6% of the FMA peak against 63.3-64.6% in
     * alternating runs), at the price of proportionally larger activation buffers (13 MiB more for the 1B geometry).
     * The buffers are counted with the FFN's whole hidden width (13 MiB at 256 tokens for the 1B geometry), as a device
     * that does not run the FFN in blocks ({@link dev.prefill4j.api.spi.ComputeDevice#feedForward}) needs them: the
     * CPU device's blocks (9 MiB) leave the choice on the safe side.
     * {@link SessionOptions#LARGE_CHUNK} is taken where the runtime's own memory and that chunk's buffers fit in the
     * {@linkplain #MEMORY_ALLOWANCE allowance} over the weights; for the 1B geometry that is from about 840 MiB of
     * weights on (its Q8_0 and F16 files, not its Q4_0 and Q4_K_M ones, which stay at {@link
     * SessionOptions#DEFAULT_CHUNK}).
     *
     * @param c                 the model's geometry
     * @param weightBytes       the bytes of the model's weights
     * @param activationFormats weight format -> activation format of the session (sizes its buffers)
     */
    static int defaultChunk(LlamaConfig c, long weightBytes, Map<Quantizer, Quantizer> activationFormats) {
        long large = Workspace.Shape.of(c, SessionOptions.LARGE_CHUNK, activationFormats).bytes();
        return RUNTIME_BYTES + large <= MEMORY_ALLOWANCE * weightBytes ? SessionOptions.LARGE_CHUNK
                : SessionOptions.DEFAULT_CHUNK;
    }

    /**
     * Readies the decode products ({@link ComputeDevice#warmUp}) before the session's first prefill: the output
     * matrix's and the first layer matrix of each format and row length, where the format takes float activations in
     * this session (otherwise they go through {@link ComputeDevice#matmulEncoded}) and the device has not readied that
     * pair yet. The output projection is the first one-row product a session runs (the prefill's last position), when
     * the whole model has just become resident, and the layers' products first run in decode steps, after it: a
     * kernel C2 compiled then had its arena on top of the resident model. With the output's alone, the two-row Q4_K
     * and Q6_K kernels of the down projection (8,192-element rows) took {@code bench -m 1b-q4_k_m.gguf -p 512 -n 16 -r
     * 2} to a peak of 930.8 and 933.8 MiB (aim 898.7); with the layers' too, 879.3 and 879.3. The Q4_0 file: 851.8
     * and 847.1 against 846.9 and 846.9 (aim 858.3); Q8_0 1,384.8 against 1,374.8 (aim 1,461.7); separate runs,
     * alternating (Zen 5 VM, 2026-12-04).
     *
     * <p>Also, once per format, the embedding's {@code decode} of one row, the first thing every step runs: where no
     * layer shares the embedding's format (Q6_K beside Q4_0 or TQ2_0 layers) nothing else runs that method, and a few
     * hundred calls a run left it in the interpreter and C1 with the Vector API's objects allocated: {@code bench -m
     * 1b-tq2_0.gguf -p 16 -n 64 -r 2 --profile} put the lookup at 0.22-0.33 ms a token (1% of a decode step; Q4_0
     * file 0.25), against 0.005 once readied (as in the Q8_0 and Q4_K_M files, whose prefill runs it). The whole of
     * {@code bench -m 1b-tq2_0.gguf -p 16 -n 1 -r 1} took 7.51 and 7.91 s with the {@value #WARM_UP_EMBEDDING_DECODES}
     * rows, 7.31 and 7.84 without.
     */
    private void warmUp(LlamaModel model, Map<Quantizer, Quantizer> activationFormats) {
        List<WeightMatrix> ready = new ArrayList<>();
        offerWarmUp(model.output(), activationFormats, ready);
        for (int l = 0; l < model.config().layers(); l++) {
            LlamaModel.Layer layer = model.layer(l);
            for (WeightMatrix w : List.of(layer.wq(), layer.wk(), layer.wv(), layer.wo(), layer.gate(), layer.up(),
                    layer.down())) {
                offerWarmUp(w, activationFormats, ready);
            }
        }
        if (!ready.isEmpty()) {
            device.warmUp(ready);
        }
        warmUpEncoded(model, activationFormats);
        WeightMatrix embedding = device.resident(model.embedding());
        if (decodeWarmedUp.add(embedding.format())) {
            float[] row = new float[embedding.cols()];
            int rows = Math.min(WARM_UP_EMBEDDING_ROWS, embedding.rows());
            for (int i = 0; i < WARM_UP_EMBEDDING_DECODES; i++) {
                embedding.format().decode(embedding.data(), embedding.rowBytes() * (i % rows), row, 0, row.length);
            }
        }
    }

    /**
     * Readies the decode steps' products with activations still encoded ({@link ComputeDevice#matmulEncoded}) for
     * each new weight format, activation format and row length of the layers: {@value #WARM_UP_ENCODED_CALLS} one-row
     * products over the matrix's first {@value #WARM_UP_ENCODED_ROWS} rows, short calls, so that C2 compiles the
     * kernel whole, before the model is resident. Left to the first decode steps, TQ2_0's integer kernel was first
     * compiled on-stack-replacement into its running block loop (the calls there are long), with an arena of 168 MB
     * ({@code -XX:CompileCommand=MemStat}) against 23 MB for the whole method, on top of the resident model: {@code
     * bench -m 1b-tq2_0.gguf -p 512 -n 16 -r 1 --verify-tokens 0 --activations per-token} peaked at 721.8 MiB against
     * 560.4 in {@code f32} mode, and its first steps ran in C1's code (the Vector API not intrinsified there) for
     * about 3 s. Where a prompt's rows reach the format encoded ({@code --activations quantized} before K-quant and
     * ternary weights), as many two-row products ready its tile form too: TQ2_0's two-row kernel, first compiled
     * into a running loop of the first prompt, took an arena of 411 MB against 34 MB and {@code bench -m
     * 1b-tq2_0.gguf -p 512 -n 16 -r 2 --activations quantized} to peaks of 606-795 MiB, against 588-593 readied
     * (2026-12-05).
     */
    private void warmUpEncoded(LlamaModel model, Map<Quantizer, Quantizer> activationFormats) {
        for (int l = 0; l < model.config().layers(); l++) {
            LlamaModel.Layer layer = model.layer(l);
            for (WeightMatrix w : List.of(layer.wq(), layer.wk(), layer.wv(), layer.wo(), layer.gate(), layer.up(),
                    layer.down())) {
                Quantizer act = activationFormats.get(w.format());
                if (act == null || !w.format().hasEncodedDot()
                        || !warmedUp.add(w.format().id() + "/" + act.id() + "/" + w.cols())) {
                    continue;
                }
                int rows = Math.min(WARM_UP_ENCODED_ROWS, w.rows());
                var head = new WeightMatrix(w.name(), w.format(),
                        device.resident(w).data().asSlice(0, w.rowBytes() * rows), rows, w.cols());
                float[] x = new float[w.cols()];
                java.util.SplittableRandom random = new java.util.SplittableRandom(rows);
                for (int i = 0; i < x.length; i++) {
                    x[i] = (float) (random.nextDouble() * 2 - 1);
                }
                long rowBytes = act.byteSize(w.cols());
                // A heap segment over an array, as sessions hand encoded activations over (Blocks.heapBytes).
                java.lang.foreign.MemorySegment encoded = java.lang.foreign.MemorySegment.ofArray(
                        new byte[Math.toIntExact(2 * rowBytes)]);
                act.encode(x, 0, w.cols(), encoded, 0);
                act.encode(x, 0, w.cols(), encoded, rowBytes);
                float[] out = new float[2 * rows];
                // Prompts whose rows reach this format encoded take its tile form (two activation rows a step for
                // TQ2_0, Q4_K and Q6_K), readied the same way.
                int tileRows = Session.decodesPrompts(w.format(), act) ? 0 : 2;
                for (int i = 0; i < WARM_UP_ENCODED_CALLS; i++) {
                    device.matmulEncoded(head, encoded, rowBytes, 1, out);
                    if (tileRows > 0) {
                        device.matmulEncoded(head, encoded, rowBytes, tileRows, out);
                    }
                }
            }
        }
    }

    /** One-row encoded products {@link #warmUpEncoded} runs per format and row length. */
    private static final int WARM_UP_ENCODED_CALLS = 256;
    /** Weight rows {@link #warmUpEncoded} reads of a matrix: a few pages. */
    private static final int WARM_UP_ENCODED_ROWS = 64;

    /** Adds {@code w} to {@code ready} if its format takes float activations and its format and row length are new. */
    private void offerWarmUp(WeightMatrix w, Map<Quantizer, Quantizer> activationFormats, List<WeightMatrix> ready) {
        if (!activationFormats.containsKey(w.format()) && warmedUp.add(w.format().id() + "/" + w.cols())) {
            ready.add(w);
        }
    }

    /**
     * {@return each weight format of {@code model} mapped to the format its inputs are rounded to in {@code mode}}:
     * empty for {@code F32}; formats whose activation format is {@code f32} are left out.
     *
     * @param model the model
     * @param mode  the activation mode
     * @throws PrefillException ({@code P4J-MISSING-FORMAT}) if an activation format is not provided by any module;
     *                          ({@code P4J-ARG}) for {@code PER_TOKEN} on a model none of whose weights takes it
     */
    public java.util.Map<Quantizer, Quantizer> activationFormats(LlamaModel model, SessionOptions.Activations mode) {
        java.util.Map<Quantizer, Quantizer> map = new java.util.HashMap<>();
        if (mode == SessionOptions.Activations.F32) {
            return map;
        }
        for (Quantizer w : model.weightFormats()) {
            String id = mode == SessionOptions.Activations.PER_TOKEN ? w.tokenActivationFormat() : w.activationFormat();
            if (id.equals("f32")) {
                continue;
            }
            map.put(w, registry.quantizer(id).orElseThrow(() -> GgmlType.byName(id)
                    .map(t -> PluginRegistry.missingFormat(t, "quantized activations for " + w.id() + " weights need "
                            + "format '" + id + "', which"))
                    .orElseGet(() -> new PrefillException(PrefillException.Code.MISSING_FORMAT, "quantized activations for "
                            + w.id() + " weights use format '" + id + "', which no module on the path provides"))));
        }
        if (mode == SessionOptions.Activations.PER_TOKEN && map.isEmpty()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "per-token activations apply to weights made for "
                    + "them (ternary: tq1_0, tq2_0), and this model's weights are " + model.weightFormats().stream()
                    .map(Quantizer::id).sorted().distinct().toList() + "; use --activations f32 or quantized");
        }
        return map;
    }

    /** Closes the device and drops the activation buffers kept for the next session. */
    @Override
    public void close() {
        closed = true;
        workspaces.clear();
        device.close();
    }

    /** Its device is closed: nothing may be loaded or run on it. */
    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("the engine is closed; build another with Engine.builder()");
        }
    }

    /** Configures an {@link Engine}. @since 0.1 */
    @Api.Stable
    public static final class Builder {
        private PluginRegistry registry;
        private String backend;
        private String attention;
        private String kvStore;
        private int threads = Runtime.getRuntime().availableProcessors();

        private Builder() {
        }

        /** {@return this} @param registry use this registry instead of discovering one */
        public Builder registry(PluginRegistry registry) {
            this.registry = registry;
            return this;
        }

        /** {@return this} @param id backend id, or {@code null} for automatic */
        public Builder backend(String id) {
            this.backend = id;
            return this;
        }

        /** {@return this} @param id attention id, or {@code null} for automatic */
        public Builder attention(String id) {
            this.attention = id;
            return this;
        }

        /** {@return this} @param id KV store id, or {@code null} for automatic */
        public Builder kvStore(String id) {
            this.kvStore = id;
            return this;
        }

        /** {@return this} @param n worker threads (default: available processors) */
        public Builder threads(int n) {
            if (n < 1) {
                throw new PrefillException(PrefillException.Code.ARGUMENT, "threads must be at least 1, got " + n);
            }
            this.threads = n;
            return this;
        }

        /** {@return the engine} @throws PrefillException if no usable backend, kernel or store is found */
        public Engine build() {
            return new Engine(this);
        }
    }
}
