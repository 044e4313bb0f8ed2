package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.verify.ReferenceForward;
import dev.prefill4j.engine.verify.Verification;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * End-to-end runs of the real model files of ../shared/models against llama.cpp's reference outputs
 * (MANIFEST.md) and against an independent FP64 forward pass.
 */
class RealModelTest {
    /** One engine for the class's tests, closed after them. */
    @AutoClose
    static final Engine engine = Engine.builder().threads(2).build();

    static Generation greedy(LlamaModel m, KVElementType kv, int n) {
        try (Session s = engine.newSession(m, SessionOptions.defaults().withKvType(kv))) {
            return s.generate(Models.PROMPT, n, new Sampler(SamplerConfig.greedy()), true, true, null);
        }
    }

    /** MANIFEST: F32 files match llama.cpp's dump to 1e-4 absolute and the greedy ids exactly. */
    @Test
    void stories260KF32MatchesLlamaCpp() throws Exception {
        try (LlamaModel m = engine.load(Models.require("stories260K-F32.gguf"))) {
            Generation g = greedy(m, KVElementType.F32, 32);
            assertArrayEquals(Models.ids("1 403 407 261 378"), g.promptIds());
            assertArrayEquals(Models.STORIES_F32_GREEDY, g.generatedIds());
            double d = Models.maxAbsDiff(Models.referenceLogits("stories260K-F32"), g.promptLogits());
            assertTrue(d <= 1e-4, "max |logit - llama.cpp| = " + d);
        }
    }

    @Test
    void llama2cCheckpointGivesTheSameIds() {
        try (LlamaModel m = engine.load(Models.require("stories260K.bin"), Models.require("tok512.bin"))) {
            Generation g = greedy(m, KVElementType.F32, 32);
            assertArrayEquals(Models.STORIES_F32_GREEDY, g.generatedIds());
        }
    }

    /** Grouped-query attention at dim 256 (8 heads, 4 KV heads): every prompt position within 1e-4 of llama.cpp. */
    @Test
    void tiny256F32MatchesLlamaCpp() throws Exception {
        try (LlamaModel m = engine.load(Models.require("tiny-256-F32.gguf"))) {
            Generation g = greedy(m, KVElementType.F32, 32);
            assertArrayEquals(Models.ids("1 394 283 272 274 374 285 284 283 354 373 278 282 274"), g.promptIds());
            double d = Models.maxAbsDiff(Models.referenceLogits("tiny-256-F32"), g.promptLogits());
            assertTrue(d <= 1e-4, "max |logit - llama.cpp| = " + d);
            assertArrayEquals(Models.TINY_F32_GREEDY, g.generatedIds());
        }
    }

