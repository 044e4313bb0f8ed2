package dev.prefill4j.engine.quantize;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.GgufWriter;
import dev.prefill4j.engine.io.OutputFiles;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.DoubleConsumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.IntStream;

/**
 * Quantizes a model the way {@code llama-quantize} does without an importance matrix, so the tensor data are
 * byte-identical to llama.cpp's: the same per-tensor type choice ({@link #plan}) and the formats' reference encoders.
 *
 * <p>Type choice (llama.cpp src/llama-quant.cpp {@code llama_tensor_get_type}, FORMATS.md §2): only 2-D weights are
 * quantized (norms stay as they are); {@code output.weight} becomes Q6_K unless the file type is Q8_0, and a tied
 * {@code token_embd} follows the output rule; Q4_K_M raises {@code attn_v} and {@code ffn_down} to Q6_K on layers
 * where {@code use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2}; Q4_K_S raises {@code attn_v} of
 * the first four layers and {@code ffn_down} of the first eighth to Q5_K. A row length that does not fit the chosen
 * block falls back: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, TQ1_0/TQ2_0 to Q4_0, and anything still unfit to F16.
 * {@code --pure} skips the mixture rules. Any other format id from the registry quantizes every 2-D weight to it.
 *
 * @since 0.1
 */
@Api.Stable
public final class ModelQuantizer {
    /**
     * A file type: the base format and llama.cpp's {@code general.file_type} value (LLAMA_FTYPE_*).
     *
     * @param name     the {@code --type} name
     * @param base     the base ggml type name
     * @param fileType {@code general.file_type}, or -1 when llama.cpp has none
     * @since 0.1
     */
    @Api.Stable
    public record FileType(String name, String base, int fileType) {
        static final List<FileType> KNOWN = List.of(new FileType("f32", "F32", 0), new FileType("f16", "F16", 1),
                new FileType("bf16", "BF16", 32), new FileType("q4_0", "Q4_0", 2), new FileType("q8_0", "Q8_0", 7),
                new FileType("q5_0", "Q5_0", 8), new FileType("q4_k_s", "Q4_K", 14), new FileType("q4_k_m", "Q4_K", 15),
                new FileType("q6_k", "Q6_K", 18), new FileType("tq1_0", "TQ1_0", 36), new FileType("tq2_0", "TQ2_0", 37));

        /**
         * {@return the file type named {@code name}: a llama.cpp type, or any ggml type a plugin provides}
         *
         * @param name e.g. {@code q4_k_m}
         */
        public static FileType parse(String name) {
            String n = name.toLowerCase(Locale.ROOT);
            for (FileType t : KNOWN) {
                if (t.name.equals(n)) {
                    return t;
                }
            }
            GgmlType g = GgmlType.byName(n).orElseThrow(() -> new PrefillException(PrefillException.Code.ARGUMENT,
                    "unknown quantization type '" + name + "'; use one of " + KNOWN.stream().map(FileType::name).toList()
                            + " or a ggml type a format module provides"));
            return new FileType(n, g.name(), -1);
        }
    }

    /**
     * One tensor's decision.
     *
     * @param name   tensor name
     * @param source type in the input
     * @param target type in the output
     * @since 0.1
     */
    @Api.Stable
    public record Choice(String name, GgmlType source, GgmlType target) {
    }

    private static final Pattern LAYER = Pattern.compile("blk\\.(\\d+)\\.");

    private ModelQuantizer() {
    }

    static boolean useMoreBits(int i, int n) {
        return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    }

    private static GgmlType type(String name) {
        return GgmlType.byName(name).orElseThrow();
    }

    /** llama.cpp's shape fallback for a row length that does not fit {@code t}'s block. */
    static GgmlType fallback(GgmlType t, long ne0) {
        if (ne0 % t.blockSize() == 0) {
            return t;
        }
        GgmlType f = switch (t.name()) {
            case "Q4_K" -> type("Q5_0");
            case "Q5_K" -> type("Q5_1");
            case "Q6_K" -> type("Q8_0");
            case "TQ1_0", "TQ2_0" -> type("Q4_0");
            default -> type("F16");
        };
        return ne0 % f.blockSize() == 0 ? f : type("F16");
    }

