package dev.prefill4j.engine.tokenizer;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgufArray;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufValue;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.PriorityQueue;
import java.util.stream.IntStream;

/**
 * A tokenizer of one of the two kinds Llama-family model files carry: SentencePiece-style (GGUF's {@code llama}
 * vocabularies, llama2.c's {@code tokenizer.bin}; Llama 1 and 2, TinyLlama) or byte-level BPE (GGUF's {@code gpt2}
 * vocabularies; Llama 3 and GPT-2).
 *
 * <p><b>SentencePiece-style encoding</b> (the algorithm of llama.cpp's SPM tokenizer and of llama2.c's {@code
 * encode}; FORMATS.md §8): a space is prepended when the vocabulary asks for a dummy prefix, spaces become {@code
 * U+2581}, the text is split into code points, then the adjacent pair whose concatenation is a piece with the
 * <em>highest score</em> is merged, repeatedly (ties: the leftmost pair). A code point that is no piece becomes its
 * UTF-8 bytes as {@code <0xHH>} byte tokens. <b>Decoding</b> maps {@code U+2581} back to a space, byte tokens to raw
 * bytes, and control tokens (BOS, EOS) to nothing.
 *
 * <p><b>Byte-level BPE</b> ({@link #byteLevelBpe}): the text is split into words by the vocabulary's pre-tokenizer
 * pattern, and within each word, whose UTF-8 bytes are each one symbol, the adjacent pair with the <em>lowest merge
 * rank</em> is merged, repeatedly (ties: the leftmost pair). Decoding maps the pieces' characters back to bytes
 * through GPT-2's byte-to-character table; control tokens decode to nothing.
 *
 * <p>Special pieces written in the text (control tokens such as {@code <|begin_of_text|>} or {@code <s>},
 * user-defined and unknown tokens) are read as their tokens, as llama-cli and Hugging Face's tokenizers read a
 * prompt; {@link #encode(String, boolean, boolean)} can read control tokens' pieces as text instead.
 *
 * <p>Immutable and thread-safe.
 *
 * @since 0.1
 */
@Api.Stable
public final class Tokenizer {
    /** SentencePiece's visible space, U+2581. */
    public static final String SPACE = "\u2581";
    /** GGUF {@code token_type} values (FORMATS.md §7). */
    static final int NORMAL = 1;
    static final int UNKNOWN = 2;
    static final int CONTROL = 3;
    static final int USER_DEFINED = 4;
    static final int UNUSED = 5;
    static final int BYTE = 6;

    /**
     * The pieces' UTF-16 chars end to end; piece {@code i} ends at {@code ends[i]} and starts where {@code i - 1}
     * ends. A Llama 3 vocabulary as 128,256 Strings took 6.6 MiB of heap; as one array of chars, about 1.1 MiB.
     */
    private final char[] chars;
    private final int[] ends;
    private final float[] scores;
    private final int[] types;
    /**
     * Piece to id, open addressing over an {@code int[]}: slot {@code h} holds {@code id + 1}, 0 is empty. A
     * {@code HashMap<String, Integer>} of a 128,256-piece vocabulary held 7.2 MiB of nodes, boxed ids and table
     * (heap histogram of a 1B model); this table is 1 MiB. Slots are found by the piece's {@link String#hashCode} and
     * compared with the chars ({@link #matches}).
     */
    private final int[] slots;
    private final int[] byteTokens = new int[256];
    private final int bos;
    private final int eos;
    /** Tokens other than EOS that end a generation (end of turn, end of message); see {@link #endsGeneration}. */
    private final int[] otherEnds;
    private final int unk;
    private final boolean addBos;
    private final boolean addSpacePrefix;
    /** The control, user-defined and unknown tokens with a piece, longest piece first (ties by id). */
    private final int[] specials;
    /** The merges and pre-tokenizer of a byte-level BPE vocabulary; null for a SentencePiece-style one. */
    private final ByteLevelBpe bpe;

