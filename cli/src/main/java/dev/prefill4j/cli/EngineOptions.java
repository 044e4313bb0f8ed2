package dev.prefill4j.cli;

import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.SessionOptions;
import java.util.Locale;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import java.nio.file.Path;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParseResult;
import picocli.CommandLine.Spec;

/** Options shared by the commands that run a model: where it comes from and what runs it. */
final class EngineOptions {
    @Option(names = {"-m", "--model"}, paramLabel = "FILE",
            description = "GGUF model, or a llama2.c .bin checkpoint (with --tokenizer). "
                    + "Without it, a synthetic model is generated (see --synthetic).")
    Path model;

    @Option(names = "--tokenizer", paramLabel = "FILE", description = "llama2.c tokenizer.bin for a .bin checkpoint.")
    Path tokenizer;

    @Option(names = "--synthetic", paramLabel = "SHAPE",
            description = "Synthetic model shape when no -m is given: tiny or llama-1b (default: ${DEFAULT-VALUE}; "
                    + "bench: llama-1b).",
            defaultValue = "tiny")
    String synthetic;

    @Option(names = "--type", paramLabel = "TYPE",
            description = "Weight format of the synthetic model: f32, f16, bf16, q8_0, ... (default: ${DEFAULT-VALUE}; "
                    + "bench: q4_0).",
            defaultValue = "f32")
    String type;

    @Option(names = "--seed-model", paramLabel = "S", defaultValue = "1",
            description = "Seed of the synthetic model's weights (default: ${DEFAULT-VALUE}).")
    long modelSeed;

    @Option(names = {"-t", "--threads"}, paramLabel = "N", description = "Worker threads (default: all cores).")
    Integer threads;

    @Option(names = "--backend", paramLabel = "ID", description = "Backend id (default: best available; see 'plugins').")
    String backend;

    @Option(names = "--kv", paramLabel = "ID", description = "KV store id (default: memory).")
    String kv;

    @Option(names = "--kv-dir", paramLabel = "DIR",
            description = "Directory for the ssd KV store's file (with --kv ssd); it must support direct I/O.")
    java.nio.file.Path kvDir;

    @Option(names = "--kv-keep", paramLabel = "NAME",
            description = "Keep the ssd KV cache after the run as NAME.p4kv (+ NAME.p4kv.meta) in --kv-dir, with the "
                    + "session's tokens, so that --kv-resume NAME continues it later.")
    String kvKeep;

    @Option(names = "--kv-resume", paramLabel = "NAME",
            description = "Reopen the ssd KV cache kept as NAME in --kv-dir and continue where it stopped (output "
                    + "identical to an uninterrupted run; no prompt; the kept sampler unless --seed is given); it stays "
                    + "kept, updated. A cache whose process did not close it cleanly is refused.")
    String kvResume;

    @Option(names = "--kv-ring", paramLabel = "MiB", defaultValue = "128",
            description = "MiB of the ssd store's read-ahead ring for K slots, and as much again for V slots (they sit "
                    + "side by side, as in the file) (default: ${DEFAULT-VALUE}).")
    int kvRingMiB;

    @Option(names = "--kv-page", paramLabel = "N", defaultValue = "0",
            description = "KV page size in positions; 0 lets the KV store choose (memory: 256; ssd: what fills a "
                    + "256 KiB slot) (default: ${DEFAULT-VALUE}).")
    int kvPage;

    @Option(names = "--kv-type", paramLabel = "TYPE", defaultValue = "f16",
            description = "KV cache element type: f32, f16 or q8_0 (default: ${DEFAULT-VALUE}).")
    String kvType;

    @Option(names = "--activations", paramLabel = "MODE", defaultValue = "f32",
            description = "f32; quantized: round each projection's input to its weight format's activation "
                    + "format (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_K for K-quants and ternary, F16 for F16) as llama.cpp does; "
                    + "per-token: BitNet b1.58's int8 activations, one absmax scale per token, before ternary weights "
                    + "(default: ${DEFAULT-VALUE}).")
    String activations;

    @Option(names = "--chunk", paramLabel = "N",
            description = "Prefill chunk in tokens: prompts run N tokens at a time, and activation memory is sized for "
                    + "at most N (for Llama-3.2-1B's geometry at 256: 9 MiB with float activations on a CPU with "
                    + "AVX-512, else 13; twice as much at 512) (default: " + SessionOptions.LARGE_CHUNK
                    + " where the runtime's memory and those buffers fit in 15%% of the weights' bytes, else "
                    + SessionOptions.DEFAULT_CHUNK + ").")
    Integer chunk;

    @Option(names = "--verbose", description = "Print stack traces and the plugin registry's log.")
    boolean verbose;

    /** The command these options are mixed into, for what its command line gave explicitly. */
    @Spec(Spec.Target.MIXEE)
    CommandSpec command;

