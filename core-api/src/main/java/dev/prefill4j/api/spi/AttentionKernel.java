package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * A causal attention kernel bound to a device; see {@link Attention}.
 *
 * @since 0.1
 */
@Api.Stable
@FunctionalInterface
public interface AttentionKernel {
    /**
     * Computes, for each query row {@code t} at position {@code startPos + t} and each head {@code h},
     * {@code softmax(scale * q . K[0..startPos+t]) . V} over the cache's keys and values of KV head
     * {@code h / (heads / kvHeads)} (grouped-query attention), writing {@code [queries][heads * headDim]}.
     * The cache must already hold positions up to {@code startPos + queries - 1}.
     *
     * @param request shapes and buffers
     */
    void attend(AttentionRequest request);
}
