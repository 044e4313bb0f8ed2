package dev.prefill4j.engine.model;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.OwnedGgufContent;
import dev.prefill4j.engine.gguf.ValueType;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.DoubleConsumer;
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
        GgmlType wtype = GgmlType.byId(format.ggufType().orElseThrow(() -> new PrefillException(
                PrefillException.Code.ARGUMENT, "format '" + format.id() + "' has no GGUF type"))).orElseThrow();
        GgmlType ftype = GgmlType.byId(0).orElseThrow();
        Map<String, GgufValue> md = new LinkedHashMap<>();
        md.put("general.architecture", GgufValue.string("llama"));
        md.put("general.name", GgufValue.string("prefill4j synthetic " + shape.cliName() + " seed " + seed));
        md.put("general.alignment", GgufValue.u32(32));
        md.put("llama.context_length", GgufValue.u32(shape.context));
        md.put("llama.embedding_length", GgufValue.u32(shape.dim));
        md.put("llama.block_count", GgufValue.u32(shape.layers));
        md.put("llama.feed_forward_length", GgufValue.u32(shape.ffn));
        md.put("llama.attention.head_count", GgufValue.u32(shape.heads));
        md.put("llama.attention.head_count_kv", GgufValue.u32(shape.kvHeads));
        md.put("llama.rope.freq_base", GgufValue.f32(shape.theta));
        md.put("llama.attention.layer_norm_rms_epsilon", GgufValue.f32(1e-5f));
        md.put("llama.rope.dimension_count", GgufValue.u32(shape.dim / shape.heads));
        md.put("llama.vocab_size", GgufValue.u32(shape.vocab));
        // general.file_type: llama.cpp's LLAMA_FTYPE values for the all-F32 and mostly-F16 files.
        if (wtype.id() == 0 || wtype.id() == 1) {
            md.put("general.file_type", GgufValue.u32(wtype.id()));
        }
        if (wtype.blockSize() > 1) {
            md.put("general.quantization_version", GgufValue.u32(2));
        }
        vocabulary(shape.vocab, md);

        int hd = shape.dim / shape.heads;
        record Spec(String name, int cols, int rows, GgmlType type, Quantizer q, boolean gain) {
        }
        List<Spec> specs = new ArrayList<>();
        specs.add(new Spec("token_embd.weight", shape.dim, shape.vocab, wtype, format, false));
        for (int l = 0; l < shape.layers; l++) {
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
            specs.add(new Spec("output.weight", shape.dim, shape.vocab, wtype, format, false));
        }
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
            return new SyntheticLlama("synthetic " + shape.cliName() + " " + format.id() + " seed " + seed, arena, md,
                    tensors);
        } catch (RuntimeException | Error e) {
            arena.close();
            throw e;
        }
    }

    private static long mix(long seed, int tensor, int row) {
        long z = seed * 0x9E3779B97F4A7C15L + tensor * 0xBF58476D1CE4E5B9L + row * 0x94D049BB133111EBL;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /**
     * A SentencePiece-style vocabulary: specials, 256 byte tokens, then letter pieces ranked by length. The pieces are
     * distinct by construction (the byte tokens hold {@code <}, which no letter piece does; a piece of the letter
     * loop spells its index in base 26, one length at a time, with and without the space marker), so no set of them
     * is kept: 128,256 Strings in a set were promoted out of the young generation and kept about 3 MiB resident
     * through a run of the default bench.
     */
    static void vocabulary(int size, Map<String, GgufValue> md) {
        String[] pieces = new String[size];
        float[] scores = new float[size];
        int[] types = new int[size];
        pieces[0] = "<unk>";
        types[0] = 2;
        pieces[1] = "<s>";
        types[1] = 3;
        pieces[2] = "</s>";
        types[2] = 3;
        int n = 3;
        for (int b = 0; b < 256 && n < size; b++, n++) {
            pieces[n] = String.format("<0x%02X>", b);
            types[n] = 6;
        }
        List<String> alphabet = new ArrayList<>();
        for (char c = 33; c < 127; c++) {
            alphabet.add(String.valueOf(c));
        }
        // Single characters, then "▁" + character: enough for any ASCII text to encode without byte fallback.
        List<String> singles = new ArrayList<>();
        singles.add("\u2581");
        singles.addAll(alphabet);
        alphabet.forEach(c -> singles.add("\u2581" + c));
        int rank = 0;
        for (String s : singles) {
            if (n >= size) {
                break;
            }
            pieces[n] = s;
            scores[n] = -(rank++);
            types[n] = 1;
            n++;
        }
        // Longer lower-case pieces, shortest first, with and without the space marker.
        String letters = "etaoinshrdlcumwfgypbvkjxqz";
        for (int len = 2; n < size; len++) {
            int combos = (int) Math.min(Integer.MAX_VALUE, Math.pow(letters.length(), len));
            for (int c = 0; c < combos && n < size; c++) {
                StringBuilder sb = new StringBuilder();
                int x = c;
                for (int k = 0; k < len; k++) {
                    sb.append(letters.charAt(x % letters.length()));
                    x /= letters.length();
                }
                for (String s : new String[] {"\u2581" + sb, sb.toString()}) {
                    if (n < size) {
                        pieces[n] = s;
                        scores[n] = -(rank++);
                        types[n] = 1;
                        n++;
                    }
                }
            }
        }
        md.put("tokenizer.ggml.model", GgufValue.string("llama"));
        md.put("tokenizer.ggml.tokens", GgufValue.array(ValueType.STRING, pieces));
        md.put("tokenizer.ggml.scores", GgufValue.array(ValueType.FLOAT32, scores));
        md.put("tokenizer.ggml.token_type", GgufValue.array(ValueType.INT32, types));
        md.put("tokenizer.ggml.bos_token_id", GgufValue.u32(1));
        md.put("tokenizer.ggml.eos_token_id", GgufValue.u32(2));
        md.put("tokenizer.ggml.unknown_token_id", GgufValue.u32(0));
        md.put("tokenizer.ggml.add_bos_token", GgufValue.bool(true));
        md.put("tokenizer.ggml.add_eos_token", GgufValue.bool(false));
    }
}