    /**
     * Decides every tensor's output type.
     *
     * @param model the input
     * @param type  the file type
     * @param pure  skip the mixture rules
     * @return one choice per tensor, in file order
     */
    public static List<Choice> plan(GgufContent model, FileType type, boolean pure) {
        GgmlType base = type(type.base());
        int layers = (int) model.getLong("llama.block_count", 0);
        boolean tied = model.tensor("output.weight").isEmpty();
        List<Choice> out = new ArrayList<>();
        int attnV = 0;
        for (GgufTensor t : model.tensors()) {
            String name = t.name();
            if (t.ne().length < 2 || !name.endsWith(".weight")) {
                out.add(new Choice(name, t.type(), t.type()));
                continue;
            }
            GgmlType target = base;
            if (!pure) {
                boolean isOutput = name.equals("output.weight") || (tied && name.equals("token_embd.weight"));
                Matcher m = LAYER.matcher(name);
                int layer = m.find() ? Integer.parseInt(m.group(1)) : -1;
                if (isOutput) {
                    if (!base.name().equals("Q8_0") && base.blockSize() > 1) {
                        target = type("Q6_K");
                    }
                } else if (name.equals("token_embd.weight") && base.name().startsWith("TQ")) {
                    // Ternary files keep the embedding in Q4_K: it is looked up, not multiplied, and is not ternary.
                    target = type("Q4_K");
                } else if (name.contains("attn_v.weight")) {
                    if (type.name().equals("q4_k_m") && useMoreBits(attnV, layers)) {
                        target = type("Q6_K");
                    } else if (type.name().equals("q4_k_s") && attnV < 4) {
                        target = type("Q5_K");
                    }
                    attnV++;
                } else if (name.contains("ffn_down")) {
                    if (type.name().equals("q4_k_m") && useMoreBits(layer, layers)) {
                        target = type("Q6_K");
                    } else if (type.name().equals("q4_k_s") && layer < layers / 8) {
                        target = type("Q5_K");
                    }
                }
            }
            out.add(new Choice(name, t.type(), fallback(target, t.ne()[0])));
        }
        return out;
    }

    /** {@code max(1e-5, mean|W|)} over a whole tensor, in double. */
    static float absMean(GgufTensor t, Quantizer format, int cols, int rows) {
        double sum = 0;
        float[] row = new float[cols];
        for (int r = 0; r < rows; r++) {
            format.decode(t.data(), format.byteSize(cols) * r, row, 0, cols);
            for (float v : row) {
                sum += Math.abs(v);
            }
        }
        return (float) Math.max(1e-5, sum / ((double) rows * cols));
    }

    /**
     * Quantizes {@code model} into a new GGUF file.
     *
     * @param model    the input (any format the registry decodes)
     * @param type     the file type
     * @param pure     skip the mixture rules
     * @param registry where the formats come from
     * @param output   the file to write
     * @param progress fraction done, or {@code null}
     * @return the choices made
     * @throws PrefillException ({@code P4J-MISSING-FORMAT}) if a chosen type's module is absent; ({@code P4J-ARG}) if
     *                          a quantized tensor would be quantized again (allowed only through the overload with
     *                          {@code allowRequantize})
     */
    public static List<Choice> quantize(GgufContent model, FileType type, boolean pure, PluginRegistry registry,
                                        Path output, DoubleConsumer progress) {
        return quantize(model, type, pure, false, registry, output, progress);
    }

    /**
     * Quantizes {@code model} into a new GGUF file, optionally with the BitNet b1.58 absmean ternary quantizer.
     *
     * <p>With {@code absmean}, every tensor going to TQ1_0 or TQ2_0 is first made ternary as the BitNet b1.58 paper
     * does for a model trained for it (FORMATS.md §6.4): {@code γ = mean|W|} over the whole tensor (at least 1e-5),
     * {@code W' = clamp(round(W / γ), -1, 1) * γ} (round half to even); the format's encoder then stores exactly these
     * trits with {@code d = γ} in every block that has a non-zero trit. Without it, each 256-block gets
     * {@code d = max|x|}, llama.cpp's choice.
     *
     * @param model    the input
     * @param type     the file type
     * @param pure     skip the mixture rules
     * @param absmean  use the absmean ternary quantizer for ternary targets
     * @param registry where the formats come from
     * @param output   the file to write
     * @param progress fraction done, or {@code null}
     * @return the choices made
     * @throws PrefillException ({@code P4J-ARG}) if {@code output} is the file {@code model} was read from, or a
     *                          directory, or a quantized tensor would be quantized again (allowed only through the
     *                          overload with {@code allowRequantize}); ({@code P4J-IO}) if its directory does not exist
     */
    public static List<Choice> quantize(GgufContent model, FileType type, boolean pure, boolean absmean,
                                        PluginRegistry registry, Path output, DoubleConsumer progress) {
        return quantize(model, type, pure, absmean, false, registry, output, progress);
    }

