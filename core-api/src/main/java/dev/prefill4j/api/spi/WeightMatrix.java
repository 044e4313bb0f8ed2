package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * A weight matrix as a backend sees it: {@code rows} output features, each a contiguous encoded row of
 * {@code cols} input features in {@code format}. This is GGUF's layout ({@code ne[0] = cols}) and PyTorch's
 * {@code (out, in)} row-major layout.
 *
 * @param name   the tensor's name, for error messages
 * @param format the format the rows are encoded in
 * @param data   the encoded rows, {@code rows * format.byteSize(cols)} bytes from offset 0; not copied
 * @param rows   output features
 * @param cols   input features, a multiple of {@code format.blockSize()}
 * @since 0.1
 */
@Api.Stable
public record WeightMatrix(String name, Quantizer format, MemorySegment data, int rows, int cols) {
    /** Checks that the data holds the whole matrix. */
    public WeightMatrix {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(format, "format");
        Objects.requireNonNull(data, "data");
        if (rows <= 0 || cols <= 0) {
            throw new IllegalArgumentException(name + ": bad shape " + rows + "x" + cols);
        }
        long need = format.byteSize(cols) * rows;
        if (data.byteSize() < need) {
            throw new IllegalArgumentException(
                    name + ": " + data.byteSize() + " bytes hold less than " + rows + "x" + cols + " " + format.id());
        }
    }

    /** {@return bytes per encoded row} */
    public long rowBytes() {
        return format.byteSize(cols);
    }
}
