package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.KVElementType;
import java.util.Map;

/**
 * Settings of one inference session.
 *
 * @param kvType        KV cache element type
 * @param contextLength positions the session may hold; 0 means the model's trained context length
 * @param chunkSize     prefill chunk in tokens: memory for activations is bounded by it
 * @param pageSize      KV page size in positions
 * @param kvOptions     options passed to the KV store
 * @since 0.1
 */
@Api.Stable
public record SessionOptions(KVElementType kvType, int contextLength, int chunkSize, int pageSize,
                             Map<String, String> kvOptions) {
    /** Validates the values. */
    public SessionOptions {
        if (contextLength < 0 || chunkSize < 1 || pageSize < 1) {
            throw new IllegalArgumentException("bad session options: context " + contextLength + ", chunk "
                    + chunkSize + ", page " + pageSize);
        }
        kvOptions = Map.copyOf(kvOptions);
    }

    /** {@return F16 KV, the model's context, chunks of 512, pages of 256} */
    public static SessionOptions defaults() {
        return new SessionOptions(KVElementType.F16, 0, 512, 256, Map.of());
    }

    /** {@return a copy with another KV element type} @param type the type */
    public SessionOptions withKvType(KVElementType type) {
        return new SessionOptions(type, contextLength, chunkSize, pageSize, kvOptions);
    }

    /** {@return a copy with another context length} @param n positions, 0 for the model's */
    public SessionOptions withContextLength(int n) {
        return new SessionOptions(kvType, n, chunkSize, pageSize, kvOptions);
    }
}