    /** The FP64 reference itself must agree with llama.cpp on the F32 files (llama.cpp vs FP64: 1.1e-5, MANIFEST). */
    @ParameterizedTest
    @ValueSource(strings = {"stories260K-F32", "tiny-256-F32"})
    void theFp64ReferenceAgreesWithLlamaCpp(String name) throws Exception {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
            int[] ids = m.tokenizer().encode(Models.PROMPT);
            float[] ref = new ReferenceForward(m, java.util.Map.of()).logits(ids);
            double d = Models.maxAbsDiff(Models.referenceLogits(name), ref);
            assertTrue(d <= 2e-5, "max |FP64 reference - llama.cpp| = " + d);
        }
    }

    /**
     * Quantized files with float32 activations against the FP64 forward pass over the same dequantized weights.
     * Tolerance 1e-4 absolute: both compute the same function of the same weights; what remains is float32
     * rounding (matmul accumulation over at most 768 terms, float softmax), which the F32 files show to be below
     * 2e-5 at these sizes; 1e-4 leaves headroom without hiding a decoding error (one wrong block moves logits by
     * more than 1e-2). llama.cpp's own dumps differ more (up to 0.6 on stories260K-Q8_0) because llama.cpp
     * quantizes the activations inside its dot products; see {@link #quantizedActivationsMatchLlamaCpp}.
     */
    @ParameterizedTest
    @ValueSource(strings = {"stories260K-Q8_0", "tiny-256-Q8_0", "stories260K-Q4_0", "tiny-256-Q4_0", "tiny-256-Q4_K_M",
        "tiny-256-TQ1_0", "tiny-256-TQ2_0"})
    void quantizedFilesMatchTheFp64ForwardPassOverDequantizedWeights(String name) {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
            Generation g = greedy(m, KVElementType.F32, 4);
            float[] ref = new ReferenceForward(m, java.util.Map.of()).logits(g.promptIds());
            double d = Models.maxAbsDiff(ref, g.promptLogits());
            assertTrue(d <= 1e-4, "max |logit - FP64 reference| = " + d);
        }
    }

    /** An F16 KV cache rounds K and V to 11 significant bits; on these models that moves logits by under 5e-3. */
    @Test
    void f16KvStaysCloseToF32Kv() {
        try (LlamaModel m = engine.load(Models.require("tiny-256-F32.gguf"))) {
            double d = Models.maxAbsDiff(greedy(m, KVElementType.F32, 1).promptLogits(),
                    greedy(m, KVElementType.F16, 1).promptLogits());
            assertTrue(d > 0 && d <= 5e-3, "F16 vs F32 KV: " + d);
        }
    }

    /**
     * A Q8_0 KV cache (blocks of 32 along each position's concatenated heads) against an F32 one. Measured maximum
     * logit change over the prompt: 7.7e-3 on tiny-256 (logits of order 1) and 0.22 on stories260K (logits of order
     * 10, a model that amplifies small changes: F16 KV already moves it by 1.4e-2). Bounds: 2e-2 and 0.3.
     */
    @Test
    void q8_0KvChangesLogitsByAStatedAmount() {
        for (String name : java.util.List.of("tiny-256-F32", "stories260K-F32")) {
            try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
                double d = Models.maxAbsDiff(greedy(m, KVElementType.F32, 1).promptLogits(),
                        greedy(m, KVElementType.Q8_0, 1).promptLogits());
                assertTrue(d > 0 && d <= (name.startsWith("tiny") ? 2e-2 : 0.3), name + ": Q8_0 vs F32 KV " + d);
            }
        }
    }

    /**
     * The reference that rounds K and V as an F16 or Q8_0 cache does is much closer to the engine with that cache than
     * the one that keeps them in FP64 (measured on stories260K, 7 prompt tokens: F16 8.5e-4 against 2.3e-2, Q8_0 2.0e-5
     * against 1.8); the test asks for five times.
     */
    @ParameterizedTest
    @EnumSource(value = KVElementType.class, names = {"F16", "Q8_0"})
    void theReferenceRoundsKAndVAsTheCacheStoresThem(KVElementType kv) {
        try (LlamaModel m = engine.load(Models.require("stories260K-F32.gguf"))) {
            int[] ids = new SplittableRandom(7).ints(7, 3, m.config().vocab()).toArray();
            float[] got;
            try (Session s = engine.newSession(m, SessionOptions.defaults().withKvType(kv).withContextLength(16))) {
                got = s.prefill(ids, true);
            }
            double rounded = Models.maxAbsDiff(new ReferenceForward(m, Map.of(), kv).logits(ids), got);
            double exact = Models.maxAbsDiff(new ReferenceForward(m, Map.of()).logits(ids), got);
            assertTrue(rounded * 5 < exact, kv + ": rounded reference " + rounded + ", FP64 K/V " + exact);
        }
    }

    /**
     * An F16 cache over 64 tokens of stories260K: 3.0e-3 from the reference that rounds as it does, where the FP64
     * K/V of the reference before put it at 7.6e-2, over the bound of 3.9e-2, and the label said FAILED.
     */
    @Test
    void anF16CacheOverSixtyFourTokensIsVerified() {
        try (LlamaModel m = engine.load(Models.require("stories260K-F32.gguf"))) {
            Verification v = Verification.run(engine, m, SessionOptions.defaults().withKvType(KVElementType.F16), 64);
            assertTrue(v.passed() && v.maxDiff() * 2 < v.tolerance(), v.label());
        }
    }

    /**
     * Quantized activations with an F32 cache: one int8 rounding that comes out the other way upstream moves tiny-256
     * Q4_0's logits by 1.8e-2 over 7 tokens, over the bound of 1.1e-2 the check had for quantized activations alone;
     * the bound for them (1,000 units) is now added to the cache's, not multiplied by it.
     */
    @Test
    void quantizedActivationsWithAnF32CacheAreVerified() {
        try (LlamaModel m = engine.load(Models.require("tiny-256-Q4_0.gguf"))) {
            Verification v = Verification.run(engine, m, SessionOptions.defaults().withKvType(KVElementType.F32)
                    .withActivations(SessionOptions.Activations.QUANTIZED), 7);
            assertTrue(v.passed() && v.maxDiff() > 0, v.label());
        }
    }

    /** Chunked prefill (chunks of 3) and one-token decode steps give the same logits as one batch. */
    @Test
    void chunkingAndDecodeAgreeWithOneBatch() {
        try (LlamaModel m = engine.load(Models.require("tiny-256-F32.gguf"))) {
            int[] ids = m.tokenizer().encode(Models.PROMPT);
            float[] whole;
            try (Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
                whole = s.prefill(ids, true);
            }
            SessionOptions chunked = new SessionOptions(KVElementType.F32, 0, 3, 4, java.util.Map.of(), SessionOptions.Activations.F32);
            try (Session s = engine.newSession(m, chunked)) {
                float[] c = s.prefill(ids, true);
                assertTrue(Models.maxAbsDiff(whole, c) <= 1e-5, "chunked");
            }
            int vocab = m.config().vocab();
            try (Session s = engine.newSession(m, chunked)) {
                for (int t = 0; t < ids.length; t++) {
                    float[] step = s.decode(ids[t]);
                    float[] expect = java.util.Arrays.copyOfRange(whole, t * vocab, (t + 1) * vocab);
                    assertTrue(Models.maxAbsDiff(expect, step) <= 1e-5, "decode step " + t);
                }
            }
        }
    }

    @Test
    void aPromptLongerThanTheContextIsRefused() {
        try (LlamaModel m = engine.load(Models.require("stories260K-F32.gguf"));
             Session s = engine.newSession(m, SessionOptions.defaults().withContextLength(8))) {
            PrefillException e = assertThrows(PrefillException.class, () -> s.generate(
                    "Once upon a time there was a very long story", 4, new Sampler(SamplerConfig.greedy()), true, false, null));
            assertEquals(PrefillException.Code.CONTEXT, e.code());
            assertEquals(0, s.position(), "nothing was processed");
        }
    }

    /**
     * With activations rounded as llama.cpp rounds them (Q8_0 blocks, rounded as its x86 code does, before
     * Q4_0/Q5_0/Q8_0 weights; Q8_K before K-quants and ternary weights) and products accumulated exactly (as
     * llama.cpp's integer dot products are), the logits match llama.cpp's dumps within 2e-3 at every prompt position
     * (measured: 1.2e-6 or better on these files; tiny-256-Q4_0, whose first activations come from a Q4_0 embedding
     * and so hit rounding ties, is 3.3e-7 with the x86 rounding and 1.7e-2 with the reference one), and
     * stories260K-Q4_0's greedy ids (smallest margin 0.022) equal the MANIFEST's.
     */
    @ParameterizedTest
    @ValueSource(strings = {"stories260K-Q4_0", "tiny-256-Q4_0", "tiny-256-Q4_K_M", "stories260K-Q8_0", "tiny-256-Q8_0",
        "tiny-256-TQ1_0", "tiny-256-TQ2_0"})
    void quantizedActivationsMatchLlamaCpp(String name) throws Exception {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"));
             Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32)
                     .withActivations(SessionOptions.Activations.QUANTIZED))) {
            Generation g = s.generate(Models.PROMPT, 32, new Sampler(SamplerConfig.greedy()), true, true, null);
            double d = Models.maxAbsDiff(Models.referenceLogits(name), g.promptLogits());
            assertTrue(d <= 2e-3, name + ": max |logit - llama.cpp| = " + d);
            if (name.equals("stories260K-Q4_0")) {
                assertArrayEquals(Models.ids("466 473 473 483 482 292 465 473 473 472 473 473 473 473 473 473 473 473 "
                        + "473 473 473 473 473 473 473 473 473 473 465 465 465 465"), g.generatedIds());
            }
        }
    }

    /**
     * In {@code quantized} mode a prompt's rows before Q4_0 and Q8_0 weights go to the exact GEMM (sums in double)
     * and a one-token chunk's to the integer dot products (exact block sums, blocks added in double): the same
     * numbers up to double rounding, so a prompt of about 60 tokens gives the same logits whole as token by token.
     * Bound 1e-5: an int8 rounding in a later projection that the two paths put on different sides of a tie moves
     * logits by about 1e-2 (measured 1.4e-2 on tiny-256-Q4_0 while the integer products added their blocks in float
     * lanes, as llama.cpp's x86 kernels do).
     */
    @ParameterizedTest
    @ValueSource(strings = {"tiny-256-Q4_0", "tiny-256-Q8_0", "stories260K-Q4_0"})
    void quantizedPromptLogitsDoNotDependOnTheChunks(String name) {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
            int[] ids = m.tokenizer().encode("Once upon a time there was a little girl who lived near the forest. Every "
                    + "day she walked to the river to fetch water, and every day she sang to the birds in the trees.");
            assertTrue(ids.length >= 40, name + ": the prompt should be long; it has " + ids.length + " tokens");
            SessionOptions o = SessionOptions.defaults().withKvType(KVElementType.F32)
                    .withActivations(SessionOptions.Activations.QUANTIZED);
            float[] whole;
            try (Session s = engine.newSession(m, o.withChunkSize(ids.length))) {
                whole = s.prefill(ids, true);
            }
            float[] tokenByToken;
            try (Session s = engine.newSession(m, o.withChunkSize(1))) {
                tokenByToken = s.prefill(ids, true);
            }
            double d = Models.maxAbsDiff(whole, tokenByToken);
            assertTrue(d <= 1e-5, name + ": " + ids.length + " tokens whole and token by token differ by " + d);
        }
    }

    /**
     * BitNet b1.58's per-token int8 activations before the ternary weights (integer dot products over the codes)
     * against the FP64 forward pass that rounds the same activations the same way (the Q4_K embedding and Q6_K output
     * keep float32 activations in both). Measured: 2.1e-3 for both files, from int8 roundings that float32 and FP64
     * inputs put on different sides of a tie (a whole step of the row's scale each); the float32 forward pass, which
     * does not round, is 2.3e-2 from that reference. The bound, 5e-3, sits between the two: it fails if the rounding
     * is skipped, a sum or a scale is wrong.
     */
    @ParameterizedTest
    @ValueSource(strings = {"tiny-256-TQ1_0", "tiny-256-TQ2_0"})
    void perTokenActivationsMatchTheFp64ForwardPassThatRoundsThem(String name) {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"));
             Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32)
                     .withActivations(SessionOptions.Activations.PER_TOKEN))) {
            Generation g = s.generate(Models.PROMPT, 4, new Sampler(SamplerConfig.greedy()), true, true, null);
            float[] ref = new ReferenceForward(m, engine.activationFormats(m, SessionOptions.Activations.PER_TOKEN))
                    .logits(g.promptIds());
            double d = Models.maxAbsDiff(ref, g.promptLogits());
            assertTrue(d <= 5e-3, name + ": max |logit - FP64 per-token reference| = " + d);
            double f32 = Models.maxAbsDiff(ref, greedy(m, KVElementType.F32, 4).promptLogits());
            assertTrue(f32 > 1e-2, name + ": per-token rounding should move the logits; float32 is only " + f32 + " away");
        }
    }


    /** Per-token activations on a model without ternary weights would silently be float32: refused, with the reason. */
    @Test
    void perTokenActivationsOnAModelWithoutTernaryWeightsAreRefused() {
        try (LlamaModel m = engine.load(Models.require("tiny-256-Q4_0.gguf"))) {
            PrefillException e = assertThrows(PrefillException.class, () -> engine.newSession(m,
                    SessionOptions.defaults().withActivations(SessionOptions.Activations.PER_TOKEN)).close());
            assertEquals(PrefillException.Code.ARGUMENT, e.code());
            assertTrue(e.getMessage().contains("ternary") && e.getMessage().contains("q4_0"), e.getMessage());
        }
    }

    /**
     * TQ1_0 and TQ2_0 store the same trits and scales, so their logits are bit-identical in every mode: those of the
     * prompt (the prefill GEMM, over decoded weights) and those of decode steps (each format's fused dot product).
     */
    @Test
    void tq1_0AndTq2_0GiveBitIdenticalLogits() {
        try (LlamaModel one = engine.load(Models.require("tiny-256-TQ1_0.gguf"));
             LlamaModel two = engine.load(Models.require("tiny-256-TQ2_0.gguf"))) {
            for (SessionOptions.Activations mode : SessionOptions.Activations.values()) {
                for (KVElementType kv : KVElementType.values()) {
                    SessionOptions o = SessionOptions.defaults().withKvType(kv).withActivations(mode);
                    assertArrayEquals(promptAndSteps(one, o), promptAndSteps(two, o), mode + " " + kv);
                }
            }
        }
    }

    /** {@return the prompt's logits at every position, then those of three decode steps} */
    private static float[] promptAndSteps(LlamaModel m, SessionOptions o) {
        try (Session s = engine.newSession(m, o)) {
            int[] ids = m.tokenizer().encode(Models.PROMPT);
            float[] prompt = s.prefill(ids, true);
            int vocab = m.config().vocab();
            float[] all = Arrays.copyOf(prompt, prompt.length + 3 * vocab);
            for (int i = 0; i < 3; i++) {
                System.arraycopy(s.decode(ids[ids.length - 1 - i]), 0, all, prompt.length + i * vocab, vocab);
            }
            return all;
        }
    }

    @Test
    void aModelNeedingAMissingFormatNamesTheModule() {
        Path q4 = Models.require("stories260K-Q4_0.gguf");
        PluginRegistry withoutQ4 = PluginRegistry.builder().properties(java.util.Map.of(PluginRegistry.PROP_EXCLUDE, "q4_0")).build();
        try (Engine e = Engine.builder().registry(withoutQ4).threads(1).build()) {
            PrefillException ex = assertThrows(PrefillException.class, () -> e.load(q4).close());
            assertEquals(PrefillException.Code.MISSING_FORMAT, ex.code());
            assertTrue(ex.getMessage().contains("is GGUF type 2 (Q4_0): add module dev.prefill4j.quant.q4_0"), ex.getMessage());
        }
    }
}
