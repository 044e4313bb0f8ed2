package dev.prefill4j.engine.formats;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector dot products for the built-in formats' {@link Quantizer#dot}, the CPU backend's decode-step kernel. Lanes
 * are summed in a fixed order ({@link #sum}), so a result does not depend on the JIT tier that computed it.
 */
final class FusedDot {
    static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED;
    private static final ThreadLocal<float[]> BUFFER = ThreadLocal.withInitial(() -> new float[0]);

    private FusedDot() {
    }

    /**
     * {@return the dot product of {@code count} elements of {@code q} at {@code offset} with {@code x}}: the row is
     * decoded whole into a per-thread buffer (a 2,048-element row is 8 KiB, in L1), then multiplied with four running
     * sums ({@link #dot}). Against decoding 1,024 elements at a time into two running sums: F16 rows 1.6x faster
     * (in-process A/B, 2,048 x 2,048).
     */
    static float byDecoding(Quantizer q, MemorySegment src, long offset, float[] x, int xOffset, int count) {
        float[] buf = BUFFER.get();
        if (buf.length < count) {
            buf = new float[count];
            BUFFER.set(buf);
        }
        q.decode(src, offset, buf, 0, count);
        return dot(buf, x, xOffset, count);
    }

    private static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    /** Half the float vector's width: one float16 per float lane (null where no vector shape is that narrow). */
    private static final VectorSpecies<Short> HALVES = FLOATS.vectorBitSize() >= 128
            ? VectorSpecies.of(short.class, VectorShape.forBitSize(FLOATS.vectorBitSize() / 2)) : null;
    /** {@return whether {@link #f16} reads float16 weights in place (vectors of 128 bits or more)} */
    static boolean f16InPlace() {
        return HALVES != null;
    }

    /** Magnitude bits of a float16 once shifted into a float's place; exponent 31 (infinity, NaN) is 0x0F800000 up. */
    private static final int F16_MAGNITUDE = 0x0FFFE000;

    /**
     * {@return the dot product of {@code count} float16 weights at {@code offset} with {@code x}}, read straight from
     * {@code src}: each weight's sign-extended bits shifted left by 13 put its sign, exponent and mantissa in a float's
     * places ({@code & 0x8FFFE000} clears the copies of the sign above the exponent), and times 2^112 the exponent is
     * rebiased, exactly for normal and subnormal values alike (the Vector API has no float16 conversion). The same
     * four running sums, lane tree and scalar tail as {@link #byDecoding} over the decoded row, so the same bits. An
     * infinity or NaN would come out finite this way: the largest magnitude is tracked and such a row is redone by
     * {@link #byDecoding}. One thread on a Zen 3 VM (AVX2), a harness of this loop against {@code byDecoding},
     * medians of 8-10 in-process rounds: 2,048-element rows 1.30x in L2 and 1.46x streamed from memory, 8,192-element
     * rows 1.6x and 1.33x; without the magnitude check it was 1.6x streamed, but an infinite weight would then pass.
     * Speed measured with 8 float lanes only (the tests hold the results on any width).
     */
    static float f16(Quantizer f16, MemorySegment src, long offset, float[] x, int xOffset, int count) {
        if (HALVES == null) {
            return byDecoding(f16, src, offset, x, xOffset, count);
        }
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        IntVector largest = IntVector.zero(INTS);
        int step = FLOATS.length();
        int i = 0;
        for (; i + 4 * step <= count; i += 4 * step) {
            long o = offset + 2L * i;
            IntVector t0 = f16Bits(src, o);
            IntVector t1 = f16Bits(src, o + 2L * step);
            IntVector t2 = f16Bits(src, o + 4L * step);
            IntVector t3 = f16Bits(src, o + 6L * step);
            largest = largest.max(t0.and(F16_MAGNITUDE).max(t1.and(F16_MAGNITUDE)))
                    .max(t2.and(F16_MAGNITUDE).max(t3.and(F16_MAGNITUDE)));
            a0 = f16Value(t0).fma(FloatVector.fromArray(FLOATS, x, xOffset + i), a0);
            a1 = f16Value(t1).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + step), a1);
            a2 = f16Value(t2).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + 2 * step), a2);
            a3 = f16Value(t3).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + 3 * step), a3);
        }
        float tail = 0;
        for (; i < count; i++) {
            float w = Float.float16ToFloat(src.get(Blocks.I16, offset + 2L * i));
            tail = Math.fma(w, x[xOffset + i], tail);
        }
        if (largest.reduceLanes(VectorOperators.MAX) >= 0x0F800000) {
            return byDecoding(f16, src, offset, x, xOffset, count);
        }
        FloatVector v = a0.add(a1).add(a2.add(a3));
        if (L > 16) {
            return sum(v) + tail;
        }
        // sum's tree written out here: called, C2 left it out of line in this method and boxed its argument for every
        // row (JFR allocation samples during decode; 1,467 more young collections over a tg64 run of the 1B F16 file).
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0) + tail;
    }

    /**
     * Rows of at most this many elements take {@link #f16} one at a time in {@link #f16Rows}, longer ones {@link
     * #f16Quad}: {@link Blocks#ONE_ROW_MAX_COUNT}, the machine's. With 16 KiB of activations or less, a row and the
     * activations stay in L1, and on the Zen 5 VM one stream of weights a thread read faster than four. In-process
     * harness on the Zen 5 VM (rows of the 1B F16 file streamed from memory, {@code dotPreparedRows} over 256 rows at a
     * time, the middle two of six timings, two to five processes each): two threads, 2,048 elements, one row at a time
     * 28.0-34.0 GB/s against 23.7-27.9 for four; 4,096 elements 26.1-35.0 against 23.3-34.0; 8,192 elements 15.7-21.5
     * against 28.9-29.7 (the case the four-row form was made for); one thread, 2,048 elements 18.9-23.1 against
     * 14.3-18.1, 4,096 elements 14.2-19.2 against 18.0-20.9. On the Intel Xeon VM of 2026-12-05 four rows at a time
     * were faster at 2,048 elements too: {@code bench -m 1b-f16.gguf -p 16 -n 32 -r 2 --profile}, two alternating
     * pairs, {@code ffn_gate+up} 15.7-16.1 GB/s one row at a time against 21.6-22.0, tg32 6.49-6.59 against 8.30-8.40
     * tok/s.
     */
    static final int F16_ONE_ROW_MAX_COUNT = Blocks.ONE_ROW_MAX_COUNT;

    /**
     * {@link #f16} for {@code rows} rows {@code stride} bytes apart ({@link Quantizer#dotPreparedRows}): with 16
     * float lanes and rows longer than {@link #F16_ONE_ROW_MAX_COUNT}, four rows at a time ({@link #f16Quad}), the rest
     * one at a time; otherwise one at a time.
     * The four rows of a group are a quarter of the run apart ({@code i, i + q, i + 2q, i + 3q} for {@code q = rows / 4}),
     * so that the next group's rows follow this group's in memory: four continuous streams of weights through the
     * run. Consecutive rows in a group (each group starting three new streams) ran the 1B F16 file's {@code ffn_down}
     * at 12.0 and 13.1 GB/s against 14.2 and 14.6 ({@code bench -p 16 -n 32 -r 2 -t 1 --profile}, two alternating
     * pairs).
     */
    static void f16Rows(Quantizer f16, MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                        int count, float[] out, int outIndex) {
        int r = 0;
        if (L == 16 && count > F16_ONE_ROW_MAX_COUNT) {
            int q = rows / 4;
            for (int i = 0; i < q; i++) {
                f16Quad(f16, src, offset + i * stride, q * stride, x, xOffset, count, out, outIndex + i, q);
            }
            r = 4 * q;
        }
        for (; r < rows; r++) {
            out[outIndex + r] = f16(f16, src, offset + r * stride, x, xOffset, count);
        }
    }

    /**
     * {@link #f16} for four rows {@code stride} bytes apart in one loop, their products to {@code out} at {@code
     * outIndex} and {@code outStride} apart, each vector of activations loaded once for the four. Each row keeps its
     * own four running sums, largest magnitude, tail and lane tree, so each gets the bits {@code f16} gives it (a row
     * with an infinity or NaN is redone by {@link #byDecoding} alone). An iteration takes one vector of each row, and
     * the sums rotate after it ({@code (s0, s1, s2, s3) <- (s1, s2, s3, s0 + w * x)}), so vector {@code j} of a row
     * still goes to sum {@code j % 4}: the loop body stays small enough for C2 to inline everything in it (a two-row
     * form with f16's four vectors a row an iteration passed C2's node-count cutoff for inlining, boxed its vectors and
     * ran at a fifth of the one-row dot's speed). Sixteen sums and four maxima fit AVX-512's 32 registers, hence
     * 16 lanes only. Why: with 8,192-element rows, one row's weights and its 32 KiB of activations overflow a 48 KiB
     * L1, and the activations come from L2 for every row; one thread on the Zen 5 VM, 512 MiB of such rows streamed
     * in-process, one-row dot 6.4-9.1 GB/s against 12.4-15.7 for four rows; the one-row dot over the same rows
     * with the activations folded into 8 KiB ran at 17-26 GB/s.
     */
    private static void f16Quad(Quantizer f16, MemorySegment src, long offset, long stride, float[] x, int xOffset,
                                int count, float[] out, int outIndex, int outStride) {
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        FloatVector b0 = a0;
        FloatVector b1 = a0;
        FloatVector b2 = a0;
        FloatVector b3 = a0;
        FloatVector c0 = a0;
        FloatVector c1 = a0;
        FloatVector c2 = a0;
        FloatVector c3 = a0;
        FloatVector d0 = a0;
        FloatVector d1 = a0;
        FloatVector d2 = a0;
        FloatVector d3 = a0;
        IntVector largestA = IntVector.zero(INTS);
        IntVector largestB = largestA;
        IntVector largestC = largestA;
        IntVector largestD = largestA;
        int step = FLOATS.length();
        int end = count - count % (4 * step); // whole groups of four vectors, as in f16; the sums are back in place
        int i = 0;
        for (; i < end; i += step) {
            long o = offset + 2L * i;
            FloatVector xv = FloatVector.fromArray(FLOATS, x, xOffset + i);
            // f16Bits and f16Value written out in this loop (and in f16QuadScaled's): C2 compiles this method past its
            // node-count cutoff for inlining ordinary methods, and one CI run's workout had the last f16Value call
            // refused there (NodeCountInliningCutoff, KernelInliningTest), its vector boxed for every vector of a row.
            // The Vector API's own methods are inlined past the cutoff.
            IntVector t = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13);
            IntVector u = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + stride, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13);
            IntVector v = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + 2 * stride,
                    ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.S2I, INTS, 0))
                    .lanewise(VectorOperators.LSHL, 13);
            IntVector w = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + 3 * stride,
                    ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.S2I, INTS, 0))
                    .lanewise(VectorOperators.LSHL, 13);
            largestA = largestA.max(t.and(F16_MAGNITUDE));
            largestB = largestB.max(u.and(F16_MAGNITUDE));
            largestC = largestC.max(v.and(F16_MAGNITUDE));
            largestD = largestD.max(w.and(F16_MAGNITUDE));
            // The four rows' rotations are written out: vectors kept in an array or passed to a helper are boxed.
            FloatVector next = t.and(0x8FFFE000).reinterpretAsFloats().mul(0x1p112f).fma(xv, a0);
            a0 = a1;
            a1 = a2;
            a2 = a3;
            a3 = next;
            next = u.and(0x8FFFE000).reinterpretAsFloats().mul(0x1p112f).fma(xv, b0);
            b0 = b1;
            b1 = b2;
            b2 = b3;
            b3 = next;
            next = v.and(0x8FFFE000).reinterpretAsFloats().mul(0x1p112f).fma(xv, c0);
            c0 = c1;
            c1 = c2;
            c2 = c3;
            c3 = next;
            next = w.and(0x8FFFE000).reinterpretAsFloats().mul(0x1p112f).fma(xv, d0);
            d0 = d1;
            d1 = d2;
            d2 = d3;
            d3 = next;
        }
        // Each row's lane tree and largest magnitude taken here, and only scalars passed to finish: C2 had inlined
        // the loop's vector calls past its node-count cutoff for inlining, left finish (which took the vectors) out
        // of line at all four calls and boxed two vectors a row (-XX:+PrintInlining: NodeCountInliningCutoff).
        FloatVector sa = a0.add(a1).add(a2.add(a3));
        FloatVector sb = b0.add(b1).add(b2.add(b3));
        FloatVector sc = c0.add(c1).add(c2.add(c3));
        FloatVector sd = d0.add(d1).add(d2.add(d3));
        sa = sa.add(sa.rearrange(X8));
        sb = sb.add(sb.rearrange(X8));
        sc = sc.add(sc.rearrange(X8));
        sd = sd.add(sd.rearrange(X8));
        sa = sa.add(sa.rearrange(X4));
        sb = sb.add(sb.rearrange(X4));
        sc = sc.add(sc.rearrange(X4));
        sd = sd.add(sd.rearrange(X4));
        sa = sa.add(sa.rearrange(X2));
        sb = sb.add(sb.rearrange(X2));
        sc = sc.add(sc.rearrange(X2));
        sd = sd.add(sd.rearrange(X2));
        out[outIndex] = finish(f16, largestA.reduceLanes(VectorOperators.MAX), sa.add(sa.rearrange(X1)).lane(0), src,
                offset, x, xOffset, i, count);
        out[outIndex + outStride] = finish(f16, largestB.reduceLanes(VectorOperators.MAX),
                sb.add(sb.rearrange(X1)).lane(0), src, offset + stride, x, xOffset, i, count);
        out[outIndex + 2 * outStride] = finish(f16, largestC.reduceLanes(VectorOperators.MAX),
                sc.add(sc.rearrange(X1)).lane(0), src, offset + 2 * stride, x, xOffset, i, count);
        out[outIndex + 3 * outStride] = finish(f16, largestD.reduceLanes(VectorOperators.MAX),
                sd.add(sd.rearrange(X1)).lane(0), src, offset + 3 * stride, x, xOffset, i, count);
    }

    /**
     * The end of {@link #f16} for one of {@link #f16Quad}'s rows, from its largest magnitude bits and the lane tree of
     * its added sums: the scalar tail from {@code i}, or the row redone by {@link #byDecoding} if it holds an infinity
     * or NaN.
     */
    private static float finish(Quantizer f16, int largest, float vectorSum, MemorySegment src, long offset,
                                float[] x, int xOffset, int i, int count) {
        float tail = 0;
        for (; i < count; i++) {
            tail = Math.fma(Float.float16ToFloat(src.get(Blocks.I16, offset + 2L * i)), x[xOffset + i], tail);
        }
        if (largest >= 0x0F800000) {
            return byDecoding(f16, src, offset, x, xOffset, count);
        }
        return vectorSum + tail;
    }

    /**
     * {@return whether none of the {@code src.byteSize() / 2} float16 values of {@code src} is an infinity or a NaN}
     * (exponent bits all ones): what lets {@link #f16RowsScaled} leave out the check {@link #f16} makes of every
     * vector. Pieces of {@value #SCAN_PIECE} bytes in parallel (the common fork-join pool), each a call of its own, so
     * that C2 compiles the loop after a few pieces: one loop over a whole matrix ran as OSR and C1 code at 0.5-3 GB/s,
     * about a second over the 1B F16 file at its first decode step.
     */
    static boolean f16AllFinite(MemorySegment src) {
        long n = src.byteSize() / 2;
        long pieces = (2 * n + SCAN_PIECE - 1) / SCAN_PIECE;
        return java.util.stream.LongStream.range(0, pieces).parallel().allMatch(p -> {
            long from = p * (SCAN_PIECE / 2);
            return f16Largest(src, from, Math.min(n, from + SCAN_PIECE / 2)) < 0x7C00;
        });
    }

    /** Bytes of float16 values {@link #f16AllFinite} reads in one call. */
    private static final int SCAN_PIECE = 1 << 20;

    /** {@return the largest magnitude bits ({@code & 0x7FFF}) of the float16 values {@code [from, to)} of {@code src}} */
    private static int f16Largest(MemorySegment src, long from, long to) {
        long end = to - (to - from) % SHORTS.length();
        ShortVector largest = ShortVector.zero(SHORTS);
        long i = from;
        for (; i < end; i += SHORTS.length()) {
            largest = largest.max(ShortVector.fromMemorySegment(SHORTS, src, 2 * i, ByteOrder.LITTLE_ENDIAN)
                    .and((short) 0x7FFF));
        }
        int top = largest.reduceLanes(VectorOperators.MAX);
        for (; i < to; i++) {
            top = Math.max(top, src.get(Blocks.I16, 2 * i) & 0x7FFF);
        }
        return top;
    }

    /** As many short lanes as {@link #FLOATS} has bits. */
    private static final VectorSpecies<Short> SHORTS = VectorSpecies.of(short.class, FLOATS.vectorShape());

    /**
     * {@link #f16Rows} over rows with no infinity or NaN ({@link #f16AllFinite}) and activations scaled by 2^112
     * ({@code xs}; every |x| below 2^16, so that the scaling is exact): each weight's bits, shifted into a float's
     * places as {@link #f16} shifts them, then stand for the weight times 2^-112, and times {@code x * 2^112} give
     * {@code w * x} exactly, so the multiplication by 2^112 and the largest-magnitude check drop out of the loop and
     * each row gets the bits {@code f16} gives it. Harness (two threads, 512 MiB of rows streamed, three processes,
     * Intel Xeon VM, 2026-12-05): the four-row form read 2,048-element rows at 20.0-23.6 GB/s against 18.5-21.5 for
     * {@link #f16Quad}, 8,192-element rows at 19.5-23.9 against 16.8-20.8; without the check but with the
     * multiplication, 16.4-21.8 against 18.1-21.2; with neither but unscaled activations (wrong results, to see the
     * cost), 17.3-19.1 against 17.9-20.7: a weight times 2^-112 times an activation falls below float's normal range,
     * and subnormal results run slowly.
     */
    static void f16RowsScaled(MemorySegment src, long offset, long stride, int rows, float[] xs, int xOffset,
                              int count, float[] out, int outIndex) {
        int r = 0;
        if (L == 16 && count > F16_ONE_ROW_MAX_COUNT) {
            int q = rows / 4;
            for (int i = 0; i < q; i++) {
                f16QuadScaled(src, offset + i * stride, q * stride, xs, xOffset, count, out, outIndex + i, q);
            }
            r = 4 * q;
        }
        for (; r < rows; r++) {
            out[outIndex + r] = f16Scaled(src, offset + r * stride, xs, xOffset, count);
        }
    }

    /** {@link #f16} of one row for {@link #f16RowsScaled}: the same sums, lane tree and tail, so the same bits. */
    private static float f16Scaled(MemorySegment src, long offset, float[] xs, int xOffset, int count) {
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        int step = FLOATS.length();
        int i = 0;
        for (; i + 4 * step <= count; i += 4 * step) {
            long o = offset + 2L * i;
            a0 = f16Raw(f16Bits(src, o)).fma(FloatVector.fromArray(FLOATS, xs, xOffset + i), a0);
            a1 = f16Raw(f16Bits(src, o + 2L * step)).fma(FloatVector.fromArray(FLOATS, xs, xOffset + i + step), a1);
            a2 = f16Raw(f16Bits(src, o + 4L * step)).fma(FloatVector.fromArray(FLOATS, xs, xOffset + i + 2 * step), a2);
            a3 = f16Raw(f16Bits(src, o + 6L * step)).fma(FloatVector.fromArray(FLOATS, xs, xOffset + i + 3 * step), a3);
        }
        FloatVector v = a0.add(a1).add(a2.add(a3));
        float tail = scaledTail(src, offset, xs, xOffset, i, count);
        if (L > 16) {
            return sum(v) + tail;
        }
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0) + tail;
    }

    /**
     * {@link #f16Quad} for {@link #f16RowsScaled}: the same rotating sums and lane trees, without the largest
     * magnitudes or the multiplication by 2^112 (the activations carry it), so each row gets {@link #f16}'s bits.
     * Written out beside {@code f16Quad} rather than sharing its tail through a helper: a helper taking the vectors
     * was left out of line by C2 there and boxed them (its comments).
     */
    private static void f16QuadScaled(MemorySegment src, long offset, long stride, float[] xs, int xOffset,
                                      int count, float[] out, int outIndex, int outStride) {
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        FloatVector b0 = a0;
        FloatVector b1 = a0;
        FloatVector b2 = a0;
        FloatVector b3 = a0;
        FloatVector c0 = a0;
        FloatVector c1 = a0;
        FloatVector c2 = a0;
        FloatVector c3 = a0;
        FloatVector d0 = a0;
        FloatVector d1 = a0;
        FloatVector d2 = a0;
        FloatVector d3 = a0;
        int step = FLOATS.length();
        int end = count - count % (4 * step);
        int i = 0;
        for (; i < end; i += step) {
            long o = offset + 2L * i;
            FloatVector xv = FloatVector.fromArray(FLOATS, xs, xOffset + i);
            FloatVector next = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13)
                    .and(0x8FFFE000).reinterpretAsFloats().fma(xv, a0);
            a0 = a1;
            a1 = a2;
            a2 = a3;
            a3 = next;
            next = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + stride, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13)
                    .and(0x8FFFE000).reinterpretAsFloats().fma(xv, b0);
            b0 = b1;
            b1 = b2;
            b2 = b3;
            b3 = next;
            next = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + 2 * stride, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13)
                    .and(0x8FFFE000).reinterpretAsFloats().fma(xv, c0);
            c0 = c1;
            c1 = c2;
            c2 = c3;
            c3 = next;
            next = ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o + 3 * stride, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13)
                    .and(0x8FFFE000).reinterpretAsFloats().fma(xv, d0);
            d0 = d1;
            d1 = d2;
            d2 = d3;
            d3 = next;
        }
        FloatVector sa = a0.add(a1).add(a2.add(a3));
        FloatVector sb = b0.add(b1).add(b2.add(b3));
        FloatVector sc = c0.add(c1).add(c2.add(c3));
        FloatVector sd = d0.add(d1).add(d2.add(d3));
        sa = sa.add(sa.rearrange(X8));
        sb = sb.add(sb.rearrange(X8));
        sc = sc.add(sc.rearrange(X8));
        sd = sd.add(sd.rearrange(X8));
        sa = sa.add(sa.rearrange(X4));
        sb = sb.add(sb.rearrange(X4));
        sc = sc.add(sc.rearrange(X4));
        sd = sd.add(sd.rearrange(X4));
        sa = sa.add(sa.rearrange(X2));
        sb = sb.add(sb.rearrange(X2));
        sc = sc.add(sc.rearrange(X2));
        sd = sd.add(sd.rearrange(X2));
        out[outIndex] = sa.add(sa.rearrange(X1)).lane(0) + scaledTail(src, offset, xs, xOffset, i, count);
        out[outIndex + outStride] = sb.add(sb.rearrange(X1)).lane(0)
                + scaledTail(src, offset + stride, xs, xOffset, i, count);
        out[outIndex + 2 * outStride] = sc.add(sc.rearrange(X1)).lane(0)
                + scaledTail(src, offset + 2 * stride, xs, xOffset, i, count);
        out[outIndex + 3 * outStride] = sd.add(sd.rearrange(X1)).lane(0)
                + scaledTail(src, offset + 3 * stride, xs, xOffset, i, count);
    }

    /** The scalar tail of {@link #f16}, from {@code i}, over scaled activations: {@code x * 2^112 * 2^-112} is x. */
    private static float scaledTail(MemorySegment src, long offset, float[] xs, int xOffset, int i, int count) {
        float tail = 0;
        for (; i < count; i++) {
            tail = Math.fma(Float.float16ToFloat(src.get(Blocks.I16, offset + 2L * i)), xs[xOffset + i] * 0x1p-112f,
                    tail);
        }
        return tail;
    }

    /** A vector of float16 bits at {@code o}, sign-extended to int lanes and shifted into a float's places. */
    private static IntVector f16Bits(MemorySegment src, long o) {
        return ((IntVector) ShortVector.fromMemorySegment(HALVES, src, o, ByteOrder.LITTLE_ENDIAN)
                .convertShape(VectorOperators.S2I, INTS, 0)).lanewise(VectorOperators.LSHL, 13);
    }

    /** The finite float values of {@link #f16Bits}' lanes: sign and magnitude kept, exponent rebiased by 2^112. */
    private static FloatVector f16Value(IntVector bits) {
        return f16Raw(bits).mul(0x1p112f);
    }

    /** {@link #f16Bits}' lanes as floats before the rebias: a finite weight times 2^-112, exactly. */
    private static FloatVector f16Raw(IntVector bits) {
        return bits.and(0x8FFFE000).reinterpretAsFloats();
    }

    /** {@return {@code sum w[i] * x[xOffset + i]} for {@code i < count}}: four running sums of vector FMAs, a scalar tail. */
    static float dot(float[] w, float[] x, int xOffset, int count) {
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        int step = FLOATS.length();
        int i = 0;
        for (; i + 4 * step <= count; i += 4 * step) {
            a0 = FloatVector.fromArray(FLOATS, w, i).fma(FloatVector.fromArray(FLOATS, x, xOffset + i), a0);
            a1 = FloatVector.fromArray(FLOATS, w, i + step).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + step), a1);
            a2 = FloatVector.fromArray(FLOATS, w, i + 2 * step).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + 2 * step), a2);
            a3 = FloatVector.fromArray(FLOATS, w, i + 3 * step).fma(FloatVector.fromArray(FLOATS, x, xOffset + i + 3 * step), a3);
        }
        float tail = 0;
        for (; i < count; i++) {
            tail = Math.fma(w[i], x[xOffset + i], tail);
        }
        // sum's tree written out (the same additions): called here, C2 now and then left it out of line and boxed its
        // argument for every row (KernelInliningTest's allocation check: F32 rows of 8,192 elements, 96 bytes a row,
        // in one workout of eight).
        FloatVector v = a0.add(a1).add(a2.add(a3));
        if (L > 16) {
            return sum(v) + tail;
        }
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0) + tail;
    }

    private static final int L = FLOATS.length();
    /** {@link #sum}'s steps: lane {@code i} meets lane {@code i ^ 8}, {@code i ^ 4}, ... (for trees written out). */
    static final VectorShuffle<Float> X8 = L > 8 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 8) : null;
    static final VectorShuffle<Float> X4 = L > 4 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 4) : null;
    static final VectorShuffle<Float> X2 = VectorShuffle.fromOp(FLOATS, i -> i ^ 2);
    static final VectorShuffle<Float> X1 = VectorShuffle.fromOp(FLOATS, i -> i ^ 1);

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
