package dev.prefill4j.cli;

import dev.prefill4j.engine.Engine;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/** Options shared by the commands that run a model: where it comes from and what runs it. */
final class EngineOptions {
    @Option(names = {"-m", "--model"}, paramLabel = "FILE",
            description = "GGUF model, or a llama2.c .bin checkpoint (with --tokenizer). "
                    + "Without it, a synthetic model is generated (see --synthetic).")
    Path model;

    @Option(names = "--tokenizer", paramLabel = "FILE", description = "llama2.c tokenizer.bin for a .bin checkpoint.")
    Path tokenizer;

    @Option(names = "--synthetic", paramLabel = "SHAPE",
            description = "Synthetic model shape when no -m is given: tiny or llama-1b (default: ${DEFAULT-VALUE}).",
            defaultValue = "tiny")
    String synthetic;

    @Option(names = "--type", paramLabel = "TYPE",
            description = "Weight format of the synthetic model: f32, f16, bf16, q8_0, ... (default: ${DEFAULT-VALUE}).",
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

    @Option(names = "--verbose", description = "Print stack traces and the plugin registry's log.")
    boolean verbose;

    Engine openEngine() {
        Engine.Builder b = Engine.builder().backend(backend).kvStore(kv);
        if (threads != null) {
            b.threads(threads);
        }
        return b.build();
    }

    LlamaModel loadModel(Engine engine) {
        if (model != null) {
            return engine.load(model, tokenizer);
        }
        if (tokenizer != null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--tokenizer needs -m with a llama2.c checkpoint");
        }
        SyntheticLlama.Shape shape = SyntheticLlama.Shape.parse(synthetic);
        Progress progress = new Progress("generating synthetic " + shape.cliName() + " " + type);
        LlamaModel m = engine.synthetic(shape, type, modelSeed, progress);
        progress.done();
        return m;
    }
}
