package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * Causal attention over a paged KV cache. One kernel serves prefill (many queries), decode (one query) and
 * verification of K draft tokens, reading K/V page by page with an online softmax, so it runs the same whether
 * pages live in RAM or stream from disk.
 *
 * <p>The engine uses the provider whose {@link #backendId()} matches the selected backend, preferring an
 * explicit choice ({@code dev.prefill4j.attention}), then the highest {@link #priority()}.
 *
 * @since 0.1
 */
@Api.Stable
public interface Attention extends Plugin {
    /** {@return the id of the backend whose devices this kernel runs on} */
    String backendId();

    /** {@return selection weight; higher wins} */
    default int priority() {
        return 0;
    }

    /**
     * Creates a kernel bound to an open device.
     *
     * @param device the device whose threads the kernel uses
     * @return a kernel; it holds no resources beyond scratch memory
     */
    AttentionKernel create(ComputeDevice device);
}
