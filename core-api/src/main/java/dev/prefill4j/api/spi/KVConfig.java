package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.util.Map;
import java.util.Objects;

/**
 * What a KV cache must hold.
 *
 * @param layers      transformer layers
 * @param kvDim       elements per position and layer for K (and for V): {@code kvHeads * headDim}
 * @param capacity    maximum positions (the context length)
 * @param elementType element encoding
 * @param pageSize    positions per page; attention reads whole pages
 * @param options     store-specific options (for example a directory); never {@code null}
 * @since 0.1
 */
@Api.Stable
public record KVConfig(int layers, int kvDim, int capacity, KVElementType elementType, int pageSize,
                       Map<String, String> options) {
    /** Validates the geometry. */
    public KVConfig {
        Objects.requireNonNull(elementType, "elementType");
        options = Map.copyOf(options);
        if (layers < 1 || kvDim < 1 || capacity < 1 || pageSize < 1) {
            throw new IllegalArgumentException("bad KV geometry: layers=" + layers + " kvDim=" + kvDim
                    + " capacity=" + capacity + " pageSize=" + pageSize);
        }
    }

    /** {@return pages needed per layer for the full capacity} */
    public int pagesPerLayer() {
        return (capacity + pageSize - 1) / pageSize;
    }
}
