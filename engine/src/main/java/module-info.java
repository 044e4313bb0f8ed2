/**
 * The prefill4j engine: the plugin registry, model readers and writers (GGUF, llama2.c), the tokenizer, the
 * Llama graph and sessions, sampling, the in-memory KV store and the built-in F32, F16, BF16 and Q8_0 formats.
 *
 * @uses dev.prefill4j.api.spi.Quantizer weight formats, built-in and from plugin modules
 * @uses dev.prefill4j.api.spi.Backend compute devices (backend-cpu is the default)
 * @uses dev.prefill4j.api.spi.Attention attention kernels
 * @uses dev.prefill4j.api.spi.KVStore KV cache stores
 * @provides dev.prefill4j.api.spi.Quantizer f32, f16, bf16, q8_0, q8_0-activations (activations only)
 * @provides dev.prefill4j.api.spi.KVStore memory
 * @since 0.1
 */
module dev.prefill4j.engine {
    requires transitive dev.prefill4j.api;
    // Vector dot products of the built-in formats (Quantizer.dot, the CPU backend's decode-step kernel).
    requires jdk.incubator.vector;

    exports dev.prefill4j.engine;
    exports dev.prefill4j.engine.draft;
    exports dev.prefill4j.engine.gguf;
    exports dev.prefill4j.engine.io;
    exports dev.prefill4j.engine.llama2c;
    exports dev.prefill4j.engine.model;
    exports dev.prefill4j.engine.quantize;
    exports dev.prefill4j.engine.registry;
    exports dev.prefill4j.engine.tokenizer;
    exports dev.prefill4j.engine.verify;

    uses dev.prefill4j.api.spi.Quantizer;
    uses dev.prefill4j.api.spi.Backend;
    uses dev.prefill4j.api.spi.Attention;
    uses dev.prefill4j.api.spi.KVStore;

    provides dev.prefill4j.api.spi.Quantizer with
            dev.prefill4j.engine.formats.F32Quantizer,
            dev.prefill4j.engine.formats.F16Quantizer,
            dev.prefill4j.engine.formats.BF16Quantizer,
            dev.prefill4j.engine.formats.Q8_0Quantizer,
            dev.prefill4j.engine.formats.Q8_0ActivationQuantizer;
    provides dev.prefill4j.api.spi.KVStore with dev.prefill4j.engine.kv.MemoryKVStore;
}
