package dev.prefill4j.engine.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.TestModels;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.ValueType;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import org.junit.jupiter.api.Test;

/**
 * Byte-level BPE against stated expectations: GPT-2's byte-to-character table at its known points, merges by rank,
 * and the Llama 3 and GPT-2 patterns' splits worked out by hand from the patterns. (Checked by hand, outside the
 * tests, against llama.cpp's test vectors for the GPT-2 vocabulary: 46 of 46 texts give its ids; see the README.)
 */
class ByteLevelBpeTest {
    /**
     * GPT-2's {@code bytes_to_unicode} restated: the printable Latin-1 bytes stand for themselves, the others take
     * U+0100 on in byte order. Pinned at known points by {@link #byteTableMatchesGpt2sKnownCharacters}.
     */
    private static String byteChar(int b) {
        if (b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
            return String.valueOf((char) b);
        }
        int n = 0;
        for (int i = 0; i < b; i++) {
            if (!(i >= '!' && i <= '~' || i >= 0xA1 && i <= 0xAC || i >= 0xAE)) {
                n++;
            }
        }
        return String.valueOf((char) (256 + n));
    }

    /** A vocabulary: the 256 byte pieces (ids 0..255), then {@code extra} (ids 256 on), all normal. */
    private static Tokenizer vocabulary(String pre, List<String> extra, String... merges) {
        List<String> pieces = new ArrayList<>();
        for (int b = 0; b < 256; b++) {
            pieces.add(byteChar(b));
        }
        pieces.addAll(extra);
        int[] types = new int[pieces.size()];
        Arrays.fill(types, Tokenizer.NORMAL);
        return Tokenizer.byteLevelBpe(pieces.toArray(String[]::new), types, merges, pre, -1, -1, false);
    }

    private static final List<String> HELLO = List.of("ll", "he", "hell", "hello", "\u0120hello", "el", "ab");
    private static final String[] HELLO_MERGES = {"l l", "h e", "he ll", "hell o", "\u0120 hello", "e l"};

    private static int id(String piece) {
        return piece.length() == 1 && piece.charAt(0) < 256 && byteChar(piece.charAt(0)).equals(piece)
                ? piece.charAt(0) : 256 + HELLO.indexOf(piece);
    }

    @Test
    void byteTableMatchesGpt2sKnownCharacters() {
        // Known from GPT-2 vocabularies: a space is "Ġ" (U+0120), a newline "Ċ" (U+010A), a tab "ĉ" (U+0109),
        // DEL "ġ" (U+0121), the soft hyphen 0xAD "Ń" (U+0143), the last of the 68.
        assertEquals("\u0120", byteChar(' '));
        assertEquals("\u010A", byteChar('\n'));
        assertEquals("\u0109", byteChar('\t'));
        assertEquals("\u0121", byteChar(0x7F));
        assertEquals("\u0143", byteChar(0xAD));
        assertEquals("A", byteChar('A'));
        for (int b = 0; b < 256; b++) {
            assertArrayEquals(new byte[] {(byte) b}, ByteLevelBpe.bytes(byteChar(b)), "byte " + b);
        }
    }

    @Test
    void mergesTheLowestRankFirst() {
        Tokenizer t = vocabulary("gpt-2", HELLO, HELLO_MERGES);
        // "hello": l+l (rank 0), h+e (1), he+ll (2), hell+o (3); " hello" then Ġ+hello (4).
        assertArrayEquals(new int[] {id("hello"), id("\u0120hello")}, t.encode("hello hello"));
        // "ell": e+l has rank 5, l+l rank 0, so l+l wins though e+l is further left.
        assertArrayEquals(new int[] {'e', id("ll")}, t.encode("ell"));
        // "lll": two l+l pairs of one rank; the leftmost merges.
        assertArrayEquals(new int[] {id("ll"), 'l'}, t.encode("lll"));
        assertEquals("hello hello", t.decode(t.encode("hello hello")));
    }

