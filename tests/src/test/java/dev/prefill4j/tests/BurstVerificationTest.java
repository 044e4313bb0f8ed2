package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.BurstGeneration;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.draft.DraftSource;
import dev.prefill4j.engine.draft.PromptLookupDrafts;
import dev.prefill4j.engine.model.LlamaModel;
import java.util.Arrays;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Burst verification is lossless: greedy output with bursts equals greedy output without them. */
class BurstVerificationTest {
    /** One engine for the class's tests, closed after them. */
    @AutoClose
    static final Engine engine = Engine.builder().threads(2).build();

    static final int N = 48;

    static int[] plainGreedy(LlamaModel m) {
        try (Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            return s.generate(Models.PROMPT, N, new Sampler(SamplerConfig.greedy()), true, false, null).generatedIds();
        }
    }

    static BurstGeneration bursts(LlamaModel m, int k, DraftSource d) {
        try (Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            return s.generateWithBursts(Models.PROMPT, N, k, d, true, null);
        }
    }

    @ParameterizedTest
    @CsvSource({"stories260K-F32,2", "stories260K-F32,4", "stories260K-F32,8", "tiny-256-F32,4", "tiny-256-F32,16"})
    void promptLookupBurstsGiveTheGreedyOutput(String name, int k) {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
            int[] expected = plainGreedy(m);
            BurstGeneration b = bursts(m, k, PromptLookupDrafts.defaults());
            assertArrayEquals(expected, b.generation().generatedIds());
            // These outputs repeat themselves, so prompt lookup must have saved passes.
            assertTrue(b.draftsAccepted() > 0 && b.passes() < N - 1, "passes " + b.passes() + ", accepted "
                    + b.draftsAccepted() + "/" + b.draftsProposed());
        }
    }

    /**
     * An oracle that proposes the true continuation is always accepted, so K tokens come out per pass; a source that
     * proposes wrong tokens is always rejected and changes nothing but the work done.
     */
    @ParameterizedTest
    @CsvSource({"stories260K-F32,4", "tiny-256-F32,8"})
    void oracleAndAdversarialDrafts(String name, int k) {
        try (LlamaModel m = engine.load(Models.require(name + ".gguf"))) {
            int[] expected = plainGreedy(m);
            int promptLength = m.tokenizer().encode(Models.PROMPT).length;
            DraftSource oracle = (h, len, max) -> Arrays.copyOfRange(expected, len - promptLength,
                    Math.min(expected.length, len - promptLength + max));
            BurstGeneration good = bursts(m, k, oracle);
            assertArrayEquals(expected, good.generation().generatedIds());
            assertEquals(1.0, good.acceptanceRate());
            assertEquals((N - 1 + k - 1) / k, good.passes(), "passes with an oracle");
            DraftSource wrong = (h, len, max) -> {
                int[] w = new int[max];
                for (int i = 0; i < max; i++) {
                    int truth = len - promptLength + i < expected.length ? expected[len - promptLength + i] : 0;
                    w[i] = (truth + 1) % m.config().vocab();
                }
                return w;
            };
            BurstGeneration bad = bursts(m, k, wrong);
            assertArrayEquals(expected, bad.generation().generatedIds());
            assertEquals(0, bad.draftsAccepted());
            assertEquals(N - 1, bad.passes());
        }
    }
}
