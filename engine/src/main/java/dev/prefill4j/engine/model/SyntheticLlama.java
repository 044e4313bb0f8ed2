package dev.prefill4j.engine.model;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.DeferredMetadata;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.OwnedGgufContent;
import dev.prefill4j.engine.gguf.ValueType;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.RandomAccess;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.DoubleConsumer;
import java.util.function.Supplier;
import java.util.stream.IntStream;

/**
 * A deterministic random-weight Llama model generated in memory: GGUF-shaped content with a valid
 * SentencePiece-style vocabulary ({@code <unk>}, {@code <s>}, {@code </s>}, the 256 byte tokens, then letter
 * pieces with and without {@code U+2581}), so it runs like a real model and, written with
 * {@link dev.prefill4j.engine.gguf.GgufWriter}, loads wherever a llama GGUF does. Its outputs are meaningless
 * text; every output that uses it says "synthetic".
 *
 * <p>Weights are uniform in {@code [-a, a]} with {@code a = sqrt(3 / fan_in)} (unit-variance projections), norm
 * gains 1. Each row draws from its own {@link SplittableRandom} seeded from (seed, tensor, row), so the model is
 * identical for a given seed whatever the thread count.
 *
 * @since 0.1
 */
@Api.Stable
public final class SyntheticLlama extends OwnedGgufContent {
    /** The geometries {@code synth --shape} offers. @since 0.1 */
    @Api.Stable
    public enum Shape {
        /** dim 256, 4 layers, 8 heads, 4 KV heads, ffn 768, vocab 512, untied output (tiny-256's geometry). */
        TINY(256, 768, 4, 8, 4, 512, 2048, 10000f, false),
        /** Llama-3.2-1B geometry: dim 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab 128256, tied. */
        LLAMA_1B(2048, 8192, 16, 32, 8, 128256, 131072, 500000f, true);

        final int dim;
        final int ffn;
        final int layers;
        final int heads;
        final int kvHeads;
        final int vocab;
        final int context;
        final float theta;
        final boolean tied;

        Shape(int dim, int ffn, int layers, int heads, int kvHeads, int vocab, int context, float theta,
              boolean tied) {
            this.dim = dim;
            this.ffn = ffn;
            this.layers = layers;
            this.heads = heads;
            this.kvHeads = kvHeads;
            this.vocab = vocab;
            this.context = context;
            this.theta = theta;
            this.tied = tied;
        }

        /** {@return the command-line name, e.g. {@code llama-1b}} */
        public String cliName() {
            return name().toLowerCase(Locale.ROOT).replace('_', '-');
        }

        /**
         * {@return the shape with this command-line name}
         *
         * @param name {@code tiny} or {@code llama-1b}
         * @throws PrefillException for an unknown name
         */
        public static Shape parse(String name) {
            for (Shape s : values()) {
                if (s.cliName().equals(name)) {
                    return s;
                }
            }
            throw new PrefillException(PrefillException.Code.ARGUMENT,
                    "unknown synthetic shape '" + name + "'; use tiny or llama-1b");
        }
    }


    private SyntheticLlama(String source, Arena arena, Map<String, GgufValue> metadata, List<GgufTensor> tensors) {
        super(source, arena, metadata, tensors);
    }

    /**
     * Generates a model.
     *
     * @param shape    the geometry
     * @param format   the format of the weight matrices (norms stay F32); must have a GGUF type
     * @param f32      the F32 format, for the norms
     * @param seed     the random seed
     * @param progress receives the fraction done, 0 to 1, from the generating threads; may be {@code null}
     * @return the model; close it to free its memory
     */
    public static SyntheticLlama generate(Shape shape, Quantizer format, Quantizer f32, long seed,
                                          DoubleConsumer progress) {
        return generate(shape, shape.layers, shape.vocab, format, f32, seed, progress);
    }