    /**
     * Refuses options that others make meaningless, before any work: they had been ignored without a word, so that
     * {@code -m F --type f16} ran F's own format and {@code --kv-dir D} without {@code --kv ssd} kept the cache in RAM.
     */
    void checkCombinations() {
        ParseResult given = command.commandLine().getParseResult();
        if (model != null) {
            for (String option : new String[] {"--synthetic", "--type", "--seed-model"}) {
                if (given.hasMatchedOption(option)) {
                    throw new PrefillException(PrefillException.Code.ARGUMENT, option + " describes a synthetic model;"
                            + " with -m the file is the model: drop " + option);
                }
            }
        }
        boolean memory = kv == null || kv.equals("memory");
        for (String option : new String[] {"--kv-dir", "--kv-ring"}) {
            if (memory && given.hasMatchedOption(option)) {
                throw new PrefillException(PrefillException.Code.ARGUMENT, option + " is an option of the ssd KV "
                        + "store, and the cache is in memory: add --kv ssd");
            }
        }
    }

    KVElementType kvElementType() {
        try {
            return KVElementType.valueOf(kvType.toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "unknown --kv-type '" + kvType + "'; use f32, f16 or q8_0");
        }
    }

    /** {@return session options from --kv-type and --activations, with the given context length} @param ctx 0 = model's */
    SessionOptions sessionOptions(int ctx) {
        SessionOptions.Activations mode = switch (activations.toLowerCase(Locale.ROOT)) {
            case "f32" -> SessionOptions.Activations.F32;
            case "quantized" -> SessionOptions.Activations.QUANTIZED;
            case "per-token" -> SessionOptions.Activations.PER_TOKEN;
            default -> throw new PrefillException(PrefillException.Code.ARGUMENT,
                    "unknown --activations '" + activations + "'; use f32, quantized or per-token");
        };
        if (ctx < 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "-c must be 0 (the model's context) or more, got "
                    + ctx);
        }
        if (kvPage < 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--kv-page must be 0 (the store's choice) or more");
        }
        if (kvKeep != null && kvResume != null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "use --kv-keep NAME to start a kept cache or "
                    + "--kv-resume NAME to continue one, not both");
        }
        if (chunk != null && chunk < 1) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--chunk must be 1 or more tokens");
        }
        java.util.Map<String, String> kv = new java.util.HashMap<>();
        if (kvDir != null) {
            kv.put("dir", kvDir.toString());
        }
        if (kvKeep != null || kvResume != null) {
            kv.put("keep", kvKeep != null ? kvKeep : kvResume);
            kv.put("resume", Boolean.toString(kvResume != null));
        }
        kv.put("ringMiB", Integer.toString(kvRingMiB));
        SessionOptions options = SessionOptions.defaults().withKvType(kvElementType()).withContextLength(ctx)
                .withActivations(mode).withPageSize(kvPage).withKvOptions(kv);
        return chunk != null ? options.withChunkSize(chunk) : options;
    }

    /** {@return whether the run continues a kept cache (--kv-resume)} */
    boolean resuming() {
        return kvResume != null;
    }

    /** Refuses --kv-keep/--kv-resume with a store that does not keep caches. @param e the engine @param s the session */
    void checkKeeping(Engine e, dev.prefill4j.engine.Session s) {
        if ((kvKeep != null || kvResume != null) && !s.cache().persistent()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "KV store '" + e.kvStore().id() + "' does not "
                    + "keep caches: use --kv ssd --kv-dir DIR with --kv-keep/--kv-resume");
        }
    }

    Engine openEngine() {
        Engine.Builder b = Engine.builder().backend(backend).kvStore(kv);
        if (threads != null) {
            b.threads(threads);
            int cores = Runtime.getRuntime().availableProcessors();
            if (threads > cores) { // allowed, but the workers then take turns on the cores and wait on each other
                System.err.printf("prefill4j: note: -t %d is more than the %d cores this process may use; threads "
                        + "beyond them slow every step down (leave -t out to use all %d)%n", threads, cores, cores);
            }
        }
        return b.build();
    }

    LlamaModel loadModel(Engine engine) {
        return loadModel(engine, 0);
    }

    /**
     * {@return the model of {@code -m}, or the synthetic one generated} With {@code readyPrompt} of 1 or more, a
     * synthetic model's kernels are readied first on one layer of its shape ({@link Engine#readyKernels}), so that
     * C2's compilations come before the whole model is resident: bench does this, for its peak resident size.
     *
     * @param engine      the engine
     * @param readyPrompt the longest prompt to come, to ready the kernels with; 0 not to ready them
     */
    LlamaModel loadModel(Engine engine, int readyPrompt) {
        if (model != null) {
            return engine.load(model, tokenizer);
        }
        if (tokenizer != null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--tokenizer needs -m with a llama2.c checkpoint");
        }
        SyntheticLlama.Shape shape = SyntheticLlama.Shape.parse(synthetic);
        if (readyPrompt > 0) {
            Progress ready = new Progress("readying kernels on one layer of " + shape.cliName() + " " + type);
            engine.readyKernels(shape, type, sessionOptions(0), readyPrompt, ready);
            ready.done();
        }
        Progress progress = new Progress("generating synthetic " + shape.cliName() + " " + type);
        LlamaModel m = engine.synthetic(shape, type, modelSeed, progress);
        progress.done();
        return m;
    }
}
