package dev.prefill4j.engine.tokenizer;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.PriorityQueue;
import java.util.function.IntConsumer;
import java.util.function.ToIntFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The byte-level BPE of GGUF's {@code gpt2} vocabularies (GPT-2, Llama 3): the text is split into words by the
 * vocabulary's pre-tokenizer pattern, each word's UTF-8 bytes become one character each through GPT-2's byte-to-
 * character table, and the adjacent pair with the <em>lowest merge rank</em> (its index in {@code
 * tokenizer.ggml.merges}) is merged, repeatedly, ties to the leftmost; each word's final symbols are its tokens.
 * Decoding maps the characters back to bytes.
 *
 * <p>The algorithm and the table are those of OpenAI's GPT-2 {@code encoder.py} ({@code bytes_to_unicode}, {@code
 * bpe}); the patterns are the ones the vocabularies' {@code tokenizer.json} files state, as llama.cpp names them by
 * {@code tokenizer.ggml.pre} (src/llama-vocab.cpp, whose "ignore merges" rule for Llama 3 is followed too).
 */
final class ByteLevelBpe {
    /**
     * A pre-tokenizer: the pattern that splits text into words, and whether a word that is itself a piece is taken
     * whole before any merge (Hugging Face's {@code ignore_merges}, set in Llama 3's {@code tokenizer.json}).
     */
    enum PreTokenizer {
        /** GPT-2's own pattern (its {@code encoder.py}), with the trailing {@code \s+} that covers all text. */
        GPT2("GPT-2's", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", false),
        /**
         * Llama 3's pattern ({@code tokenizer.json} of Meta-Llama-3): contractions in either case, a letter run with
         * at most one non-letter, non-digit char before it, digits in groups of up to three, punctuation runs with
         * their line ends, line breaks, then spaces.
         */
        LLAMA3("Llama 3's", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
                + "|\\s+(?!\\S)|\\s+", true);

        /** {@code \s} as Unicode's White_Space, as the vocabularies' own (Rust, Oniguruma) patterns read it. */
        final Pattern pattern;
        final boolean ignoreMerges;
        /** Whose pattern it is, for descriptions. */
        final String owner;

        PreTokenizer(String owner, String regex, boolean ignoreMerges) {
            this.owner = owner;
            this.pattern = Pattern.compile(regex, Pattern.UNICODE_CHARACTER_CLASS);
            this.ignoreMerges = ignoreMerges;
        }

        /**
         * {@return the pre-tokenizer {@code tokenizer.ggml.pre} names, or null if not supported}: the names llama.cpp
         * maps to these two patterns (a file without the key is GPT-2's).
         *
         * @param name the key's value, or null where the file has none
         */
        static PreTokenizer forName(String name) {
            if (name == null) {
                return GPT2;
            }
            return switch (name.toLowerCase(Locale.ROOT)) {
                case "gpt-2", "gpt2" -> GPT2;
                case "llama-bpe", "llama3", "llama-v3" -> LLAMA3;
                default -> null;
            };
        }
    }

    /** The names {@link PreTokenizer#forName} accepts, for messages. */
    static final String SUPPORTED_PRE = "'llama-bpe' (also 'llama3', 'llama-v3') and 'gpt-2'";

    /**
     * GPT-2's {@code bytes_to_unicode}: the printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
     * themselves, the other 68 take the characters from U+0100 on, in byte order.
     */
    private static final char[] BYTE_CHAR = new char[256];
    /** The inverse of {@link #BYTE_CHAR} over U+0000..U+0143; -1 where a character stands for no byte. */
    private static final short[] CHAR_BYTE = new short[256 + 68];

    static {
        Arrays.fill(CHAR_BYTE, (short) -1);
        int next = 256;
        for (int b = 0; b < 256; b++) {
            boolean printable = b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF;
            char c = (char) (printable ? b : next++);
            BYTE_CHAR[b] = c;
            CHAR_BYTE[c] = (short) b;
        }
    }

    private final PreTokenizer pre;
    private final int mergeCount;
    private final ToIntFunction<String> ids;
    /** Each byte's one-character piece. */
    private final int[] byteIds = new int[256];
    /**
     * The merges by their two pieces' ids, open addressing: {@code keys[h] = left << 32 | right}, {@code ranks[h]}
     * its index + 1 (0: empty slot), {@code merged[h]} the id of the joined piece: for Llama 3's 280,147 merges
     * three arrays of 524,288 slots, 8 MiB, and no object per merge.
     */
    private final long[] keys;
    private final int[] ranks;
    private final int[] merged;

