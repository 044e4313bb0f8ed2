package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * A compute device provider (CPU, Metal, ...). The engine picks the backend named by {@code --backend} or the
 * system property {@code dev.prefill4j.backend}; otherwise the available one with the highest
 * {@link #priority()}. The CPU backend (priority 100) is the reference every other backend is checked against.
 *
 * @since 0.1
 */
@Api.Stable
public interface Backend extends Plugin {
    /** {@return selection weight; higher wins among available backends} */
    default int priority() {
        return 0;
    }

    /** {@return whether this backend can run here, and why not}; cheap, no device initialisation */
    Availability availability();

    /**
     * Opens the device. This is where threads start and buffers are allocated.
     *
     * @param context engine-owned settings
     * @return an open device; the caller closes it
     * @throws IllegalStateException if the backend is not {@linkplain #availability() available}
     */
    ComputeDevice create(BackendContext context);
}
