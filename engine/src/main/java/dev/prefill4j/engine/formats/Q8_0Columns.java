package dev.prefill4j.engine.formats;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.FloatPackedMatrix;
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
import jdk.incubator.vector.VectorSpecies;

/**
 * A Q8_0 matrix laid out with 16 rows side by side, one row a float lane, for the decode steps' products with
 * float32 activations and the prompts' panels ({@link #decodeColumns}). In the file each row's 34-byte blocks are read
 * in 16-byte loads, some across cache lines, four rows (four streams) at a time, with a scale broadcast per block
 * and row; here a 16-byte load widened to 16 float lanes holds element {@code j} of 16 rows, one FMA with the
 * broadcast activation {@code x[j]} adds it into the 16 rows' sums, and the 16 rows' scales are one vector a block:
 * three vector operations (widen to int lanes, convert, FMA: as {@link Q8_0Quantizer}'s kernels, which
 * found that faster than the byte-to-float conversion) per 16 weights in this source (C2's code not read), every load
 * within one cache line.
 *
 * <p>Layout, per group of 16 rows and block of 32 elements ({@value #GROUP_BLOCK_BYTES} bytes, as the 16 rows'
 * blocks take in the file): the 16 rows' fp16 scales {@code d}, then 32 times 16 bytes, byte {@code l} of the
 * {@code j}-th holding row {@code 16g + l}'s {@code qs[j]}. Groups go in pairs with their blocks interleaved where
 * the machine reads one stream a thread fastest, else group after group ({@link Blocks#groupBlockOffset}, {@link
 * #PAIRED}), as {@code Q4_0Columns} in {@code quant-q4_0} lays out its copies.
 *
 * <p>A matrix with an infinite or NaN scale is not packed (the scales are converted in int lanes by a shift and a
 * multiply that keep every finite fp16, subnormals included, and not those); its products read the file as before.
 * Nothing is packed on CPUs without 16 float lanes.
 */
