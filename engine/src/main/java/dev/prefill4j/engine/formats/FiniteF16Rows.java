package dev.prefill4j.engine.formats;

import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.MemorySegment;

/**
 * An F16 matrix found once to hold no infinity or NaN ({@link FusedDot#f16AllFinite}), for decode steps' products:
 * not a copy ({@link #byteSize()} 0) but the file's rows themselves, which {@link FusedDot#f16RowsScaled} then reads
 * without the per-vector check that {@link FusedDot#f16} needs to catch such values, and with the activations
 * prepared times 2^112 in place of a multiplication per weight vector. Each product has the bits of {@link
 * F16Quantizer#dot}. Activations of magnitude 2^16 or more (or not finite) cannot be scaled exactly; a row of them is
 * prepared as it is and multiplied by {@link FusedDot#f16Rows}, the file path's kernel.
 */
final class FiniteF16Rows implements PackedMatrix {
    /** Activations below this magnitude scale by 2^112 exactly: the largest product stays under 2^128. */
    private static final float SCALABLE = 0x1p16f;

    private final WeightMatrix source;

    /** @param source an F16 matrix with no infinity or NaN */
    FiniteF16Rows(WeightMatrix source) {
        this.source = source;
    }

    @Override
    public WeightMatrix source() {
        return source;
    }

    /** {@return 1: any run of rows; the kernel groups four rows of a run itself} */
    @Override
    public int rowGroup() {
        return 1;
    }

    /** {@return 0: nothing is copied} */
    @Override
    public long byteSize() {
        return 0;
    }

    /** {@return the row's length and one float that says whether the row was scaled} */
    @Override
    public int preparedFloats() {
        return source.cols() + 1;
    }

    @Override
    public void prepareFloats(float[] x, int xOffset, float[] prepared) {
        int k = source.cols();
        boolean scalable = true;
        for (int i = 0; i < k; i++) {
            scalable &= Math.abs(x[xOffset + i]) < SCALABLE; // false for infinities and NaN
        }
        float scale = scalable ? 0x1p112f : 1f;
        for (int i = 0; i < k; i++) {
            prepared[i] = x[xOffset + i] * scale;
        }
        prepared[k] = scalable ? 1f : 0f;
    }

    @Override
    public void dotRows(int firstRow, int rows, float[] prepared, float[] out, int outIndex) {
        int k = source.cols();
        long rowBytes = source.rowBytes();
        if (prepared[k] == 1f) {
            FusedDot.f16RowsScaled(source.data(), firstRow * rowBytes, rowBytes, rows, prepared, 0, k, out, outIndex);
        } else {
            FusedDot.f16Rows(source.format(), source.data(), firstRow * rowBytes, rowBytes, rows, prepared, 0, k, out,
                    outIndex);
        }
    }

    /** {@return 0: F16 has no encoded activations} */
    @Override
    public int preparedBytes() {
        return 0;
    }

    /** @throws UnsupportedOperationException always: F16 has no encoded activations */
    @Override
    public void prepareActivations(MemorySegment act, long actOffset, byte[] prepared) {
        throw new UnsupportedOperationException("f16 has no encoded activations");
    }

    /** @throws UnsupportedOperationException always: F16 has no encoded activations */
    @Override
    public void dotEncodedRows(int firstRow, int rows, byte[] prepared, float[] out, int outIndex) {
        throw new UnsupportedOperationException("f16 has no encoded activations");
    }
}
