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
 * Decodes one KV head's slice of a page's rows into float arrays for the attention kernel: values row-major,
 * keys transposed (so scores over positions are vector FMAs). Q8_0 rows go through the Vector API (int8 lanes
 * widened to float, times the block scale), the same products as {@link KVElementType#decode}, so results are
 * identical to it; F32 is a copy; F16 uses the JDK's float16 conversion.
 */
final class KvRows {
    /** int8 lanes that widen to one float vector. */
    private static final VectorSpecies<Byte> BYTES = VectorSpecies.of(byte.class,
            jdk.incubator.vector.VectorShape.forBitSize(VectorOps.FLOATS.length() * 8));

    private KvRows() {
    }

    /**
     * Lane indices of the transpose's stages: at scale {@code s} (L/2, ..., 1), rows {@code i} and {@code i + s} (bit
     * {@code s} of {@code i} clear) exchange the lanes of row {@code i} with bit {@code s} set against those of row
     * {@code i + s} with it clear. {@code selectFrom(a, b)} reads lane {@code x < L} of {@code a}, {@code L + x} of
     * {@code b}.
     */
    private static final float[] PICK_A;
    private static final float[] PICK_B;

    static {
        int lanes = VectorOps.FLOATS.length();
        int stages = Integer.numberOfTrailingZeros(lanes);
        PICK_A = new float[stages * lanes];
        PICK_B = new float[stages * lanes];
        int st = 0;
        for (int s = lanes / 2; s >= 1; s >>= 1, st++) {
            for (int l = 0; l < lanes; l++) {
                PICK_A[st * lanes + l] = (l & s) == 0 ? l : lanes + l - s;
                PICK_B[st * lanes + l] = (l & s) == 0 ? l + s : lanes + l;
            }
        }
    }

    /**
     * Elements {@code [from, from + count)} of rows {@code first + j}, {@code j < rows}, of the page's keys into
     * {@code kT[d * stride + j]}. Rows go in groups of one vector length: decoded row-major into {@code tmp} (at least
     * {@code L * count} floats), transposed there block by block with lane selections (exact data movement, log2 L
     * stages), then stored as contiguous runs of positions; leftover rows element by element.
     */
    static void keysTransposed(KVPage page, int first, int rows, int from, int count, float[] kT, int stride, float[] tmp) {
        long rowBytes = page.elementType().rowBytes(page.kvDim());
        int lanes = VectorOps.FLOATS.length();
        int j = 0;
        if (count % lanes == 0 && lanes >= 2) {
            for (; j + lanes <= rows; j += lanes) {
                for (int r = 0; r < lanes; r++) {
                    row(page.keys(), page.elementType(), rowBytes * (first + j + r), from, count, tmp, r * count);
                }
                for (int c = 0; c < count; c += lanes) {
                    transposeBlock(tmp, c, count);
                    for (int d = 0; d < lanes; d++) {
                        FloatVector.fromArray(VectorOps.FLOATS, tmp, d * count + c).intoArray(kT, (c + d) * stride + j);
                    }
                }
            }
        }
        for (; j < rows; j++) {
            row(page.keys(), page.elementType(), rowBytes * (first + j), from, count, tmp, 0);
            for (int d = 0; d < count; d++) {
                kT[d * stride + j] = tmp[d];
            }
        }
    }

    /** Transposes the L x L block whose row {@code r} is {@code a[r * rowStride + c ..]}, in place. */
    private static void transposeBlock(float[] a, int c, int rowStride) {
        var sp = VectorOps.FLOATS;
        int lanes = sp.length();
        int st = 0;
        for (int s = lanes / 2; s >= 1; s >>= 1, st++) {
            FloatVector pa = FloatVector.fromArray(sp, PICK_A, st * lanes);
            FloatVector pb = FloatVector.fromArray(sp, PICK_B, st * lanes);
            for (int i = 0; i < lanes; i++) {
                if ((i & s) == 0) {
                    int ia = i * rowStride + c;
                    int ib = (i + s) * rowStride + c;
                    FloatVector x = FloatVector.fromArray(sp, a, ia);
                    FloatVector y = FloatVector.fromArray(sp, a, ib);
                    pa.selectFrom(x, y).intoArray(a, ia);
                    pb.selectFrom(x, y).intoArray(a, ib);
                }
            }
        }
    }

    /**
     * Elements {@code [from, from + count)} of rows {@code first + j}, {@code j < rows}, of the page's values into
     * {@code v[j * count + d]}.
     */
    static void values(KVPage page, int first, int rows, int from, int count, float[] v) {
        long rowBytes = page.elementType().rowBytes(page.kvDim());
        for (int j = 0; j < rows; j++) {
            row(page.values(), page.elementType(), rowBytes * (first + j), from, count, v, j * count);
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
