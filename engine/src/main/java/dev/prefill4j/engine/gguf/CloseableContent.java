package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;

/**
 * GGUF-shaped content that holds memory (a file's mapping, generated tensors) until it is closed: a {@link GgufFile},
 * a llama2.c checkpoint, a synthetic model's content.
 *
 * @since 0.1
 */
@Api.Stable
public interface CloseableContent extends GgufContent, AutoCloseable {
    /** Releases the content's memory; its tensors must not be read afterwards. */
    @Override
    void close();
}
