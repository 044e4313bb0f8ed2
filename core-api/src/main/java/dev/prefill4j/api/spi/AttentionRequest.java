package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * One call of an {@link AttentionKernel}.
 *
 * @param q        queries {@code [queries][heads * headDim]}
 * @param queries  query rows
 * @param startPos position of query row 0
 * @param cache    the KV cache holding positions {@code [0, startPos + queries)}
 * @param layer    which layer's pages to read
 * @param heads    query heads
 * @param kvHeads  KV heads; {@code heads % kvHeads == 0}
 * @param headDim  elements per head
 * @param scale    multiplier of the dot products, usually {@code 1/sqrt(headDim)}
 * @param out      results {@code [queries][heads * headDim]}, fully overwritten
 * @since 0.1
 */
@Api.Stable
public record AttentionRequest(float[] q, int queries, int startPos, KVCache cache, int layer, int heads,
                               int kvHeads, int headDim, float scale, float[] out) {
    /** Validates the shapes. */
    public AttentionRequest {
        if (heads % kvHeads != 0) {
            throw new IllegalArgumentException("heads " + heads + " is not a multiple of kvHeads " + kvHeads);
        }
        if ((long) queries * heads * headDim > Math.min(q.length, out.length)) {
            throw new IllegalArgumentException("q/out too small for " + queries + " queries");
        }
    }
}