    /**
     * Creates a tokenizer from its vocabulary.
     *
     * @param pieces         token pieces, spaces written as {@link #SPACE}
     * @param scores         merge scores, one per piece
     * @param types          GGUF token types, one per piece
     * @param bos            BOS id, or -1
     * @param eos            EOS id, or -1
     * @param unk            unknown-token id, or -1
     * @param addBos         whether {@link #encode(String)} starts with BOS
     * @param addSpacePrefix whether a space is prepended before encoding
     */
    public Tokenizer(String[] pieces, float[] scores, int[] types, int bos, int eos, int unk, boolean addBos,
                     boolean addSpacePrefix) {
        this(Arrays.asList(pieces), scores.clone(), types.clone(), bos, eos, new int[0], unk, addBos, addSpacePrefix,
                null, null);
    }

    /**
     * Creates a byte-level BPE tokenizer (GGUF's {@code gpt2} vocabularies: Llama 3, GPT-2).
     *
     * @param pieces       token pieces in GPT-2's byte-to-character form (a space is {@code U+0120}, "Ġ")
     * @param types        GGUF token types, one per piece
     * @param merges       the merges, {@code "left right"}, highest priority first
     * @param preTokenizer the pre-tokenizer's name as in {@code tokenizer.ggml.pre}: {@code llama-bpe} (Llama 3;
     *                     also {@code llama3}, {@code llama-v3}) or {@code gpt-2}
     * @param bos          BOS id, or -1
     * @param eos          EOS id, or -1
     * @param addBos       whether {@link #encode(String)} starts with BOS
     * @return the tokenizer
     * @throws IllegalArgumentException if the pre-tokenizer is not one of these, a byte that UTF-8 uses has no
     *                                  piece, or a merge names pieces the vocabulary lacks
     */
    public static Tokenizer byteLevelBpe(String[] pieces, int[] types, String[] merges, String preTokenizer, int bos,
                                         int eos, boolean addBos) {
        ByteLevelBpe.PreTokenizer pre = ByteLevelBpe.PreTokenizer.forName(preTokenizer);
        if (pre == null) {
            throw new IllegalArgumentException("pre-tokenizer '" + preTokenizer + "' is not supported (supported: "
                    + ByteLevelBpe.SUPPORTED_PRE + ")");
        }
        return new Tokenizer(Arrays.asList(pieces), new float[pieces.length], types.clone(), bos, eos, new int[0], -1,
                addBos, false, Arrays.asList(merges), pre);
    }

    /**
     * Keeps {@code scores} and {@code types} as they are: the callers' own copies or read-only metadata arrays.
     * {@code merges} and {@code pre} are null for a SentencePiece-style vocabulary; {@code fileEnds} are the file's
     * end-of-turn and end-of-message ids.
     */
    private Tokenizer(List<String> pieces, float[] scores, int[] types, int bos, int eos, int[] fileEnds, int unk,
                      boolean addBos, boolean addSpacePrefix, List<String> merges, ByteLevelBpe.PreTokenizer pre) {
        int size = pieces.size();
        if (scores.length != size || types.length != size) {
            throw new IllegalArgumentException("vocabulary arrays differ in length: " + size + " pieces, "
                    + scores.length + " scores, " + types.length + " types");
        }
        // One pass over the pieces (a GgufFile's are decoded from the mapping as they are asked for, then dropped):
        // their chars end to end in a growing array, trimmed at the end.
        this.ends = new int[size];
        char[] all = new char[Math.max(16, 8 * size)];
        int total = 0;
        for (int i = 0; i < size; i++) {
            String piece = pieces.get(i);
            if (piece.length() > all.length - total) {
                if (piece.length() > Integer.MAX_VALUE - 8 - total) {
                    throw new IllegalArgumentException("vocabulary pieces hold over 2^31 chars");
                }
                all = Arrays.copyOf(all, (int) Math.min(Integer.MAX_VALUE - 8,
                        Math.max(2L * all.length, (long) total + piece.length())));
            }
            piece.getChars(0, piece.length(), all, total);
            total += piece.length();
            ends[i] = total;
        }
        this.chars = total == all.length ? all : Arrays.copyOf(all, total);
        this.scores = scores;
        this.types = types;
        this.bos = bos;
        this.eos = eos;
        this.unk = unk;
        this.addBos = addBos;
        this.addSpacePrefix = addSpacePrefix;
        this.slots = new int[Integer.highestOneBit(Math.max(1, size)) << 2];
        Arrays.fill(byteTokens, -1);
        for (int i = 0; i < size; i++) {
            String piece = piece(i);
            if (types[i] == BYTE || isBytePiece(piece)) {
                int b = parseByte(piece);
                if (b >= 0 && byteTokens[b] < 0) {
                    byteTokens[b] = i;
                }
            }
            if (types[i] != CONTROL && types[i] != BYTE) {
                int h = slot(piece);
                if (slots[h] == 0) {
                    slots[h] = i + 1;
                }
            }
        }
        this.specials = IntStream.range(0, size)
                .filter(i -> (types[i] == CONTROL || types[i] == USER_DEFINED || types[i] == UNKNOWN)
                        && ends[i] > start(i))
                .boxed().sorted(Comparator.comparingInt((Integer i) -> start(i) - ends[i])) // stable: ties by id
                .mapToInt(Integer::intValue).toArray();
        this.bpe = merges == null ? null : new ByteLevelBpe(merges, pre, this::id);
        // Where the file names no end of turn or message, Llama 3's control pieces for them, as llama.cpp finds such
        // tokens by their text (src/llama-vocab.cpp): an instruct model ends its answer with <|eot_id|>.
        this.otherEnds = fileEnds.length > 0 ? fileEnds.clone() : Arrays.stream(specials)
                .filter(i -> types[i] == CONTROL && (matches(i, "<|eot_id|>") || matches(i, "<|eom_id|>")))
                .toArray();
    }

