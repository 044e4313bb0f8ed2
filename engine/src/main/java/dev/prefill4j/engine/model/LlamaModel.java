package dev.prefill4j.engine.model;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.registry.PluginRegistry;
import dev.prefill4j.engine.tokenizer.Tokenizer;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * A loaded Llama-family model: configuration, tokenizer, and every weight bound to the format that decodes
 * it. Weights stay where the content keeps them (the file mapping, or synthetic off-heap memory); only the
 * small norm vectors are decoded to {@code float[]}.
 *
 * <p>Immutable and thread-safe; closing it releases the content (unmaps the file).
 *
 * @since 0.1
 */
@Api.Stable
public final class LlamaModel implements AutoCloseable {
    private final String source;
    private final boolean synthetic;
    private final LlamaConfig config;
    private final Tokenizer tokenizer;
    private final WeightMatrix embedding;
    private final WeightMatrix output;
    private final float[] outputNorm;
    private final Layer[] layers;
    /** See {@link #ropeDivisors()}; null where there are none. */
    private final float[] ropeDivisors;
    /** The tensors read while binding, to refuse a file with others (weights the forward pass would leave out). */
    private final Set<String> used = new HashSet<>();
    private final AutoCloseable resource;
    private final GgufContent content;
    private volatile boolean closed;

    /**
     * One transformer block's weights.
     *
     * @param attnNorm RMSNorm gains before attention
     * @param wq       query projection {@code [qDim][dim]}
     * @param wk       key projection {@code [kvDim][dim]}
     * @param wv       value projection {@code [kvDim][dim]}
     * @param wo       output projection {@code [dim][qDim]}
     * @param ffnNorm  RMSNorm gains before the feed-forward
     * @param gate     {@code [ffn][dim]}
     * @param up       {@code [ffn][dim]}
     * @param down     {@code [dim][ffn]}
     * @since 0.1
     */
    @Api.Stable
    public record Layer(float[] attnNorm, WeightMatrix wq, WeightMatrix wk, WeightMatrix wv, WeightMatrix wo,
                        float[] ffnNorm, WeightMatrix gate, WeightMatrix up, WeightMatrix down) {
    }

    private LlamaModel(GgufContent content, boolean synthetic, PluginRegistry registry, AutoCloseable resource) {
        this.content = content;
        this.source = content.source();
        this.synthetic = synthetic;
        this.resource = resource;
        this.config = LlamaConfig.from(content);
        this.tokenizer = Tokenizer.fromGguf(content);
        if (tokenizer.size() != config.vocab()) {
            throw content.fail("vocabulary has " + tokenizer.size() + " tokens but llama.vocab_size is " + config.vocab());
        }
        LlamaConfig c = config;
        this.embedding = matrix(registry, "token_embd.weight", c.dim(), c.vocab());
        this.output = content.tensor("output.weight").isPresent()
                ? matrix(registry, "output.weight", c.dim(), c.vocab()) : embedding;
        this.outputNorm = vector(registry, "output_norm.weight", c.dim());
        this.layers = new Layer[c.layers()];
        for (int l = 0; l < c.layers(); l++) {
            String p = "blk." + l + ".";
            layers[l] = new Layer(vector(registry, p + "attn_norm.weight", c.dim()),
                    matrix(registry, p + "attn_q.weight", c.dim(), c.qDim()),
                    matrix(registry, p + "attn_k.weight", c.dim(), c.kvDim()),
                    matrix(registry, p + "attn_v.weight", c.dim(), c.kvDim()),
                    matrix(registry, p + "attn_output.weight", c.qDim(), c.dim()),
                    vector(registry, p + "ffn_norm.weight", c.dim()),
                    matrix(registry, p + "ffn_gate.weight", c.dim(), c.ffnDim()),
                    matrix(registry, p + "ffn_up.weight", c.dim(), c.ffnDim()),
                    matrix(registry, p + "ffn_down.weight", c.ffnDim(), c.dim()));
        }
        this.ropeDivisors = ropeDivisors(registry);
        // A tensor left unread would be a weight left out of the forward pass (biases, another architecture's
        // extras): outputs silently wrong, so the file is refused instead, as llama.cpp's loader refuses it ("wrong
        // number of tensors", llama_model_loader::done_getting_tensors).
        for (GgufTensor t : content.tensors()) {
            if (!used.contains(t.name())) {
                throw content.fail("tensor '" + t.name() + "' is not part of the llama architecture as this engine "
                        + "runs it, so the model would run without it; is the file another architecture?");
            }
        }
        used.clear();
    }

