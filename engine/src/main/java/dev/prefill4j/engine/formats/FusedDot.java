package dev.prefill4j.engine.formats;

import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector dot products for the built-in formats' {@link Quantizer#dot}, the CPU backend's decode-step kernel. Lanes
 * are summed in a fixed order ({@link #sum}), so a result does not depend on the JIT tier that computed it.
 */
final class FusedDot {
    static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED;
    /** Elements decoded per step: 4 KiB of floats, which stay in L1 while they are multiplied. */
    private static final int CHUNK = 1024;
    private static final ThreadLocal<float[]> BUFFER = ThreadLocal.withInitial(() -> new float[CHUNK + FLOATS.length()]);

    private FusedDot() {
    }

    /**
     * {@return the dot product of {@code count} elements of {@code q} at {@code offset} with {@code x}}, decoding
     * {@value #CHUNK} elements at a time into a per-thread buffer ({@code count} and the chunk are multiples of the
     * block size of every format that uses this).
     */
    static float byDecoding(Quantizer q, MemorySegment src, long offset, float[] x, int xOffset, int count) {
        float[] buf = BUFFER.get();
        FloatVector acc0 = FloatVector.zero(FLOATS);
        FloatVector acc1 = acc0;
        float tail = 0;
        int step = FLOATS.length();
        for (int c = 0; c < count; c += CHUNK) {
            int n = Math.min(CHUNK, count - c);
            q.decode(src, offset + q.byteSize(c), buf, 0, n);
            int xo = xOffset + c;
            int i = 0;
            for (; i + 2 * step <= n; i += 2 * step) {
                acc0 = FloatVector.fromArray(FLOATS, buf, i).fma(FloatVector.fromArray(FLOATS, x, xo + i), acc0);
                acc1 = FloatVector.fromArray(FLOATS, buf, i + step).fma(FloatVector.fromArray(FLOATS, x, xo + i + step), acc1);
            }
            for (; i < n; i++) {
                tail = Math.fma(buf[i], x[xo + i], tail);
            }
        }
        return sum(acc0.add(acc1)) + tail;
    }

    private static final int L = FLOATS.length();
    private static final VectorShuffle<Float> X8 = L > 8 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 8) : null;
    private static final VectorShuffle<Float> X4 = L > 4 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 4) : null;
    private static final VectorShuffle<Float> X2 = VectorShuffle.fromOp(FLOATS, i -> i ^ 2);
    private static final VectorShuffle<Float> X1 = VectorShuffle.fromOp(FLOATS, i -> i ^ 1);

    /**
     * {@return the sum of the lanes of {@code v}} in a fixed order that is the same in compiled and interpreted code:
     * up to 16 lanes, a tree of lane-wise additions, each lane added to the lane half the remaining width away
     * ({@code reduceLanes} leaves its order unspecified; adding {@code lane(i)} in a loop compiles to a jump table per
     * lane, measured 1.07-1.09x slower for a whole dot of 2,048 elements); wider vectors, first to last.
     */
    static float sum(FloatVector v) {
        if (L > 16) {
            float s = 0;
            for (int i = 0; i < L; i++) {
                s += v.lane(i);
            }
            return s;
        }
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0);
    }
}
