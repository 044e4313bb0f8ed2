package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Optional;

/**
 * What both ternary formats share as quantizers: 256-element blocks with one fp16 scale, Q8_K activations (or, per
 * token, {@link Q8KTokenQuantizer}'s in the same layout), the two dot products over staged blocks ({@link
 * Ternary}) and, with 16 float lanes, the packed float dot of TQ2_0's layout ({@link #dotPacked}), with 32 short lanes
 * the integer dot of TQ2_0's layout ({@link #dotCodesRows}); a format supplies its layout.
 */
abstract sealed class TernaryQuantizer implements Quantizer permits TQ1_0Quantizer, TQ2_0Quantizer {
    @Override public final int blockSize() { return Ternary.QK; }
    @Override public final String activationFormat() { return "q8_k"; }
    @Override public final String tokenActivationFormat() { return Q8KTokenQuantizer.ID; }

    /** {@return the offset of the fp16 scale {@code d} within a block} */
    abstract int scaleAt();

    /** Writes the trits (0, 1, 2 for -1, 0, +1) of the staged block at {@code o} to {@code trits} in element order. */
    abstract void unpack(byte[] staged, int o, byte[] trits);

    /**
     * Computes the 32 int16 lanes {@link TernaryTable} keeps of one row's block at {@code offset}: lane {@code j}
     * holds the block's elements {@code 8j .. 8j + 7}, element {@code 8j + i}'s code at bits {@code 2i}. By default
     * the block is staged into {@code staged} ({@link #blockBytes()} bytes at least), unpacked into {@code trits}
     * (256) and the lanes put together from the codes.
     *
     * @return false if a code is 3, which {@link TernaryTable} does not pack
     */
    boolean packLanes(MemorySegment src, long offset, short[] lanes, byte[] staged, byte[] trits) {
        MemorySegment.copy(src, ValueLayout.JAVA_BYTE, offset, staged, 0, blockBytes());
        unpack(staged, 0, trits);
        for (int j = 0; j < 32; j++) {
            int lane = 0;
            for (int i = 0; i < 8; i++) {
                int c = trits[8 * j + i];
                if (c > 2) {
                    return false;
                }
                lane |= c << (2 * i);
            }
            lanes[j] = (short) lane;
        }
        return true;
    }

    /** With the packed dot, 272 floats a block ({@link Ternary#prepare}); otherwise none. */
    @Override
    public final int preparedActivations(int count) {
        int blocks = blocks(count);
        return Ternary.packed(count) ? blocks * Ternary.PREPARED_PER_BLOCK : 0;
    }

    @Override
    public final void prepareActivations(float[] x, int xOffset, int count, float[] prepared, int preparedOffset) {
        int blocks = blocks(count);
        if (Ternary.packed(count)) {
            Ternary.prepare(x, xOffset, blocks, prepared, preparedOffset);
        }
    }

