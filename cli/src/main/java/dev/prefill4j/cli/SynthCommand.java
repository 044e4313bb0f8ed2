package dev.prefill4j.cli;

import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufWriter;
import dev.prefill4j.engine.io.OutputFiles;
import dev.prefill4j.engine.model.SyntheticLlama;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code prefill4j synth}: write a deterministic random-weight Llama GGUF. */
@Command(name = "synth", mixinStandardHelpOptions = true,
        description = {"Write a deterministic random-weight Llama GGUF with a valid SentencePiece-style vocabulary.",
                "Shapes: tiny (dim 256, 4 layers, 8 heads, 4 KV heads, ffn 768, vocab 512); llama-1b (Llama-3.2-1B "
                + "geometry: dim 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab 128256, rope theta 500000, "
                + "tied embeddings)."})
final class SynthCommand implements Callable<Integer> {
    @Option(names = "--shape", required = true, paramLabel = "SHAPE", description = "tiny or llama-1b.")
    String shape;

    @Option(names = "--type", defaultValue = "f32", paramLabel = "TYPE",
            description = "Weight format: f32 or f16 (or any format id from 'plugins') (default: ${DEFAULT-VALUE}).")
    String type;

    @Option(names = {"-o", "--output"}, required = true, paramLabel = "FILE", description = "Output GGUF file.")
    Path output;

    @Option(names = "--seed", defaultValue = "1", paramLabel = "S", description = "Random seed (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--verbose", description = "Print stack traces.")
    boolean verbose;

    @Override
    public Integer call() {
        SyntheticLlama.Shape s = SyntheticLlama.Shape.parse(shape);
        OutputFiles.requireWritableFile(output, "the synthetic model"); // before generating it (2.5 GB for llama-1b)
        Progress progress = new Progress("generating " + s.cliName() + " " + type);
        try (SyntheticLlama model = Engine.generateSynthetic(PluginRegistry.load(), s, type, seed, progress)) {
            progress.done();
            GgufWriter w = new GgufWriter().putAll(model);
            for (GgufTensor t : model.tensors()) {
                w.tensor(t.name(), t.ne(), t.type(), dst -> MemorySegment.copy(t.data(), 0, dst, 0, dst.byteSize()));
            }
            Progress writing = new Progress("writing " + output);
            w.write(output, writing);
            writing.done();
            System.err.printf("wrote %s: synthetic %s, %s, seed %d, %d tensors%n", output, s.cliName(), type, seed,
                    model.tensors().size());
        }
        return 0;
    }
}
