package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.FloatPackedMatrix;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Optional;

/**
 * What the K-quants' copies with 16 rows side by side share ({@link Q4KColumns}, {@link Q6KColumns}): units of a pair
 * of groups of 16 rows (a last group without a pair alone), super-block after super-block ({@link
 * Blocks#groupBlockOffset} with pairs), and packing them from the file's rows in parallel. Each format lays out a
 * unit's super-block ({@link #packBlock}) in the order its kernel reads it. The copies are made only where a thread
 * reads one stream of weights fastest ({@link KQuants#PACK_FOR_DECODE}), so pairs are their only layout: a unit's
 * two groups are one stream.
 *
 * <p>These copies give back every weight ({@link dev.prefill4j.api.spi.Quantizer#packedCopyDecodes}), so they take
 * the place of a file's matrix in memory: where the source is a read-only mapping, its rows are let go from memory
 * ({@link MemorySegment#unload}) a few MB at a time as they are packed, not only once the whole copy is made, so that
 * packing a large matrix does not hold it twice. With the 1B Q4_K_M file's Q6_K output matrix (215 MB) packed, as it
 * was in a trial, and its pages let go only at the end, bench's peak resident memory reached 977.6-1,074 MiB against
 * an aim of 898.6 (Zen 5 VM, 2026-12-06); the matrices packed now are 14 MB at most. Pages read again later come back
 * from the file; nothing is lost.
 */
abstract sealed class KColumns extends FloatPackedMatrix permits Q4KColumns, Q6KColumns {
    /** Rows side by side: the float lanes of a 512-bit vector. */
    static final int GROUP = 16;
    /**
     * 2^112: an fp16's exponent and mantissa moved to a float's places are its value times 2^-112, exactly (the same
     * conversion as Q4_0's copy).
     */
    static final float FP16_BIAS = 0x1p112f;
    /**
     * The bits kept of a sign-extended fp16 shifted left by 13 in an int lane: its exponent and mantissa, now in a
     * float's places, and bit 31, a copy of its sign. As a float that is the fp16's value times 2^-112.
     */
    static final int SCALE_BITS = 0x8FFF_FFFF;

    private final int blocks;
    private final int groups;
    private final int groupBlockBytes;

    /**
     * @param source          the matrix
     * @param copy            the copy's bytes: {@code groupBlockBytes} a super-block of each group
     * @param groupBlockBytes bytes of one super-block of one group
     */
    KColumns(WeightMatrix source, MemorySegment copy, int groupBlockBytes) {
        super(source, copy, GROUP);
        this.blocks = source.cols() / source.format().blockSize();
        this.groups = source.rows() / GROUP;
        this.groupBlockBytes = groupBlockBytes;
    }

    /** A format's copy made over its bytes, not yet packed. */
    @FunctionalInterface
    interface Layout {
        KColumns over(WeightMatrix source, MemorySegment copy);
    }

    /**
     * {@return {@code w} packed in the {@code layout} of {@code groupBlockBytes} bytes a super-block of a group, or
     * empty where it cannot be}: without 16 float lanes, with rows not a multiple of {@value #GROUP}, or with a
     * super-block {@link #packBlock} refuses
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena, int groupBlockBytes, Layout layout) {
        if (KQuants.FLOATS.length() != GROUP || w.rows() % GROUP != 0) {
            return Optional.empty();
        }
        long bytes = (long) w.rows() / GROUP * (w.cols() / w.format().blockSize()) * groupBlockBytes;
        KColumns p = layout.over(w, arena.allocate(bytes, 64));
        return p.packUnits() ? Optional.of(p) : Optional.empty();
    }

    /** {@return super-blocks a row} */
    final int blocks() {
        return blocks;
    }

    /** {@return how many groups the unit of group {@code g} holds: two where it is one of a pair, else one} */
    final int unitGroups(int g) {
        return (g | 1) < groups ? 2 : 1;
    }

    /** {@return group {@code g}'s place in its unit: 0, or 1 for the second of a pair} */
    final int placeInUnit(int g) {
        return unitGroups(g) == 2 ? g & 1 : 0;
    }

    /** {@return where the first super-block of the unit of group {@code g} starts} */
    final long unitStart(int g) {
        return Blocks.groupBlockOffset(g, 0, blocks, groups, true, groupBlockBytes)
                - (long) placeInUnit(g) * groupBlockBytes;
    }

    /** {@return the bytes from one super-block of the unit of group {@code g} to its next} */
    final long unitStride(int g) {
        return Blocks.groupBlockStride(g, groups, true, groupBlockBytes);
    }

    /**
     * Bytes of the file's rows packed between two releases of their pages ({@link #packUnits}). Reading 200 MB of a
     * mapping in 54 KB steps (a unit of two groups of Q6_K rows of 2,048 elements) and releasing each step, a harness's
     * file-backed resident memory ended at 134 MB (faults near a released range map its pages again; ext4, kernel
     * 6.18); releasing 430 KB at a time, 39 MB; 3.4 MB at a time, 28 MB, about what the JVM's own files hold.
     */
    private static final long RELEASE_BYTES = 4L << 20;

