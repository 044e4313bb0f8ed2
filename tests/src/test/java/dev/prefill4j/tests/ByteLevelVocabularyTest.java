package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.ValueType;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.verify.ReferenceForward;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A model file with a byte-level BPE vocabulary (GGUF's {@code gpt2}, as Llama 3's files have): tiny-256-F32's
 * weights under a 512-piece vocabulary written here, read back through the file's metadata (merges included), and
 * run. The pieces: the 256 bytes in byte order (GPT-2's characters), the five of {@code MERGES}, fillers, and BOS.
 */
class ByteLevelVocabularyTest {
    private static final String[] MERGES = {"l l", "h e", "he ll", "hell o", "\u0120 hello"};
    private static final int BOS = 511;

    @TempDir
    Path dir;

    /** GPT-2's {@code bytes_to_unicode}: printable Latin-1 bytes as themselves, the other 68 from U+0100 on. */
    private static String byteChar(int b) {
        int n = 0;
        for (int i = 0; i <= b; i++) {
            boolean printable = i >= '!' && i <= '~' || i >= 0xA1 && i <= 0xAC || i >= 0xAE;
            if (i == b) {
                return String.valueOf((char) (printable ? b : 256 + n));
            }
            n += printable ? 0 : 1;
        }
        throw new AssertionError();
    }

    private Path model() {
        return model(-1);
    }

    /** The model, with piece {@code eot} (if not -1) Llama 3's end-of-turn control token. */
    private Path model(int eot) {
        List<String> pieces = new ArrayList<>();
        for (int b = 0; b < 256; b++) {
            pieces.add(byteChar(b));
        }
        pieces.addAll(List.of("ll", "he", "hell", "hello", "\u0120hello"));
        while (pieces.size() < BOS) {
            pieces.add("\u0120w" + pieces.size()); // " w261" and on: "Ġ" stands for the space byte
        }
        pieces.add("<|begin_of_text|>");
        int[] types = new int[pieces.size()];
        Arrays.fill(types, 1);
        types[BOS] = 3;
        if (eot >= 0) {
            pieces.set(eot, "<|eot_id|>");
            types[eot] = 3;
        }
        return Models.rewrite("tiny-256-F32.gguf", dir.resolve("bpe" + eot + ".gguf"),
                key -> !key.startsWith("tokenizer."),
                w -> w.put("tokenizer.ggml.model", GgufValue.string("gpt2"))
                        .put("tokenizer.ggml.pre", GgufValue.string("llama-bpe"))
                        .put("tokenizer.ggml.tokens", GgufValue.array(ValueType.STRING, pieces.toArray(String[]::new)))
                        .put("tokenizer.ggml.token_type", GgufValue.array(ValueType.INT32, types))
                        .put("tokenizer.ggml.merges", GgufValue.array(ValueType.STRING, MERGES))
                        .put("tokenizer.ggml.bos_token_id", GgufValue.u32(BOS))
                        .put("tokenizer.ggml.eos_token_id", GgufValue.u32(BOS)));
    }

    @Test
    void aByteLevelVocabularyFileRuns() {
        try (Engine engine = Engine.builder().threads(2).build(); LlamaModel m = engine.load(model());
             Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            // BOS (Llama 3's pre-tokenizer adds it), "hello" and " hello" by the merges, "!" as its byte.
            int[] expected = {BOS, 259, 260, '!'};
            Generation g = s.generate("hello hello!", 8, new Sampler(SamplerConfig.greedy()), true, true, null);
            assertArrayEquals(expected, g.promptIds());
            double d = Models.maxAbsDiff(new ReferenceForward(m, Map.of()).logits(expected), g.promptLogits());
            assertTrue(d <= 1e-4, "max |logit - FP64 reference| = " + d);
            // This model's greedy choices here are fillers (ids 261..510), which decode as " w" and their id.
            StringBuilder text = new StringBuilder();
            for (int id : g.generatedIds()) {
                assertTrue(id > 260 && id < BOS, "not a filler: " + id);
                text.append(" w").append(id);
            }
            assertEquals(text.toString(), g.text());
        }
    }

    /**
     * The greedy run above chooses 307, then 406: with 406 made Llama 3's {@code <|eot_id|>}, a run that stops at the
     * end of a generation stops there, though the file names no end-of-turn id, as an instruct model's answer ends.
     */
    @Test
    void llama3sEndOfTurnEndsAGeneration() {
        try (Engine engine = Engine.builder().threads(2).build(); LlamaModel m = engine.load(model(406));
             Session s = engine.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            Generation g = s.generate("hello hello!", 8, new Sampler(SamplerConfig.greedy()), false, false, null);
            assertArrayEquals(new int[] {307, 406}, g.generatedIds());
            assertEquals(" w307", g.text()); // the control token prints nothing
        }
    }
}