    /**
     * Activations times the trits in vector lanes: where {@link Ternary#packed} prepared in a per-thread buffer for
     * {@link #dotPacked} ({@link Blocks#dotByPreparing}), otherwise {@link #dotRow}.
     */
    @Override
    public final float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return Ternary.packed(count) ? Blocks.dotByPreparing(this, src, offset, x, xOffset, count)
                : dotRow(src, offset, blocks(count), x, xOffset);
    }

    @Override
    public final float dotPrepared(MemorySegment src, long offset, float[] x, int xOffset, float[] prepared,
                                   int preparedOffset, int count) {
        int blocks = blocks(count);
        return Ternary.packed(count) ? dotPacked(src, offset, blocks, prepared, preparedOffset)
                : dotRow(src, offset, blocks, x, xOffset);
    }

    /**
     * The packed dot product ({@link TQ2_0Quantizer#dotPacked16}) of {@code blocks} blocks at {@code offset} with
     * activations {@link Ternary#prepare}d at {@code at}; both formats compute it by that one kernel, so they give the
     * same bits.
     */
    abstract float dotPacked(MemorySegment src, long offset, int blocks, float[] prepared, int at);

    /**
     * The float dot product of {@code blocks} blocks at {@code offset}; by default the row is staged into an array and
     * multiplied over its unpacked trits ({@link Ternary#dot}). A format that overrides it must add the same products
     * in the same order, so that both formats give the same bits.
     */
    float dotRow(MemorySegment src, long offset, int blocks, float[] x, int xOffset) {
        return Ternary.dot(Blocks.stage(src, offset, blocks * blockBytes()), blocks, this, x, xOffset);
    }

    @Override
    public final boolean hasEncodedDot() {
        return true;
    }

    /**
     * With 32 short lanes and activations in an array ({@link Blocks#heapBytes}), the integer kernel for one row
     * ({@link #dotCodesRows}); otherwise {@link #dotEncodedRow}.
     */
    @Override
    public final double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        int blocks = blocks(count);
        byte[] a = Ternary.CODES32 ? Blocks.heapBytes(act) : null;
        if (a == null) {
            return dotEncodedRow(src, offset, blocks, act, actOffset);
        }
        float[] one = Ternary.one();
        dotCodesRows(src, offset, 0, 1, blocks, a, Math.toIntExact(act.address() + actOffset), 0, 1, one, 0, 0);
        return one[0];
    }

    /**
     * The integer dot product of {@code blocks} blocks at {@code offset} with Q8_K activations; by default the row is
     * staged into an array and multiplied over its unpacked trits ({@link Ternary#dotQ8K}). A format that overrides it
     * must give the same value (the block sums are exact, so any order of the additions within a block does).
     */
    double dotEncodedRow(MemorySegment src, long offset, int blocks, MemorySegment act, long actOffset) {
        return Ternary.dotQ8K(Blocks.stage(src, offset, blocks * blockBytes()), blocks, this, act, actOffset);
    }

    /**
     * With 32 short lanes and activations in an array ({@link Blocks#heapBytes}), the integer kernel over the whole
     * tile in one call ({@link #dotCodesRows}); otherwise one {@link #dotEncoded} a product.
     */
    @Override
    public final void dotEncodedRows(MemorySegment src, long offset, long stride, int rows, MemorySegment act,
                                     long actOffset, long actStride, int actRows, int count, float[] out, int outIndex,
                                     int outStride) {
        int blocks = blocks(count);
        byte[] a = Ternary.CODES32 ? Blocks.heapBytes(act) : null;
        if (a == null) {
            Quantizer.super.dotEncodedRows(src, offset, stride, rows, act, actOffset, actStride, actRows, count, out,
                    outIndex, outStride);
            return;
        }
        dotCodesRows(src, offset, stride, rows, blocks, a, Math.toIntExact(act.address() + actOffset),
                Math.toIntExact(actStride), actRows, out, outIndex, outStride);
    }

    /**
     * The integer dot products of {@code rows} weight rows of {@code blocks} blocks, {@code stride} bytes apart, with
     * {@code actRows} rows of Q8_K activations at {@code a[at + i * actStride..]}, to {@code out[outIndex + i *
     * outStride + r]}, by TQ2_0's kernel ({@link TQ2_0Quantizer#dotCodes32}), each product as {@link #dotEncoded}
     * gives it: both formats the same bits.
     */
    abstract void dotCodesRows(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a, int at,
                               int actStride, int actRows, float[] out, int outIndex, int outStride);

    /**
     * With 32 short lanes, the matrix laid out for table lookups ({@link TernaryTable}): both formats pack to the same
     * bytes, so their decode steps give the same bits.
     */
    @Override
    public final Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        if (!w.format().id().equals(id())) {
            throw new IllegalArgumentException(w.name() + " is " + w.format().id() + ", not " + id());
        }
        return TernaryTable.pack(this, w, arena);
    }

    /**
     * True: a packed copy gives back each weight as {@code decode} does ({@link TernaryTable#decodeColumns}), so a
     * prompt's products may read it too, and the copy (2.125 bits a weight: TQ2_0's blocks take 2.0625, TQ1_0's
     * 1.6875) can take the place of the file's blocks in memory.
     */
    @Override
    public final boolean packedCopyDecodes() {
        return true;
    }

    /** {@return whole blocks in {@code count} elements} @throws IllegalArgumentException if not a multiple of 256 */
    final int blocks(int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        return count / Ternary.QK;
    }
}
