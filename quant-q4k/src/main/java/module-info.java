/**
 * llama.cpp's K-quants: Q4_K (the bulk of every Q4_K_M file), Q5_K (used by Q4_K_S), Q6_K (which every Q4_K_M file also holds), and
 * Q8_K, the 256-element activation format llama.cpp pairs with them. Layouts and reference quantizers:
 * FORMATS.md §2 and ggml's {@code quantize_row_q4_K_ref} / {@code quantize_row_q6_K_ref} /
 * {@code quantize_row_q8_K_ref}.
 *
 * @provides dev.prefill4j.api.spi.Quantizer q4_k (GGUF type 12), q5_k (13), q6_k (14), q8_k (15)
 * @since 0.1
 */
module dev.prefill4j.quant.q4k {
    requires dev.prefill4j.api;
    // Vector API tile decoders (the CPU backend calls decode once per weight tile).
    requires jdk.incubator.vector;

    provides dev.prefill4j.api.spi.Quantizer with
            dev.prefill4j.quant.q4k.Q4KQuantizer,
            dev.prefill4j.quant.q4k.Q5KQuantizer,
            dev.prefill4j.quant.q4k.Q6KQuantizer,
            dev.prefill4j.quant.q4k.Q8KQuantizer;
}
