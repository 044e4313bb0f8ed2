/**
 * Example third-party format module: GGUF Q4_1, written only against {@code dev.prefill4j.api}. The engine finds
 * it through {@link java.util.ServiceLoader}; the implementation package stays unexported.
 *
 * @provides dev.prefill4j.api.spi.Quantizer q4_1 (GGUF type 3)
 */
module com.example.q4_1 {
    requires dev.prefill4j.api;

    provides dev.prefill4j.api.spi.Quantizer with com.example.q4_1.Q4_1Quantizer;
}