    /**
     * RoPE's per-pair frequency divisors: Llama 3.1's frequency factors (the tensor {@code rope_freqs.weight},
     * {@code ropeDim / 2} F32 values, written by llama.cpp's converter from {@code rope_scaling} type {@code
     * llama3}), times the linear scaling factor ({@code llama.rope.scaling.factor}, or the older {@code
     * llama.rope.scale_linear}) where the scaling type is {@code linear}, the default as in llama.cpp
     * (src/llama-model.cpp: {@code freq_scale = 1 / factor} multiplies the angle, the factors divide it).
     */
    private float[] ropeDivisors(PluginRegistry registry) {
        LlamaConfig c = config;
        String type = content.metadata().containsKey("llama.rope.scaling.type")
                ? content.requireString("llama.rope.scaling.type") : "linear";
        double scale = 1;
        switch (type) {
            case "none" -> {
            }
            case "linear" -> {
                scale = content.getDouble("llama.rope.scaling.factor",
                        content.getDouble("llama.rope.scale_linear", 0));
                if (scale == 0) {
                    scale = 1; // llama.cpp's reading of 0: no scaling
                }
                if (!(scale > 0) || Double.isInfinite(scale)) {
                    throw content.fail("llama.rope.scaling.factor " + scale + " is not a positive number");
                }
            }
            default -> throw content.fail("RoPE scaling '" + type + "' (llama.rope.scaling.type) is not supported yet "
                    + "(supported: none, linear, and Llama 3.1's frequency factors)");
        }
        float[] factors = null;
        if (content.tensor("rope_freqs.weight").isPresent()) {
            factors = vector(registry, "rope_freqs.weight", c.ropeDim() / 2);
            for (float f : factors) {
                if (!(f > 0) || Float.isInfinite(f)) {
                    throw content.fail("rope_freqs.weight holds " + f + "; RoPE frequency factors must be positive "
                            + "and finite");
                }
            }
        }
        if (factors == null && scale == 1) {
            return null;
        }
        float[] d = factors != null ? factors : new float[c.ropeDim() / 2];
        for (int i = 0; i < d.length; i++) {
            d[i] = (float) ((factors != null ? factors[i] : 1) * scale);
        }
        return d;
    }

    /**
     * Binds a model's weights to the formats of {@code registry}.
     *
     * @param content   GGUF-shaped content
     * @param synthetic whether the weights are generated (labelled so in every output)
     * @param registry  where formats come from
     * @param resource  closed with the model (the mapping), or {@code null}
     * @return the model
     * @throws dev.prefill4j.api.PrefillException for a missing key or tensor, a wrong shape, or a format no
     *                                               module provides (naming the module to add)
     */
    public static LlamaModel bind(GgufContent content, boolean synthetic, PluginRegistry registry,
                                  AutoCloseable resource) {
        return new LlamaModel(content, synthetic, registry, resource);
    }

    private GgufTensor tensor(String name, long... ne) {
        GgufTensor t = content.tensor(name).orElseThrow(() -> content.fail("missing required tensor '" + name + "'"));
        used.add(name);
        long[] expect = ne[ne.length - 1] == 1 ? Arrays.copyOf(ne, ne.length - 1) : ne;
        if (!Arrays.equals(t.ne(), expect)) {
            throw content.fail("tensor '" + name + "' has shape " + t.shape() + ", expected " + Arrays.toString(expect));
        }
        return t;
    }

