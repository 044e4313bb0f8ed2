package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * Where KV pages live: RAM ({@code memory}, built into the engine) or elsewhere. Chosen with {@code --kv} or the
 * system property {@code dev.prefill4j.kv}; otherwise the available store with the highest {@link #priority()}.
 *
 * @since 0.1
 */
@Api.Stable
public interface KVStore extends Plugin {
    /** {@return selection weight; higher wins} */
    default int priority() {
        return 0;
    }

    /**
     * {@return the page size, in positions, this store works best with} for rows of {@code kvDim} elements of
     * {@code type}; used when the session does not set one. The default, 256, suits RAM.
     *
     * @param type  element type
     * @param kvDim elements per row
     * @since 0.1
     */
    default int preferredPageSize(KVElementType type, int kvDim) {
        return 256;
    }

    /** {@return the element types this store can hold} */
    java.util.Set<KVElementType> elementTypes();

    /**
     * Opens an empty cache for one session.
     *
     * @param config geometry and options
     * @return the open cache; the caller closes it
     * @throws IllegalArgumentException if the configuration is not supported (names what is wrong)
     */
    KVCache open(KVConfig config);
}
