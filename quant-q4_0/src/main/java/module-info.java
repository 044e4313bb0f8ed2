/**
 * GGUF Q4_0 and Q5_0 weights (llama.cpp's legacy 4- and 5-bit formats; Q5_0 is the fallback llama.cpp writes
 * inside Q4_K_M files for rows that are not a multiple of 256). Layouts and reference quantizers: FORMATS.md §1 and
 * ggml's {@code quantize_row_q4_0_ref} / {@code quantize_row_q5_0_ref}.
 *
 * @provides dev.prefill4j.api.spi.Quantizer q4_0 (GGUF type 2), q5_0 (6), q5_1 (7)
 * @since 0.1
 */
module dev.prefill4j.quant.q4_0 {
    requires dev.prefill4j.api;
    // Vector API tile decoders (the CPU backend calls decode once per weight tile) and fused dots (decode steps).
    requires jdk.incubator.vector;

    provides dev.prefill4j.api.spi.Quantizer with
            dev.prefill4j.quant.q4_0.Q4_0Quantizer,
            dev.prefill4j.quant.q4_0.Q5_0Quantizer,
            dev.prefill4j.quant.q4_0.Q5_1Quantizer;
}
