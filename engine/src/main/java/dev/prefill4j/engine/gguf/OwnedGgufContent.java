package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.lang.foreign.Arena;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * GGUF-shaped content whose tensor memory belongs to an {@link Arena} that closing the content releases: the base of
 * the llama2.c reader and of synthetic models.
 *
 * @since 0.1
 */
@Api.Stable
public abstract class OwnedGgufContent implements CloseableContent {
    private final String source;
    private final Arena arena;
    private final Map<String, GgufValue> metadata;
    private final List<GgufTensor> tensors;

    /**
     * @param source   where the content comes from, for messages
     * @param arena    owns the tensors' memory; closed by {@link #close()}
     * @param metadata typed metadata in order (copied into an unmodifiable view; {@link DeferredMetadata}, which is
     *                 unmodifiable, kept as it is)
     * @param tensors  the tensors in order (copied)
     */
    protected OwnedGgufContent(String source, Arena arena, Map<String, GgufValue> metadata, List<GgufTensor> tensors) {
        this.source = source;
        this.arena = arena;
        this.metadata = metadata instanceof DeferredMetadata ? metadata : Collections.unmodifiableMap(metadata);
        this.tensors = List.copyOf(tensors);
    }

    @Override
    public final String source() {
        return source;
    }

    @Override
    public final Map<String, GgufValue> metadata() {
        return metadata;
    }

    @Override
    public final List<GgufTensor> tensors() {
        return tensors;
    }

    /** Releases the tensors' memory (or mapping). */
    @Override
    public final void close() {
        arena.close();
    }
}
