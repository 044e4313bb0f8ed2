package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;

/**
 * A copy of a weight matrix that its format laid out again for the products of decode steps, one activation row at a
 * time, made by {@link Quantizer#packForDecode}: with activations still encoded in the format's {@linkplain
 * Quantizer#activationFormat() activation format} or its {@linkplain Quantizer#tokenActivationFormat() per-token one}
 * where {@link #preparedBytes()} is not 0, and with float32 activations where {@link #preparedFloats()} is not 0 (at
 * least one of the two). A format offers one where a layout other than the file's lets its kernel do less work per
 * weight: the ternary formats put {@link #rowGroup()} rows side by side, so that one table lookup serves that many
 * rows at once; Q4_0 puts 16 rows in the float lanes of a vector. It may also be no copy at all ({@link #byteSize()}
 * 0) but the source's own bytes with something the format checked once: F16 finds a matrix free of infinities and
 * NaN, so that its kernel need not look for them in every vector of every product.
 *
 * <p>A product is computed in two steps: {@link #prepareActivations} (or {@link #prepareFloats}) derives what the
 * kernel reads from the activation row, once for all rows, into the caller's buffer, and {@link #dotEncodedRows} (or
 * {@link #dotRows}) computes runs of whole row groups from it, from as many threads at once as the caller likes. The
 * products equal the source format's {@link Quantizer#dotEncoded} (or {@link Quantizer#dot}) to float rounding, not
 * necessarily to the bit; the plugin author's test kit compares them with FP64.
 *
 * <p>The copy lives in the arena given to {@link Quantizer#packForDecode}; the source stays valid and is what every
 * other product reads (and what a view reads too, so the source's bytes must not change while it is in use). Where
 * the format's {@link Quantizer#packedCopyDecodes()} is true, the copy also gives the weights back as floats ({@link
 * #decodeColumns}), so that a device may read it for a prompt's products too and leave the source unread.
 *
 * @since 1.7
 */
@Api.Experimental
public interface PackedMatrix {
    /** {@return the matrix this is a copy of} */
    WeightMatrix source();

    /**
     * {@return how many rows the kernels compute together: the runs of {@link #dotEncodedRows} and {@link #dotRows}
     * start at multiples of it and hold whole multiples of it}
     */
    int rowGroup();

    /** {@return bytes the copy takes; 0 where it is a view of the source's bytes} */
    long byteSize();

    /**
     * {@return floats {@link #prepareFloats} writes for one activation row of float32 activations, or 0 where this copy
     * serves encoded activations only}
     */
    int preparedFloats();

    /**
     * Derives what {@link #dotRows} reads from one row of {@code source().cols()} float32 activations.
     *
     * @param x        the activations
     * @param xOffset  index of the row's first element
     * @param prepared where it goes, at least {@link #preparedFloats()} long, from index 0
     * @throws UnsupportedOperationException if {@link #preparedFloats()} is 0
     */
    void prepareFloats(float[] x, int xOffset, float[] prepared);

    /**
     * {@code out[outIndex + i]} gets the product of row {@code firstRow + i} with the float32 activation row {@link
     * #prepareFloats} prepared, for {@code i < rows}: the source format's {@link Quantizer#dot} to float rounding.
     *
     * @param firstRow the first row, a multiple of {@link #rowGroup()}
     * @param rows     how many rows, a multiple of {@link #rowGroup()}
     * @param prepared what {@link #prepareFloats} wrote
     * @param out      where the products go
     * @param outIndex index of the first product
     * @throws IllegalArgumentException if {@code firstRow} or {@code rows} is not a multiple of {@link #rowGroup()}
     * @throws UnsupportedOperationException if {@link #preparedFloats()} is 0
     */
    void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex);

    /**
     * {@return bytes {@link #prepareActivations} writes for one activation row, or 0 where this copy serves float32
     * activations only} With 0, {@link #preparedFloats()} is not 0, {@link #prepareActivations} and {@link
     * #dotEncodedRows} throw {@link UnsupportedOperationException}, and products with encoded activations read the
     * source (since 1.9).
     */
    int preparedBytes();

    /**
     * Derives what {@link #dotEncodedRows} reads from one activation row of {@code source().cols()} elements.
     *
     * @param act       the encoded activations
     * @param actOffset byte offset of the row's first block
     * @param prepared  where it goes, at least {@link #preparedBytes()} long, from index 0
     */
    void prepareActivations(MemorySegment act, long actOffset, byte[] prepared);

    /**
     * {@code out[outIndex + i]} gets the product of row {@code firstRow + i} with the prepared activation row, for
     * {@code i < rows}.
     *
     * @param firstRow the first row, a multiple of {@link #rowGroup()}
     * @param rows     how many rows, a multiple of {@link #rowGroup()}
     * @param prepared what {@link #prepareActivations} wrote
     * @param out      where the products go
     * @param outIndex index of the first product
     * @throws IllegalArgumentException if {@code firstRow} or {@code rows} is not a multiple of {@link #rowGroup()}
     */
    void dotEncodedRows(int firstRow, int rows, byte[] prepared, float[] out, int outIndex);

    /**
     * Writes the weights of rows {@code firstRow .. firstRow + rows} and columns {@code fromCol .. fromCol + cols} as
     * float32, column after column: row {@code firstRow + r}'s element {@code fromCol + c} to {@code dst[dstOffset + c
     * * dstStride + r]}, the value the source format's {@link Quantizer#decode} gives it, bit for bit. It is the
     * transposed panel a prompt's GEMM multiplies, so a copy laid out in groups of rows writes it without a transpose.
     *
     * @param firstRow  the first row, a multiple of {@link #rowGroup()}
     * @param rows      how many rows, a multiple of {@link #rowGroup()}, at most {@code dstStride}
     * @param fromCol   the first column, a multiple of the source format's block size
     * @param cols      how many columns, a multiple of the source format's block size
     * @param dst       where the weights go
     * @param dstOffset index of row {@code firstRow}'s element {@code fromCol}
     * @param dstStride floats from one column to the next
     * @throws IllegalArgumentException if the rows are not whole groups or the columns not whole blocks
     * @throws UnsupportedOperationException where the format's {@link Quantizer#packedCopyDecodes()} is false (the
     *                                       default)
     * @since 1.8
     */
    default void decodeColumns(int firstRow, int rows, int fromCol, int cols, float[] dst, int dstOffset,
                               int dstStride) {
        throw new UnsupportedOperationException(source().format().id() + "'s packed copy does not decode");
    }
}
