package dev.prefill4j.engine.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.engine.TestModels;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.llama2c.Llama2cCheckpoint;
import org.junit.jupiter.api.Test;

/** Prompt ids stated in ../shared/models/MANIFEST.md (made by llama.cpp's tokenizer). */
class TokenizerTest {
    static final int[] STORIES_IDS = {1, 403, 407, 261, 378};
    static final int[] TINY_IDS = {1, 394, 283, 272, 274, 374, 285, 284, 283, 354, 373, 278, 282, 274};

    @Test
    void storiesGgufEncodesTheManifestIds() {
        try (GgufFile f = GgufFile.open(TestModels.require("stories260K-F32.gguf"))) {
            Tokenizer t = Tokenizer.fromGguf(f);
            assertArrayEquals(STORIES_IDS, t.encode("Once upon a time"));
            assertEquals(" Once upon a time", t.decode(t.encode("Once upon a time")));
        }
    }

    @Test
    void tinyGgufEncodesTheManifestIds() {
        try (GgufFile f = GgufFile.open(TestModels.require("tiny-256-F32.gguf"))) {
            Tokenizer t = Tokenizer.fromGguf(f);
            assertArrayEquals(TINY_IDS, t.encode("Once upon a time"));
        }
    }

    @Test
    void llama2cTokenizerBinEncodesTheSameIds() {
        try (Llama2cCheckpoint ck = Llama2cCheckpoint.open(TestModels.require("stories260K.bin"),
                TestModels.require("tok512.bin"))) {
            Tokenizer t = Tokenizer.fromGguf(ck);
            assertArrayEquals(STORIES_IDS, t.encode("Once upon a time"));
        }
    }

    /**
     * Special pieces in the text: as llama.cpp's llama-tokenize reads them (build c392e50, {@code llama-tokenize -m
     * FILE -f PROMPT --ids --no-escape}, and with {@code --no-parse-special}): BOS, EOS and unknown written out
     * become those tokens, with the dummy prefix space again after each; without parsing they are text.
     */
    @Test
    void specialPiecesInTheTextAreReadAsLlamaCppReadsThem() {
        String text = "<s>Once upon</s> a time<unk>";
        try (GgufFile f = GgufFile.open(TestModels.require("stories260K-F32.gguf"))) {
            Tokenizer t = Tokenizer.fromGguf(f);
            assertArrayEquals(new int[] {1, 1, 403, 407, 2, 410, 261, 378, 0}, t.encode(text));
            assertArrayEquals(new int[] {1, 410, 504, 419, 505, 441, 416, 331, 407, 504, 492, 419, 505, 261, 378, 504,
                379, 433, 505}, t.encode(text, true, false));
        }
        try (GgufFile f = GgufFile.open(TestModels.require("tiny-256-F32.gguf"))) {
            Tokenizer t = Tokenizer.fromGguf(f);
            assertArrayEquals(new int[] {1, 1, 394, 283, 272, 274, 374, 285, 284, 283, 2, 259, 354, 373, 278, 282, 274,
                0}, t.encode(text));
            assertArrayEquals(new int[] {1, 259, 339, 288, 341, 310, 283, 272, 274, 374, 285, 284, 283, 339, 336, 288,
                341, 354, 373, 278, 282, 274, 339, 290, 283, 280, 341}, t.encode(text, true, false));
        }
    }

    @Test
    void unknownCharactersFallBackToByteTokens() {
        try (GgufFile f = GgufFile.open(TestModels.require("stories260K-F32.gguf"))) {
            Tokenizer t = Tokenizer.fromGguf(f);
            // "☃" is U+2603 = E2 98 83; the vocabulary has no piece for it, so three byte tokens <0xE2><0x98><0x83>.
            int[] ids = t.encode("☃", false);
            assertEquals(4, ids.length, java.util.Arrays.toString(ids));
            int[] tail = java.util.Arrays.copyOfRange(ids, ids.length - 3, ids.length);
            assertEquals("<0xE2>", t.piece(tail[0]));
            assertEquals("<0x98>", t.piece(tail[1]));
            assertEquals("<0x83>", t.piece(tail[2]));
            assertEquals(" ☃", t.decode(ids));
        }
    }

    /**
     * Generated text leaves out unknown and control tokens, as llama.cpp's token_to_piece without {@code special}
     * (llama-cli's default) does; a normal piece keeps its text with the SentencePiece space marker as a space.
     */
    @Test
    void unknownAndControlTokensPrintNothing() {
        String[] pieces = {"<unk>", "<s>", "</s>", "\u2581hi", "x"};
        Tokenizer t = new Tokenizer(pieces, new float[5], new int[] {2, 3, 3, 1, 1}, 1, 2, 0, false, false);
        assertArrayEquals(new byte[0], t.bytes(0), "unknown");
        assertArrayEquals(new byte[0], t.bytes(1), "BOS");
        assertArrayEquals(new byte[0], t.bytes(2), "EOS");
        assertEquals(" hix", t.decode(new int[] {0, 3, 2, 4, 0}));
        // A user-defined piece prints as written (its U+2581 kept), an unused one nothing, as in llama.cpp.
        Tokenizer u = new Tokenizer(new String[] {"<unk>", "\u2581\u2581", "<unused0>", "x"}, new float[4],
                new int[] {2, 4, 5, 1}, -1, -1, 0, false, false);
        assertEquals("\u2581\u2581x", u.decode(new int[] {1, 2, 3}));
    }

    /** Pieces longer than the tokenizer's first guess at their total length: stored whole, found by their chars. */
    @Test
    void longPiecesAreKeptWhole() {
        String longA = "\u2581" + "a".repeat(40);
        String longB = "b".repeat(33) + "\u00e9";
        String[] pieces = {"<unk>", "<s>", "</s>", longA, longB, "x", "y", "xy"};
        float[] scores = {0, 0, 0, 0, 0, -5, -5, -1};
        int[] types = {2, 3, 3, 1, 1, 1, 1, 1};
        Tokenizer t = new Tokenizer(pieces, scores, types, 1, 2, 0, false, false);
        for (int i = 0; i < pieces.length; i++) {
            assertEquals(pieces[i], t.piece(i), "piece " + i);
        }
        assertArrayEquals(new int[] {7}, t.encode("xy"));
        assertEquals(" " + "a".repeat(40), t.decode(new int[] {3}));
    }

    @Test
    void mergesHighestScoreFirstAndLeftmostOnTies() {
        // Vocabulary: a, b, ab, bb. In "abb" the pairs ab and bb tie: the leftmost (ab) merges, giving [ab, b]; when bb
        // scores higher it merges first, giving [a, bb].
        String[] pieces = {"<unk>", "<s>", "</s>", "a", "b", "ab", "bb"};
        float[] scores = {0, 0, 0, -5, -5, -1, -1};
        int[] types = {2, 3, 3, 1, 1, 1, 1};
        Tokenizer t = new Tokenizer(pieces, scores, types, 1, 2, 0, true, false);
        assertArrayEquals(new int[] {1, 5, 4}, t.encode("abb"));
        scores[6] = -0.5f;
        Tokenizer t2 = new Tokenizer(pieces, scores, types, 1, 2, 0, true, false);
        assertArrayEquals(new int[] {1, 3, 6}, t2.encode("abb"));
    }
}
