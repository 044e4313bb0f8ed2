package dev.prefill4j.engine.llama2c;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgmlType;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import dev.prefill4j.engine.gguf.OwnedGgufContent;
import dev.prefill4j.engine.gguf.ValueType;
import dev.prefill4j.engine.io.InputFiles;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A llama2.c checkpoint and its {@code tokenizer.bin}, memory-mapped and presented as GGUF-shaped content:
 * {@code llama.*} metadata, GGUF tensor names ({@code w1 -> ffn_gate}, {@code w3 -> ffn_up},
 * {@code w2 -> ffn_down}) and a {@code llama} vocabulary. The weights are float32 slices of the mapping, in
 * PyTorch's {@code (out, in)} row-major order, which is GGUF's {@code ne = [in, out]}; llama2.c's RoPE is the
 * interleaved form, so no Q/K permutation is needed (FORMATS.md §8).
 *
 * @since 0.1
 */
@Api.Stable
public final class Llama2cCheckpoint extends OwnedGgufContent {
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final int HEADER_BYTES = 7 * 4;
    private static final GgmlType F32_TYPE = GgmlType.byId(0).orElseThrow();


    private Llama2cCheckpoint(Path path, Arena arena, Map<String, GgufValue> metadata, List<GgufTensor> tensors) {
        super(path.toString(), arena, metadata, tensors);
    }

