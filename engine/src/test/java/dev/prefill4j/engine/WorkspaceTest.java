package dev.prefill4j.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.engine.formats.F16Quantizer;
import dev.prefill4j.engine.formats.Q8_0Quantizer;
import dev.prefill4j.engine.model.LlamaConfig;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * How many rows a session's activation buffers are made for, and when an engine's idle workspace is taken over
 * ({@code tests}' WorkspaceReuseTest checks that the results do not depend on either).
 */
class WorkspaceTest {
    private static final long MIB = 1L << 20;
    private static final LlamaConfig LLAMA_1B = ChunkChoiceTest.LLAMA_1B;

    @Test
    void rowsArePowersOfTwoFromSixteenUpToTheChunk() {
        assertEquals(16, Workspace.Shape.rowsFor(1, 256), "a decode step");
        assertEquals(16, Workspace.Shape.rowsFor(16, 256));
        assertEquals(32, Workspace.Shape.rowsFor(17, 256));
        assertEquals(128, Workspace.Shape.rowsFor(128, 256));
        assertEquals(256, Workspace.Shape.rowsFor(129, 256));
        assertEquals(256, Workspace.Shape.rowsFor(256, 256));
        assertEquals(8, Workspace.Shape.rowsFor(1, 8), "never more than the chunk");
        assertEquals(8, Workspace.Shape.rowsFor(8, 8));
        assertEquals(100, Workspace.Shape.rowsFor(99, 100));
    }

    @Test
    void sixteenRowsOfThe1BGeometryTakeWhatTheirShareOfAChunkDoes() {
        // 13,312 floats a token (ChunkChoiceTest): 832 KiB for 16 rows against 13 MiB for a chunk of 256.
        assertEquals(16L * 13_312 * Float.BYTES, Workspace.Shape.of(LLAMA_1B, 16, Map.of()).bytes());
        assertEquals(13 * MIB, Workspace.Shape.of(LLAMA_1B, 256, Map.of()).bytes());
    }

    @Test
    void anFfnInBlocksHoldsOneBlockOfHiddenColumnsAndItsOutput() {
        // x 2,048 + xb 2,048 + k, v 512 each + the FFN's buffer 2,048 (a block; the queries' width too) + its output
        // 2,048: 9,216 floats a token, 9 MiB at 256 rows against 13 for the whole width.
        Workspace.Shape blocked = Workspace.Shape.of(LLAMA_1B, 256, Map.of(), 2048);
        assertTrue(blocked.blocked());
        assertEquals(9 * MIB, blocked.bytes());
        Workspace w = new Workspace.Pool().take(blocked);
        assertEquals(256 * 2048, w.gate.length);
        assertEquals(256 * 2048, w.ffnOut.length);
        Workspace whole = new Workspace.Pool().take(Workspace.Shape.of(LLAMA_1B, 256, Map.of(), 8192));
        assertFalse(whole.shape.blocked());
        assertNull(whole.ffnOut);
        assertEquals(256 * 8192, whole.gate.length);
        F16Quantizer f16 = new F16Quantizer();
        Workspace quantized = new Workspace.Pool().take(Workspace.Shape.of(LLAMA_1B, 16, Map.of(f16, f16), 2048));
        assertEquals(8192, quantized.shape.hidden(), "quantized activations write gate and up out whole");
        assertNull(quantized.ffnOut);
    }

    @Test
    void theIdleWorkspaceIsTakenWhenItHasRowsEnoughForTheSameGeometry() {
        Workspace.Shape sixteen = Workspace.Shape.of(LLAMA_1B, 16, Map.of());
        Workspace.Pool pool = new Workspace.Pool();
        Workspace large = pool.take(sixteen.withRows(64));
        pool.give(large);
        assertSame(large, pool.take(sixteen), "64 rows serve a pass of 16");
        pool.give(large);
        Workspace larger = pool.take(sixteen.withRows(128));
        assertNotSame(large, larger, "64 rows do not serve 128");
        assertEquals(128, larger.shape.rows());
        pool.give(larger);
        LlamaConfig other = new LlamaConfig(2048, 4096, 16, 32, 8, 64, 128256, 131072, 64, 500000f, 1e-5f);
        assertNotSame(larger, pool.take(Workspace.Shape.of(other, 16, Map.of())), "another FFN width");
        Workspace whole = pool.take(Workspace.Shape.of(LLAMA_1B, 64, Map.of()));
        pool.give(whole);
        assertNotSame(whole, pool.take(Workspace.Shape.of(LLAMA_1B, 16, Map.of(), 2048)), "the FFN in blocks");
        pool.give(whole);
        F16Quantizer f16 = new F16Quantizer();
        Workspace quantized = pool.take(Workspace.Shape.of(LLAMA_1B, 16, Map.of(f16, f16)));
        assertNotSame(whole, quantized, "quantized activations");
        pool.give(quantized);
        assertNotSame(quantized, pool.take(Workspace.Shape.of(LLAMA_1B, 16, Map.of(f16, new Q8_0Quantizer()))),
                "activations in another format");
        pool.give(whole);
        assertSame(whole, pool.take(Workspace.Shape.of(LLAMA_1B, 64, Map.of())), "the same shape");
    }
}
