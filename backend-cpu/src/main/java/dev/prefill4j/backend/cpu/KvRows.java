package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVPage;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
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
    /** Eight int8 lanes, and the eight float lanes they widen to: one chunk. */
    private static final VectorSpecies<Byte> BYTES8 = ByteVector.SPECIES_64;
    private static final VectorSpecies<Float> FLOATS8 = FloatVector.SPECIES_256;

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
     * {@code dst[j * rowStride + (d / CHUNK) * chunkStride + d % CHUNK]}. Q8_0 rows with whole blocks are widened a
     * chunk at a time (int8 lanes to float, times the block scale: the same products as {@link KVElementType#decode},
     * so identical results); other rows are decoded by their type, straight into {@code dst} when chunks are
     * contiguous ({@code chunkStride == CHUNK}), else through {@code tmp}.
     */
    private static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                               int rowStride, int chunkStride, float[] tmp, short[] halves) {
        KVElementType type = page.elementType();
        long rowBytes = type.rowBytes(page.kvDim());
        if (type == KVElementType.F16) {
            f16(src, rowBytes, first, rows, from, count, dst, rowStride, chunkStride, tmp, halves);
            return;
        }
        boolean q8 = type == KVElementType.Q8_0 && from % 32 == 0 && count % 32 == 0;
        for (int j = 0; j < rows; j++) {
            long rowOffset = rowBytes * (first + j);
            int off = j * rowStride;
            if (q8) {
                for (int b = 0; b < count / 32; b++) {
                    long block = rowOffset + 34L * (from / 32 + b);
                    float d = Blocks.fp16(src, block);
                    for (int i = 0; i < 32; i += CHUNK) {
                        ByteVector q = ByteVector.fromMemorySegment(BYTES8, src, block + 2 + i, ByteOrder.LITTLE_ENDIAN);
                        ((FloatVector) q.convertShape(VectorOperators.B2F, FLOATS8, 0)).mul(d)
                                .intoArray(dst, off + (32 * b + i) / CHUNK * chunkStride);
                    }
                }
            } else if (chunkStride == CHUNK) {
                type.decode(src, rowOffset, from, count, dst, off);
            } else {
                type.decode(src, rowOffset, from, count, tmp, 0);
                for (int e = 0; e < count; e++) {
                    dst[off + e / CHUNK * chunkStride + e % CHUNK] = tmp[e];
                }
            }
        }
    }

    /**
     * F16 rows as {@link #decode} lays them out: the rows' halves copied into one array, converted in one plain loop
     * (C2 compiles it to the float16 conversion instruction over vectors; converted element by element from the
     * segment, a row's slice at a time, it stayed scalar at 0.6 ns an element, most of a decode step's attention), then,
     * unless the layout is row-major, moved into place a chunk at a time. The conversion is {@link
     * Float#float16ToFloat}'s, as {@link KVElementType#decode}'s. On the 1B TQ2_0 file ({@code bench --profile},
     * alternating processes): attention 1.02-1.24 to 0.46-0.55 ms a token in tg128 (three pairs), 0.21-0.23 to 0.15
     * in pp512 (two pairs); decode at depth 4,096 ({@code --context 4096}, one run each) 9.48 to 18.45 tokens/s.
     */
    private static void f16(MemorySegment src, long rowBytes, int first, int rows, int from, int count, float[] dst,
                            int rowStride, int chunkStride, float[] tmp, short[] halves) {
        int n = rows * count;
        for (int j = 0; j < rows; j++) {
            MemorySegment.copy(src, Blocks.I16, rowBytes * (first + j) + 2L * from, halves, j * count, count);
        }
        boolean rowMajor = rowStride == count && chunkStride == CHUNK;
        float[] f = rowMajor ? dst : tmp;
        for (int i = 0; i < n; i++) {
            f[i] = Float.float16ToFloat(halves[i]);
        }
        if (rowMajor) {
            return;
        }
        for (int j = 0; j < rows; j++) {
            int off = j * rowStride;
            int e = 0;
            for (; e + CHUNK <= count; e += CHUNK) {
                FloatVector.fromArray(FLOATS8, f, j * count + e).intoArray(dst, off + e / CHUNK * chunkStride);
            }
            for (; e < count; e++) {
                dst[off + e / CHUNK * chunkStride + e % CHUNK] = f[j * count + e];
            }
        }
    }
}
