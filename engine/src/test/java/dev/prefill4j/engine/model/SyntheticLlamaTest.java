package dev.prefill4j.engine.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.engine.TestModels;
import dev.prefill4j.engine.gguf.DeferredMetadata;
import dev.prefill4j.engine.gguf.GgufArray;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The synthetic models' vocabulary, which the generator computes piece by piece and does not deduplicate. */
class SyntheticLlamaTest {
    /**
     * Both shapes' vocabularies (512 and 128,256 pieces), as the tokenizer reads them ({@code requireStrings}) and as
     * a metadata look-up gives them, equal a plain enumeration in the documented order, every piece distinct: a
     * repeated piece would leave one of its two ids unreachable by the tokenizer, and a piece computed from a wrong id
     * would change every synthetic model's tokens and its {@code synth} file.
     */
    @Test
    void vocabularyIsTheDocumentedEnumerationWithDistinctPieces() {
        for (int size : new int[] {512, 128_256}) {
            Map<String, Object> md = new LinkedHashMap<>();
            SyntheticLlama.vocabulary(size, md);
            DeferredMetadata metadata = new DeferredMetadata(md);
            GgufContent content = TestModels.metadataOnly("test", metadata);
            List<String> pieces = content.requireStrings("tokenizer.ggml.tokens");
            List<String> expected = enumeration(size);
            assertEquals(expected, pieces);
            assertArrayEquals(expected.toArray(new String[0]),
                    (String[]) ((GgufArray) metadata.get("tokenizer.ggml.tokens").value()).values());
            Set<String> seen = new HashSet<>();
            for (int i = 0; i < size; i++) {
                assertTrue(seen.add(pieces.get(i)), "piece " + i + ": " + pieces.get(i));
            }
            assertEquals(List.of("<unk>", "<s>", "</s>", "<0x00>"), pieces.subList(0, 4));
            assertEquals("<0xFF>", pieces.get(258));
            assertEquals(List.of("\u2581", "!"), pieces.subList(259, 261));
            float[] scores = (float[]) ((GgufArray) metadata.get("tokenizer.ggml.scores").value()).values();
            assertEquals(0f, scores[258]);
            assertEquals(-(size - 1 - 259), scores[size - 1]);
            assertThrows(IndexOutOfBoundsException.class, () -> pieces.get(size));
        }
    }

    /** The vocabulary's pieces written out in order with nested loops, independently of the id arithmetic. */
    private static List<String> enumeration(int size) {
        List<String> out = new ArrayList<>(List.of("<unk>", "<s>", "</s>"));
        for (int b = 0; b < 256; b++) {
            out.add(String.format("<0x%02X>", b));
        }
        out.add("\u2581");
        for (char c = 33; c < 127; c++) {
            out.add(String.valueOf(c));
        }
        for (char c = 33; c < 127; c++) {
            out.add("\u2581" + c);
        }
        String letters = "etaoinshrdlcumwfgypbvkjxqz";
        for (int len = 2; out.size() < size; len++) {
            int combos = (int) Math.pow(letters.length(), len);
            for (int c = 0; c < combos && out.size() < size; c++) {
                StringBuilder sb = new StringBuilder();
                for (int k = 0, x = c; k < len; k++, x /= letters.length()) {
                    sb.append(letters.charAt(x % letters.length()));
                }
                out.add("\u2581" + sb);
                out.add(sb.toString());
            }
        }
        return out.subList(0, size);
    }

    /**
     * A part of a shape ({@code generate} with fewer layers and a smaller vocabulary, what {@code
     * Engine.readyKernels} runs) holds the whole model's first layer and first embedding rows byte for byte, says
     * what it is, and {@code weightBytes} gives the whole model's bytes without generating it.
     */
    @Test
    void aPartHoldsTheWholeModelsFirstLayerAndWeightBytesCountsTheWhole() {
        PluginRegistry registry = PluginRegistry.load();
        Quantizer q8 = registry.quantizer("q8_0").orElseThrow();
        Quantizer f32 = registry.quantizer("f32").orElseThrow();
        SyntheticLlama.Shape shape = SyntheticLlama.Shape.TINY;
        try (SyntheticLlama whole = SyntheticLlama.generate(shape, q8, f32, 3, null);
             SyntheticLlama part = SyntheticLlama.generate(shape, 1, 300, q8, f32, 3, null)) {
            assertEquals(whole.tensors().stream().mapToLong(t -> t.data().byteSize()).sum(),
                    SyntheticLlama.weightBytes(shape, q8, f32));
            assertEquals(1, part.requireLong("llama.block_count"));
            assertEquals(300, part.requireStrings("tokenizer.ggml.tokens").size());
            assertTrue(part.requireString("general.name").contains("(1 of 4 layers, vocabulary 300)"),
                    part.requireString("general.name"));
            for (GgufTensor t : part.tensors()) {
                if (!t.name().startsWith("blk.0.") && !t.name().equals("token_embd.weight")) {
                    continue; // output_norm and output come after the layers: other seeds (indices) in a part
                }
                MemorySegment w = whole.tensor(t.name()).orElseThrow().data();
                assertEquals(-1, w.asSlice(0, t.data().byteSize()).mismatch(t.data()), t.name());
            }
            assertEquals(whole.tensors().size() - 3 * 9, part.tensors().size());
        }
        assertThrows(PrefillException.class, () -> SyntheticLlama.generate(shape, 5, 512, q8, f32, 3, null));
        assertThrows(PrefillException.class, () -> SyntheticLlama.generate(shape, 1, 100, q8, f32, 3, null));
    }
}
