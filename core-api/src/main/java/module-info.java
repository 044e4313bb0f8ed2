/**
 * The prefill4j core API: the service-provider interfaces every plugin implements and the small value types
 * they speak in. It depends on {@code java.base} only, so a format or backend module written against it
 * never sees the engine's internals.
 *
 * <p>The four SPIs live in {@link dev.prefill4j.api.spi}: {@code Quantizer} (one weight format),
 * {@code Backend} (a compute device), {@code Attention} (causal attention over a paged KV cache) and
 * {@code KVStore} (where KV pages live). A plugin module declares {@code provides ... with ...} for them and
 * keeps its implementation package unexported; the engine discovers it through {@link java.util.ServiceLoader}.
 *
 * @since 0.1
 */
module dev.prefill4j.api {
    exports dev.prefill4j.api;
    exports dev.prefill4j.api.spi;
}