    /**
     * Opens a checkpoint and its tokenizer.
     *
     * @param model     the {@code .bin} checkpoint
     * @param tokenizer the {@code tokenizer.bin}
     * @return the content; close it to unmap
     * @throws PrefillException ({@code P4J-GGUF}) if either file is malformed, ({@code P4J-IO}) if either is not a
     *                          readable regular file or cannot be read
     */
    public static Llama2cCheckpoint open(Path model, Path tokenizer) {
        InputFiles.requireReadableFile(model, "the llama2.c checkpoint");
        InputFiles.requireReadableFile(tokenizer, "the llama2.c tokenizer");
        Arena arena = Arena.ofShared();
        try (FileChannel ch = FileChannel.open(model, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < HEADER_BYTES) {
                throw fail(model, "truncated: " + size + " bytes is too short for a llama2.c header");
            }
            MemorySegment seg = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            if (seg.get(I32, 0) == GgufFile.MAGIC) {
                throw new PrefillException(PrefillException.Code.ARGUMENT, model + " is a GGUF file, which holds its"
                        + " own vocabulary: a tokenizer file (--tokenizer) goes only with a llama2.c .bin checkpoint;"
                        + " drop it");
            }
            int dim = seg.get(I32, 0);
            int hidden = seg.get(I32, 4);
            int layers = seg.get(I32, 8);
            int heads = seg.get(I32, 12);
            int kvHeads = seg.get(I32, 16);
            int vocabRaw = seg.get(I32, 20);
            int seqLen = seg.get(I32, 24);
            boolean shared = vocabRaw > 0;
            int vocab = Math.abs(vocabRaw);
            if (dim <= 0 || hidden <= 0 || layers <= 0 || heads <= 0 || kvHeads <= 0 || vocab <= 0 || seqLen <= 0
                    || dim % heads != 0 || heads % kvHeads != 0 || dim > 1 << 16 || hidden > 1 << 18
                    || layers > 1024 || vocab > 1 << 22 || seqLen > 1 << 24) {
                throw fail(model, "not a llama2.c checkpoint: implausible header dim=" + dim + " hidden=" + hidden
                        + " layers=" + layers + " heads=" + heads + " kv_heads=" + kvHeads + " vocab=" + vocabRaw
                        + " seq_len=" + seqLen);
            }
            int hd = dim / heads;
            int kvDim = kvHeads * hd;
            List<GgufTensor> tensors = new ArrayList<>();
            long[] off = {HEADER_BYTES};
            record Spec(String name, long cols, long rows) {
            }
            List<Spec> order = new ArrayList<>();
            order.add(new Spec("token_embd.weight", dim, vocab));
            String[][] perLayer = {
                {"attn_norm", "D"}, {"attn_q", "Q"}, {"attn_k", "K"}, {"attn_v", "K"}, {"attn_output", "Q"},
                {"ffn_norm", "D"}, {"ffn_gate", "G"}, {"ffn_down", "W2"}, {"ffn_up", "G"}};
            // llama2.c stores each kind for all layers before the next kind.
            for (String[] kind : perLayer) {
                for (int l = 0; l < layers; l++) {
                    String name = "blk." + l + "." + kind[0] + ".weight";
                    order.add(switch (kind[1]) {
                        case "D" -> new Spec(name, dim, 1);
                        case "Q" -> new Spec(name, dim, dim);
                        case "K" -> new Spec(name, dim, kvDim);
                        case "G" -> new Spec(name, dim, hidden);
                        default -> new Spec(name, hidden, dim);
                    });
                }
            }
            order.add(new Spec("output_norm.weight", dim, 1));
            long expected = HEADER_BYTES;
            for (Spec s : order) {
                expected += 4 * s.cols * s.rows;
            }
            expected += 4L * seqLen * (hd / 2) * 2; // freq_cis_real and freq_cis_imag, unused
            long clsOffset = expected;
            if (!shared) {
                expected += 4L * vocab * dim;
            }
            if (size != expected) {
                throw fail(model, "size " + size + " bytes does not match the header, which implies " + expected
                        + " bytes (" + (shared ? "shared" : "separate") + " classifier): truncated or not a llama2.c"
                        + " checkpoint");
            }
            for (Spec s : order) {
                long bytes = 4 * s.cols * s.rows;
                long[] ne = s.rows == 1 ? new long[] {s.cols} : new long[] {s.cols, s.rows};
                tensors.add(new GgufTensor(s.name, ne, F32_TYPE, off[0], seg.asSlice(off[0], bytes).asReadOnly()));
                off[0] += bytes;
            }
            if (!shared) {
                tensors.add(new GgufTensor("output.weight", new long[] {dim, vocab}, F32_TYPE, clsOffset,
                        seg.asSlice(clsOffset, 4L * vocab * dim).asReadOnly()));
            }
            Map<String, GgufValue> md = new LinkedHashMap<>();
            md.put("general.architecture", GgufValue.string("llama"));
            md.put("general.name", GgufValue.string(model.getFileName().toString()));
            md.put("llama.context_length", GgufValue.u32(seqLen));
            md.put("llama.embedding_length", GgufValue.u32(dim));
            md.put("llama.block_count", GgufValue.u32(layers));
            md.put("llama.feed_forward_length", GgufValue.u32(hidden));
            md.put("llama.attention.head_count", GgufValue.u32(heads));
            md.put("llama.attention.head_count_kv", GgufValue.u32(kvHeads));
            // run.c: RoPE base 10000 and RMSNorm eps 1e-5 are hard-coded (FORMATS.md §8).
            md.put("llama.rope.freq_base", GgufValue.f32(10000f));
            md.put("llama.rope.dimension_count", GgufValue.u32(hd));
            md.put("llama.attention.layer_norm_rms_epsilon", GgufValue.f32(1e-5f));
            md.put("llama.vocab_size", GgufValue.u32(vocab));
            readTokenizer(tokenizer, vocab, md);
            return new Llama2cCheckpoint(model, arena, md, tensors);
        } catch (IOException e) {
            arena.close();
            throw InputFiles.cannotRead(model, e);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** Reads tokenizer.bin: u32 max_token_length, then per token f32 score, u32 length, bytes (FORMATS.md §8). */
    private static void readTokenizer(Path file, int vocab, Map<String, GgufValue> md) {
        byte[] b;
        try {
            b = Files.readAllBytes(file);
        } catch (IOException e) {
            throw InputFiles.cannotRead(file, e);
        }
        MemorySegment seg = MemorySegment.ofArray(b);
        if (b.length < 4) {
            throw fail(file, "truncated: too short for a tokenizer.bin header");
        }
        if (seg.get(I32, 0) == GgufFile.MAGIC) {
            throw fail(file, "a GGUF file, not a llama2.c tokenizer.bin (--tokenizer takes the tokenizer.bin written"
                    + " with the checkpoint)");
        }
        long pos = 4;
        String[] pieces = new String[vocab];
        float[] scores = new float[vocab];
        int[] types = new int[vocab];
        for (int i = 0; i < vocab; i++) {
            if (pos + 8 > b.length) {
                throw fail(file, "truncated: token " + i + " of " + vocab + " is missing (the model's vocab_size)");
            }
            scores[i] = seg.get(F32, pos);
            int len = seg.get(I32, pos + 4);
            pos += 8;
            if (len < 0 || len > b.length - pos) {
                throw fail(file, "token " + i + " claims " + len + " bytes but the file has " + (b.length - pos) + " left");
            }
            String piece = new String(b, (int) pos, len, StandardCharsets.UTF_8);
            pos += len;
            // export rewrote "▁" to " " and wrapped BOS/EOS in newlines; undo that so the vocabulary reads like GGUF's.
            if (i == 1 || i == 2) {
                types[i] = 3;
                piece = i == 1 ? "<s>" : "</s>";
            } else if (i == 0) {
                types[i] = 2;
            } else if (piece.length() == 6 && piece.startsWith("<0x") && piece.endsWith(">")) {
                types[i] = 6;
            } else {
                types[i] = 1;
                piece = piece.replace(" ", "\u2581");
            }
            pieces[i] = piece;
        }
        md.put("tokenizer.ggml.model", GgufValue.string("llama"));
        md.put("tokenizer.ggml.tokens", GgufValue.array(ValueType.STRING, pieces));
        md.put("tokenizer.ggml.scores", GgufValue.array(ValueType.FLOAT32, scores));
        md.put("tokenizer.ggml.token_type", GgufValue.array(ValueType.INT32, types));
        md.put("tokenizer.ggml.bos_token_id", GgufValue.u32(1));
        md.put("tokenizer.ggml.eos_token_id", GgufValue.u32(2));
        md.put("tokenizer.ggml.unknown_token_id", GgufValue.u32(0));
    }

    private static PrefillException fail(Path file, String problem) {
        return new PrefillException(PrefillException.Code.MODEL_FORMAT, file + ": " + problem);
    }
}