    @Test
    void llama3TakesAWordThatIsAPieceWhole() {
        // "ab" is a piece but no merge makes it: GPT-2 keeps the bytes, Llama 3 (ignore_merges) takes the piece.
        assertArrayEquals(new int[] {'a', 'b'}, vocabulary("gpt-2", HELLO, HELLO_MERGES).encode("ab"));
        assertArrayEquals(new int[] {id("ab")}, vocabulary("llama-bpe", HELLO, HELLO_MERGES).encode("ab"));
    }

    @Test
    void anyTextRoundTripsThroughTheBytes() {
        Tokenizer t = vocabulary("llama-bpe", HELLO, HELLO_MERGES);
        String text = "héllo\u00A0wörld 🦙\r\n\t12345 'LL ?!…\u0000";
        assertEquals(text, t.decode(t.encode(text)));
        // "é" is C3 A9: the pieces "Ã" and "©", each its own byte.
        assertArrayEquals(new int[] {0xC3, 0xA9}, t.encode("é"));
    }

    private static List<String> split(ByteLevelBpe.PreTokenizer pre, String text) {
        List<String> words = new ArrayList<>();
        Matcher m = pre.pattern.matcher(text);
        int end = 0;
        while (m.find()) {
            assertEquals(end, m.start(), "a gap in the split of '" + text + "'");
            words.add(m.group());
            end = m.end();
        }
        assertEquals(text.length(), end);
        return words;
    }

    @Test
    void llama3PatternSplitsAsItsAlternativesSay() {
        ByteLevelBpe.PreTokenizer p = ByteLevelBpe.PreTokenizer.LLAMA3;
        // Digits in threes and apart from the space before them; a contraction its own word.
        assertEquals(List.of("Hello", " world", "'s", " ", "123", "45"), split(p, "Hello world's 12345"));
        // Contractions in either case.
        assertEquals(List.of("I", "'LL", " go"), split(p, "I'LL go"));
        // Of two spaces before a word, the last goes with the word.
        assertEquals(List.of("a", " ", " b"), split(p, "a  b"));
        // Line breaks together; punctuation with the line ends after it.
        assertEquals(List.of("x", "\n\n", "y", " ...!!\n", "z"), split(p, "x\n\ny ...!!\nz"));
        // \s is Unicode's White_Space: of two no-break spaces the last goes with the word, as of two spaces.
        assertEquals(List.of("a", "\u00A0", "\u00A0b"), split(p, "a\u00A0\u00A0b"));
        // One non-letter before a letter run joins it.
        assertEquals(List.of("(hello", ")"), split(p, "(hello)"));
    }

    @Test
    void gpt2PatternSplitsAsItsAlternativesSay() {
        ByteLevelBpe.PreTokenizer p = ByteLevelBpe.PreTokenizer.GPT2;
        assertEquals(List.of("Hello", " world", "'s", " 12345"), split(p, "Hello world's 12345"));
        // Contractions in lower case only.
        assertEquals(List.of("I", "'", "LL", " go"), split(p, "I'LL go"));
        assertEquals(List.of("(", "hello", ")"), split(p, "(hello)"));
        // Spaces before a word leave it one: "\n\n" splits where Llama 3's pattern keeps it whole.
        assertEquals(List.of("x", "\n", "\n", "y"), split(p, "x\n\ny"));
    }

    @Test
    void refusesWhatItCannotTokenize() {
        IllegalArgumentException pre = assertThrows(IllegalArgumentException.class,
                () -> vocabulary("qwen2", HELLO, HELLO_MERGES));
        assertTrue(pre.getMessage().contains("pre-tokenizer 'qwen2' is not supported"), pre.getMessage());
        IllegalArgumentException merge = assertThrows(IllegalArgumentException.class,
                () -> vocabulary("gpt-2", HELLO, "x yz"));
        assertTrue(merge.getMessage().contains("merge 0 'x yz'"), merge.getMessage());
        String[] noSpace = {"a", "b"};
        IllegalArgumentException bytes = assertThrows(IllegalArgumentException.class,
                () -> Tokenizer.byteLevelBpe(noSpace, new int[] {1, 1}, new String[0], "gpt-2", -1, -1, false));
        assertTrue(bytes.getMessage().contains("no piece for byte 0x00"), bytes.getMessage());
    }