    private WeightMatrix matrix(PluginRegistry registry, String name, int cols, int rows) {
        GgufTensor t = tensor(name, cols, rows);
        Quantizer q = registry.requireFormat(t.type(), name);
        return new WeightMatrix(name, q, t.data(), rows, cols);
    }

    private float[] vector(PluginRegistry registry, String name, int n) {
        GgufTensor t = tensor(name, n, 1);
        float[] v = new float[n];
        registry.requireFormat(t.type(), name).decode(t.data(), 0, v, 0, n);
        return v;
    }

    /** {@return where the model came from} */
    public String source() {
        return source;
    }

    /** {@return whether the weights are synthetic (random), not a trained model} */
    public boolean synthetic() {
        return synthetic;
    }

    /**
     * {@return what each RoPE pair's frequency is divided by} ({@code ropeDim / 2} values, to pass to {@link
     * dev.prefill4j.api.spi.ComputeDevice#rope(float[], int, int, int, int, int, float, float[])} as they are), or
     * {@code null} where the model has neither frequency factors nor linear scaling. The array is the model's own:
     * not to be modified.
     */
    public float[] ropeDivisors() {
        return ropeDivisors;
    }

    /** {@return the hyper-parameters} */
    public LlamaConfig config() {
        return config;
    }

    /** {@return the tokenizer} */
    public Tokenizer tokenizer() {
        return tokenizer;
    }

    /** {@return the token embedding, {@code [vocab][dim]}} */
    public WeightMatrix embedding() {
        return embedding;
    }

    /** {@return the output projection, {@code [vocab][dim]} (the embedding when tied)} */
    public WeightMatrix output() {
        return output;
    }

    /** {@return the final RMSNorm gains} */
    public float[] outputNorm() {
        return outputNorm;
    }

    /** {@return block {@code l}} @param l layer index */
    public Layer layer(int l) {
        return layers[l];
    }

    /** {@return the content the model was bound from} */
    public GgufContent content() {
        return content;
    }

    /** {@return bytes of weights (as stored)} */
    public long weightBytes() {
        return content.tensors().stream().mapToLong(t -> t.data().byteSize()).sum();
    }

    /** {@return every layer's projection matrices, layer by layer} */
    private java.util.List<WeightMatrix> layerMatrices() {
        java.util.List<WeightMatrix> all = new java.util.ArrayList<>();
        for (Layer l : layers) {
            all.addAll(java.util.List.of(l.wq(), l.wk(), l.wv(), l.wo(), l.gate(), l.up(), l.down()));
        }
        return all;
    }

    /** {@return the formats of every matrix the forward pass multiplies by (layers and output)} */
    public java.util.Set<Quantizer> weightFormats() {
        java.util.Set<Quantizer> formats = new java.util.LinkedHashSet<>();
        layerMatrices().forEach(w -> formats.add(w.format()));
        formats.add(output.format());
        return formats;
    }

    /** {@return bytes one decoded token reads from the weights: every projection, the output matrix, one embedding row} */
    public long bytesPerToken() {
        return layerMatrices().stream().mapToLong(w -> w.data().byteSize()).sum() + output.rowBytes() * output.rows()
                + embedding.rowBytes();
    }

    /** {@return e.g. "f32", or "mixed[f16, q8_0]" over the layers' matrices} */
    public String formatSummary() {
        java.util.Set<String> ids = new java.util.TreeSet<>();
        layerMatrices().forEach(w -> ids.add(w.format().id()));
        return ids.size() == 1 ? ids.iterator().next() : "mixed" + ids;
    }

    /** {@return whether {@link #close()} has run: the weights' memory is released, and no session may start} */
    public boolean isClosed() {
        return closed;
    }

    @Override
    public void close() {
        closed = true;
        if (resource != null) {
            try {
                resource.close();
            } catch (Exception e) {
                throw new IllegalStateException("closing " + source + " failed", e);
            }
        }
    }
}
