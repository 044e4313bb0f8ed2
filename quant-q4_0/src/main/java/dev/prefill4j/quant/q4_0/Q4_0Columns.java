package dev.prefill4j.quant.q4_0;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.FloatPackedMatrix;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Optional;
import java.util.stream.IntStream;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * A Q4_0 matrix laid out with 16 rows side by side, one row a float lane: the decode steps' products with float32
 * activations and the prompts' panels ({@link #decodeColumns}) read it instead of the file's blocks. In the file a
 * row's 32 weights share a scale, so a product of one activation row works along the row and needs the block's
 * weights in one vector, a scale broadcast per block and a sum across lanes per row; here a byte load widened to 16
 * int lanes holds one byte of each of 16 rows, its two nibbles (elements {@code j} and {@code j + 16} of the block)
 * select their values {@code q - 8} by lane permute ({@code vpermd}), and two FMAs with the broadcast activations
 * {@code x[j]} and {@code x[j + 16]} add them into 16 rows' sums at once; the 16 rows' scales are one vector a block.
 * Seven vector operations for 32 weights in this source (C2's code not read), where C2's code of the file layout's
 * kernels takes 13 to 18 instructions a block ({@link Q4_0Quantizer}), and one stream of weights per 32 rows or per
 * 16 ({@link #PAIRED}; {@link #dotRows} has the measurements). Prompts read it too: their panels come out of {@link
 * #decodeColumns} already transposed. llama.cpp repacks Q4_0 for its AVX-512 kernels too (8 rows interleaved, {@code
 * q4_0_8x8}); the layout here is this project's own.
 *
 * <p>Layout, per group of 16 rows and block of 32 elements ({@value #GROUP_BLOCK_BYTES} bytes, as the 16 rows' blocks
 * take in the file): the 16 rows' fp16 scales {@code d}, then 16 times 16 bytes, byte {@code l} of the {@code j}-th
 * holding row {@code 16g + l}'s {@code qs[j]} as the file does (element {@code j} in the low nibble, {@code j + 16} in
 * the high one). Where the machine reads one stream a thread fastest ({@link #PAIRED}), groups go in pairs and a
 * pair's blocks alternate: block {@code b} of group {@code 2p}, then block {@code b} of group {@code 2p + 1}, then
 * block {@code b + 1} of each ({@link #offset}); a last group without a pair has its blocks in order. So {@link
 * #dotRows}, which takes a pair at a time, reads one stream of weights, not two. Elsewhere each group's blocks are
 * in order, group after group.
 *
 * <p>A matrix with an infinite or NaN scale is not packed (the scales are converted in int lanes by a shift and a
 * multiply that keep every finite fp16, subnormals included, and not those); its products read the file as before.
 * NOT VERIFIED on CPUs without 16 float lanes: nothing is packed there.
 */
final class Q4_0Columns extends FloatPackedMatrix {
    /** Rows side by side: the float lanes of a 512-bit vector. */
    static final int GROUP = 16;
    /** Bytes of one block of one group: 16 fp16 scales, then 16 x 16 bytes of nibbles. */
    static final int GROUP_BLOCK_BYTES = 2 * GROUP + GROUP * 16;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** 2^112: an fp16's exponent and mantissa moved to a float's places are its value times 2^-112, exactly. */
    private static final float FP16_BIAS = 0x1p112f;
    /**
     * The bits kept of a sign-extended fp16 shifted left by 13 in an int lane: its exponent and mantissa, now in a
     * float's places, and bit 31, a copy of its sign (bits 28-30 hold the sign too and are cleared). As a float that
     * is the fp16's value times 2^-112 ({@link #FP16_BIAS}): exact for every finite fp16, subnormals included.
     */
    private static final int SCALE_BITS = 0x8FFF_FFFF;

    /** The float bits of {@code q - 8} in lane {@code q}: a nibble as a lane index selects its weight's level. */
    private static final IntVector LEVELS = IntVector.fromArray(IntVector.SPECIES_512,
            IntStream.range(0, 16).map(q -> Float.floatToRawIntBits(q - 8)).toArray(), 0);

    private final int blocks;
    private final int groups;
    /** Whether pairs of groups interleave their blocks ({@link #PAIRED}). */
    private final boolean paired;

    /**
     * Whether copies interleave each pair of groups' blocks, so that {@link #dotRows} reads one stream of weights
     * ({@link Blocks#PAIRED_GROUPS}). Where not (Intel processors) the groups' blocks stay in order and the products
     * read two streams, with loads ahead of both, as they were measured there ({@link #dotRows}).
     */
    static final boolean PAIRED = Blocks.PAIRED_GROUPS;

    private Q4_0Columns(WeightMatrix source, MemorySegment packed, boolean paired) {
        super(source, packed, GROUP);
        this.blocks = source().cols() / Q4_0Quantizer.QK;
        this.groups = source().rows() / GROUP;
        this.paired = paired;
    }

    /** {@return where block {@code b} of group {@code g} starts ({@link Blocks#groupBlockOffset})} */
    static long offset(int g, int b, int blocks, int groups, boolean paired) {
        return Blocks.groupBlockOffset(g, b, blocks, groups, paired, GROUP_BLOCK_BYTES);
    }

    /** {@return the bytes from one block of group {@code g} to its next ({@link Blocks#groupBlockStride})} */
    static long stride(int g, int groups, boolean paired) {
        return Blocks.groupBlockStride(g, groups, paired, GROUP_BLOCK_BYTES);
    }

    /**
     * {@return {@code w} packed, or empty where it cannot be}: without 16 float lanes, with rows not a multiple of
     * {@value #GROUP}, or with a scale that is infinite or NaN. The groups are packed in parallel (the common
     * fork-join pool).
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena) {
        return pack(w, arena, PAIRED);
    }

    /** {@link #pack(WeightMatrix, Arena)} with the pairs interleaved or not (package-private: tests take both). */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena, boolean paired) {
        if (Q4_0Quantizer.FLOATS.length() != GROUP || w.rows() % GROUP != 0) {
            return Optional.empty();
        }
        int blocks = w.cols() / Q4_0Quantizer.QK;
        int groups = w.rows() / GROUP;
        MemorySegment packed = arena.allocate((long) groups * blocks * GROUP_BLOCK_BYTES, 64);
        boolean finite = Blocks.packGroups(groups, g -> packGroup(w, g, blocks, groups, paired, packed));
        return finite ? Optional.of(new Q4_0Columns(w, packed, paired)) : Optional.empty();
    }

    /**
     * Packs group {@code g}.
     *
     * @return false if a scale is infinite or NaN
     */
    private static boolean packGroup(WeightMatrix w, int g, int blocks, int groups, boolean paired,
                                     MemorySegment packed) {
        int bytes = Q4_0Quantizer.BYTES;
        long rowBytes = w.rowBytes();
        MemorySegment src = w.data();
        byte[] block = new byte[GROUP_BLOCK_BYTES];
        for (int b = 0; b < blocks; b++) {
            for (int l = 0; l < GROUP; l++) {
                long from = (GROUP * (long) g + l) * rowBytes + (long) b * bytes;
                short d = src.get(Blocks.I16, from);
                if ((d & 0x7C00) == 0x7C00) {
                    return false;
                }
                block[2 * l] = (byte) d;
                block[2 * l + 1] = (byte) (d >> 8);
                for (int j = 0; j < 16; j++) {
                    block[2 * GROUP + 16 * j + l] = src.get(ValueLayout.JAVA_BYTE, from + 2 + j);
                }
            }
            MemorySegment.copy(block, 0, packed, ValueLayout.JAVA_BYTE, offset(g, b, blocks, groups, paired),
                    GROUP_BLOCK_BYTES);
        }
        return true;
    }

    /** The activations themselves: the kernel broadcasts them one at a time. */
    @Override
    public int preparedFloats() {
        return source().cols();
    }

    @Override
    public void prepareFloats(float[] x, int xOffset, float[] prepared) {
        System.arraycopy(x, xOffset, prepared, 0, source().cols());
    }

    /**
     * Two groups of 16 rows a step (each activation broadcast once for both), per block: 16 byte loads of each group,
     * each widened to 16 int lanes, its low and high nibbles looked up in {@link #LEVELS} and multiplied with {@code
     * x[j]} and {@code x[j + 16]} into two running sums (the block's elements in order within each); the block's two
     * sums added and accumulated times the 16 rows' scales, block after block. Each row's product is {@code sum over
     * blocks of d * (sum of (q - 8) x)}, as the format's {@code dot} computes it, to float rounding; an odd last group
     * is computed as both of a step (the same bits twice). Where the copy pairs groups ({@link #PAIRED}), a step's two
     * groups are a pair wherever a run starts at an even group, as the CPU device's runs do (whole pairs of row
     * groups), so that its weights are one stream ({@link #offset}). Where it does not, each block also loads a long
     * from each of the five cache lines {@link #AHEAD} bytes ahead in each of the two streams, added into a sum that
     * only decides the sign of a zero subtracted from the first product, so that the weights' cache misses start early
     * (as {@code TernaryTable} does; Java has no prefetch instruction).
     *
     * <p>{@code bench -m 1b-q4_0.gguf -p 16 -n 32 -r 2 --profile --verify-tokens 0}, Intel Xeon VM (2026-12-06), two
     * streams: one group a step, {@code ffn_gate+up} 10.8 GB/s without the loads ahead, 12.8 with them 1 or 2 KiB
     * ahead, 12.2 at 4 KiB (the file's layout through {@code tripleByTable}, same hour: 11.3-11.7); two groups a step,
     * two alternating pairs: 12.5 and 12.5 against 13.7 and 13.5 GB/s, {@code ffn_down} 12.7 against 15.3 and 15.1,
     * tg32 16.04 and 16.23 against 17.39 and 17.12 tok/s. Pairs interleaved were not measured there (a plain read ran
     * faster with two streams a thread than with one, {@link Blocks#ONE_ROW_MAX_COUNT}).
     *
     * <p>One stream, not two, on an AMD EPYC Zen 5 VM (2026-12-06): a copy of this loop in a harness outside the
     * repository (one thread, 256 MiB of copy) read 10.1-10.4 GB/s with each group's blocks in order (two streams 18
     * KiB apart) and 17.2-18.8 with a pair's blocks interleaved, against 20-22 from L2 or L3 and 30-35 for a plain loop
     * of 64-byte loads; the loads ahead (1-8 KiB) cost there, 6.5-9.0 against 8.6-9.3 GB/s with two streams, 8.2-15.2
     * against 18.8 with one. In the model, two alternating pairs: {@code ffn_gate+up} 14.5 and 17.5 -> 26.0 and 21.8
     * GB/s, {@code ffn_down} 13.8 and 19.4 -> 26.7 and 22.5; {@code -p 512 -n 32 -r 2}: tg32 19.96 and 23.12 -> 38.02
     * and 37.64 tok/s.
     */
    @Override
    public void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex) {
        Blocks.checkRowGroups(firstRow, rows, GROUP);
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_128;
        var b2i = VectorOperators.ZERO_EXTEND_B2I;
        var halves = ShortVector.SPECIES_256;
        var s2i = VectorOperators.S2I;
        IntVector levels = LEVELS;
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        MemorySegment w = copy();
        boolean loadAhead = !paired;
        long last = w.byteSize() - 8;
        long ahead = 0;
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g += 2) {
            boolean pair = g + 1 < end;
            long first = offset(g, 0, blocks, groups, paired);
            long step = stride(g, groups, paired);
            long first2 = pair ? offset(g + 1, 0, blocks, groups, paired) : first;
            long step2 = pair ? stride(g + 1, groups, paired) : step;
            FloatVector acc = FloatVector.zero(f);
            FloatVector acc2 = acc;
            for (int b = 0; b < blocks; b++) {
                long o = first + b * step;
                long o2 = first2 + b * step2;
                int x = b * Q4_0Quantizer.QK;
                if (loadAhead) {
                    for (long l = AHEAD; l < AHEAD + 5 * 64; l += 64) { // the five lines the block ahead touches
                        ahead += w.get(ValueLayout.JAVA_LONG_UNALIGNED, Math.min(o + l, last))
                                + w.get(ValueLayout.JAVA_LONG_UNALIGNED, Math.min(o2 + l, last));
                    }
                }
                // The 16 rows' scales (see SCALE_BITS); written out here: a helper returning the vector was left
                // out of line in the model (NodeCountInliningCutoff) and boxed it at every call.
                FloatVector d = ((IntVector) ShortVector.fromMemorySegment(halves, w, o, LE).convertShape(s2i, ints, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                FloatVector d2 = ((IntVector) ShortVector.fromMemorySegment(halves, w, o2, LE).convertShape(s2i, ints, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                FloatVector s0 = FloatVector.zero(f);
                FloatVector s1 = s0;
                FloatVector s2 = s0;
                FloatVector s3 = s0;
                for (int j = 0; j < 16; j++) {
                    FloatVector x0 = FloatVector.broadcast(f, prepared[x + j]);
                    FloatVector x1 = FloatVector.broadcast(f, prepared[x + 16 + j]);
                    IntVector q = (IntVector) ByteVector.fromMemorySegment(bytes, w, o + 2 * GROUP + 16L * j, LE)
                            .convertShape(b2i, ints, 0);
                    s0 = q.and(0x0F).selectFrom(levels).reinterpretAsFloats().fma(x0, s0);
                    s1 = q.lanewise(VectorOperators.LSHR, 4).selectFrom(levels).reinterpretAsFloats().fma(x1, s1);
                    IntVector q2 = (IntVector) ByteVector.fromMemorySegment(bytes, w, o2 + 2 * GROUP + 16L * j, LE)
                            .convertShape(b2i, ints, 0);
                    s2 = q2.and(0x0F).selectFrom(levels).reinterpretAsFloats().fma(x0, s2);
                    s3 = q2.lanewise(VectorOperators.LSHR, 4).selectFrom(levels).reinterpretAsFloats().fma(x1, s3);
                }
                acc = s0.add(s1).fma(d, acc);
                acc2 = s2.add(s3).fma(d2, acc2);
            }
            int at = outIndex + (g * GROUP - firstRow);
            acc.intoArray(out, at);
            if (pair) {
                acc2.intoArray(out, at + GROUP);
            }
        }
        // x - (+0) is x for every float, -0 and NaN included; the compiler cannot drop the loads behind it.
        out[outIndex] -= (ahead & 1) * 0f;
    }

    /**
     * Bytes ahead of each stream that {@link #dotRows} touches with loads of its own where the groups' blocks are in
     * order: 2 KiB (Intel Xeon VM: tg32 17.33 and 18.00 tok/s with two groups a step against 16.98-17.22 at 512 B and
     * 1 KiB, two rounds).
     */
    private static final long AHEAD = 2048;

    /**
     * Each group's 16 rows column by column: the nibbles of a byte load are elements {@code j} and {@code j + 16} of
     * 16 rows, already transposed. Each value is {@code (q - 8) * d}, the format's {@code decode} to the bit.
     */
    @Override
    public void decodeColumns(int firstRow, int rows, int fromCol, int cols, float[] dst, int dstOffset,
                              int dstStride) {
        int qk = Q4_0Quantizer.QK;
        Blocks.checkColumns(this, firstRow, rows, fromCol, cols, dstStride);
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_128;
        var b2i = VectorOperators.ZERO_EXTEND_B2I;
        var halves = ShortVector.SPECIES_256;
        var s2i = VectorOperators.S2I;
        IntVector levels = LEVELS;
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        MemorySegment w = copy();
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g++) {
            int rowAt = dstOffset + g * GROUP - firstRow;
            long first = offset(g, 0, blocks, groups, paired);
            long step = stride(g, groups, paired);
            for (int b = fromCol / qk, last = (fromCol + cols) / qk; b < last; b++) {
                long o = first + b * step;
                FloatVector d = ((IntVector) ShortVector.fromMemorySegment(halves, w, o, LE).convertShape(s2i, ints, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                int at = rowAt + (b * qk - fromCol) * dstStride;
                for (int j = 0; j < 16; j++) {
                    IntVector q = (IntVector) ByteVector.fromMemorySegment(bytes, w, o + 2 * GROUP + 16L * j, LE)
                            .convertShape(b2i, ints, 0);
                    q.and(0x0F).selectFrom(levels).reinterpretAsFloats().mul(d).intoArray(dst, at + j * dstStride);
                    q.lanewise(VectorOperators.LSHR, 4).selectFrom(levels).reinterpretAsFloats().mul(d)
                            .intoArray(dst, at + (j + 16) * dstStride);
                }
            }
        }
    }
}
