package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVPage;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/**
 * Decodes one KV head's slice of a page's rows into float arrays for the attention kernel, row-major or in blocks of
 * the head dimension. Q8_0 rows go through the Vector API (int8 lanes widened to float, times the block scale), the
 * same products as {@link KVElementType#decode}, so results are identical to it; F32 is a copy; F16 uses the JDK's
 * float16 conversion over the whole tile at once ({@link #f16}).
 */
final class KvRows {
    /** Elements per chunk of a decoded row: the unit of {@link #decodeBlocked}'s layout. */
    static final int CHUNK = 8;
    /**
     * Int8 lanes as many as {@link VectorOps#FLOATS} has: a Q8_0 block's codes widened a float vector at a time, or
     * {@code null} where that vector has fewer than 8 lanes (no byte vector that small; such rows are decoded by
     * {@link KVElementType#decode}).
     */
    private static final VectorSpecies<Byte> Q8_LANES = VectorOps.FLOATS.length() < 8 ? null
            : VectorSpecies.of(byte.class, VectorShape.forBitSize(VectorOps.FLOATS.length() * 8));

    private KvRows() {
    }

    /**
     * Elements {@code [from, from + count)} of rows {@code first + j}, {@code j < rows}, of a page's keys or values
     * ({@code src}, one of the page's segments) into {@code dst[j * count + d]}. {@code halves} holds at least
     * {@code rows * count} elements (F16 rows are staged there).
     */
    static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                       short[] halves) {
        decode(src, page, first, rows, from, count, dst, count, CHUNK, null, halves);
    }

    /**
     * Like {@link #decode}, but in chunks of {@link #CHUNK} elements laid out chunk by chunk: element {@code d} of row
     * {@code j} goes to {@code dst[(d / CHUNK) * span * CHUNK + j * CHUNK + d % CHUNK]} (a chunk of the head dimension
     * is contiguous over the positions, so the attention kernel walks it with a constant stride). {@code tmp} and
     * {@code halves} hold at least {@code rows * count} elements.
     */
    static void decodeBlocked(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                              int span, float[] tmp, short[] halves) {
        decode(src, page, first, rows, from, count, dst, CHUNK, span * CHUNK, tmp, halves);
    }

    /**
     * The one decoder: element {@code d} of row {@code j} goes to
     * {@code dst[j * rowStride + (d / CHUNK) * chunkStride + d % CHUNK]}. Rows are decoded whole, straight into
     * {@code dst} when each row's elements are contiguous there ({@code chunkStride == CHUNK}), else into {@code tmp}
     * ({@code tmp[j * count + d]}) and then moved a chunk at a time ({@link #scatter}). F16 tiles go through {@link
     * #f16}; Q8_0 rows of whole blocks through {@link #q8} (the same products as {@link KVElementType#decode}, so
     * identical results); the rest through {@link KVElementType#decode}.
     */
    private static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                               int rowStride, int chunkStride, float[] tmp, short[] halves) {
        KVElementType type = page.elementType();
        long rowBytes = type.rowBytes(page.kvDim());
        boolean inPlace = chunkStride == CHUNK;
        float[] f = inPlace ? dst : tmp;
        int fStride = inPlace ? rowStride : count;
        if (type == KVElementType.F16) {
            f16(src, rowBytes, first, rows, from, count, f, fStride, tmp, halves);
        } else {
            boolean q8 = Q8_LANES != null && type == KVElementType.Q8_0 && from % 32 == 0 && count % 32 == 0;
            for (int j = 0; j < rows; j++) {
                long rowOffset = rowBytes * (first + j);
                if (q8) {
                    q8(src, rowOffset, from, count, f, j * fStride);
                } else {
                    type.decode(src, rowOffset, from, count, f, j * fStride);
                }
            }
        }
        if (!inPlace) {
            scatter(tmp, rows, count, dst, rowStride, chunkStride);
        }
    }

    /**
     * Q8_0 blocks {@code [from / 32, (from + count) / 32)} of the row at {@code rowOffset} into {@code f[off...]}:
     * int8 lanes widened to whole float vectors ({@link VectorOps#FLOATS}), times the block's scale. Only whole-width
     * float vectors: a half-width one stored through {@code FloatVector.intoArray} here was, in every decode process,
     * the receiver that failed that shared method's class guess 4 times (JFR {@code jdk.Deoptimization} stack traces,
     * {@code bench -m 1b-q4_k_m.gguf -p 16 -n 64}, 2026-12-07); once a guess has failed there, C2 compiles later
     * kernels' calls at that site as virtual calls, which box their vectors.
     */
    private static void q8(MemorySegment src, long rowOffset, int from, int count, float[] f, int off) {
        int lanes = Q8_LANES.length();
        for (int b = 0; b < count / 32; b++) {
            long block = rowOffset + 34L * (from / 32 + b);
            float d = Blocks.fp16(src, block);
            for (int i = 0; i < 32; i += lanes) {
                ByteVector q = ByteVector.fromMemorySegment(Q8_LANES, src, block + 2 + i, ByteOrder.LITTLE_ENDIAN);
                ((FloatVector) q.convertShape(VectorOperators.B2F, VectorOps.FLOATS, 0)).mul(d)
                        .intoArray(f, off + 32 * b + i);
            }
        }
    }

    /**
     * Rows {@code f[j * count + d]} moved into {@link #decode}'s chunked layout, a chunk at a time in a plain loop
     * (no Vector API store: a half-width one here was the shared-site failure {@link #q8} describes).
     */
    private static void scatter(float[] f, int rows, int count, float[] dst, int rowStride, int chunkStride) {
        for (int j = 0; j < rows; j++) {
            int off = j * rowStride;
            int e = 0;
            for (; e + CHUNK <= count; e += CHUNK) {
                int to = off + e / CHUNK * chunkStride;
                int at = j * count + e;
                for (int i = 0; i < CHUNK; i++) {
                    dst[to + i] = f[at + i];
                }
            }
            for (; e < count; e++) {
                dst[off + e / CHUNK * chunkStride + e % CHUNK] = f[j * count + e];
            }
        }
    }

    /**
     * F16 rows into {@code f[j * fStride + d]}: the rows' halves copied into one array, converted in one plain loop
     * (C2 compiles it to the float16 conversion instruction over vectors; converted element by element from the
     * segment, a row's slice at a time, it stayed scalar at 0.6 ns an element, most of a decode step's attention).
     * The conversion is {@link Float#float16ToFloat}'s, as {@link KVElementType#decode}'s. On the 1B TQ2_0 file
     * ({@code bench --profile}, alternating processes): attention 1.02-1.24 to 0.46-0.55 ms a token in tg128 (three
     * pairs), 0.21-0.23 to 0.15 in pp512 (two pairs); decode at depth 4,096 ({@code --context 4096}, one run each)
     * 9.48 to 18.45 tokens/s. Rows not packed in {@code f} ({@code fStride != count}) are converted in {@code tmp}
     * and copied.
     */
    private static void f16(MemorySegment src, long rowBytes, int first, int rows, int from, int count, float[] f,
                            int fStride, float[] tmp, short[] halves) {
        int n = rows * count;
        for (int j = 0; j < rows; j++) {
            MemorySegment.copy(src, Blocks.I16, rowBytes * (first + j) + 2L * from, halves, j * count, count);
        }
        float[] g = fStride == count ? f : tmp;
        for (int i = 0; i < n; i++) {
            g[i] = Float.float16ToFloat(halves[i]);
        }
        if (g != f) {
            for (int j = 0; j < rows; j++) {
                System.arraycopy(g, j * count, f, j * fStride, count);
            }
        }
    }
}
