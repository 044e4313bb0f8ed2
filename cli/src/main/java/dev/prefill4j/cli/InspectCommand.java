package dev.prefill4j.cli;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.engine.gguf.GgufArray;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.gguf.CloseableContent;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.model.LlamaConfig;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.reflect.Array;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code prefill4j inspect}: whether this engine runs a model file (what it runs, or why not), its metadata and tensors,
 * and which module decodes each tensor.
 */
@Command(name = "inspect", mixinStandardHelpOptions = true,
        description = "Show whether this engine runs a model file (and what it runs, or why not), its metadata and, "
                + "per tensor, its name, shape, type and the module that decodes it (or the module to add).")
final class InspectCommand implements Callable<Integer> {
    @Parameters(paramLabel = "MODEL", arity = "0..1",
            description = "GGUF file, or llama2.c .bin (with --tokenizer); or give it with -m.")
    Path modelArgument;

    @Option(names = {"-m", "--model"}, paramLabel = "FILE",
            description = "The model file, as run and bench take it (instead of MODEL).")
    Path modelOption;

    @Option(names = "--tokenizer", paramLabel = "FILE", description = "llama2.c tokenizer.bin.")
    Path tokenizer;

    @Option(names = "--json", description = "Print JSON.")
    boolean json;

    @Option(names = "--verbose", description = "Print stack traces.")
    boolean verbose;

    @Override
    public Integer call() {
        PluginRegistry registry = PluginRegistry.load();
        try (CloseableContent content = Engine.openContent(model(), tokenizer)) {
            Map<String, Object> md = new LinkedHashMap<>();
            content.metadata().forEach((k, v) -> md.put(k, summary(v)));
            List<Map<String, Object>> tensors = new ArrayList<>();
            for (GgufTensor t : content.tensors()) {
                Optional<Quantizer> q = registry.forGgufType(t.type());
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("name", t.name());
                row.put("shape", t.ne());
                row.put("type", t.type().name());
                row.put("bytes", t.data().byteSize());
                row.put("decoder", q.map(x -> x.id() + " (" + x.getClass().getModule().getName() + ")")
                        .orElseGet(() -> "MISSING: " + PluginRegistry.missingFormat(t.type(), "it").getMessage()));
                tensors.add(row);
            }
            Map<String, Object> runs = verdict(content, registry);
            if (json) {
                Map<String, Object> doc = new LinkedHashMap<>();
                doc.put("file", content.source());
                doc.put("runs", runs);
                doc.put("metadata", md);
                doc.put("tensors", tensors);
                System.out.print(Json.write(doc));
                return 0;
            }
            System.out.println("file: " + content.source());
            System.out.println(Boolean.TRUE.equals(runs.get("ok")) ? "runs: yes: " + runs.get("model")
                    : "runs: no: " + Printable.of((String) runs.get("problem")));
            System.out.println("metadata (" + md.size() + " keys):");
            // Keys, values and names are the file's text: escaped (a hostile file's terminal escape sequences would
            // otherwise reach the terminal, and a chat template's lines broke the list) and long values shortened.
            md.forEach((k, v) -> System.out.println("  " + Printable.of(k) + " = " + shortened((String) v)));
            System.out.println("tensors (" + tensors.size() + "):");
            System.out.printf("  %-32s %-20s %-6s %12s  %s%n", "name", "shape", "type", "bytes", "decoded by");
            for (Map<String, Object> r : tensors) {
                System.out.printf("  %-32s %-20s %-6s %12d  %s%n", Printable.of((String) r.get("name")),
                        java.util.Arrays.toString((long[]) r.get("shape")), r.get("type"), (Long) r.get("bytes"),
                        r.get("decoder"));
            }
        }
        return 0;
    }

    /**
     * Binds the weights as {@code run} would (nothing is read but the norms), to say whether this engine runs the
     * file and what it runs, or why not: a vocabulary or RoPE scaling it does not know, a tensor it would leave out, a
     * format no module provides.
     */
    private static Map<String, Object> verdict(CloseableContent content, PluginRegistry registry) {
        Map<String, Object> v = new LinkedHashMap<>();
        try (LlamaModel m = LlamaModel.bind(content, false, registry, null)) {
            LlamaConfig c = m.config();
            v.put("ok", true);
            v.put("model", String.format(Locale.ROOT, "llama, %d layers, width %d, %d heads of %d (%d for K and V), "
                    + "FFN %d, trained context %d; %s; RoPE base %s%s", c.layers(), c.dim(), c.heads(), c.headDim(),
                    c.kvHeads(), c.ffnDim(), c.contextLength(), m.tokenizer().description(), c.ropeBase(),
                    m.ropeDivisors() != null ? " with per-pair frequency divisors" : ""));
        } catch (PrefillException e) {
            v.put("ok", false);
            v.put("problem", e.getMessage());
        }
        return v;
    }

    /** The model file, from MODEL or -m (one of them, not both). */
    private Path model() {
        if (modelArgument != null && modelOption != null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT,
                    "the model is given twice (MODEL and -m); give it once");
        }
        if (modelArgument == null && modelOption == null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT,
                    "no model given; use 'prefill4j inspect MODEL' or 'prefill4j inspect -m MODEL'");
        }
        return modelArgument != null ? modelArgument : modelOption;
    }

    /** Scalars as they are; arrays as {@code TYPE[n]} plus their first elements. */
    static String summary(GgufValue v) {
        if (v.value() instanceof GgufArray a) {
            int n = a.size();
            StringBuilder sb = new StringBuilder(a.elementType() + "[" + n + "]");
            if (n > 0) {
                sb.append(" [");
                for (int i = 0; i < Math.min(n, 5); i++) {
                    Object e = Array.get(a.values(), i);
                    sb.append(i == 0 ? "" : ", ").append(e instanceof String str ? quoted(str) : String.valueOf(e));
                }
                sb.append(n > 5 ? ", ...]" : "]");
            }
            return sb.toString();
        }
        return v.value() instanceof String str ? quoted(str) : v.toString();
    }

    private static String quoted(String s) {
        return '"' + Printable.of(s).replace("\"", "\\\"") + '"';
    }

    private static final int SHOWN_CHARS = 200;

    /** At most {@value #SHOWN_CHARS} characters of a value in the text view; --json gives it whole. */
    private static String shortened(String value) {
        return value.length() <= SHOWN_CHARS ? value
                : value.substring(0, SHOWN_CHARS) + "... (" + value.length() + " characters; --json shows all)";
    }
}
