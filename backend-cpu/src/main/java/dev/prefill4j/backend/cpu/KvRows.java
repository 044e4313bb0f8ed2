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
 * float16 conversion.
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
     * ({@code src}, one of the page's segments) into {@code dst[j * count + d]}.
     */
    static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst) {
        decode(src, page, first, rows, from, count, dst, count, CHUNK, null);
    }

    /**
     * Like {@link #decode}, but in chunks of {@link #CHUNK} elements laid out chunk by chunk: element {@code d} of row
     * {@code j} goes to {@code dst[(d / CHUNK) * span * CHUNK + j * CHUNK + d % CHUNK]} (a chunk of the head dimension
     * is contiguous over the positions, so the attention kernel walks it with a constant stride). {@code tmp} holds
     * at least {@code count} floats.
     */
    static void decodeBlocked(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                              int span, float[] tmp) {
        decode(src, page, first, rows, from, count, dst, CHUNK, span * CHUNK, tmp);
    }

    /**
     * The one decoder: element {@code d} of row {@code j} goes to
     * {@code dst[j * rowStride + (d / CHUNK) * chunkStride + d % CHUNK]}. Q8_0 rows with whole blocks are widened a
     * chunk at a time (int8 lanes to float, times the block scale: the same products as {@link KVElementType#decode},
     * so identical results); other rows are decoded by their type, straight into {@code dst} when chunks are
     * contiguous ({@code chunkStride == CHUNK}), else through {@code tmp}.
     */
    private static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                               int rowStride, int chunkStride, float[] tmp) {
        KVElementType type = page.elementType();
        long rowBytes = type.rowBytes(page.kvDim());
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
}