    /**
     * Generates the first {@code layers} layers of a model of this shape, with a vocabulary of {@code vocab} pieces
     * (the first pieces of the shape's own): its layers and embedding rows are the whole model's, byte for byte (the
     * tensors after the layers are drawn from other seeds), so it runs the kernels a model of the whole shape runs, in
     * a fraction of its memory ({@link dev.prefill4j.engine.Engine#readyKernels}). Its {@code general.name} and
     * source say which part of the shape it is.
     *
     * @param shape    the geometry
     * @param layers   layers to generate, 1 to the shape's count
     * @param vocab    vocabulary size, 259 (the specials and the byte tokens) to the shape's
     * @param format   the format of the weight matrices (norms stay F32); must have a GGUF type
     * @param f32      the F32 format, for the norms
     * @param seed     the random seed
     * @param progress receives the fraction done, 0 to 1, from the generating threads; may be {@code null}
     * @return the model; close it to free its memory
     * @throws PrefillException if {@code layers} or {@code vocab} is out of range
     */
    public static SyntheticLlama generate(Shape shape, int layers, int vocab, Quantizer format, Quantizer f32,
                                          long seed, DoubleConsumer progress) {
        if (layers < 1 || layers > shape.layers || vocab < Pieces.FIRST_LETTER_PIECE || vocab > shape.vocab) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "a part of synthetic " + shape.cliName()
                    + " has 1 to " + shape.layers + " layers and " + Pieces.FIRST_LETTER_PIECE + " to " + shape.vocab
                    + " pieces; asked for " + layers + " and " + vocab);
        }
        boolean whole = layers == shape.layers && vocab == shape.vocab;
        String part = whole ? "" : " (" + layers + " of " + shape.layers + " layers, vocabulary " + vocab + ")";
        GgmlType wtype = weightType(format);
        Map<String, Object> md = new LinkedHashMap<>();
        md.put("general.architecture", GgufValue.string("llama"));
        md.put("general.name", GgufValue.string("prefill4j synthetic " + shape.cliName() + part + " seed " + seed));
        md.put("general.alignment", GgufValue.u32(32));
        md.put("llama.context_length", GgufValue.u32(shape.context));
        md.put("llama.embedding_length", GgufValue.u32(shape.dim));
        md.put("llama.block_count", GgufValue.u32(layers));
        md.put("llama.feed_forward_length", GgufValue.u32(shape.ffn));
        md.put("llama.attention.head_count", GgufValue.u32(shape.heads));
        md.put("llama.attention.head_count_kv", GgufValue.u32(shape.kvHeads));
        md.put("llama.rope.freq_base", GgufValue.f32(shape.theta));
        md.put("llama.attention.layer_norm_rms_epsilon", GgufValue.f32(1e-5f));
        md.put("llama.rope.dimension_count", GgufValue.u32(shape.dim / shape.heads));
        md.put("llama.vocab_size", GgufValue.u32(vocab));
        // general.file_type: llama.cpp's LLAMA_FTYPE values for the all-F32 and mostly-F16 files.
        if (wtype.id() == 0 || wtype.id() == 1) {
            md.put("general.file_type", GgufValue.u32(wtype.id()));
        }
        if (wtype.blockSize() > 1) {
            md.put("general.quantization_version", GgufValue.u32(2));
        }
        vocabulary(vocab, md);

        List<Spec> specs = specs(shape, layers, vocab, wtype, format, f32);
        long totalRows = specs.stream().mapToLong(Spec::rows).sum();
        AtomicLong doneRows = new AtomicLong();
        Arena arena = Arena.ofShared();
        try {
            List<GgufTensor> tensors = new ArrayList<>();
            long offset = 0;
            for (int ti = 0; ti < specs.size(); ti++) {
                Spec s = specs.get(ti);
                long rowBytes = s.q.byteSize(s.cols);
                MemorySegment data = arena.allocate(rowBytes * s.rows, 64);
                final int tensorIndex = ti;
                IntStream.range(0, s.rows).parallel().forEach(r -> {
                    float[] row = new float[s.cols];
                    if (s.gain) {
                        java.util.Arrays.fill(row, 1f);
                    } else {
                        double a = Math.sqrt(3.0 / s.cols);
                        SplittableRandom rnd = new SplittableRandom(mix(seed, tensorIndex, r));
                        for (int i = 0; i < row.length; i++) {
                            row[i] = (float) ((rnd.nextDouble() * 2 - 1) * a);
                        }
                    }
                    s.q.encode(row, 0, s.cols, data, rowBytes * r);
                    long d = doneRows.incrementAndGet();
                    if (progress != null && (d & 1023) == 0) {
                        progress.accept((double) d / totalRows);
                    }
                });
                long[] ne = s.rows == 1 ? new long[] {s.cols} : new long[] {s.cols, s.rows};
                tensors.add(new GgufTensor(s.name, ne, s.type, offset, data.asReadOnly()));
                offset += (data.byteSize() + 31) / 32 * 32;
            }
            if (progress != null) {
                progress.accept(1.0);
            }
            return new SyntheticLlama("synthetic " + shape.cliName() + part + " " + format.id() + " seed " + seed, arena,
                    new DeferredMetadata(md), tensors);
        } catch (RuntimeException | Error e) {
            arena.close();
            throw e;
        }
    }

    /** A tensor to generate: F32 gains of 1 or uniform random weights. */
    private record Spec(String name, int cols, int rows, GgmlType type, Quantizer q, boolean gain) {
    }

    /** The tensors of the first {@code layers} layers of {@code shape}, in file order. */
    private static List<Spec> specs(Shape shape, int layers, int vocab, GgmlType wtype, Quantizer format,
                                    Quantizer f32) {
        GgmlType ftype = GgmlType.byId(0).orElseThrow();
        int hd = shape.dim / shape.heads;
        List<Spec> specs = new ArrayList<>();
        specs.add(new Spec("token_embd.weight", shape.dim, vocab, wtype, format, false));
        for (int l = 0; l < layers; l++) {
            String p = "blk." + l + ".";
            specs.add(new Spec(p + "attn_norm.weight", shape.dim, 1, ftype, f32, true));
            specs.add(new Spec(p + "attn_q.weight", shape.dim, shape.heads * hd, wtype, format, false));
            specs.add(new Spec(p + "attn_k.weight", shape.dim, shape.kvHeads * hd, wtype, format, false));
            specs.add(new Spec(p + "attn_v.weight", shape.dim, shape.kvHeads * hd, wtype, format, false));
            specs.add(new Spec(p + "attn_output.weight", shape.heads * hd, shape.dim, wtype, format, false));
            specs.add(new Spec(p + "ffn_norm.weight", shape.dim, 1, ftype, f32, true));
            specs.add(new Spec(p + "ffn_gate.weight", shape.dim, shape.ffn, wtype, format, false));
            specs.add(new Spec(p + "ffn_up.weight", shape.dim, shape.ffn, wtype, format, false));
            specs.add(new Spec(p + "ffn_down.weight", shape.ffn, shape.dim, wtype, format, false));
        }
        specs.add(new Spec("output_norm.weight", shape.dim, 1, ftype, f32, true));
        if (!shape.tied) {
            specs.add(new Spec("output.weight", shape.dim, vocab, wtype, format, false));
        }
        return specs;
    }

    /**
     * {@return the bytes of the weights {@link #generate(Shape, Quantizer, Quantizer, long, DoubleConsumer)} makes for
     * this shape and format, without generating them}
     *
     * @param shape  the geometry
     * @param format the format of the weight matrices; must have a GGUF type
     * @param f32    the F32 format, for the norms
     */
    public static long weightBytes(Shape shape, Quantizer format, Quantizer f32) {
        return specs(shape, shape.layers, shape.vocab, weightType(format), format, f32).stream()
                .mapToLong(s -> s.q.byteSize(s.cols) * s.rows).sum();
    }

    private static GgmlType weightType(Quantizer format) {
        return GgmlType.byId(format.ggufType().orElseThrow(() -> new PrefillException(
                PrefillException.Code.ARGUMENT, "format '" + format.id() + "' has no GGUF type"))).orElseThrow();
    }

    private static long mix(long seed, int tensor, int row) {
        long z = seed * 0x9E3779B97F4A7C15L + tensor * 0xBF58476D1CE4E5B9L + row * 0x94D049BB133111EBL;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /**
     * A SentencePiece-style vocabulary: specials, 256 byte tokens, then letter pieces ranked by length. The pieces are
     * not stored: {@link Pieces} computes each from its id, so that the model's metadata holds no Strings for them
     * (128,256 Strings took 6.7 MB of heap through a run of the default bench, and as they were promoted out of the
     * young generation they stayed resident).
     */
    static void vocabulary(int size, Map<String, Object> md) {
        float[] scores = new float[size];
        int[] types = new int[size];
        for (int i = 0; i < size; i++) {
            types[i] = i == 0 ? 2 : i < 3 ? 3 : i < Pieces.FIRST_LETTER_PIECE ? 6 : 1;
            scores[i] = i < Pieces.FIRST_LETTER_PIECE ? 0 : -(i - Pieces.FIRST_LETTER_PIECE);
        }
        Supplier<List<String>> pieces = () -> new Pieces(size);
        md.put("tokenizer.ggml.model", GgufValue.string("llama"));
        md.put("tokenizer.ggml.tokens", pieces);
        md.put("tokenizer.ggml.scores", GgufValue.array(ValueType.FLOAT32, scores));
        md.put("tokenizer.ggml.token_type", GgufValue.array(ValueType.INT32, types));
        md.put("tokenizer.ggml.bos_token_id", GgufValue.u32(1));
        md.put("tokenizer.ggml.eos_token_id", GgufValue.u32(2));
        md.put("tokenizer.ggml.unknown_token_id", GgufValue.u32(0));
        md.put("tokenizer.ggml.add_bos_token", GgufValue.bool(true));
        md.put("tokenizer.ggml.add_eos_token", GgufValue.bool(false));
    }

    /**
     * The synthetic vocabulary's pieces, each computed from its id: {@code <unk>}, {@code <s>}, {@code </s>}, the 256
     * byte tokens {@code <0x00>}..{@code <0xFF>}, {@code U+2581} alone, the 94 printable ASCII characters and each of
     * them after {@code U+2581} (enough for any ASCII text to encode without byte fallback), then lower-case words of
     * two letters, three, and so on, the word with index {@code c} spelling {@code c} in base 26 (least significant
     * letter first, over letters in order of English frequency), each with and then without the space marker. The
     * pieces are distinct by construction: only byte tokens hold {@code <}, and the words of one length are the
     * numbers below {@code 26^length}.
     */
    private static final class Pieces extends AbstractList<String> implements RandomAccess {
        /** Id of the first letter piece ({@code U+2581} alone), after the three specials and the 256 byte tokens. */
        static final int FIRST_LETTER_PIECE = 3 + 256;
        private static final String LETTERS = "etaoinshrdlcumwfgypbvkjxqz";
        private static final String HEX = "0123456789ABCDEF";
        private static final char MARKER = '\u2581';
        /** Printable ASCII after the space: {@code !} (33) to {@code ~} (126). */
        private static final int PRINTABLE = 126 - 33 + 1;

        private final int size;

        Pieces(int size) {
            this.size = size;
        }

        @Override
        public int size() {
            return size;
        }

        @Override
        public String get(int id) {
            Objects.checkIndex(id, size);
            if (id < 3) {
                return List.of("<unk>", "<s>", "</s>").get(id);
            }
            if (id < FIRST_LETTER_PIECE) {
                int b = id - 3;
                return "<0x" + HEX.charAt(b >> 4) + HEX.charAt(b & 15) + ">";
            }
            int j = id - FIRST_LETTER_PIECE;
            if (j == 0) {
                return String.valueOf(MARKER);
            }
            if (j <= PRINTABLE) {
                return String.valueOf((char) (32 + j));
            }
            if (j <= 2 * PRINTABLE) {
                return MARKER + String.valueOf((char) (32 + j - PRINTABLE));
            }
            j -= 2 * PRINTABLE + 1;
            for (int len = 2; ; len++) {
                long words = (long) Math.pow(LETTERS.length(), len);
                if (j < 2 * words) {
                    StringBuilder sb = new StringBuilder(len + 1);
                    if ((j & 1) == 0) {
                        sb.append(MARKER);
                    }
                    for (int k = 0, x = j >> 1; k < len; k++, x /= LETTERS.length()) {
                        sb.append(LETTERS.charAt(x % LETTERS.length()));
                    }
                    return sb.toString();
                }
                j -= (int) (2 * words);
            }
        }
    }
}