    /**
     * Packs every unit, in parallel (the common fork-join pool), a few MB of the file's rows at a time; where the
     * source is a read-only mapping, each such run's pages are let go ({@link MemorySegment#unload}) once it is packed.
     *
     * @return false if a super-block could not be packed ({@link #packBlock})
     */
    final boolean packUnits() {
        int units = (groups + 1) / 2;
        long unitBytes = 2L * GROUP * source().rowBytes();
        int run = (int) Math.max(1, RELEASE_BYTES / unitBytes);
        MemorySegment data = source().data();
        boolean release = data.isMapped() && data.isReadOnly();
        for (int from = 0; from < units; from += run) {
            int first = from;
            int count = Math.min(run, units - from);
            if (!Blocks.packGroups(count, k -> packUnit(2 * (first + k)))) {
                return false;
            }
            if (release) {
                long start = GROUP * 2L * first * source().rowBytes();
                long end = Math.min(data.byteSize(), start + count * unitBytes);
                data.asSlice(start, end - start).unload();
            }
        }
        return true;
    }

    private boolean packUnit(int g0) {
        int units = unitGroups(g0);
        int bytes = source().format().blockBytes();
        long rowBytes = source().rowBytes();
        byte[][] rows = new byte[GROUP][bytes];
        byte[] unit = new byte[units * groupBlockBytes];
        long start = unitStart(g0);
        long step = unitStride(g0);
        for (int b = 0; b < blocks; b++) {
            for (int u = 0; u < units; u++) {
                for (int l = 0; l < GROUP; l++) {
                    MemorySegment.copy(source().data(), Blocks.I8, (GROUP * (long) (g0 + u) + l) * rowBytes
                            + (long) b * bytes, rows[l], 0, bytes);
                }
                if (!packBlock(rows, units, u, unit)) {
                    return false;
                }
            }
            MemorySegment.copy(unit, 0, copy(), Blocks.I8, start + b * step, unit.length);
        }
        return true;
    }

    /**
     * Two groups of 16 rows a step, per super-block its four sections ({@link #section}), so that each activation is
     * broadcast once for 32 rows; an odd last group is computed as both of a step (the same bits twice).
     */
    @Override
    public final void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex) {
        Blocks.checkRowGroups(firstRow, rows, GROUP);
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g += 2) {
            boolean pair = g + 1 < end;
            int g2 = pair ? g + 1 : g;
            long step = unitStride(g);
            long step2 = unitStride(g2);
            int units = unitGroups(g);
            int units2 = unitGroups(g2);
            int u = placeInUnit(g);
            int u2 = placeInUnit(g2);
            long start = unitStart(g);
            long start2 = unitStart(g2);
            int at = outIndex + (g * GROUP - firstRow);
            int at2 = pair ? at + GROUP : at;
            Arrays.fill(out, at, at2 + GROUP, 0f);
            for (int b = 0; b < blocks; b++) {
                for (int s = 0; s < 4; s++) {
                    section(start + b * step, units, u, start2 + b * step2, units2, u2, prepared, b, s, out, at, at2);
                }
            }
        }
    }

    /**
     * One section (a quarter) of super-block {@code b} of two groups: its products added to the 16 rows' sums at {@code
     * out[at]} and {@code out[at2]} (the same index for a group computed as both: both sums are read before either is
     * stored). A method of its own, so that C2 compiles it whole, not on stack replacement inside {@link #dotRows}'
     * loops ({@link Q4KColumns} says what that cost).
     *
     * @param base     where group one's unit starts this super-block; {@code units} groups in it, the group {@code
     *                 u1}-th
     * @param units    groups in group one's unit
     * @param u1       group one's place in its unit
     * @param base2    the same for group two
     * @param units2   the same for group two
     * @param u2       the same for group two
     * @param prepared the activations as {@link #prepareFloats} laid them out
     * @param b        the super-block
     * @param s        the section
     * @param out      the products
     * @param at       group one's first product
     * @param at2      group two's first product
     */
    abstract void section(long base, int units, int u1, long base2, int units2, int u2, float[] prepared, int b, int s,
                          float[] out, int at, int at2);

    /** Each group's 16 rows, super-block by super-block ({@link #decodeBlock}). */
    @Override
    public final void decodeColumns(int firstRow, int rows, int fromCol, int cols, float[] dst, int dstOffset,
                                    int dstStride) {
        Blocks.checkColumns(this, firstRow, rows, fromCol, cols, dstStride);
        int qk = source().format().blockSize();
        for (int g = firstRow / GROUP, end = (firstRow + rows) / GROUP; g < end; g++) {
            long step = unitStride(g);
            int units = unitGroups(g);
            int u = placeInUnit(g);
            long start = unitStart(g);
            int rowAt = dstOffset + g * GROUP - firstRow;
            for (int b = fromCol / qk, last = (fromCol + cols) / qk; b < last; b++) {
                decodeBlock(start + b * step, units, u, dst, rowAt + (b * qk - fromCol) * dstStride, dstStride);
            }
        }
    }

    /**
     * Writes the weights of one super-block of one group, as the format's {@code decode} gives them: column {@code c}
     * of the super-block, row {@code l} of the group at {@code dst[at + c * dstStride + l]}.
     *
     * @param base      where the group's unit starts this super-block
     * @param units     groups in the unit
     * @param u         the group's place in it
     * @param dst       the panel
     * @param at        where the super-block's first column of the group's first row goes
     * @param dstStride floats from one column to the next
     */
    abstract void decodeBlock(long base, int units, int u, float[] dst, int at, int dstStride);

    /**
     * Lays out one super-block of 16 rows, the group {@code u}-th of a unit of {@code units}, into the unit's bytes.
     *
     * @param rows  the 16 rows' super-blocks as the file holds them
     * @param units groups in the unit
     * @param u     the group's place in it
     * @param unit  the unit's super-block, {@code units} times the group's bytes
     * @return false where the super-block cannot be packed (a factor infinite or NaN)
     */
    abstract boolean packBlock(byte[][] rows, int units, int u, byte[] unit);
}
