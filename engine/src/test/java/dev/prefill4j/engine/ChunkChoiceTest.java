package dev.prefill4j.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.engine.model.LlamaConfig;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The prefill chunk the engine chooses when the options leave it to it: 512 tokens where the runtime's memory and the
 * larger chunk's activation buffers fit in 15% of the weights' bytes, 256 otherwise ({@code tests}' EngineChunkTest
 * checks the public side: explicit chunks and the context bound).
 */
class ChunkChoiceTest {
    private static final long MIB = 1L << 20;
    /** Llama-3.2-1B's geometry (the synthetic {@code llama-1b} shape); WorkspaceTest uses it too. */
    static final LlamaConfig LLAMA_1B = new LlamaConfig(2048, 8192, 16, 32, 8, 64, 128256, 131072, 64,
            500000f, 1e-5f);

    @Test
    void theBuffersOfA512TokenChunkOfThe1BGeometryAre26MiB() {
        // x and xb (dim), k and v (kvDim = 512), gate (ffn, which also holds the queries): 13,312 floats a token.
        long expected = 512L * (2048 + 2048 + 512 + 512 + 8192) * Float.BYTES;
        assertEquals(26 * MIB, expected);
        assertEquals(expected, Workspace.Shape.of(LLAMA_1B, 512, Map.of()).bytes());
        assertEquals(expected / 2, Workspace.Shape.of(LLAMA_1B, 256, Map.of()).bytes());
    }

    @Test
    void largerWeightsGetTheLargerChunk() {
        // (100 MiB of runtime + 26 MiB of buffers) / 0.15 = 840 MiB of weights at least.
        assertEquals(256, Engine.defaultChunk(LLAMA_1B, 730 * MIB, Map.of()), "the 1B Q4_0 file's weights");
        assertEquals(256, Engine.defaultChunk(LLAMA_1B, 765 * MIB, Map.of()), "the 1B Q4_K_M file's weights");
        assertEquals(256, Engine.defaultChunk(LLAMA_1B, 839 * MIB, Map.of()));
        assertEquals(512, Engine.defaultChunk(LLAMA_1B, 841 * MIB, Map.of()));
        assertEquals(512, Engine.defaultChunk(LLAMA_1B, 1255 * MIB, Map.of()), "the 1B Q8_0 file's weights");
        assertEquals(512, Engine.defaultChunk(LLAMA_1B, 2360 * MIB, Map.of()), "the 1B F16 file's weights");
    }
}
