package dev.prefill4j.engine.model;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.Api;
import dev.prefill4j.engine.gguf.GgufContent;

/**
 * The hyper-parameters of a Llama-family model, read from {@code llama.*} metadata (FORMATS.md §7).
 *
 * @param dim           embedding width
 * @param ffnDim        feed-forward width
 * @param layers        transformer blocks
 * @param heads         query heads
 * @param kvHeads       key/value heads
 * @param headDim       elements per head
 * @param vocab         vocabulary size
 * @param contextLength trained context length
 * @param ropeDim       rotated elements per head
 * @param ropeBase      RoPE frequency base
 * @param rmsEps        RMSNorm epsilon
 * @since 0.1
 */
@Api.Stable
public record LlamaConfig(int dim, int ffnDim, int layers, int heads, int kvHeads, int headDim, int vocab,
                          int contextLength, int ropeDim, float ropeBase, float rmsEps) {
    /** Validates the geometry. */
    public LlamaConfig {
        if (dim <= 0 || ffnDim <= 0 || layers <= 0 || heads <= 0 || kvHeads <= 0 || headDim <= 0 || vocab <= 0
                || contextLength <= 0) {
            throw new IllegalArgumentException("non-positive model dimension");
        }
        if (heads % kvHeads != 0) {
            throw new IllegalArgumentException("head_count " + heads + " is not a multiple of head_count_kv " + kvHeads);
        }
        if (ropeDim <= 0 || ropeDim > headDim || ropeDim % 2 != 0) {
            throw new IllegalArgumentException("rope dimension " + ropeDim + " must be even and at most " + headDim);
        }
    }

    /** {@return {@code kvHeads * headDim}} */
    public int kvDim() {
        return kvHeads * headDim;
    }

    /** {@return {@code heads * headDim}} */
    public int qDim() {
        return heads * headDim;
    }

    /**
     * Reads the configuration.
     *
     * @param gguf the model content
     * @return the configuration
     * @throws dev.prefill4j.api.PrefillException naming the missing or bad key
     */
    public static LlamaConfig from(GgufContent gguf) {
        String arch = gguf.requireString("general.architecture");
        if (!arch.equals("llama")) {
            throw gguf.fail("architecture '" + arch + "' is not supported yet (supported: llama)");
        }
        int dim = positive(gguf, "llama.embedding_length", gguf.requireLong("llama.embedding_length"));
        int heads = positive(gguf, "llama.attention.head_count", gguf.requireLong("llama.attention.head_count"));
        int kvHeads = positive(gguf, "llama.attention.head_count_kv",
                gguf.getLong("llama.attention.head_count_kv", heads));
        int headDim = positive(gguf, "llama.attention.key_length", gguf.getLong("llama.attention.key_length",
                dim / heads));
        int vocab = positive(gguf, "llama.vocab_size", gguf.getLong("llama.vocab_size",
                gguf.metadata().containsKey("tokenizer.ggml.tokens")
                        ? gguf.requireStrings("tokenizer.ggml.tokens").size() : 0));
        try {
            return new LlamaConfig(dim,
                    positive(gguf, "llama.feed_forward_length", gguf.requireLong("llama.feed_forward_length")),
                    positive(gguf, "llama.block_count", gguf.requireLong("llama.block_count")),
                    heads, kvHeads, headDim, vocab,
                    positive(gguf, "llama.context_length", gguf.requireLong("llama.context_length")),
                    positive(gguf, "llama.rope.dimension_count", gguf.getLong("llama.rope.dimension_count", headDim)),
                    (float) gguf.getDouble("llama.rope.freq_base", 10000.0),
                    (float) requireDouble(gguf, "llama.attention.layer_norm_rms_epsilon"));
        } catch (IllegalArgumentException e) {
            throw gguf.fail(e.getMessage());
        }
    }

    private static double requireDouble(GgufContent gguf, String key) {
        gguf.require(key);
        return gguf.getDouble(key, Double.NaN);
    }

    private static int positive(GgufContent gguf, String key, long v) {
        if (v <= 0 || v > (1 << 24)) {
            throw gguf.fail("key '" + key + "' = " + v + " is out of range");
        }
        return (int) v;
    }

    /** {@return multiply-accumulates per token in the layers' projections} */
    public long layerMacsPerToken() {
        return (long) layers * ((long) dim * qDim() * 2 + 2L * dim * kvDim() + 3L * dim * ffnDim);
    }

    /**
     * {@return FLOPs (2 per multiply-add) of processing positions {@code [start, start + n)}}: projections, causal
     * attention scores and weighted values over every earlier position, and logits for {@code logitRows} rows.
     * Norms, RoPE and softmax are left out (under 1% at these sizes).
     *
     * @param start     position of the first token
     * @param n         tokens
     * @param logitRows rows whose logits are computed
     */
    public double flops(int start, int n, int logitRows) {
        double attention = 0;
        for (int t = start; t < start + n; t++) {
            attention += 4.0 * qDim() * (t + 1);
        }
        return 2.0 * n * layerMacsPerToken() + attention * layers + 2.0 * logitRows * vocab * dim;
    }

    /** {@return approximate parameter count (embeddings counted once)} */
    public long parameters() {
        long perLayer = (long) dim * qDim() * 2 + (long) dim * kvDim() * 2 + 3L * dim * ffnDim + 2L * dim;
        return perLayer * layers + (long) vocab * dim + dim;
    }
}