    /** A {@code gpt2} vocabulary in GGUF metadata, as llama.cpp's converter writes Llama 3's. */
    private static GgufContent gguf(String pre) {
        List<String> pieces = new ArrayList<>();
        for (int b = 0; b < 256; b++) {
            pieces.add(byteChar(b));
        }
        pieces.addAll(HELLO);
        pieces.add("<|begin_of_text|>");
        int[] types = new int[pieces.size()];
        Arrays.fill(types, Tokenizer.NORMAL);
        types[types.length - 1] = Tokenizer.CONTROL;
        Map<String, GgufValue> md = new LinkedHashMap<>();
        md.put("tokenizer.ggml.model", GgufValue.string("gpt2"));
        if (pre != null) {
            md.put("tokenizer.ggml.pre", GgufValue.string(pre));
        }
        md.put("tokenizer.ggml.tokens", GgufValue.array(ValueType.STRING, pieces.toArray(String[]::new)));
        md.put("tokenizer.ggml.token_type", GgufValue.array(ValueType.INT32, types));
        md.put("tokenizer.ggml.merges", GgufValue.array(ValueType.STRING, HELLO_MERGES));
        md.put("tokenizer.ggml.bos_token_id", GgufValue.u32(types.length - 1));
        return TestModels.metadataOnly("test vocabulary", md);
    }

    @Test
    void readsAGpt2VocabularyFromGguf() {
        int bos = 256 + HELLO.size();
        // Llama 3's pre-tokenizer adds BOS unless the file says otherwise (llama.cpp's default); BOS prints nothing.
        Tokenizer llama3 = Tokenizer.fromGguf(gguf("llama-bpe"));
        assertArrayEquals(new int[] {bos, id("hello"), id("\u0120hello")}, llama3.encode("hello hello"));
        assertEquals("hello hello", llama3.decode(llama3.encode("hello hello")));
        // A file without the key is GPT-2's, which adds none.
        Tokenizer gpt2 = Tokenizer.fromGguf(gguf(null));
        assertArrayEquals(new int[] {'a', 'b'}, gpt2.encode("ab"));
        // A control piece in the text is its token (llama-cli's reading of a prompt), or text when not parsed.
        assertArrayEquals(new int[] {id("hello"), bos, id("hello")}, llama3.encode("hello<|begin_of_text|>hello",
                false));
        int[] asText = llama3.encode("<|begin_of_text|>", false, false);
        assertEquals(17, asText.length, Arrays.toString(asText)); // its 17 bytes: no merge of this vocabulary applies
        assertEquals("<|begin_of_text|>", llama3.decode(asText));
        // No end-of-turn id in the file and no <|eot_id|> piece: only EOS (none here) ends a generation; a file's
        // eot_token_id does.
        assertTrue(java.util.stream.IntStream.range(0, llama3.size()).noneMatch(llama3::endsGeneration));
        GgufContent withEot = gguf("llama-bpe");
        withEot.metadata().put("tokenizer.ggml.eot_token_id", GgufValue.u32(bos));
        Tokenizer eot = Tokenizer.fromGguf(withEot);
        assertTrue(eot.endsGeneration(bos));
        assertEquals(1, java.util.stream.IntStream.range(0, eot.size()).filter(eot::endsGeneration).count());
        PrefillException e = assertThrows(PrefillException.class, () -> Tokenizer.fromGguf(gguf("qwen2")));
        assertTrue(e.getMessage().contains("pre-tokenizer 'qwen2' (tokenizer.ggml.pre) is not supported yet"),
                e.getMessage());
    }
}
