package dev.prefill4j.cli;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.quantize.ModelQuantizer;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code prefill4j quantize}: llama-quantize's type choice and reference encoders, byte-compatible output. */
@Command(name = "quantize", mixinStandardHelpOptions = true,
        description = {"Quantize a GGUF model the way llama-quantize does (no importance matrix): the same per-tensor "
                + "type choice and byte-identical tensor data, in a file llama.cpp loads.",
                "Types: q4_0, q5_0, q8_0, q4_k_m, q4_k_s, q6_k, tq1_0, tq2_0 (ternary, with the quant-bitnet "
                + "module), f16, bf16, f32, or any ggml type a format module provides (e.g. q4_1 from "
                + "examples/custom-format)."})
final class QuantizeCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "IN", description = "Input GGUF.")
    Path input;

    @Parameters(index = "1", paramLabel = "OUT", description = "Output GGUF.")
    Path output;

    @Option(names = "--type", required = true, paramLabel = "TYPE", description = "Target file type.")
    String type;

    @Option(names = "--pure", description = "No mixtures: every 2-D weight in the base type (shape fallbacks still apply).")
    boolean pure;

    @Option(names = "--ternary", paramLabel = "METHOD", defaultValue = "absmax",
            description = "For tq1_0/tq2_0: absmax (llama.cpp: per-256-block scale max|x|) or absmean (BitNet b1.58 "
                    + "paper: per-tensor scale mean|W|, for models trained for ternary weights) (default: ${DEFAULT-VALUE}).")
    String ternary;

    @Option(names = "--allow-requantize", description = "Quantize tensors that are already quantized again, as "
            + "llama-quantize's flag of that name allows (refused by default: the two roundings add up).")
    boolean allowRequantize;

    @Option(names = "--verbose", description = "Print stack traces.")
    boolean verbose;

    @Override
    public Integer call() throws Exception {
        ModelQuantizer.FileType ft = ModelQuantizer.FileType.parse(type);
        if (!ternary.equals("absmax") && !ternary.equals("absmean")) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--ternary must be absmax or absmean, got '"
                    + ternary + "'");
        }
        if (ternary.equals("absmean") && !type.toLowerCase(Locale.ROOT).startsWith("tq")) { // it had been ignored
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--ternary absmean applies to --type tq1_0 "
                    + "or tq2_0, not " + type);
        }
        PluginRegistry registry = PluginRegistry.load();
        Progress progress = new Progress("quantizing to " + ft.name());
        List<ModelQuantizer.Choice> plan;
        long inputBytes;
        try (GgufFile in = GgufFile.open(input)) {
            inputBytes = Files.size(input);
            plan = ModelQuantizer.quantize(in, ft, pure, ternary.equals("absmean"), allowRequantize, registry, output,
                    progress);
        }
        progress.done();
        Map<String, Integer> counts = new TreeMap<>();
        plan.forEach(c -> counts.merge(c.target().name(), 1, Integer::sum));
        System.err.printf("wrote %s (%s%s): %d tensors %s, %.2f MiB -> %.2f MiB%n", output, ft.name(),
                pure ? ", pure" : "", plan.size(), counts, inputBytes / 1048576.0, Files.size(output) / 1048576.0);
        return 0;
    }
}
