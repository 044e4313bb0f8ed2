/**
 * Ternary (BitNet b1.58) weights as llama.cpp stores them: TQ1_0 (5 trits per byte, 1.69 bits/weight) and TQ2_0
 * (2 bits per trit, 2.06 bits/weight). Layouts and reference quantizers: FORMATS.md §6.1 and ggml's
 * {@code quantize_row_tq1_0_ref} / {@code quantize_row_tq2_0_ref}. llama.cpp pairs both with Q8_K activations.
 *
 * @provides dev.prefill4j.api.spi.Quantizer tq1_0 (GGUF type 34), tq2_0 (GGUF type 35), q8_k-token (BitNet b1.58's
 *           per-token int8 activations, for {@code --activations per-token})
 * @since 0.1
 */
module dev.prefill4j.quant.bitnet {
    requires dev.prefill4j.api;
    // Masked vector additions: the fused float dot products and the integer ones over Q8_K activation codes.
    requires jdk.incubator.vector;

    provides dev.prefill4j.api.spi.Quantizer with
            dev.prefill4j.quant.bitnet.TQ1_0Quantizer,
            dev.prefill4j.quant.bitnet.TQ2_0Quantizer,
            dev.prefill4j.quant.bitnet.Q8KTokenQuantizer;
}