    /**
     * Reads the merges against the vocabulary.
     *
     * @param merges the {@code "left right"} strings, highest priority first
     * @param pre    the pre-tokenizer
     * @param ids    piece to id, -1 where the piece is none
     * @throws IllegalArgumentException where a byte that UTF-8 uses has no piece, or a merge names pieces the
     *                                  vocabulary lacks
     */
    ByteLevelBpe(List<String> merges, PreTokenizer pre, ToIntFunction<String> ids) {
        this.pre = pre;
        this.ids = ids;
        for (int b = 0; b < 256; b++) {
            byteIds[b] = ids.applyAsInt(String.valueOf(BYTE_CHAR[b]));
            // 0xC0, 0xC1 and 0xF5..0xFF never occur in UTF-8 (RFC 3629), and some vocabularies (MPT's) lack them.
            boolean inUtf8 = b != 0xC0 && b != 0xC1 && b < 0xF5;
            if (byteIds[b] < 0 && inUtf8) {
                throw new IllegalArgumentException(String.format(Locale.ROOT, "the vocabulary has no piece for byte "
                        + "0x%02X ('%s'), so it is not a byte-level BPE vocabulary", b, BYTE_CHAR[b]));
            }
        }
        int n = merges.size();
        this.mergeCount = n;
        int capacity = Integer.highestOneBit(Math.max(2, n + n / 2)) << 1;
        keys = new long[capacity];
        ranks = new int[capacity];
        merged = new int[capacity];
        for (int i = 0; i < n; i++) {
            String m = merges.get(i);
            // The first space after the first character separates the two: a piece may itself be a space.
            int sep = m.indexOf(' ', 1);
            int left = sep < 0 ? -1 : ids.applyAsInt(m.substring(0, sep));
            int right = sep < 0 ? -1 : ids.applyAsInt(m.substring(sep + 1));
            int joined = sep < 0 ? -1 : ids.applyAsInt(m.substring(0, sep) + m.substring(sep + 1));
            if (left < 0 || right < 0 || joined < 0) {
                throw new IllegalArgumentException("merge " + i + " '" + m + "' is not two pieces whose join is a "
                        + "piece of the vocabulary");
            }
            long key = (long) left << 32 | right;
            int h = slot(key);
            if (ranks[h] == 0) { // a repeated merge keeps its first, higher, rank
                keys[h] = key;
                ranks[h] = i + 1;
                merged[h] = joined;
            }
        }
    }

    /** {@return what this is, for people: the pattern's owner and the number of merges} */
    String description() {
        return String.format(Locale.ROOT, "byte-level BPE with %s pre-tokenizer, %,d merges", pre.owner, mergeCount);
    }

    private int slot(long key) {
        int mask = keys.length - 1;
        int h = (int) (key * 0x9E3779B97F4A7C15L >>> 40) & mask;
        while (ranks[h] != 0 && keys[h] != key) {
            h = h + 1 & mask;
        }
        return h;
    }

    /**
     * Encodes text.
     *
     * @param text the input
     * @param out  receives the token ids in order
     */
    void encode(String text, IntConsumer out) {
        Matcher m = pre.pattern.matcher(text);
        int end = 0;
        while (m.find()) {
            if (m.start() > end) { // not reached with these patterns, which cover every character; kept, not dropped
                word(text.substring(end, m.start()), out);
            }
            word(m.group(), out);
            end = m.end();
        }
        if (end < text.length()) {
            word(text.substring(end), out);
        }
    }

    private void word(String word, IntConsumer out) {
        byte[] utf8 = word.getBytes(StandardCharsets.UTF_8);
        int n = utf8.length;
        if (pre.ignoreMerges && n > 1) {
            char[] mapped = new char[n];
            for (int i = 0; i < n; i++) {
                mapped[i] = BYTE_CHAR[utf8[i] & 0xFF];
            }
            int whole = ids.applyAsInt(new String(mapped));
            if (whole >= 0) {
                out.accept(whole);
                return;
            }
        }
        // Symbols: a doubly linked list over the bytes, each holding its piece's id.
        int[] sym = new int[n];
        int[] prev = new int[n];
        int[] next = new int[n];
        for (int i = 0; i < n; i++) {
            sym[i] = byteIds[utf8[i] & 0xFF];
            prev[i] = i - 1;
            next[i] = i + 1 < n ? i + 1 : -1;
        }
        PriorityQueue<Pair> queue = new PriorityQueue<>((a, b) -> a.rank != b.rank
                ? Integer.compare(a.rank, b.rank) : Integer.compare(a.left, b.left));
        for (int i = 0; i + 1 < n; i++) {
            offer(queue, i, i + 1, sym);
        }
        while (!queue.isEmpty()) {
            Pair p = queue.poll();
            if (sym[p.left] != p.leftId || sym[p.right] != p.rightId || next[p.left] != p.right) {
                continue;
            }
            sym[p.left] = p.joined;
            sym[p.right] = -1;
            next[p.left] = next[p.right];
            if (next[p.right] >= 0) {
                prev[next[p.right]] = p.left;
            }
            if (prev[p.left] >= 0) {
                offer(queue, prev[p.left], p.left, sym);
            }
            if (next[p.left] >= 0) {
                offer(queue, p.left, next[p.left], sym);
            }
        }
        for (int i = 0; i >= 0 && n > 0; i = next[i]) {
            out.accept(sym[i]);
        }
    }

    /** A candidate merge: its rank, its left position, and the two ids it was found with (stale if either changed). */
    private record Pair(int rank, int left, int right, int leftId, int rightId, int joined) {
    }

    private void offer(PriorityQueue<Pair> queue, int left, int right, int[] sym) {
        int h = slot((long) sym[left] << 32 | sym[right]);
        if (ranks[h] != 0) {
            queue.add(new Pair(ranks[h], left, right, sym[left], sym[right], merged[h]));
        }
    }

    /**
     * {@return the bytes a piece's characters stand for}; a character outside the table, which no byte-level
     * vocabulary's normal pieces should hold, gives its UTF-8.
     *
     * @param piece a piece of the vocabulary
     */
    static byte[] bytes(String piece) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(piece.length());
        for (int i = 0; i < piece.length(); ) {
            int cp = piece.codePointAt(i);
            int b = cp < CHAR_BYTE.length ? CHAR_BYTE[cp] : -1;
            if (b >= 0) {
                out.write(b);
            } else {
                out.writeBytes(Character.toString(cp).getBytes(StandardCharsets.UTF_8));
            }
            i += Character.charCount(cp);
        }
        return out.toByteArray();
    }
}
