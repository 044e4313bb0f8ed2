package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * {@link Engine#chunkSize}: what the options ask for, or the engine's choice (256 tokens for a model of a few MiB,
 * whose weights leave no room in the memory allowance for a larger chunk), never more than the session's context; and
 * a prompt gives the same logits whichever chunk of six or more rows it is run in.
 */
class EngineChunkTest {
    @Test
    void explicitChunksAndTheContextBoundTheChoice() {
        try (Engine e = Engine.builder().threads(1).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null)) {
            SessionOptions options = SessionOptions.defaults();
            assertEquals(SessionOptions.ENGINE_CHUNK, options.chunkSize());
            assertEquals(SessionOptions.DEFAULT_CHUNK, e.chunkSize(m, options));
            assertEquals(100, e.chunkSize(m, options.withContextLength(100)), "no chunk beyond the context");
            assertEquals(8, e.chunkSize(m, options.withChunkSize(8)));
            assertEquals(512, e.chunkSize(m, options.withChunkSize(512)));
        }
    }

    @Test
    void theChunkDoesNotChangeTheLogits() {
        int[] ids = new SplittableRandom(5).ints(40, 3, 512).toArray();
        float[][] logits = new float[3][];
        int[] chunks = {SessionOptions.ENGINE_CHUNK, 16, 20};
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null)) {
            for (int i = 0; i < chunks.length; i++) {
                try (Session s = e.newSession(m, SessionOptions.defaults().withContextLength(64)
                        .withChunkSize(chunks[i]))) {
                    logits[i] = s.prefill(ids, true);
                }
            }
        }
        // Tolerance 0: with six or more rows in every chunk (40 = 16 + 16 + 8 = 20 + 20) every projection takes the
        // panel GEMM, which adds each output's products in one order whatever rows share its chunk, and attention
        // reads earlier chunks from the KV cache. (A chunk of fewer rows takes the tiled or fused-dot product, whose
        // order differs: logits about 1e-6 apart.)
        assertArrayEquals(logits[0], logits[1], "one chunk of 40 against chunks of 16");
        assertArrayEquals(logits[0], logits[2], "against chunks of 20");
    }
}
