package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;

/**
 * A base for packed copies that take float32 activations only ({@link #preparedBytes()} 0): it holds the source and
 * the copy's bytes, and products with encoded activations read the source, as {@link PackedMatrix} says of such
 * copies. A format's copy extends it and adds its layout's kernels ({@link #prepareFloats}, {@link #dotRows}, and
 * {@link #decodeColumns} where its {@link Quantizer#packedCopyDecodes()} is true).
 *
 * @since 1.11
 */
@Api.Experimental
public abstract class FloatPackedMatrix implements PackedMatrix {
    private final WeightMatrix source;
    private final MemorySegment copy;
    private final int rowGroup;

    /**
     * @param source   the matrix this is a copy of
     * @param copy     the copy's bytes, in the arena {@link Quantizer#packForDecode} was given
     * @param rowGroup rows the kernels compute together ({@link #rowGroup()})
     */
    protected FloatPackedMatrix(WeightMatrix source, MemorySegment copy, int rowGroup) {
        this.source = source;
        this.copy = copy;
        this.rowGroup = rowGroup;
    }

    /** {@return the copy's bytes} */
    protected final MemorySegment copy() {
        return copy;
    }

    @Override
    public final WeightMatrix source() {
        return source;
    }

    @Override
    public final int rowGroup() {
        return rowGroup;
    }

    @Override
    public long byteSize() {
        return copy.byteSize();
    }

    /** 0: this copy serves float32 activations only; products with encoded activations read the source. */
    @Override
    public final int preparedBytes() {
        return 0;
    }

    /** @throws UnsupportedOperationException always: see {@link #preparedBytes()} */
    @Override
    public final void prepareActivations(MemorySegment act, long actOffset, byte[] prepared) {
        throw floatsOnly();
    }

    /** @throws UnsupportedOperationException always: see {@link #preparedBytes()} */
    @Override
    public final void dotEncodedRows(int firstRow, int rows, byte[] prepared, float[] out, int outIndex) {
        throw floatsOnly();
    }

    private UnsupportedOperationException floatsOnly() {
        return new UnsupportedOperationException(source.format().id()
                + "'s packed copy takes float32 activations only");
    }
}
