package dev.prefill4j.engine.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.engine.gguf.GgufArray;
import dev.prefill4j.engine.gguf.GgufValue;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The synthetic models' vocabulary, which the generator does not deduplicate. */
class SyntheticLlamaTest {
    /**
     * Every piece of both shapes' vocabularies (512 and 128,256 pieces) is distinct and none is missing, and the
     * specials, the first byte token and the first single-character pieces have the ids the generator gives them: a
     * repeated piece would leave one of its two ids unreachable by the tokenizer.
     */
    @Test
    void vocabularyPiecesAreDistinct() {
        for (int size : new int[] {512, 128_256}) {
            Map<String, GgufValue> md = new LinkedHashMap<>();
            SyntheticLlama.vocabulary(size, md);
            String[] pieces = (String[]) ((GgufArray) md.get("tokenizer.ggml.tokens").value()).values();
            assertEquals(size, pieces.length);
            Set<String> seen = new HashSet<>();
            for (int i = 0; i < size; i++) {
                assertTrue(pieces[i] != null && seen.add(pieces[i]), "piece " + i + ": " + pieces[i]);
            }
            assertEquals(List.of("<unk>", "<s>", "</s>", "<0x00>"), List.of(pieces).subList(0, 4));
            assertEquals(List.of("\u2581", "!"), List.of(pieces).subList(259, 261));
        }
    }
}
