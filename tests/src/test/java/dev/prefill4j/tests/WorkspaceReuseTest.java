package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * A session opened after another one closed takes over its activation buffers; it must compute what a session of a
 * fresh engine computes, bit for bit, and two live sessions must never share buffers.
 */
class WorkspaceReuseTest {
    private static final SessionOptions CHUNK_8 = new SessionOptions(SessionOptions.defaults().kvType(), 256, 8, 0,
            SessionOptions.defaults().kvOptions(), SessionOptions.Activations.F32);

    private static int[] prompt(long seed, int n) {
        return new SplittableRandom(seed).ints(n, 3, 512).toArray();
    }

    /** {@return all-position logits of {@code ids} then of three decoded tokens, in a session of its own engine} */
    private static float[] fresh(String format, SessionOptions o, int[] ids) {
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, format, 7, null);
             Session s = e.newSession(m, o)) {
            return run(s, ids);
        }
    }

    /** {@return all-position logits of {@code ids} then those of three decode steps (of ids' first three tokens)} */
    static float[] run(Session s, int[] ids) {
        float[] prompt = s.prefill(ids, true);
        float[] out = new float[prompt.length + 3 * 512];
        System.arraycopy(prompt, 0, out, 0, prompt.length);
        for (int i = 0; i < 3; i++) {
            System.arraycopy(s.decode(ids[i]), 0, out, prompt.length + 512 * i, 512);
        }
        return out;
    }

    @Test
    void aSessionAfterAClosedOneComputesWhatAFreshOneDoes() {
        int[] a = prompt(1, 21);
        int[] b = prompt(2, 13); // shorter than a: stale rows of a's chunk stay in the buffers
        float[] expectedB = fresh("f32", CHUNK_8, b);
        float[] expectedQuantized = fresh("q8_0", CHUNK_8.withActivations(SessionOptions.Activations.QUANTIZED), b);
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel f32 = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null);
             LlamaModel q8 = e.synthetic(SyntheticLlama.Shape.TINY, "q8_0", 7, null)) {
            try (Session s = e.newSession(f32, CHUNK_8)) {
                run(s, a);
            }
            try (Session s = e.newSession(f32, CHUNK_8)) {
                assertArrayEquals(expectedB, run(s, b), "second session of one engine");
            }
            // Another shape (quantized activations need more buffers): a workspace of its own, same results.
            try (Session s = e.newSession(q8, CHUNK_8.withActivations(SessionOptions.Activations.QUANTIZED))) {
                assertArrayEquals(expectedQuantized, run(s, b), "quantized activations after float32 ones");
            }
        }
    }

    /**
     * {@link Engine#readyKernels} runs a one-layer part of the shape in a session of its own and leaves that session's
     * buffers to the engine: a session of the whole model opened after it must compute what a fresh engine's computes,
     * bit for bit. Its progress ends at 1; a prompt of no tokens and an unknown format are refused.
     */
    @Test
    void readyingKernelsChangesNoResult() {
        int[] b = prompt(2, 13);
        float[] expected = fresh("q8_0", CHUNK_8, b);
        try (Engine e = Engine.builder().threads(2).build()) {
            java.util.List<Double> progress = new java.util.ArrayList<>();
            e.readyKernels(SyntheticLlama.Shape.TINY, "q8_0", CHUNK_8, 21, progress::add);
            assertEquals(1.0, progress.getLast());
            try (LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "q8_0", 7, null);
                 Session s = e.newSession(m, CHUNK_8)) {
                assertArrayEquals(expected, run(s, b), "after readying the kernels");
            }
            assertThrows(PrefillException.class,
                    () -> e.readyKernels(SyntheticLlama.Shape.TINY, "q8_0", CHUNK_8, 0, null));
            assertThrows(PrefillException.class,
                    () -> e.readyKernels(SyntheticLlama.Shape.TINY, "no-such-format", CHUNK_8, 8, null));
        }
    }

    /**
     * A session's buffers start at 16 rows and are replaced by larger ones as passes need them (up to its chunk); a
     * session that grows them must compute what one that took a whole chunk's buffers from the start computes.
     */
    @Test
    void aSessionThatGrowsItsBuffersComputesWhatOneWithAWholeChunkDoes() {
        SessionOptions chunk64 = new SessionOptions(SessionOptions.defaults().kvType(), 256, 64, 0,
                SessionOptions.defaults().kvOptions(), SessionOptions.Activations.F32);
        int[] a = prompt(5, 70);
        float[] expected;
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null)) {
            try (Session s = e.newSession(m, chunk64)) {
                s.prefill(prompt(6, 64), false); // leaves a 64-row workspace idle for the next session
            }
            try (Session s = e.newSession(m, chunk64)) {
                expected = growing(s, a);
            }
        }
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null);
             Session s = e.newSession(m, chunk64)) {
            assertArrayEquals(expected, growing(s, a), "16 rows, then 32, then 64");
        }
    }

    /** Decode, then passes of 5, 20 and 40 tokens (the last split at the chunk), each's last-position logits. */
    private static float[] growing(Session s, int[] ids) {
        float[] out = new float[4 * 512];
        System.arraycopy(s.decode(ids[0]), 0, out, 0, 512);
        System.arraycopy(s.prefill(java.util.Arrays.copyOfRange(ids, 1, 6), false), 0, out, 512, 512);
        System.arraycopy(s.prefill(java.util.Arrays.copyOfRange(ids, 6, 26), false), 0, out, 1024, 512);
        System.arraycopy(s.prefill(java.util.Arrays.copyOfRange(ids, 26, 70), false), 0, out, 1536, 512);
        return out;
    }

    @Test
    void liveSessionsNeverShareBuffers() throws InterruptedException {
        int[] a = prompt(3, 19);
        int[] b = prompt(4, 23);
        float[] expectedA = fresh("f32", CHUNK_8, a);
        float[] expectedB = fresh("f32", CHUNK_8, b);
        try (Engine e = Engine.builder().threads(1).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null)) {
            Session first = e.newSession(m, CHUNK_8);
            first.close();
            first.close(); // a second close must not hand the buffers on twice
            try (Session s1 = e.newSession(m, CHUNK_8); Session s2 = e.newSession(m, CHUNK_8)) {
                AtomicReference<Throwable> failure = new AtomicReference<>();
                Thread other = new Thread(() -> {
                    try {
                        for (int i = 0; i < 5; i++) {
                            try (Session t = e.newSession(m, CHUNK_8)) {
                                assertArrayEquals(expectedB, run(t, b));
                            }
                        }
                    } catch (Throwable t) {
                        failure.set(t);
                    }
                });
                other.start();
                assertArrayEquals(expectedA, run(s1, a));
                assertArrayEquals(expectedB, run(s2, b));
                other.join();
                assertNull(failure.get(), () -> "the other thread's sessions: " + failure.get());
            }
        }
    }

    /**
     * Calls on closed objects are refused: a closed session's buffers may already be another session's (its prefill
     * had run into them, failing only when it reached the closed KV cache), and a closed model's or engine's memory is
     * gone (both had accepted newSession/load). A negative token count is refused before the prompt is prefilled (it
     * had prefilled it, then failed with NegativeArraySizeException, leaving the session advanced).
     */
    @Test
    void closedObjectsAndNegativeCountsAreRefusedBeforeAnyWork() {
        Engine e = Engine.builder().threads(2).build();
        LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null);
        Session closed = e.newSession(m, CHUNK_8);
        closed.close();
        int[] ids = prompt(3, 9);
        float[] expected = fresh("f32", CHUNK_8, ids);
        try (Session s = e.newSession(m, CHUNK_8)) { // takes over the closed session's buffers
            IllegalStateException refused = assertThrows(IllegalStateException.class, () -> closed.prefill(ids, true));
            assertEquals("the session is closed; open another with Engine.newSession", refused.getMessage());
            assertThrows(IllegalStateException.class, () -> closed.generate("a", 2,
                    new dev.prefill4j.engine.Sampler(dev.prefill4j.engine.SamplerConfig.greedy()), true, false, null));
            PrefillException negative = assertThrows(PrefillException.class, () -> s.generate("a", -1,
                    new dev.prefill4j.engine.Sampler(dev.prefill4j.engine.SamplerConfig.greedy()), true, false, null));
            assertEquals(PrefillException.Code.ARGUMENT, negative.code());
            assertEquals(0, s.position(), "nothing was prefilled");
            assertArrayEquals(expected, run(s, ids));
        }
        m.close();
        IllegalStateException model = assertThrows(IllegalStateException.class, () -> e.newSession(m, CHUNK_8));
        assertEquals(m.source() + " is closed; load it again", model.getMessage());
        e.close();
        IllegalStateException engine = assertThrows(IllegalStateException.class,
                () -> e.synthetic(SyntheticLlama.Shape.TINY, "f32", 7, null));
        assertEquals("the engine is closed; build another with Engine.builder()", engine.getMessage());
    }
}
