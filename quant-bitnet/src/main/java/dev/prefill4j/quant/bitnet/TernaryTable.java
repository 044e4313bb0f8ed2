package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Optional;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * A ternary matrix (TQ1_0 or TQ2_0) laid out for table lookups, the decode steps' products with Q8_K or per-token
 * activations and with float32 ones: trits go two at a time into a 4-bit index, 32 rows side by side in the 16-bit
 * lanes of a vector, and a lane permute ({@code vpermw}) of the 16 possible sums of a pair of activation codes
 * ({@code (c0 - 1) a0 + (c1 - 1) a1}, made once per activation row, {@link #prepareActivations}) gives the pair's
 * products for all 32 rows in one instruction; with float32 activations the sums are floats ({@link #prepareFloats}),
 * and a permute of int lanes ({@code vpermd}) gives 16 rows' at a time ({@link #dotRows}). No weight is multiplied:
 * lookup tables over packed trits are what bitnet.cpp's BitNet b1.58 kernels use too. The formats' own integer kernels
 * ({@link TQ2_0Quantizer#dotCodes32}) take each trit out of its byte with two shifts and multiply it with its code,
 * about three instructions a trit where this takes about one per four.
 *
 * <p>Layout, per group of 32 rows and block of 256 elements ({@value #GROUP_BLOCK_BYTES} bytes, groups' blocks in
 * order): 32 vectors of 32 int16 lanes, lane {@code l} of vector {@code j} holding row {@code 32g + l}'s pairs {@code
 * 4j .. 4j + 3} of the block, pair {@code p} (elements {@code 2p} and {@code 2p + 1}, trit codes {@code c0}, {@code
 * c1} in 0..2) as the nibble {@code c0 + 4 c1} at bit {@code 4(p - 4j)}; then the 32 rows' scales {@code d} as float32.
 * The prepared activations: per block, 128 tables of 32 int16 (the 16 sums twice, so that the permute's index may
 * keep the next nibble's low bit: lane selection wraps modulo 32), 8 KiB; after all blocks, each block's activation
 * scale as float32.
 *
 * <p>Per row and block the 128 pairs' sums are added exactly in int16: a pair's sum is at most {@code 2 * 127} in
 * magnitude (Q8_K codes and the per-token ones are within +-127), a block's at most {@code 128 * 254 = 32512}. The
 * product is {@code sum over blocks of (float) s_b * (d_w * d_a)}, each term one FMA into a float sum in block order:
 * the format's {@code dotEncoded} rounds per lane and block instead, so the two agree to float rounding. With float32
 * activations each table entry is rounded once, a block's 128 entries are added in float and the sum is scaled by
 * {@code d_w} the same way: the format's {@code dot} to float rounding. Both formats pack to the same bytes from the
 * same trits and scales, so they give the same bits here too.
 *
 * <p>Where a trit's code is 3 (no quantizer writes it; TQ2_0's decoding reads it as +2) the pair sums could leave
 * int16, so such a matrix is not packed. NOT VERIFIED on CPUs without AVX-512 (32 short lanes): there the formats'
 * own kernels run and nothing is packed.
 */
final class TernaryTable implements PackedMatrix {
    /** Rows a lookup serves: the int16 lanes of a 512-bit vector. */
    static final int GROUP = 32;
    /** Pairs a block holds. */
    private static final int PAIRS = Ternary.QK / 2;
    /** Bytes of one block of one group: 32 vectors of pairs' nibbles, then 32 float scales. */
    static final int GROUP_BLOCK_BYTES = 32 * 64 + 4 * GROUP;
    /** Bytes of one pair's table: 32 int16. */
    private static final int TABLE_BYTES = 64;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;

    /** Lane {@code i}: {@code (i & 3) - 1} and {@code ((i >> 2) & 3) - 1}, the first and second trit of index i. */
    private static final ShortVector FIRST = ShortVector.fromArray(ShortVector.SPECIES_512, lanes(0), 0);
    private static final ShortVector SECOND = ShortVector.fromArray(ShortVector.SPECIES_512, lanes(2), 0);

    /** {@link #FIRST} and {@link #SECOND} as 16 float lanes, for the float32 tables. */
    private static final FloatVector FIRST_F = FloatVector.fromArray(FloatVector.SPECIES_512, floats(0), 0);
    private static final FloatVector SECOND_F = FloatVector.fromArray(FloatVector.SPECIES_512, floats(2), 0);
    /** Floats of one pair's float32 table: the 16 sums once (an int lane permute takes the index modulo 16). */
    private static final int FLOAT_TABLE = 16;

    private static float[] floats(int shift) {
        float[] t = new float[16];
        for (int i = 0; i < 16; i++) {
            t[i] = ((i >> shift) & 3) - 1;
        }
        return t;
    }

    private static short[] lanes(int shift) {
        short[] t = new short[32];
        for (int i = 0; i < 32; i++) {
            t[i] = (short) (((i >> shift) & 3) - 1);
        }
        return t;
    }

    private final WeightMatrix source;
    private final MemorySegment packed;
    private final int blocks;

    private TernaryTable(WeightMatrix source, MemorySegment packed) {
        this.source = source;
        this.packed = packed;
        this.blocks = source.cols() / Ternary.QK;
    }

    /**
     * {@return {@code w} packed, or empty where it cannot be}: without 32 short lanes, with rows not a multiple of
     * {@value #GROUP}, or with a trit code of 3. The groups are packed in parallel (the common fork-join pool).
     */
    static Optional<PackedMatrix> pack(TernaryQuantizer format, WeightMatrix w, Arena arena) {
        if (!Ternary.CODES32 || w.rows() % GROUP != 0) {
            return Optional.empty();
        }
        int blocks = w.cols() / Ternary.QK;
        int groups = w.rows() / GROUP;
        MemorySegment packed = arena.allocate((long) groups * blocks * GROUP_BLOCK_BYTES, 64);
        boolean clean = Blocks.packGroups(groups, g -> packGroup(format, w, g, blocks, packed));
        return clean ? Optional.of(new TernaryTable(w, packed)) : Optional.empty();
    }

    /**
     * Packs group {@code g}.
     *
     * @return false if a trit's code is 3
     */
    private static boolean packGroup(TernaryQuantizer format, WeightMatrix w, int g, int blocks, MemorySegment packed) {
        int bytes = format.blockBytes();
        byte[] staged = new byte[bytes + 8];
        byte[] trits = new byte[Ternary.QK];
        short[] lanes = new short[32];
        long rowBytes = w.rowBytes();
        for (int b = 0; b < blocks; b++) {
            long to = ((long) g * blocks + b) * GROUP_BLOCK_BYTES;
            for (int l = 0; l < GROUP; l++) {
                long from = (32L * g + l) * rowBytes + (long) b * bytes;
                if (!format.packLanes(w.data(), from, lanes, staged, trits)) {
                    return false;
                }
                for (int j = 0; j < 32; j++) {
                    packed.set(Blocks.I16, to + 64L * j + 2L * l, lanes[j]);
                }
                packed.set(Blocks.F32, to + 32 * 64 + 4L * l, Blocks.fp16(w.data(), from + format.scaleAt()));
            }
        }
        return true;
    }

    @Override
    public WeightMatrix source() {
        return source;
    }

    @Override
    public int rowGroup() {
        return GROUP;
    }

    @Override
    public long byteSize() {
        return packed.byteSize();
    }

    @Override
    public int preparedBytes() {
        return blocks * (PAIRS * TABLE_BYTES + 4);
    }

    /** Per block, each pair's table: {@code FIRST * a0 + SECOND * a1} in 32 int16 lanes; then the blocks' scales. */
    @Override
    public void prepareActivations(MemorySegment act, long actOffset, byte[] prepared) {
        MemorySegment to = MemorySegment.ofArray(prepared);
        int scales = blocks * PAIRS * TABLE_BYTES;
        for (int b = 0; b < blocks; b++) {
            long a = actOffset + (long) b * Ternary.Q8K_BYTES;
            to.set(Blocks.F32, scales + 4L * b, act.get(Blocks.F32, a));
            for (int p = 0; p < PAIRS; p++) {
                short a0 = act.get(ValueLayout.JAVA_BYTE, a + 4 + 2 * p);
                short a1 = act.get(ValueLayout.JAVA_BYTE, a + 5 + 2 * p);
                FIRST.mul(a0).add(SECOND.mul(a1)).reinterpretAsBytes()
                        .intoArray(prepared, (b * PAIRS + p) * TABLE_BYTES);
            }
        }
    }

    @Override
    public int preparedFloats() {
        return blocks * PAIRS * FLOAT_TABLE;
    }

    /**
     * Per pair, its 16 sums {@code (c0 - 1) x0 + (c1 - 1) x1} as float32 (each product exact, the sum rounded once).
     */
    @Override
    public void prepareFloats(float[] x, int xOffset, float[] prepared) {
        for (int p = 0; p < blocks * PAIRS; p++) {
            float x0 = x[xOffset + 2 * p];
            float x1 = x[xOffset + 2 * p + 1];
            FIRST_F.mul(x0).add(SECOND_F.mul(x1)).intoArray(prepared, p * FLOAT_TABLE);
        }
    }

    /**
     * {@link #dotEncodedRows} with float32 tables: each group's 32 rows as two int vectors of 16 (each nibble shifted
     * down and looked up by {@code selectFrom}, modulo 16, in its pair's table as int bits), added in float per block,
     * then scaled by the rows' {@code d} into float sums; the loads ahead as there. One group a step: with two (16
     * lookups a step), C2 left the FMAs at the end of each block to the Vector API's Java code in some compilations in
     * the model (JFR, {@code bench -p 16 -n 200 -r 3}: about 8 GB of boxed vectors in the last 40% of the run, tg200
     * 19.4 tok/s).
     */
    @Override
    public void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex) {
        Blocks.checkRowGroups(firstRow, rows, GROUP);
        var shorts = ShortVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var f = FloatVector.SPECIES_512;
        var shr = VectorOperators.LSHR;
        var s2i = VectorOperators.ZERO_EXTEND_S2I;
        MemorySegment w = packed;
        long last = w.byteSize() - 8;
        long ahead = 0;
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g++) {
            FloatVector acc0 = FloatVector.zero(f);
            FloatVector acc1 = acc0;
            for (int b = 0; b < blocks; b++) {
                long o = ((long) g * blocks + b) * GROUP_BLOCK_BYTES;
                int t = b * PAIRS * FLOAT_TABLE;
                // The scales loaded first: loaded after the loop, at the end of the body, C2 left their FMAs to the
                // Vector API's Java code in the model (JFR: gigabytes of boxed vectors in a bench -p 16 -n 64).
                FloatVector d0 = FloatVector.fromMemorySegment(f, w, o + 32 * 64, LE);
                FloatVector d1 = FloatVector.fromMemorySegment(f, w, o + 32 * 64 + 64, LE);
                FloatVector s0 = FloatVector.zero(f);
                FloatVector s1 = s0;
                for (int j = 0; j < 32; j++) {
                    ahead += w.get(ValueLayout.JAVA_LONG_UNALIGNED, Math.min(o + 64L * j + AHEAD, last));
                    ShortVector q = ShortVector.fromMemorySegment(shorts, w, o + 64L * j, LE);
                    IntVector i0 = (IntVector) q.convertShape(s2i, ints, 0);
                    IntVector i1 = (IntVector) q.convertShape(s2i, ints, 1);
                    int tj = t + 4 * j * FLOAT_TABLE;
                    IntVector table = FloatVector.fromArray(f, prepared, tj).reinterpretAsInts();
                    s0 = s0.add(i0.selectFrom(table).reinterpretAsFloats());
                    s1 = s1.add(i1.selectFrom(table).reinterpretAsFloats());
                    table = FloatVector.fromArray(f, prepared, tj + FLOAT_TABLE).reinterpretAsInts();
                    s0 = s0.add(i0.lanewise(shr, 4).selectFrom(table).reinterpretAsFloats());
                    s1 = s1.add(i1.lanewise(shr, 4).selectFrom(table).reinterpretAsFloats());
                    table = FloatVector.fromArray(f, prepared, tj + 2 * FLOAT_TABLE).reinterpretAsInts();
                    s0 = s0.add(i0.lanewise(shr, 8).selectFrom(table).reinterpretAsFloats());
                    s1 = s1.add(i1.lanewise(shr, 8).selectFrom(table).reinterpretAsFloats());
                    table = FloatVector.fromArray(f, prepared, tj + 3 * FLOAT_TABLE).reinterpretAsInts();
                    s0 = s0.add(i0.lanewise(shr, 12).selectFrom(table).reinterpretAsFloats());
                    s1 = s1.add(i1.lanewise(shr, 12).selectFrom(table).reinterpretAsFloats());
                }
                acc0 = s0.fma(d0, acc0);
                acc1 = s1.fma(d1, acc1);
            }
            int at = outIndex + (g * GROUP - firstRow);
            acc0.intoArray(out, at);
            acc1.intoArray(out, at + 16);
        }
        out[outIndex] -= (ahead & 1) * 0f; // as in dotEncodedRows
    }

    /**
     * Each group's 32 rows from its 32 vectors of a block: element {@code 8j + e} of the block is bits {@code 2e,
     * 2e + 1} of vector {@code j}'s lanes, so a vector's lanes, widened to two int vectors, shifted, masked and
     * converted, are column {@code 8j + e} of 16 rows at a time, already transposed. Each value is {@code (code - 1)
     * * d} with {@code d} the fp16 scale as float, the source formats' {@code decode} to the bit.
     */
    @Override
    public void decodeColumns(int firstRow, int rows, int fromCol, int cols, float[] dst, int dstOffset,
                              int dstStride) {
        Blocks.checkColumns(this, firstRow, rows, fromCol, cols, dstStride);
        var shorts = ShortVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var f = FloatVector.SPECIES_512;
        var shr = VectorOperators.LSHR;
        var s2i = VectorOperators.ZERO_EXTEND_S2I;
        var i2f = VectorOperators.I2F;
        MemorySegment w = packed;
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g++) {
            int rowAt = dstOffset + g * GROUP - firstRow;
            for (int b = fromCol / Ternary.QK, last = (fromCol + cols) / Ternary.QK; b < last; b++) {
                long o = ((long) g * blocks + b) * GROUP_BLOCK_BYTES;
                FloatVector d0 = FloatVector.fromMemorySegment(f, w, o + 32 * 64, LE);
                FloatVector d1 = FloatVector.fromMemorySegment(f, w, o + 32 * 64 + 64, LE);
                int blockAt = rowAt + (b * Ternary.QK - fromCol) * dstStride;
                for (int j = 0; j < 32; j++) {
                    ShortVector q = ShortVector.fromMemorySegment(shorts, w, o + 64L * j, LE);
                    IntVector i0 = (IntVector) q.convertShape(s2i, ints, 0);
                    IntVector i1 = (IntVector) q.convertShape(s2i, ints, 1);
                    int at = blockAt + 8 * j * dstStride;
                    for (int e = 0; e < 8; e++) {
                        ((FloatVector) i0.lanewise(shr, 2 * e).and(3).sub(1).convert(i2f, 0)).mul(d0)
                                .intoArray(dst, at + e * dstStride);
                        ((FloatVector) i1.lanewise(shr, 2 * e).and(3).sub(1).convert(i2f, 0)).mul(d1)
                                .intoArray(dst, at + e * dstStride + 16);
                    }
                }
            }
        }
    }

    /**
     * Bytes ahead of each stream that the kernels touch with a load of their own (see {@link #dotEncodedRows}): in a
     * harness outside the repository (module jars, two threads, 2,048- and 8,192-element rows streamed) 1, 2 and 4
     * KiB were alike (12.2-14.6 GB/s float, 14.2-16.4 integer), 8 and 16 KiB slower, and the same loads at distance 0
     * 8.6 GB/s (float).
     */
    private static final long AHEAD = 2048;

    /**
     * Two groups a step (two streams of weights, each table loaded once for both), per block: 32 loads of each
     * group's 32 rows' four pairs, each pair's nibble shifted down and looked up in its table ({@code selectFrom}: the
     * index taken modulo 32, the tables stored twice), the lookups added in int16; each group's 32 sums widened to two
     * int vectors, converted, and accumulated times {@code d_w * d_a} (one FMA a row and block). An odd last group is
     * computed as both of a step (the same bits twice). Each 64-byte step also loads a long {@link #AHEAD} bytes
     * ahead in each stream, added into a sum that only decides the sign of a zero subtracted from the first product,
     * so that the weights' cache misses start early: Java has no prefetch instruction, and this kernel does so little
     * per byte that the hardware's prefetchers on this VM fall behind.
     */
    @Override
    public void dotEncodedRows(int firstRow, int rows, byte[] prepared, float[] out, int outIndex) {
        Blocks.checkRowGroups(firstRow, rows, GROUP);
        var shorts = ShortVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var f = FloatVector.SPECIES_512;
        var shr = VectorOperators.LSHR;
        var s2i = VectorOperators.S2I;
        var i2f = VectorOperators.I2F;
        int scales = blocks * PAIRS * TABLE_BYTES;
        MemorySegment w = packed;
        long last = w.byteSize() - 8;
        long ahead = 0;
        long groupBytes = (long) blocks * GROUP_BLOCK_BYTES;
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g += 2) {
            long second = g + 1 < end ? groupBytes : 0;
            FloatVector acc0 = FloatVector.zero(f);
            FloatVector acc1 = acc0;
            FloatVector acc2 = acc0;
            FloatVector acc3 = acc0;
            for (int b = 0; b < blocks; b++) {
                long o = g * groupBytes + (long) b * GROUP_BLOCK_BYTES;
                long o2 = o + second;
                int t = b * PAIRS * TABLE_BYTES;
                // The scales first, as in dotRows.
                float da = Blocks.f32(prepared, scales + 4 * b);
                FloatVector d0 = FloatVector.fromMemorySegment(f, w, o + 32 * 64, LE).mul(da);
                FloatVector d1 = FloatVector.fromMemorySegment(f, w, o + 32 * 64 + 64, LE).mul(da);
                FloatVector d2 = FloatVector.fromMemorySegment(f, w, o2 + 32 * 64, LE).mul(da);
                FloatVector d3 = FloatVector.fromMemorySegment(f, w, o2 + 32 * 64 + 64, LE).mul(da);
                ShortVector sum = ShortVector.zero(shorts);
                ShortVector sum2 = sum;
                for (int j = 0; j < 32; j++) {
                    ahead += w.get(ValueLayout.JAVA_LONG_UNALIGNED, Math.min(o + 64L * j + AHEAD, last))
                            + w.get(ValueLayout.JAVA_LONG_UNALIGNED, Math.min(o2 + 64L * j + AHEAD, last));
                    ShortVector q = ShortVector.fromMemorySegment(shorts, w, o + 64L * j, LE);
                    ShortVector q2 = ShortVector.fromMemorySegment(shorts, w, o2 + 64L * j, LE);
                    int tj = t + 4 * j * TABLE_BYTES;
                    ShortVector table = ByteVector.fromArray(bytes, prepared, tj).reinterpretAsShorts();
                    sum = sum.add(q.selectFrom(table));
                    sum2 = sum2.add(q2.selectFrom(table));
                    table = ByteVector.fromArray(bytes, prepared, tj + TABLE_BYTES).reinterpretAsShorts();
                    sum = sum.add(q.lanewise(shr, 4).selectFrom(table));
                    sum2 = sum2.add(q2.lanewise(shr, 4).selectFrom(table));
                    table = ByteVector.fromArray(bytes, prepared, tj + 2 * TABLE_BYTES).reinterpretAsShorts();
                    sum = sum.add(q.lanewise(shr, 8).selectFrom(table));
                    sum2 = sum2.add(q2.lanewise(shr, 8).selectFrom(table));
                    table = ByteVector.fromArray(bytes, prepared, tj + 3 * TABLE_BYTES).reinterpretAsShorts();
                    sum = sum.add(q.lanewise(shr, 12).selectFrom(table));
                    sum2 = sum2.add(q2.lanewise(shr, 12).selectFrom(table));
                }
                acc0 = ((FloatVector) ((IntVector) sum.convertShape(s2i, ints, 0)).convertShape(i2f, f, 0))
                        .fma(d0, acc0);
                acc1 = ((FloatVector) ((IntVector) sum.convertShape(s2i, ints, 1)).convertShape(i2f, f, 0))
                        .fma(d1, acc1);
                acc2 = ((FloatVector) ((IntVector) sum2.convertShape(s2i, ints, 0)).convertShape(i2f, f, 0))
                        .fma(d2, acc2);
                acc3 = ((FloatVector) ((IntVector) sum2.convertShape(s2i, ints, 1)).convertShape(i2f, f, 0))
                        .fma(d3, acc3);
            }
            int at = outIndex + (g * GROUP - firstRow);
            acc0.intoArray(out, at);
            acc1.intoArray(out, at + 16);
            if (second != 0) {
                acc2.intoArray(out, at + GROUP);
                acc3.intoArray(out, at + GROUP + 16);
            }
        }
        // x - (+0) is x for every float, -0 and NaN included; the compiler cannot drop the loads behind it.
        out[outIndex] -= (ahead & 1) * 0f;
    }
}
