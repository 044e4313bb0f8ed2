package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.KVElementType;
import java.util.Map;

/**
 * Settings of one inference session.
 *
 * @param kvType        KV cache element type
 * @param contextLength positions the session may hold; 0 means the model's trained context length
 * @param chunkSize     prefill chunk in tokens: memory for activations is bounded by it; {@value #ENGINE_CHUNK} lets the
 *                      engine choose ({@link Engine#chunkSize})
 * @param pageSize      KV page size in positions; 0 lets the KV store choose ({@code KVStore.preferredPageSize})
 * @param kvOptions     options passed to the KV store
 * @param activations   how activations meet the weights in every projection
 * @since 0.1
 */
@Api.Stable
public record SessionOptions(KVElementType kvType, int contextLength, int chunkSize, int pageSize,
                             Map<String, String> kvOptions, Activations activations) {
    /**
     * How activations enter the matrix products.
     *
     * @since 0.1
     */
    @Api.Stable
    public enum Activations {
        /** float32 activations: more precise than llama.cpp. */
        F32,
        /**
         * Each projection's input is rounded to its weight format's {@link
         * dev.prefill4j.api.spi.Quantizer#activationFormat() activation format} first (Q8_0 blocks for Q4_0/Q5_0/Q8_0,
         * Q8_K for K-quants, F16 for F16, BF16 for BF16), as llama.cpp does inside its dot products; logits then match
         * llama.cpp's to about 1e-3.
         */
        QUANTIZED,
        /**
         * BitNet b1.58's activations: each projection's input row (one token) is rounded to int8 with one scale,
         * {@code 127 / max|x|} of the row, before it meets weights whose format names a {@link
         * dev.prefill4j.api.spi.Quantizer#tokenActivationFormat() per-token activation format} (TQ1_0, TQ2_0); other
         * weights keep float32 activations.
         */
        PER_TOKEN
    }


    /** Validates the values. */
    public SessionOptions {
        if (contextLength < 0 || chunkSize < 0 || pageSize < 0) {
            throw new IllegalArgumentException("bad session options: context " + contextLength + ", chunk "
                    + chunkSize + ", page " + pageSize);
        }
        kvOptions = Map.copyOf(kvOptions);
        java.util.Objects.requireNonNull(activations, "activations");
    }

    /** A {@link #chunkSize} that lets the engine choose between {@link #DEFAULT_CHUNK} and {@link #LARGE_CHUNK}. */
    public static final int ENGINE_CHUNK = 0;

    /**
     * The prefill chunk the engine chooses where {@link #LARGE_CHUNK} would not fit its memory allowance ({@link
     * Engine#chunkSize}): 256 tokens, 13 MiB of activations for the Llama-3.2-1B geometry. Half of 512's 26 MiB, at
     * 0.975 of 512's pp512 speed on the 1B Q4_0 file and 1.06 on the F16 file (medians of alternating in-process runs,
     * Zen 3, 2 threads); 128 tokens ran at 0.91 on Q4_0.
     */
    public static final int DEFAULT_CHUNK = 256;

    /**
     * The prefill chunk the engine chooses where its activation buffers fit the memory allowance ({@link
     * Engine#chunkSize}): 512 tokens. A 512-token prompt then decodes every weight once instead of twice.
     */
    public static final int LARGE_CHUNK = 512;

    /**
     * {@return F16 KV, the model's context, the engine's choice of prefill chunk ({@value #ENGINE_CHUNK}), the KV
     * store's page size, float32 activations}
     */
    public static SessionOptions defaults() {
        return new SessionOptions(KVElementType.F16, 0, ENGINE_CHUNK, 0, Map.of(), Activations.F32);
    }

    /** {@return a copy with another KV element type} @param type the type */
    public SessionOptions withKvType(KVElementType type) {
        return new SessionOptions(type, contextLength, chunkSize, pageSize, kvOptions, activations);
    }

    /** {@return a copy with another context length} @param n positions, 0 for the model's */
    public SessionOptions withContextLength(int n) {
        return new SessionOptions(kvType, n, chunkSize, pageSize, kvOptions, activations);
    }

    /**
     * {@return a copy with another prefill chunk} Activation memory is proportional to it; prompts longer than a chunk
     * run a chunk at a time. @param tokens tokens per chunk, or {@value #ENGINE_CHUNK} for the engine's choice
     */
    public SessionOptions withChunkSize(int tokens) {
        return new SessionOptions(kvType, contextLength, tokens, pageSize, kvOptions, activations);
    }

    /** {@return a copy with other KV store options} @param options e.g. {@code dir} for the ssd store */
    public SessionOptions withKvOptions(Map<String, String> options) {
        return new SessionOptions(kvType, contextLength, chunkSize, pageSize, options, activations);
    }

    /** {@return a copy with another page size} @param positions positions per KV page; 0 for the store's choice */
    public SessionOptions withPageSize(int positions) {
        return new SessionOptions(kvType, contextLength, chunkSize, positions, kvOptions, activations);
    }

    /** {@return a copy with another activation mode} @param mode the mode */
    public SessionOptions withActivations(Activations mode) {
        return new SessionOptions(kvType, contextLength, chunkSize, pageSize, kvOptions, mode);
    }
}
