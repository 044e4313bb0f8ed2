package dev.prefill4j.engine.verify;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import java.util.Arrays;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * Checks a configuration (engine, model, session options) against the {@link ReferenceForward} on a short prompt
 * of deterministic random tokens, its first half prefilled and the rest decoded one token at a time, so that both the
 * prompt's kernels and the decode steps' are compared: the label every benchmark prints.
 *
 * <p>The reference computes the function the configuration is meant to compute: it rounds each projection's input as
 * quantized activations do, and each position's K and V as the KV cache stores them ({@link ReferenceForward}). What
 * is left is float32 arithmetic, and its last-bit differences upstream of a rounding, which now and then round an
 * element the other way (one F16 step of a K or V element; one int8 step of a Q8_0 block) and grow through the later
 * layers. Tolerance on the largest logit difference, relative to the largest reference logit magnitude {@code M}:
 * {@code (1e-4 + 1e-4 M) x (kv + act)}, with {@code kv} 1 for an F32 KV cache, 20 for F16 and 200 for Q8_0, and
 * {@code act} 0 for float32 activations and 1000 for quantized or per-token ones. The two sources of such flips add
 * up. Measured with {@code prefill4j bench -p 4 -n 4 -r 1 --verify-tokens N} (N = 7, 64, 200) on the eight GGUF files
 * of {@code stories260K} and {@code tiny-256} under each KV type and activation mode, the largest differences were,
 * in units of {@code 1e-4 + 1e-4 M}: 0.05 with F32 KV and float32 activations, 2.7 with F16 KV, 53 with Q8_0 KV, 350
 * with quantized activations (stories260K Q4_0, 200 tokens; 84 at the default 7 tokens on tiny-256 Q4_0); so each
 * bound is about 3 to 20 times the largest difference seen.
 *
 * @param passed    whether the difference is within tolerance
 * @param maxDiff   largest |logit - reference| over every position
 * @param tolerance the bound applied
 * @param tokens    prompt length used
 * @since 0.1
 */
@Api.Stable
public record Verification(boolean passed, double maxDiff, double tolerance, int tokens) {
    /**
     * Runs the check.
     *
     * @param engine  the engine (its backend and kernels are what is checked)
     * @param model   the model
     * @param options the session options to check
     * @param tokens  prompt length (small: the reference is scalar FP64)
     * @return the result
     */
    public static Verification run(Engine engine, LlamaModel model, SessionOptions options, int tokens) {
        int[] ids = new SplittableRandom(7).ints(tokens, 3, model.config().vocab()).toArray();
        // The first half as a prompt, the rest one token at a time: decode steps take their own kernels (one activation
        // row; where a format packs its matrices for them, the packed copies, PackedMatrix), and they are checked too.
        int prompt = prompted(tokens);
        int vocab = model.config().vocab();
        // The reference first, and each of the session's logits rows compared as it comes: the session's rows are
        // not kept (a second array of tokens x vocab floats, 3.5 MiB for a 128K vocabulary, was on top of the
        // reference's at the end and raised bench's peak resident size).
        float[] ref = new ReferenceForward(model, engine.activationFormats(model, options.activations()),
                options.kvType()).logits(ids);
        double mag = 0;
        for (float r : ref) {
            mag = Math.max(mag, Math.abs(r));
        }
        double max;
        try (Session s = engine.newSession(model, options.withContextLength(Math.max(tokens, 16)))) {
            max = largestDifference(s.prefill(Arrays.copyOf(ids, prompt), true), ref, 0, prompt * vocab);
            for (int i = prompt; i < tokens; i++) {
                max = Math.max(max, largestDifference(s.decode(ids[i]), ref, i * vocab, vocab));
            }
        }
        double kv = switch (options.kvType()) {
            case F32 -> 1;
            case F16 -> 20;
            case Q8_0 -> 200;
        };
        double act = options.activations() == SessionOptions.Activations.F32 ? 0 : 1000;
        double tol = (1e-4 + 1e-4 * mag) * (kv + act);
        return new Verification(max <= tol, max, tol, tokens);
    }

    /**
     * {@return e.g. {@code "VERIFIED against the FP64 reference: max |Δlogit| 2.1e-06 <= 1.2e-03 (7 tokens: 4
     * prefilled, 3 decoded)"}}
     */
    public String label() {
        int prompt = prompted(tokens);
        return String.format(Locale.ROOT, "%s against the FP64 reference: max |Δlogit| %.2e %s %.2e (%d tokens: %d "
                + "prefilled, %d decoded)", passed ? "VERIFIED" : "FAILED", maxDiff, passed ? "<=" : ">", tolerance,
                tokens, prompt, tokens - prompt);
    }

    /** {@return the largest {@code |got[i] - ref[at + i]|} for {@code i < count}, NaN where a value is NaN} */
    static double largestDifference(float[] got, float[] ref, int at, int count) {
        double max = 0;
        for (int i = 0; i < count; i++) {
            double d = Math.abs((double) got[i] - ref[at + i]);
            max = d > max || Double.isNaN(d) ? d : max;
        }
        return max;
    }

    /** {@return how many of a check's {@code tokens} go in as the prompt: the first half, rounded up} */
    private static int prompted(int tokens) {
        return Math.max(1, (tokens + 1) / 2);
    }
}