    /**
     * Quantizes {@code model} into a new GGUF file, refusing by default, as llama-quantize does, to turn a tensor
     * that is already quantized into another quantized type.
     *
     * @param model           the input
     * @param type            the file type
     * @param pure            skip the mixture rules
     * @param absmean         use the absmean ternary quantizer for ternary targets (see the overload without
     *                        {@code allowRequantize})
     * @param allowRequantize decode quantized tensors and quantize them again (their rounding errors add up)
     * @param registry        where the formats come from
     * @param output          the file to write
     * @param progress        fraction done, or {@code null}
     * @return the choices made
     * @throws PrefillException ({@code P4J-ARG}) if a tensor would be requantized and that is not allowed, or
     *                          {@code output} is the file {@code model} was read from, or a directory; ({@code
     *                          P4J-IO}) if its directory does not exist
     */
    public static List<Choice> quantize(GgufContent model, FileType type, boolean pure, boolean absmean,
                                        boolean allowRequantize, PluginRegistry registry, Path output,
                                        DoubleConsumer progress) {
        OutputFiles.requireWritableFile(output, "the quantized model");
        if (model instanceof GgufFile in) {
            OutputFiles.requireNotAnInput(output, "the quantized model", in.path());
        }
        List<Choice> plan = plan(model, type, pure);
        if (!allowRequantize) {
            // llama-quantize's rule (src/llama-quant.cpp: "requantizing from type %s is disabled"): a tensor whose
            // type changes must not be quantized already. Checked over the whole plan before anything is written.
            plan.stream().filter(c -> c.source().blockSize() > 1 && !c.source().equals(c.target())).findFirst()
                    .ifPresent(c -> {
                        throw new PrefillException(PrefillException.Code.ARGUMENT, c.name() + ": requantizing from "
                                + "type " + c.source().name() + " to " + c.target().name() + " is disabled (the "
                                + "roundings of both add up); quantize the F32, F16 or BF16 model instead, or allow it"
                                + " with --allow-requantize");
                    });
        }
        GgufWriter w = new GgufWriter().putAll(model);
        w.put("general.quantization_version", GgufValue.u32(2));
        if (type.fileType() >= 0) {
            w.put("general.file_type", GgufValue.u32(type.fileType()));
        }
        long totalRows = model.tensors().stream().mapToLong(GgufTensor::rows).sum();
        AtomicLong done = new AtomicLong();
        for (Choice c : plan) {
            GgufTensor t = model.tensor(c.name()).orElseThrow();
            Quantizer from = registry.requireFormat(c.source(), c.name());
            Quantizer to = registry.forGgufType(c.target()).orElseThrow(() ->
                    PluginRegistry.missingFormat(c.target(), "quantizing " + c.name() + " to " + type.name() + " needs"
                            + " a format that"));
            int cols = (int) t.ne()[0];
            int rows = (int) t.rows();
            float gamma = absmean && c.target().name().startsWith("TQ") ? absMean(t, from, cols, rows) : Float.NaN;
            w.tensor(c.name(), t.ne(), c.target(), dst -> {
                if (from == to) {
                    java.lang.foreign.MemorySegment.copy(t.data(), 0, dst, 0, dst.byteSize());
                } else {
                    long inRow = from.byteSize(cols);
                    long outRow = to.byteSize(cols);
                    IntStream.range(0, rows).parallel().forEach(r -> {
                        float[] row = new float[cols];
                        from.decode(t.data(), inRow * r, row, 0, cols);
                        if (!Float.isNaN(gamma)) {
                            for (int i = 0; i < cols; i++) {
                                row[i] = Math.max(-1, Math.min(1, (float) Math.rint(row[i] / gamma))) * gamma;
                            }
                        }
                        to.encode(row, 0, cols, dst, outRow * r);
                    });
                }
                if (progress != null) {
                    progress.accept((double) done.addAndGet(rows) / totalRows);
                }
            });
        }
        w.write(output);
        return plan;
    }
}
