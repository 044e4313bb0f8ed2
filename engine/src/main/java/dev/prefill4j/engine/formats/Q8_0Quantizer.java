package dev.prefill4j.engine.formats;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Optional;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/**
 * GGUF Q8_0 (type 8): blocks of 32 int8 with one fp16 scale, 34 bytes: {@code d} at bytes 0-1, {@code qs[32]}
 * at 2-33; {@code y[j] = qs[j] * d} (FORMATS.md §1, from ggml-common.h {@code block_q8_0}).
 *
 * <p>The encoder is llama.cpp's reference {@code quantize_row_q8_0_ref}: {@code d = max|x| / 127}, the
 * reciprocal taken from the fp32 {@code d} (not the fp16-rounded one), {@code qs = roundf(x / d)} rounding
 * half away from zero.
 */
public final class Q8_0Quantizer implements Quantizer {
    static final int QK = 32;
    static final int BLOCK_BYTES = 34;
    /** Sixteen int16 lanes (half a block) for {@link #dotEncoded} where vectors have 256 bits or more. */
    private static final VectorSpecies<Short> SHORTS =
            FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 256 ? ShortVector.SPECIES_256 : null;
    private static final VectorSpecies<Byte> BYTES_128 = ByteVector.SPECIES_128;
    /** Doubles {@link #dotInt16} widens eight int lanes of sums to: all eight with 512-bit vectors, else four a part. */
    private static final VectorSpecies<Double> DOUBLES =
            FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 512 ? DoubleVector.SPECIES_512 : DoubleVector.SPECIES_256;
    /**
     * Bytes in vectors with as many lanes as {@link FusedDot#FLOATS}, or 8 with 4 float lanes (the narrowest byte
     * vector; the widening takes the first 4, and {@link #dot} reads a staged copy with slack at 4 lanes).
     */
    private static final VectorSpecies<Byte> QUANTS =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(Math.max(64, FusedDot.FLOATS.length() * 8)));
    private static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FusedDot.FLOATS.vectorShape());

    @Override public String id() { return "q8_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q8_0: 32 x int8 + fp16 scale, 8.5 bits/weight, type 8"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BLOCK_BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(8); }
    @Override public String activationFormat() { return Q8_0ActivationQuantizer.ID; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BLOCK_BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BLOCK_BYTES;
            float d = Blocks.fp16(b, o);
            int base = dstOffset + k * QK;
            for (int j = 0; j < QK; j += FusedDot.FLOATS.length()) {
                // Widened to ints, then converted, as in dot.
                ((FloatVector) ByteVector.fromArray(QUANTS, b, o + 2 + j).convertShape(VectorOperators.B2I, INTS, 0)
                        .convert(VectorOperators.I2F, 0)).mul(d).intoArray(dst, base + j);
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        encode(src, srcOffset, count, dst, offset, false);
    }

    /**
     * Encodes blocks; {@code simd} selects the arithmetic of ggml's x86 CPU code ({@code quantize_row_q8_0} in
     * ggml-cpu/arch/x86/quants.c: inverse scale {@code 127 / max|x|}, products rounded half to even), otherwise the
     * reference ({@code 1 / d}, half away from zero).
     */
    static void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset, boolean simd) {
        Blocks.checkCount(count, QK, "q8_0");
        if (simd && ACTIVATIONS16) {
            encodeActivations16(src, srcOffset, count, dst, offset);
            return;
        }
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            float amax = 0;
            for (int j = 0; j < QK; j++) {
                amax = Math.max(amax, Math.abs(src[base + j]));
            }
            float d = amax / 127f;
            float id = simd ? (amax != 0 ? 127f / amax : 0f) : (d != 0 ? 1f / d : 0f);
            long o = offset + (long) b * BLOCK_BYTES;
            dst.set(Blocks.I16, o, Float.floatToFloat16(d));
            for (int j = 0; j < QK; j++) {
                float v = src[base + j] * id;
                dst.set(Blocks.I8, o + 2 + j, (byte) (simd ? Math.rint(v) : Blocks.roundHalfAway(v)));
            }
        }
    }

    /** Whether {@link #encode}'s activation form takes 16 elements at a time (16 float lanes). */
    private static final boolean ACTIVATIONS16 = FloatVector.SPECIES_PREFERRED.length() >= 16;
    /** {@code 1.5 * 2^23}: added to and subtracted from a float below 2^22 in magnitude, it rounds half to even. */
    private static final float ROUNDING = 12582912f;

    /**
     * {@link #encode}'s activation form (llama.cpp's x86 rounding) 16 elements at a time: {@code max|x|} by lane-wise
     * max (exact in any order), {@code x * (127 / amax)} as the scalar form computes it, rounded half to even by adding
     * and subtracting {@code 1.5 * 2^23} (exact below 2^22 in magnitude; these are at most 127): the same bytes.
     * Activations are encoded for every projection of every step ({@code activation_encode}, 3.8% of a quantized
     * pp512 on the 1B Q4_0 file in scalar code); docs/performance-notes.md, Kernels.
     */
    private static void encodeActivations16(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        var f = FloatVector.SPECIES_512;
        FloatVector magic = FloatVector.broadcast(f, ROUNDING);
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            FloatVector lo = FloatVector.fromArray(f, src, base);
            FloatVector hi = FloatVector.fromArray(f, src, base + 16);
            float amax = lo.abs().max(hi.abs()).reduceLanes(VectorOperators.MAX);
            float d = amax / 127f;
            float id = amax != 0 ? 127f / amax : 0f;
            long o = offset + (long) b * BLOCK_BYTES;
            dst.set(Blocks.I16, o, Float.floatToFloat16(d));
            FloatVector scale = FloatVector.broadcast(f, id);
            lo.mul(scale).add(magic).sub(magic).convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0)
                    .convertShape(VectorOperators.I2B, ByteVector.SPECIES_128, 0)
                    .intoMemorySegment(dst, o + 2, ByteOrder.LITTLE_ENDIAN);
            hi.mul(scale).add(magic).sub(magic).convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0)
                    .convertShape(VectorOperators.I2B, ByteVector.SPECIES_128, 0)
                    .intoMemorySegment(dst, o + 18, ByteOrder.LITTLE_ENDIAN);
        }
    }

    /**
     * Vectorized and fused, read straight from the mapping, a block an iteration: its int8 quants widened to float
     * lanes against the activations (a multiply, then FMAs), and that block sum times the block's {@code d} into one
     * accumulator, lanes added in a fixed order at the end. Against the earlier form (every vector of quants times
     * {@code d} before its FMA, four accumulators over block pairs), one thread on a Zen 3 VM (AVX2), 2,048-element
     * rows, medians of 8 in-process rounds in each of two processes: 1.12x and 1.22x in L2, 1.06x and 1.16x streamed;
     * bench tg32 on the 1B Q8_0 file, three alternating pairs of processes: median 6.60 to 7.14 tok/s. The loop's
     * segment bounds checks stay in it (C2 does not hoist them here; a block read as two 16-byte vectors, which would
     * halve them, ran at 0.42-0.50x of the earlier form in a harness: the upper half's conversion costs a shuffle).
     * With 8 or more lanes the blocks are read at absolute offsets of {@code src}, not from a slice of the row (C2
     * kept the slice's bounds checks in the loop besides the tensor's): one and two threads on the Zen 5 VM, rows of
     * 2,048 elements streamed, in-process harness: 11.4-11.9 to 13.1-14.0 GB/s and 14.6-17.5 to 16.8-19.8; 8,192
     * elements unchanged (5-11); bench {@code -m 1b-q8_0.gguf -p 16 -n 32 -r 3 -t 1}, three alternating pairs: tg32
     * 6.48, 6.29, 7.41 to 6.51, 6.44, 8.35 tok/s; with two threads seven pairs, four for and three against (medians
     * 14.0-19.1 tok/s either way: the two vCPUs' shared stream swings more than this change) (2026-12-03).
     */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        var floats = FusedDot.FLOATS;
        int l = floats.length();
        // With 4 lanes each load takes 8 bytes: the row is staged (Blocks.stage leaves slack after it), or the last
        // load of the last block could read past the tensor.
        MemorySegment row = l < 8 ? MemorySegment.ofArray(Blocks.stage(src, offset, blocks * BLOCK_BYTES)) : src;
        long start = l < 8 ? 0 : offset;
        FloatVector acc = FloatVector.zero(floats);
        for (int k = 0; k < blocks; k++) {
            long o = start + (long) k * BLOCK_BYTES;
            int base = xOffset + k * QK;
            FloatVector block = widen(row, o + 2).mul(FloatVector.fromArray(floats, x, base));
            for (int j = l; j < QK; j += l) {
                block = widen(row, o + 2 + j).fma(FloatVector.fromArray(floats, x, base + j), block);
            }
            acc = block.fma(FloatVector.broadcast(floats, Blocks.fp16(row, o)), acc);
        }
        return FusedDot.sum(acc);
    }

    /**
     * With 16 lanes four rows at a time ({@link #quad}), a quarter of the run apart so that the groups read four
     * continuous streams of weights (as F16's, {@code FusedDot.f16Rows}), then two at a time ({@link #pair}), a last
     * odd row alone; with fewer than 8 lanes, one call per row. Groups of four consecutive rows against these, on the 1B
     * Q8_0 file ({@code bench -p 16 -n 32 -r 2 -t 1 --profile}, two alternating pairs): {@code ffn_down} 9.2, 9.9 ->
     * 13.9, 17.1 GB/s, tg32 7.82, 8.11 -> 8.46, 9.45 tok/s.
     */
    @Override
    public void dotPreparedRows(MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                                float[] prepared, int preparedOffset, int count, float[] out, int outIndex) {
        Blocks.checkCount(count, QK, id());
        if (FusedDot.FLOATS.length() < 8) {
            Quantizer.super.dotPreparedRows(src, offset, stride, rows, x, xOffset, prepared, preparedOffset, count,
                    out, outIndex);
            return;
        }
        int r = 0;
        if (FusedDot.FLOATS.length() == 16) {
            int q = rows / 4;
            quad(src, offset, stride, q, x, xOffset, count, out, outIndex);
            r = 4 * q;
        }
        for (; r + 2 <= rows; r += 2) {
            pair(src, offset + r * stride, stride, x, xOffset, count, out, outIndex + r);
        }
        if (r < rows) {
            out[outIndex + r] = dot(src, offset + r * stride, x, xOffset, count);
        }
    }

    /**
     * How many blocks {@link #quad} walks in its inner loop, the outer loop taking a row's blocks this many at a time.
     * On the Intel Xeon VM (2026-12-05, night), where a weight byte of 2,048-element rows took about 1.2 times as long as
     * one of 4,096 or 8,192 when streamed but not in L2, one loop over a row's 64 blocks left the short rows that much
     * slower: in a harness copy of this kernel (two threads, 512 MiB of rows streamed, three alternating pairs of
     * processes) 2,048-element rows ran at 17.4-25.3 GB/s in loops of 16 blocks against 7.6-22.4 in one loop (one slow
     * pass, 14.8 and up otherwise; 4,096 elements: 14.2-26.4 against 23.5-27.8, two of six processes at 14.2-17.7);
     * loops of 4 (15.6-19.8) and 32 (17.8-22.6) were slower than 16. In the model, {@code bench -m 1b-q8_0.gguf -p
     * 16 -n 32 -r 2 --profile}, three alternating pairs: {@code ffn_gate+up} 15.7, 16.1, 15.9 -> 21.2, 19.8, 21.1
     * GB/s, the output matrix 16.7, 17.3, 17.1 -> 22.0, 21.3, 22.5, {@code ffn_down} (8,192 elements) 21.7, 22.5, 22.5
     * -> 22.9, 21.8, 23.0. Why is NOT VERIFIED (the VM exposes no performance counters): an exit of the block loop
     * that the branch predictor misses once a row, taking the loads already issued for the next row with it, would
     * fit.
     *
     * <p>On the Zen 5 VM (2026-12-06) the other way round: one loop over the row was the fastest. {@code bench -m
     * 1b-q8_0.gguf -p 16 -n 32 -r 2 --profile --verify-tokens 0} in one build with the inner loop's length set per
     * process, alternating, two rounds: loops of 16 blocks {@code ffn_gate+up} 30.6, 31.0 GB/s, {@code ffn_down} 28.1,
     * 27.9, the output matrix 30.9, 29.7; the whole row (up to 256 blocks) 37.5, 38.4, 38.0, 39.2, 42.1, 43.1; 64
     * blocks between (28.8-36.3), 4 blocks 15.2-16.6 everywhere; without {@code --profile}, tg32 22.34, 22.42 tok/s
     * with 16 against 27.34, 26.71 with the whole row. So 16 where {@link Blocks#ONE_ROW_MAX_COUNT} is 0 (Intel
     * processors, as measured there), and the whole row elsewhere. The same blocks in the same order either way: the
     * same bits.
     */
    private static final int QUAD_BLOCKS = Blocks.ONE_ROW_MAX_COUNT == 0 ? 16 : 1 << 24;

    /**
     * Four rows' blocks in one loop, for {@code groups} groups of four rows a call: group {@code g} takes rows {@code
     * g}, {@code g + groups}, {@code g + 2 groups} and {@code g + 3 groups} ({@code rowStride} bytes a row; products
     * into {@code out[outIndex + row]}), so that the four streams run on through consecutive rows inside one call (in a
     * harness copy of this kernel, two threads, 2,048-element rows streamed: 17.8-21.7 GB/s against 15.3-20.2 with a
     * call per group; in the model, bench -m 1b-q8_0.gguf -p 16 -n 32 -r 2 --profile, two alternating pairs: {@code
     * ffn_gate+up} 15.0, 15.1 -> 15.7, 15.4 GB/s, tg32 12.03, 12.28 -> 12.64, 12.52 tok/s; Intel Xeon VM, 2026-12-05);
     * each activation vector loaded once for the four; each row's products and sums in the order {@link #dot} takes
     * them, so the same bits. A block's sums start at -0.0, so that the first product is added to it exactly as {@code
     * dot}'s first multiply gives it ({@code p + -0.0 == p}, the sign of a zero
     * included), and one loop over the block's vectors serves for the first as for the others: with a multiply
     * before the loop for each row, as {@link #pair} has it, the method would be larger than C2 inlines whole. A row's
     * blocks are walked {@link #QUAD_BLOCKS} at a time, an inner loop in an outer one (the same blocks in the same
     * order).
     */
    private static void quad(MemorySegment src, long offset, long rowStride, int groups, float[] x, int xOffset,
                             int count, float[] out, int outIndex) {
        var floats = FusedDot.FLOATS;
        int l = floats.length();
        int blocks = count / QK;
        FloatVector minusZero = FloatVector.broadcast(floats, -0.0f);
        long stride = groups * rowStride;
        for (int g = 0; g < groups; g++) {
            long row = offset + g * rowStride;
            FloatVector acc0 = FloatVector.zero(floats);
            FloatVector acc1 = acc0;
            FloatVector acc2 = acc0;
            FloatVector acc3 = acc0;
            for (int k0 = 0; k0 < blocks; k0 += QUAD_BLOCKS) {
                for (int k = k0, k1 = Math.min(blocks, k0 + QUAD_BLOCKS); k < k1; k++) {
                    long o0 = row + (long) k * BLOCK_BYTES;
                    int base = xOffset + k * QK;
                    FloatVector b0 = minusZero;
                    FloatVector b1 = minusZero;
                    FloatVector b2 = minusZero;
                    FloatVector b3 = minusZero;
                    for (int j = 0; j < QK; j += l) {
                        FloatVector xv = FloatVector.fromArray(floats, x, base + j);
                        b0 = widen(src, o0 + 2 + j).fma(xv, b0);
                        b1 = widen(src, o0 + stride + 2 + j).fma(xv, b1);
                        b2 = widen(src, o0 + 2 * stride + 2 + j).fma(xv, b2);
                        b3 = widen(src, o0 + 3 * stride + 2 + j).fma(xv, b3);
                    }
                    acc0 = b0.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o0)), acc0);
                    acc1 = b1.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o0 + stride)), acc1);
                    acc2 = b2.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o0 + 2 * stride)), acc2);
                    acc3 = b3.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o0 + 3 * stride)), acc3);
                }
            }
            // FusedDot.sum's tree written out for the four rows (16 lanes here): called, C2 left some of the calls out
            // of line past its node-count cutoff for inlining and boxed their vectors (-XX:+PrintInlining).
            acc0 = acc0.add(acc0.rearrange(FusedDot.X8));
            acc1 = acc1.add(acc1.rearrange(FusedDot.X8));
            acc2 = acc2.add(acc2.rearrange(FusedDot.X8));
            acc3 = acc3.add(acc3.rearrange(FusedDot.X8));
            acc0 = acc0.add(acc0.rearrange(FusedDot.X4));
            acc1 = acc1.add(acc1.rearrange(FusedDot.X4));
            acc2 = acc2.add(acc2.rearrange(FusedDot.X4));
            acc3 = acc3.add(acc3.rearrange(FusedDot.X4));
            acc0 = acc0.add(acc0.rearrange(FusedDot.X2));
            acc1 = acc1.add(acc1.rearrange(FusedDot.X2));
            acc2 = acc2.add(acc2.rearrange(FusedDot.X2));
            acc3 = acc3.add(acc3.rearrange(FusedDot.X2));
            int at = outIndex + g;
            out[at] = acc0.add(acc0.rearrange(FusedDot.X1)).lane(0);
            out[at + groups] = acc1.add(acc1.rearrange(FusedDot.X1)).lane(0);
            out[at + 2 * groups] = acc2.add(acc2.rearrange(FusedDot.X1)).lane(0);
            out[at + 3 * groups] = acc3.add(acc3.rearrange(FusedDot.X1)).lane(0);
        }
    }

    /**
     * Both rows' blocks in one loop, each activation vector loaded once for the two; each row's products and sums in
     * the order {@link #dot} takes them, so the same bits.
     */
    private static void pair(MemorySegment src, long offset, long stride, float[] x, int xOffset, int count,
                             float[] out, int outIndex) {
        var floats = FusedDot.FLOATS;
        int l = floats.length();
        int blocks = count / QK;
        FloatVector acc0 = FloatVector.zero(floats);
        FloatVector acc1 = acc0;
        for (int k = 0; k < blocks; k++) {
            long o0 = offset + (long) k * BLOCK_BYTES;
            long o1 = o0 + stride;
            int base = xOffset + k * QK;
            FloatVector xv = FloatVector.fromArray(floats, x, base);
            FloatVector b0 = widen(src, o0 + 2).mul(xv);
            FloatVector b1 = widen(src, o1 + 2).mul(xv);
            for (int j = l; j < QK; j += l) {
                xv = FloatVector.fromArray(floats, x, base + j);
                b0 = widen(src, o0 + 2 + j).fma(xv, b0);
                b1 = widen(src, o1 + 2 + j).fma(xv, b1);
            }
            acc0 = b0.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o0)), acc0);
            acc1 = b1.fma(FloatVector.broadcast(floats, Blocks.fp16(src, o1)), acc1);
        }
        // FusedDot.sum's tree written out for both rows (8 or 16 lanes here), as in quad.
        if (l > 8) {
            acc0 = acc0.add(acc0.rearrange(FusedDot.X8));
            acc1 = acc1.add(acc1.rearrange(FusedDot.X8));
        }
        acc0 = acc0.add(acc0.rearrange(FusedDot.X4));
        acc1 = acc1.add(acc1.rearrange(FusedDot.X4));
        acc0 = acc0.add(acc0.rearrange(FusedDot.X2));
        acc1 = acc1.add(acc1.rearrange(FusedDot.X2));
        out[outIndex] = acc0.add(acc0.rearrange(FusedDot.X1)).lane(0);
        out[outIndex + 1] = acc1.add(acc1.rearrange(FusedDot.X1)).lane(0);
    }

    /** Int8 quants at {@code at} as float lanes (widened to ints first: faster than the byte-to-float conversion). */
    private static FloatVector widen(MemorySegment row, long at) {
        return (FloatVector) ByteVector.fromMemorySegment(QUANTS, row, at, ByteOrder.LITTLE_ENDIAN)
                .convertShape(VectorOperators.B2I, INTS, 0).convert(VectorOperators.I2F, 0);
    }

    /**
     * With 16 float lanes, a copy with 16 rows side by side ({@link Q8_0Columns}): its decode products take three
     * vector operations per 16 weights, each load within a cache line, where {@link #dotPreparedRows} reads four
     * rows' 34-byte blocks. The same bytes as the file's blocks, laid out again.
     */
    @Override
    public Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        if (!w.format().id().equals(id())) {
            throw new IllegalArgumentException(w.name() + " is " + w.format().id() + ", not " + id());
        }
        return Q8_0Columns.pack(w, arena);
    }

    /**
     * True: a packed copy gives back each weight as {@code decode} does ({@link Q8_0Columns#decodeColumns}), so a
     * prompt's products may read it too, and the copy (as many bytes as the file's blocks) can take their place in
     * memory.
     */
    @Override
    public boolean packedCopyDecodes() {
        return true;
    }

    /** Q8_0 multiplies {@code q8_0-activations} codes in integer lanes ({@link #dotEncoded}). */
    @Override
    public boolean hasEncodedDot() {
        return true;
    }

    /**
     * True: an int8 weight or code times an fp16 scale is exact in float, each block's integer sum is exact, and
     * {@link #dotEncoded} adds the blocks in double.
     */
    @Override
    public boolean encodedDotIsExact() {
        return true;
    }

    /**
     * {@code sum_blocks d_w * d_x * sum(q * x)} over {@code q8_0-activations} blocks, each block's integer sum exact
     * and scaled by the product of the two fp16 scales (exact), the blocks added in double ({@link
     * #encodedDotIsExact}). With activations in a heap segment ({@link Blocks#heapBytes}) and 256-bit vectors, {@link
     * #dotInt16}; otherwise the same integers in scalar code.
     */
    @Override
    public double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] a = Blocks.heapBytes(act);
        if (a != null && SHORTS != null) {
            return dotInt16(src, offset, a,
                    Math.toIntExact(act.address() + actOffset), blocks);
        }
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BLOCK_BYTES;
            long x = actOffset + (long) k * BLOCK_BYTES;
            int isum = 0;
            for (int j = 0; j < QK; j++) {
                isum += src.get(Blocks.I8, o + 2 + j) * act.get(Blocks.I8, x + 2 + j);
            }
            sum += (double) Blocks.fp16(src, o) * Blocks.fp16(act, x) * isum;
        }
        return sum;
    }

    /**
     * The vector form of {@link #dotEncoded}, two blocks an iteration: each block's two halves of 16 codes widened to
     * int16 lanes times the activations' (products at most 128 * 127, two added per lane: below 2^15 since activation
     * codes stay within [-127, 127]); each int lane then adds its two int16 halves, both sign-extended first ({@code
     * ((v << 16) >> 16) + (v >> 16)}: their sum can pass 2^15, where Q4_0's cheaper {@code (v + (v << 16)) >> 16}
     * would wrap), is widened to double and accumulated times {@code d_w * d_x} (each term exact in double; until
     * 2026-12-05 the terms were added in float lanes, as llama.cpp's x86 dot adds them).
     */
    private static double dotInt16(MemorySegment row, long offset, byte[] a, int at, int blocks) {
        var s = SHORTS;
        var dv = DOUBLES;
        DoubleVector acc0 = DoubleVector.zero(dv);
        DoubleVector acc1 = acc0;
        DoubleVector acc2 = acc0; // the upper halves' sums where a double vector holds four lanes (AVX2)
        DoubleVector acc3 = acc0;
        int pairs = blocks / 2;
        for (int p = 0; p < pairs; p++) {
            long o = offset + (long) p * 2 * BLOCK_BYTES;
            int x = at + p * 2 * BLOCK_BYTES;
            double d0 = Blocks.fp16(row, o) * Blocks.fp16(a, x);
            double d1 = Blocks.fp16(row, o + BLOCK_BYTES) * Blocks.fp16(a, x + BLOCK_BYTES);
            IntVector v0 = ((ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o + 2, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.B2S, s, 0))
                    .mul((ShortVector) ByteVector.fromArray(BYTES_128, a, x + 2).convertShape(VectorOperators.B2S, s, 0))
                    .add(((ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o + 18, ByteOrder.LITTLE_ENDIAN)
                            .convertShape(VectorOperators.B2S, s, 0))
                            .mul((ShortVector) ByteVector.fromArray(BYTES_128, a, x + 18)
                                    .convertShape(VectorOperators.B2S, s, 0))).reinterpretAsInts();
            IntVector sum0 = v0.lanewise(VectorOperators.LSHL, 16).lanewise(VectorOperators.ASHR, 16)
                    .add(v0.lanewise(VectorOperators.ASHR, 16));
            DoubleVector s0 = DoubleVector.broadcast(dv, d0);
            acc0 = ((DoubleVector) sum0.convertShape(VectorOperators.I2D, dv, 0)).fma(s0, acc0);
            long o1 = o + BLOCK_BYTES;
            int x1 = x + BLOCK_BYTES;
            IntVector v1 = ((ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o1 + 2, ByteOrder.LITTLE_ENDIAN)
                    .convertShape(VectorOperators.B2S, s, 0))
                    .mul((ShortVector) ByteVector.fromArray(BYTES_128, a, x1 + 2).convertShape(VectorOperators.B2S, s, 0))
                    .add(((ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o1 + 18, ByteOrder.LITTLE_ENDIAN)
                            .convertShape(VectorOperators.B2S, s, 0))
                            .mul((ShortVector) ByteVector.fromArray(BYTES_128, a, x1 + 18)
                                    .convertShape(VectorOperators.B2S, s, 0))).reinterpretAsInts();
            IntVector sum1 = v1.lanewise(VectorOperators.LSHL, 16).lanewise(VectorOperators.ASHR, 16)
                    .add(v1.lanewise(VectorOperators.ASHR, 16));
            DoubleVector s1 = DoubleVector.broadcast(dv, d1);
            acc1 = ((DoubleVector) sum1.convertShape(VectorOperators.I2D, dv, 0)).fma(s1, acc1);
            if (dv.length() == 4) {
                acc2 = ((DoubleVector) sum0.convertShape(VectorOperators.I2D, dv, 1)).fma(s0, acc2);
                acc3 = ((DoubleVector) sum1.convertShape(VectorOperators.I2D, dv, 1)).fma(s1, acc3);
            }
        }
        double last = 0;
        if (blocks % 2 != 0) { // an odd last block in scalar code
            long o = offset + (long) (blocks - 1) * BLOCK_BYTES;
            int x = at + (blocks - 1) * BLOCK_BYTES;
            int isum = 0;
            for (int j = 0; j < QK; j++) {
                isum += row.get(Blocks.I8, o + 2 + j) * a[x + 2 + j];
            }
            last = (double) (Blocks.fp16(row, o) * Blocks.fp16(a, x)) * isum;
        }
        // The lanes in a fixed tree, written out: a helper taking the vector could stay a call and box it.
        DoubleVector t = acc0.add(acc1).add(acc2.add(acc3));
        double sum = dv.length() == 8
                ? ((t.lane(0) + t.lane(4)) + (t.lane(2) + t.lane(6))) + ((t.lane(1) + t.lane(5)) + (t.lane(3) + t.lane(7)))
                : (t.lane(0) + t.lane(2)) + (t.lane(1) + t.lane(3));
        return sum + last;
    }
}
