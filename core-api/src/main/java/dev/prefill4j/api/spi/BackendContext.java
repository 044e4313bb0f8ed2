package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * Settings the engine hands a backend when it opens a device.
 *
 * @param threads worker threads to use, at least 1
 * @since 0.1
 */
@Api.Stable
public record BackendContext(int threads) {
    /** Validates the thread count. */
    public BackendContext {
        if (threads < 1) {
            throw new IllegalArgumentException("threads must be at least 1, got " + threads);
        }
    }
}