final class Q8_0Columns extends FloatPackedMatrix {
    /** Rows side by side: the float lanes of a 512-bit vector. */
    static final int GROUP = 16;
    /** Bytes of one block of one group: 16 fp16 scales, then 32 x 16 int8 codes. */
    static final int GROUP_BLOCK_BYTES = 2 * GROUP + GROUP * Q8_0Quantizer.QK;
    /** Whether copies interleave each pair of groups' blocks ({@link Blocks#PAIRED_GROUPS}). */
    static final boolean PAIRED = Blocks.PAIRED_GROUPS;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** What {@link #dotRows} and {@link #decodeColumns} work in: 16 float lanes, 16 int, 16 bytes, 16 fp16 scales. */
    private static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_512;
    private static final VectorSpecies<Integer> INTS = IntVector.SPECIES_512;
    private static final VectorSpecies<Byte> BYTES = ByteVector.SPECIES_128;
    private static final VectorSpecies<Short> HALVES = ShortVector.SPECIES_256;
    private static final VectorOperators.Conversion<Short, Integer> S2I = VectorOperators.S2I;
    private static final VectorOperators.Conversion<Byte, Integer> B2I = VectorOperators.B2I;
    private static final VectorOperators.Conversion<Integer, Float> I2F = VectorOperators.I2F;
    /** 2^112: an fp16's exponent and mantissa moved to a float's places are its value times 2^-112, exactly. */
    private static final float FP16_BIAS = 0x1p112f;
    /** The bits kept of a sign-extended fp16 shifted left by 13: exponent, mantissa and sign (bit 31). */
    private static final int SCALE_BITS = 0x8FFF_FFFF;
    /**
     * Bytes of the file's rows packed between two releases of their pages: where the source is a read-only mapping,
     * each run's pages are let go once it is packed, so that the copy takes their place a few MiB at a time instead
     * of adding a whole matrix (the 1B model's tied embedding and output matrix is 266 MB) before the source goes.
     */
    private static final long RELEASE_BYTES = 4L << 20;

    private final int blocks;
    private final int groups;
    private final boolean paired;

    private Q8_0Columns(WeightMatrix source, MemorySegment packed, boolean paired) {
        super(source, packed, GROUP);
        this.blocks = source.cols() / Q8_0Quantizer.QK;
        this.groups = source.rows() / GROUP;
        this.paired = paired;
    }

    /**
     * {@return {@code w} packed, or empty where it cannot be}: without 16 float lanes, with rows not a multiple of
     * {@value #GROUP}, or with a scale that is infinite or NaN.
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena) {
        return pack(w, arena, PAIRED);
    }

    /**
     * {@link #pack(WeightMatrix, Arena)} with the pairs interleaved or not (tests take both). Runs of groups of about
     * {@link #RELEASE_BYTES} of the file's rows are packed in parallel (the common fork-join pool), one run after
     * another.
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena, boolean paired) {
        if (FusedDot.FLOATS.length() != GROUP || w.rows() % GROUP != 0) {
            return Optional.empty();
        }
        int blocks = w.cols() / Q8_0Quantizer.QK;
        int groups = w.rows() / GROUP;
        MemorySegment packed = arena.allocate((long) groups * blocks * GROUP_BLOCK_BYTES, 64);
        MemorySegment data = w.data();
        boolean release = data.isMapped() && data.isReadOnly();
        long groupBytes = GROUP * w.rowBytes();
        int run = (int) Math.max(1, RELEASE_BYTES / groupBytes);
        for (int from = 0; from < groups; from += run) {
            int first = from;
            int count = Math.min(run, groups - from);
            if (!Blocks.packGroups(count, k -> packGroup(w, first + k, blocks, groups, paired, packed))) {
                return Optional.empty();
            }
            if (release) {
                long start = first * groupBytes;
                data.asSlice(start, Math.min(data.byteSize(), start + count * groupBytes) - start).unload();
            }
        }
        return Optional.of(new Q8_0Columns(w, packed, paired));
    }

    /**
     * Packs group {@code g}.
     *
     * @return false if a scale is infinite or NaN
     */
    private static boolean packGroup(WeightMatrix w, int g, int blocks, int groups, boolean paired,
                                     MemorySegment packed) {
        int qk = Q8_0Quantizer.QK;
        MemorySegment src = w.data();
        byte[] rows = new byte[Q8_0Quantizer.BLOCK_BYTES * blocks];
        byte[] block = new byte[GROUP_BLOCK_BYTES * blocks];
        for (int l = 0; l < GROUP; l++) {
            MemorySegment.copy(src, ValueLayout.JAVA_BYTE, (GROUP * (long) g + l) * w.rowBytes(), rows, 0,
                    rows.length);
            for (int b = 0; b < blocks; b++) {
                int from = b * Q8_0Quantizer.BLOCK_BYTES;
                if ((rows[from + 1] & 0x7C) == 0x7C) {
                    return false; // exponent all ones: infinite or NaN
                }
                int to = b * GROUP_BLOCK_BYTES;
                block[to + 2 * l] = rows[from];
                block[to + 2 * l + 1] = rows[from + 1];
                for (int j = 0; j < qk; j++) {
                    block[to + 2 * GROUP + GROUP * j + l] = rows[from + 2 + j];
                }
            }
        }
        for (int b = 0; b < blocks; b++) {
            MemorySegment.copy(block, b * GROUP_BLOCK_BYTES, packed, ValueLayout.JAVA_BYTE,
                    Blocks.groupBlockOffset(g, b, blocks, groups, paired, GROUP_BLOCK_BYTES), GROUP_BLOCK_BYTES);
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
     * Two groups of 16 rows a step (each activation broadcast once for both), per block: 32 loads of 16 bytes from each
     * group, each widened to 16 float lanes and converted and multiplied with {@code x[j]} into one of two running sums
     * (even and odd {@code j}, so that four chains of FMAs run at once); the two sums added and accumulated times the
     * 16 rows' scales, block after block. Each row's product is {@code sum over blocks of d * (sum of q x)}, as the
     * format's {@code dot} computes it, to float rounding; an odd last group is computed as both of a step (the same
     * bits twice).
     *
     * <p>A copy of this loop in a harness outside the repository (two threads, 512 MiB of copy, groups in order, the
     * bytes converted to floats in one step where this loop widens them to int lanes first; Intel Xeon VM, 2026-12-07)
     * read 28.2 GB/s on 2 MiB pages and 23.4 on 4 KiB pages, against 28.4 and 25.9 for a plain loop of 64-byte loads
     * over the same memory, and 37.7 over 16 MiB (from L3): it runs at the rate memory gives. In the model, this loop:
     * tg16 1.20-1.32x the file's layout (docs/performance-notes.md). The file's layout through {@link
     * Q8_0Quantizer#dotPreparedRows} read 18.9-20.7 GB/s in the model that hour ({@code bench -m 1b-q8_0.gguf -p 16 -n
     * 32 -r 2 --profile}).
     */
    @Override
    public void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex) {
        Blocks.checkRowGroups(firstRow, rows, GROUP);
        FloatVector bias = FloatVector.broadcast(FLOATS, FP16_BIAS);
        MemorySegment w = copy();
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g += 2) {
            boolean pair = g + 1 < end;
            long first = Blocks.groupBlockOffset(g, 0, blocks, groups, paired, GROUP_BLOCK_BYTES);
            long step = Blocks.groupBlockStride(g, groups, paired, GROUP_BLOCK_BYTES);
            long first2 = pair ? Blocks.groupBlockOffset(g + 1, 0, blocks, groups, paired, GROUP_BLOCK_BYTES) : first;
            long step2 = pair ? Blocks.groupBlockStride(g + 1, groups, paired, GROUP_BLOCK_BYTES) : step;
            FloatVector acc = FloatVector.zero(FLOATS);
            FloatVector acc2 = acc;
            for (int b = 0; b < blocks; b++) {
                long o = first + b * step;
                long o2 = first2 + b * step2;
                int x = b * Q8_0Quantizer.QK;
                // The 16 rows' scales (see SCALE_BITS), written out here as Q4_0Columns does: a helper returning the
                // vector can be left out of line by C2 and box it at every call.
                FloatVector d = ((IntVector) ShortVector.fromMemorySegment(HALVES, w, o, LE).convertShape(S2I, INTS, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                FloatVector d2 = ((IntVector) ShortVector.fromMemorySegment(HALVES, w, o2, LE)
                        .convertShape(S2I, INTS, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                FloatVector s0 = FloatVector.zero(FLOATS);
                FloatVector s1 = s0;
                FloatVector s2 = s0;
                FloatVector s3 = s0;
                for (int j = 0; j < Q8_0Quantizer.QK; j += 2) {
                    FloatVector x0 = FloatVector.broadcast(FLOATS, prepared[x + j]);
                    FloatVector x1 = FloatVector.broadcast(FLOATS, prepared[x + j + 1]);
                    long at = 2 * GROUP + (long) GROUP * j;
                    s0 = ((FloatVector) ((IntVector) ByteVector.fromMemorySegment(BYTES, w, o + at, LE)
                            .convertShape(B2I, INTS, 0)).convert(I2F, 0)).fma(x0, s0);
                    s1 = ((FloatVector) ((IntVector) ByteVector.fromMemorySegment(BYTES, w, o + at + GROUP, LE)
                            .convertShape(B2I, INTS, 0)).convert(I2F, 0)).fma(x1, s1);
                    s2 = ((FloatVector) ((IntVector) ByteVector.fromMemorySegment(BYTES, w, o2 + at, LE)
                            .convertShape(B2I, INTS, 0)).convert(I2F, 0)).fma(x0, s2);
                    s3 = ((FloatVector) ((IntVector) ByteVector.fromMemorySegment(BYTES, w, o2 + at + GROUP, LE)
                            .convertShape(B2I, INTS, 0)).convert(I2F, 0)).fma(x1, s3);
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
    }

    /**
     * Each group's 16 rows column by column: a 16-byte load is element {@code j} of 16 rows, already transposed. Each
     * value is {@code q * d} rounded once, the format's {@code decode} to the bit.
     */
    @Override
    public void decodeColumns(int firstRow, int rows, int fromCol, int cols, float[] dst, int dstOffset,
                              int dstStride) {
        int qk = Q8_0Quantizer.QK;
        Blocks.checkColumns(this, firstRow, rows, fromCol, cols, dstStride);
        FloatVector bias = FloatVector.broadcast(FLOATS, FP16_BIAS);
        MemorySegment w = copy();
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g++) {
            int rowAt = dstOffset + g * GROUP - firstRow;
            long first = Blocks.groupBlockOffset(g, 0, blocks, groups, paired, GROUP_BLOCK_BYTES);
            long step = Blocks.groupBlockStride(g, groups, paired, GROUP_BLOCK_BYTES);
            for (int b = fromCol / qk, last = (fromCol + cols) / qk; b < last; b++) {
                long o = first + b * step;
                FloatVector d = ((IntVector) ShortVector.fromMemorySegment(HALVES, w, o, LE).convertShape(S2I, INTS, 0))
                        .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
                int at = rowAt + (b * qk - fromCol) * dstStride;
                for (int j = 0; j < qk; j++) {
                    ((FloatVector) ((IntVector) ByteVector.fromMemorySegment(BYTES, w, o + 2 * GROUP + (long) GROUP * j,
                            LE).convertShape(B2I, INTS, 0)).convert(I2F, 0)).mul(d).intoArray(dst, at + j * dstStride);
                }
            }
        }
    }
}
