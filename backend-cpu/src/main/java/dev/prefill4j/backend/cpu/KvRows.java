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
    /** int8 lanes that widen to one float vector. */
    private static final VectorSpecies<Byte> BYTES = VectorSpecies.of(byte.class,
            jdk.incubator.vector.VectorShape.forBitSize(VectorOps.FLOATS.length() * 8));

    private KvRows() {
    }

    /**
     * Elements {@code [from, from + count)} of rows {@code first + j}, {@code j < rows}, of a page's keys or values
     * ({@code src}, one of the page's segments) into {@code dst[j * count + d]}.
     */
    static void decode(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst) {
        long rowBytes = page.elementType().rowBytes(page.kvDim());
        for (int j = 0; j < rows; j++) {
            row(src, page.elementType(), rowBytes * (first + j), from, count, dst, j * count);
        }
    }

    /** Eight int8 lanes, and the eight float lanes they widen to, for values decoded in blocks of eight. */
    private static final VectorSpecies<Byte> BYTES8 = ByteVector.SPECIES_64;
    private static final VectorSpecies<Float> FLOATS8 = FloatVector.SPECIES_256;

    /**
     * Like {@link #decode}, but into blocks of {@code step} elements: element {@code d} of row {@code j} goes to
     * {@code dst[(d / step) * span * step + j * step + d % step]} (a block of the head dimension is contiguous over the
     * positions, so the attention kernel walks it with a constant stride). Q8_0 rows with whole blocks and a step of
     * eight are widened eight lanes at a time, the same products as {@link KVElementType#decode}; other rows are
     * decoded into {@code tmp} (at least {@code count} floats) and copied.
     */
    static void decodeBlocked(MemorySegment src, KVPage page, int first, int rows, int from, int count, float[] dst,
                              int span, int step, float[] tmp) {
        KVElementType type = page.elementType();
        long rowBytes = type.rowBytes(page.kvDim());
        boolean q8 = type == KVElementType.Q8_0 && step == 8 && from % 32 == 0 && count % 32 == 0;
        for (int j = 0; j < rows; j++) {
            long rowOffset = rowBytes * (first + j);
            if (q8) {
                for (int b = 0; b < count / 32; b++) {
                    long block = rowOffset + 34L * (from / 32 + b);
                    float d = Blocks.fp16(src, block);
                    for (int i = 0; i < 32; i += 8) {
                        ByteVector q = ByteVector.fromMemorySegment(BYTES8, src, block + 2 + i, ByteOrder.LITTLE_ENDIAN);
                        ((FloatVector) q.convertShape(VectorOperators.B2F, FLOATS8, 0)).mul(d)
                                .intoArray(dst, (32 * b + i) / 8 * span * 8 + j * 8);
                    }
                }
            } else {
                row(src, type, rowOffset, from, count, tmp, 0);
                for (int e = 0; e < count; e++) {
                    dst[e / step * span * step + j * step + e % step] = tmp[e];
                }
            }
        }
    }

    /** One row's elements {@code [from, from + count)}. */
    static void row(MemorySegment src, KVElementType type, long rowOffset, int from, int count, float[] dst, int off) {
        int lanes = VectorOps.FLOATS.length();
        if (type == KVElementType.Q8_0 && from % 32 == 0 && count % 32 == 0 && 32 % lanes == 0) {
            for (int b = 0; b < count / 32; b++) {
                long block = rowOffset + 34L * (from / 32 + b);
                float d = Blocks.fp16(src, block);
                for (int i = 0; i < 32; i += lanes) {
                    ByteVector q = ByteVector.fromMemorySegment(BYTES, src, block + 2 + i, ByteOrder.LITTLE_ENDIAN);
                    ((FloatVector) q.convertShape(VectorOperators.B2F, VectorOps.FLOATS, 0)).mul(d)
                            .intoArray(dst, off + 32 * b + i);
                }
            }
            return;
        }
        type.decode(src, rowOffset, from, count, dst, off);
    }
}