    private int start(int id) {
        return id == 0 ? 0 : ends[id - 1];
    }

    /** {@return whether piece {@code id} is {@code s}} */
    private boolean matches(int id, String s) {
        int from = start(id);
        if (ends[id] - from != s.length()) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            if (chars[from + i] != s.charAt(i)) {
                return false;
            }
        }
        return true;
    }

    /** {@return the slot of {@code piece}: the one that holds it, or the empty one where it would go} */
    private int slot(String piece) {
        int mask = slots.length - 1;
        // Fibonacci hashing, the top bits of the product: String hashes of short pieces differ in their low bits only.
        int h = piece.hashCode() * 0x9E3779B9 >>> Integer.numberOfLeadingZeros(mask);
        while (slots[h] != 0 && !matches(slots[h] - 1, piece)) {
            h = h + 1 & mask;
        }
        return h;
    }

    /** {@return the id of a mergeable piece (not control, not byte), or -1} */
    private int id(String piece) {
        return slots[slot(piece)] - 1;
    }

    private static boolean isBytePiece(String p) {
        return p.length() == 6 && p.startsWith("<0x") && p.endsWith(">");
    }

    private static int parseByte(String p) {
        if (!isBytePiece(p)) {
            return -1;
        }
        try {
            return Integer.parseInt(p.substring(3, 5), 16);
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /**
     * Reads the vocabulary from GGUF metadata: a {@code llama} (SentencePiece-style) one, or a {@code gpt2}
     * (byte-level BPE) one with its merges and a pre-tokenizer this class knows ({@link #byteLevelBpe}).
     *
     * @param gguf the model
     * @return the tokenizer
     * @throws PrefillException if the vocabulary is missing, of another kind, or inconsistent
     */
    public static Tokenizer fromGguf(GgufContent gguf) {
        String model = gguf.requireString("tokenizer.ggml.model");
        boolean byteLevel = model.equals("gpt2");
        if (!byteLevel && !model.equals("llama")) {
            throw gguf.fail("tokenizer model '" + model + "' is not supported yet (supported: 'llama', the "
                    + "SentencePiece-style vocabulary, and 'gpt2', byte-level BPE)");
        }
        ByteLevelBpe.PreTokenizer pre = null;
        List<String> merges = null;
        if (byteLevel) {
            String name = gguf.metadata().containsKey("tokenizer.ggml.pre")
                    ? gguf.requireString("tokenizer.ggml.pre") : null;
            pre = ByteLevelBpe.PreTokenizer.forName(name);
            if (pre == null) {
                throw gguf.fail("pre-tokenizer '" + name + "' (tokenizer.ggml.pre) is not supported yet (supported: "
                        + ByteLevelBpe.SUPPORTED_PRE + "); its pattern decides how text splits into words");
            }
            merges = gguf.requireStrings("tokenizer.ggml.merges");
        }
        List<String> pieces = gguf.requireStrings("tokenizer.ggml.tokens");
        int size = pieces.size();
        // The metadata's own arrays where the file has them (read only here): a copy of each held another 0.5 MiB
        // for a 128,256-piece vocabulary.
        float[] scores = gguf.get("tokenizer.ggml.scores").map(v -> {
            if (!(v.value() instanceof GgufArray a) || !(a.values() instanceof float[] f) || f.length != size) {
                throw gguf.fail("tokenizer.ggml.scores must be " + size + " f32 values");
            }
            return f;
        }).orElseGet(() -> new float[size]);
        int[] types = gguf.get("tokenizer.ggml.token_type").map(v -> {
            if (!(v.value() instanceof GgufArray a) || !(a.values() instanceof int[] t) || t.length != size) {
                throw gguf.fail("tokenizer.ggml.token_type must be " + size + " integers");
            }
            return t;
        }).orElseGet(() -> {
            int[] t = new int[size];
            Arrays.fill(t, NORMAL);
            return t;
        });
        // Defaults where a key is absent: SentencePiece's fixed ids; none for BPE, whose files state theirs.
        int bos = (int) gguf.getLong("tokenizer.ggml.bos_token_id", byteLevel ? -1 : 1);
        int eos = (int) gguf.getLong("tokenizer.ggml.eos_token_id", byteLevel ? -1 : 2);
        int unk = (int) gguf.getLong("tokenizer.ggml.unknown_token_id", byteLevel ? -1 : 0);
        int eot = (int) gguf.getLong("tokenizer.ggml.eot_token_id", -1);
        int eom = (int) gguf.getLong("tokenizer.ggml.eom_token_id", -1);
        for (int id : new int[] {bos, eos, unk, eot, eom}) {
            if (id < -1 || id >= size) {
                throw gguf.fail("special token id " + id + " is outside the vocabulary of " + size);
            }
        }
        // BOS by default for SentencePiece and Llama 3, not for GPT-2 (llama.cpp's defaults, src/llama-vocab.cpp).
        boolean addBos = gguf.get("tokenizer.ggml.add_bos_token").map(GgufValue::value)
                .map(Boolean.TRUE::equals).orElse(!byteLevel || pre == ByteLevelBpe.PreTokenizer.LLAMA3);
        boolean prefix = !byteLevel && gguf.get("tokenizer.ggml.add_space_prefix").map(GgufValue::value)
                .map(Boolean.TRUE::equals).orElse(true);
        try {
            int[] fileEnds = IntStream.of(eot, eom).filter(i -> i >= 0).toArray();
            return new Tokenizer(pieces, scores, types, bos, eos, fileEnds, unk, addBos, prefix, merges, pre);
        } catch (IllegalArgumentException e) {
            throw gguf.fail(e.getMessage());
        }
    }

    /**
     * {@return what kind of tokenizer this is, for people}: e.g. "SentencePiece-style, 32,000 pieces" or "byte-level
     * BPE with Llama 3's pre-tokenizer, 280,147 merges, 128,256 pieces"
     */
    public String description() {
        return String.format(Locale.ROOT, "%s, %,d pieces",
                bpe != null ? bpe.description() : "SentencePiece-style", size());
    }

    /** {@return the vocabulary size} */
    public int size() {
        return ends.length;
    }

    /** {@return the BOS id, or -1} */
    public int bos() {
        return bos;
    }

    /** {@return the EOS id, or -1} */
    public int eos() {
        return eos;
    }

    /**
     * {@return whether {@code id} ends a generation}: EOS, and the end-of-turn and end-of-message tokens the file
     * names ({@code tokenizer.ggml.eot_token_id}, {@code eom_token_id}) or, where it names neither, Llama 3's
     * {@code <|eot_id|>} and {@code <|eom_id|>} control tokens.
     *
     * @param id token id
     */
    public boolean endsGeneration(int id) {
        if (id == eos && id >= 0) {
            return true;
        }
        for (int end : otherEnds) {
            if (id == end) {
                return true;
            }
        }
        return false;
    }

    /** {@return the piece of {@code id} as stored} @param id token id */
    public String piece(int id) {
        int from = start(id);
        return new String(chars, from, ends[id] - from);
    }

    /** {@return the score of {@code id}} @param id token id */
    public float score(int id) {
        return scores[id];
    }

    /** {@return the GGUF token type of {@code id}} @param id token id */
    public int type(int id) {
        return types[id];
    }

    /**
     * {@return the token ids of {@code text}, with BOS first if the vocabulary asks for it}: special pieces written
     * in the text are read as their tokens ({@link #encode(String, boolean, boolean)}).
     *
     * @param text input
     */
    public int[] encode(String text) {
        return encode(text, addBos, true);
    }

    /**
     * Encodes text, reading special pieces written in it as their tokens ({@link #encode(String, boolean,
     * boolean)}).
     *
     * @param text    the input
     * @param withBos whether to start with BOS
     * @return the token ids
     */
    public int[] encode(String text, boolean withBos) {
        return encode(text, withBos, true);
    }

    /**
     * Encodes text. The special pieces (control, user-defined and unknown tokens, longest first) split the text
     * before anything else, each occurrence becoming its token, as llama.cpp (its {@code parse_special}, which
     * llama-cli sets for a prompt) and Hugging Face's tokenizers do: so a chat prompt can be written out, {@code
     * <|start_header_id|>user<|end_header_id|>} for Llama 3. Without {@code parseSpecial} only user-defined pieces
     * split the text, and control tokens' pieces are encoded as text. In a SentencePiece-style vocabulary the dummy
     * prefix space goes before the text at the start and after each special piece, as in llama.cpp.
     *
     * @param text         the input
     * @param withBos      whether to start with BOS
     * @param parseSpecial whether control and unknown tokens' pieces in the text are read as those tokens
     * @return the token ids
     */
    public int[] encode(String text, boolean withBos, boolean parseSpecial) {
        IntList out = new IntList();
        if (withBos && bos >= 0) {
            out.add(bos);
        }
        boolean afterSpecial = true;
        for (int[] part : partition(text, parseSpecial)) {
            if (part[2] >= 0) {
                out.add(part[2]);
                afterSpecial = true;
            } else {
                encodeText(text.substring(part[0], part[1]), afterSpecial, out);
                afterSpecial = false;
            }
        }
        return out.toArray();
    }

    /**
     * {@return {@code text} cut at the special pieces it holds}: {@code {start, end, id}} in order, {@code id} -1 for
     * a stretch of text. Each special in turn (longest first) splits the stretches left so far at every occurrence,
     * from the left.
     */
    private List<int[]> partition(String text, boolean parseSpecial) {
        List<int[]> parts = new ArrayList<>();
        if (text.isEmpty()) {
            return parts;
        }
        parts.add(new int[] {0, text.length(), -1});
        for (int id : specials) {
            if (!parseSpecial && types[id] != USER_DEFINED) {
                continue;
            }
            String piece = piece(id);
            if (!text.contains(piece)) {
                continue;
            }
            List<int[]> next = new ArrayList<>(parts.size() + 2);
            for (int[] p : parts) {
                if (p[2] >= 0) {
                    next.add(p);
                    continue;
                }
                int from = p[0];
                for (int at = text.indexOf(piece, from); at >= 0 && at + piece.length() <= p[1];
                     at = text.indexOf(piece, from)) {
                    if (at > from) {
                        next.add(new int[] {from, at, -1});
                    }
                    next.add(new int[] {at, at + piece.length(), id});
                    from = at + piece.length();
                }
                if (from < p[1]) {
                    next.add(new int[] {from, p[1], -1});
                }
            }
            parts = next;
        }
        return parts;
    }

    /** Encodes a stretch of text without special pieces; {@code prefix}: SentencePiece's dummy prefix applies. */
    private void encodeText(String text, boolean prefix, IntList out) {
        if (bpe != null) {
            bpe.encode(text, out::add);
            return;
        }
        String norm = ((addSpacePrefix && prefix ? " " : "") + text).replace(" ", SPACE);
        // Symbols: a doubly linked list over the code points.
        int n = norm.codePointCount(0, norm.length());
        String[] sym = new String[n];
        int[] prev = new int[n];
        int[] next = new int[n];
        for (int i = 0, off = 0; i < n; i++) {
            int cp = norm.codePointAt(off);
            int len = Character.charCount(cp);
            sym[i] = norm.substring(off, off + len);
            off += len;
            prev[i] = i - 1;
            next[i] = i + 1 < n ? i + 1 : -1;
        }
        record Pair(int left, int right, String text, float score) {
        }
        PriorityQueue<Pair> queue = new PriorityQueue<>((a, b) -> a.score != b.score
                ? Float.compare(b.score, a.score) : Integer.compare(a.left, b.left));
        java.util.function.BiConsumer<Integer, Integer> offer = (l, r) -> {
            if (l < 0 || r < 0) {
                return;
            }
            String joined = sym[l] + sym[r];
            int id = id(joined);
            if (id >= 0) {
                queue.add(new Pair(l, r, joined, scores[id]));
            }
        };
        for (int i = 0; i + 1 < n; i++) {
            offer.accept(i, i + 1);
        }
        while (!queue.isEmpty()) {
            Pair p = queue.poll();
            // Skip pairs made stale by an earlier merge.
            if (sym[p.left] == null || sym[p.right] == null || next[p.left] != p.right
                    || !(sym[p.left] + sym[p.right]).equals(p.text)) {
                continue;
            }
            sym[p.left] = p.text;
            sym[p.right] = null;
            next[p.left] = next[p.right];
            if (next[p.right] >= 0) {
                prev[next[p.right]] = p.left;
            }
            offer.accept(prev[p.left], p.left);
            offer.accept(p.left, next[p.left]);
        }
        for (int i = 0; i >= 0; i = next[i]) {
            int id = id(sym[i]);
            if (id >= 0) {
                out.add(id);
                continue;
            }
            for (byte b : sym[i].getBytes(StandardCharsets.UTF_8)) {
                int t = byteTokens[b & 0xFF];
                out.add(t >= 0 ? t : unk);
            }
        }
    }

    /**
     * {@return the raw bytes a token stands for}: control, unknown and unused tokens nothing, user-defined ones their
     * piece's UTF-8 as written; in a SentencePiece-style vocabulary byte tokens their byte and other pieces their
     * UTF-8 with {@link #SPACE} as a space; in a byte-level BPE one the bytes its characters stand for.
     *
     * @param id token id
     */
    public byte[] bytes(int id) {
        if (id < 0 || id >= ends.length) {
            throw new IllegalArgumentException("token id " + id + " is outside the vocabulary of " + ends.length);
        }
        // As llama.cpp's token_to_piece without `special` (llama-cli's default; src/llama-vocab.cpp): unknown,
        // control and unused tokens print nothing ("<unk>" had been printed as text in the middle of a generation),
        // user-defined ones their text as written.
        if (types[id] == CONTROL || types[id] == UNKNOWN || types[id] == UNUSED) {
            return new byte[0];
        }
        String piece = piece(id);
        if (types[id] == USER_DEFINED) {
            return piece.getBytes(StandardCharsets.UTF_8);
        }
        if (bpe != null) {
            return ByteLevelBpe.bytes(piece);
        }
        int b = types[id] == BYTE || isBytePiece(piece) ? parseByte(piece) : -1;
        if (b >= 0) {
            return new byte[] {(byte) b};
        }
        return piece.replace(SPACE, " ").getBytes(StandardCharsets.UTF_8);
    }

    /** {@return the text of a token sequence} @param ids token ids */
    public String decode(int[] ids) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (int id : ids) {
            out.writeBytes(bytes(id));
        }
        return out.toString(StandardCharsets.UTF_8);
    }

    /** A growable int array. */
    private static final class IntList {
        private int[] a = new int[16];
        private int n;

        void add(int v) {
            if (n == a.length) {
                a = Arrays.copyOf(a, n * 2);
            }
            a[n++] = v;
        }

        int[] toArray() {
            return Arrays.copyOf(a, n);
        }
    }
}
