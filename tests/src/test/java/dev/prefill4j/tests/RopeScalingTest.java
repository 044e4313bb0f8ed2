package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.GgufWriter;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.verify.ReferenceForward;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.Map;
import java.util.function.Consumer;
import org.junit.jupiter.api.AutoClose;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Llama 3.1's RoPE frequency factors ({@code rope_freqs.weight}) and linear RoPE scaling, on copies of tiny-256-F32
 * with the tensor or keys added; and the refusal of what the forward pass would leave out. The rotation itself is
 * checked against its FP64 formula in the CPU kernel tests; here, that the model reads and applies it.
 */
class RopeScalingTest {
    /** Long enough that positions, and so the angles the divisors change, reach 30 and more. */
    private static final String PROMPT = "Once upon a time there was a little girl who liked to play in the park with "
            + "her dog and her friends every day";
    private static final GgmlType F32 = GgmlType.byName("F32").orElseThrow();
    /** One engine for the class's tests, closed after them. */
    @AutoClose
    private static final Engine engine = Engine.builder().threads(2).build();

    @TempDir
    Path dir;

    /** tiny-256-F32 written again with {@code extra} applied to the writer. */
    private Path variant(String name, Consumer<GgufWriter> extra) {
        return Models.rewrite("tiny-256-F32.gguf", dir.resolve(name + ".gguf"), key -> true, extra);
    }

    private static Consumer<GgufWriter> ropeFreqs(float[] factors) {
        return w -> w.tensor("rope_freqs.weight", new long[] {factors.length}, F32,
                dst -> MemorySegment.copy(factors, 0, dst, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, factors.length));
    }

    private static float[] promptLogits(Path model) {
        try (LlamaModel m = engine.load(model);
             Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            return s.generate(PROMPT, 1, new Sampler(SamplerConfig.greedy()), true, true, null).promptLogits();
        }
    }

    private static float[] referenceLogits(Path model) {
        try (LlamaModel m = engine.load(model)) {
            return new ReferenceForward(m, Map.of()).logits(m.tokenizer().encode(PROMPT));
        }
    }

    private static int pairs() {
        try (LlamaModel m = engine.load(Models.require("tiny-256-F32.gguf"))) {
            return m.config().ropeDim() / 2;
        }
    }

    @Test
    void frequencyFactorsChangeTheRotationAsTheReferenceDoes() {
        int n = pairs();
        float[] ramp = new float[n];
        float[] ones = new float[n];
        float[] fours = new float[n];
        for (int i = 0; i < n; i++) {
            ramp[i] = 1 + 7f * i / (n - 1); // Llama 3.1's factors run from 1 (high frequencies) to 8 (low)
            ones[i] = 1;
            fours[i] = 4;
        }
        Path plain = Models.require("tiny-256-F32.gguf");
        Path scaled = variant("ramp", ropeFreqs(ramp));
        // The session against the FP64 forward pass, both with the factors (1e-4 as the F32 files' own check).
        float[] got = promptLogits(scaled);
        double d = Models.maxAbsDiff(referenceLogits(scaled), got);
        assertTrue(d <= 1e-4, "max |logit - FP64 reference| with frequency factors = " + d);
        // And they matter: the same model without them gives other logits.
        double moved = Models.maxAbsDiff(promptLogits(plain), got);
        assertTrue(moved > 1e-2, "the factors moved the logits by only " + moved);
        // Factors of 1 are no factors, bit for bit.
        assertArrayEquals(promptLogits(plain), promptLogits(variant("ones", ropeFreqs(ones))));
        // A linear scaling factor of 4 divides every frequency by 4, as factors of 4 do.
        Path linear = variant("linear", w -> w.put("llama.rope.scaling.type", GgufValue.string("linear"))
                .put("llama.rope.scaling.factor", GgufValue.f32(4)));
        assertArrayEquals(promptLogits(variant("fours", ropeFreqs(fours))), promptLogits(linear));
    }

    private void assertRefused(Path model, String expected) {
        PrefillException e = assertThrows(PrefillException.class, () -> engine.load(model).close());
        assertTrue(e.getMessage().contains(expected), e.getMessage());
    }

    @Test
    void whatTheForwardPassWouldLeaveOutIsRefused() {
        int n = pairs();
        float[] zero = new float[n];
        java.util.Arrays.fill(zero, 1);
        zero[n / 2] = 0;
        assertRefused(variant("zero", ropeFreqs(zero)), "rope_freqs.weight holds 0.0");
        assertRefused(variant("short", ropeFreqs(new float[n - 1])), "tensor 'rope_freqs.weight' has shape");
        assertRefused(variant("yarn", w -> w.put("llama.rope.scaling.type", GgufValue.string("yarn"))),
                "RoPE scaling 'yarn' (llama.rope.scaling.type) is not supported yet");
        // A bias the llama architecture has no place for (as a Qwen file has) would be skipped: refused instead.
        float[] bias = new float[256];
        assertRefused(variant("bias", w -> w.tensor("blk.0.attn_q.bias", new long[] {bias.length}, F32,
                dst -> MemorySegment.copy(bias, 0, dst, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, bias.length))),
                "tensor 'blk.0.attn_q.bias' is not part of the llama architecture");
    }
}
