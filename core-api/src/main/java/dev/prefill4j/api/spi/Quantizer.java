package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * One weight format: its identity and block geometry, the reference encoder, and the decoders the kernels
 * use.
 *
 * <p>A format stores a row of {@code n} weights as {@code n / blockSize()} consecutive blocks of
 * {@code blockBytes()} bytes; {@code n} is always a multiple of {@code blockSize()}. Offsets are byte offsets
 * into a {@link MemorySegment} (usually a read-only mapping of the model file) and need not be aligned.
 *
 * <p><b>How backends use it.</b> The CPU backend's GEMM calls {@link #decode} once per weight tile into a small
 * float buffer and reuses that tile across many activation rows; for one activation row (decode) it calls the
 * fused {@link #dot} (or {@link #dotPrepared}, with what {@link #prepareActivations} derived from the activation row
 * once). Adding a format therefore never touches a backend.
 *
 * <p><b>Threading.</b> Implementations are stateless and thread-safe: every method may be called from many
 * threads at once and must not allocate on the heap per call beyond what escape analysis removes.
 *
 * <p><b>Errors.</b> Arguments out of range throw {@link IndexOutOfBoundsException} (from the segment or array
 * access); a {@code count} that is not a multiple of the block size throws {@link IllegalArgumentException}.
 *
 * @since 0.1
 */
@Api.Stable
public interface Quantizer extends Plugin {
    /** {@return elements per block} (1 for plain float formats) */
    int blockSize();

    /** {@return bytes per block} */
    int blockBytes();

    /** {@return storage cost in bits per weight, including scales} */
    default double bitsPerWeight() {
        return 8.0 * blockBytes() / blockSize();
    }

    /** {@return the GGUF ({@code ggml_type}) id this format reads and writes, if it has one} */
    OptionalInt ggufType();

    /**
     * {@return the id of the format activations are rounded to before they meet this format's weights when the
     * engine runs with quantized activations}: what llama.cpp does inside its dot products ({@code
     * q8_0-activations}, Q8_0 rounded as llama.cpp's x86 code rounds activations, for Q4_0/Q5_0/Q8_0 weights;
     * {@code q8_k} for the K-quants; {@code f16} for F16 weights). The default, {@code f32}, leaves activations as
     * they are.
     */
    default String activationFormat() {
        return "f32";
    }

    /**
     * {@return the id of the format activations are rounded to before they meet this format's weights when the
     * engine runs with per-token activations}: BitNet b1.58's int8 activations with one absmax scale per token, for
     * formats made for models trained that way ({@code q8_k-token} for the ternary formats). A format named here
     * must have the layout of {@link #activationFormat()}, so that {@link #dotEncoded} reads either. The default,
     * {@code f32}, leaves activations as they are.
     */
    default String tokenActivationFormat() {
        return "f32";
    }

    /**
     * {@return bytes needed for {@code count} elements}
     *
     * @param count element count, a multiple of {@link #blockSize()}
     * @throws IllegalArgumentException if {@code count} is not a multiple of the block size
     */
    default long byteSize(long count) {
        if (count < 0 || count % blockSize() != 0) {
            throw new IllegalArgumentException(
                    id() + ": " + count + " elements is not a multiple of the block size " + blockSize());
        }
        return count / blockSize() * blockBytes();
    }

    /**
     * Decodes {@code count} elements stored from byte {@code offset} of {@code src} into
     * {@code dst[dstOffset .. dstOffset + count)}.
     *
     * @param src       the encoded data
     * @param offset    byte offset of the first block
     * @param dst       where the floats go
     * @param dstOffset first index written
     * @param count     elements to decode, a multiple of {@link #blockSize()}
     */
    void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count);

    /**
     * The reference quantizer: encodes {@code count} floats into blocks at byte {@code offset} of {@code dst}.
     * Where the ecosystem has a tool for the format, the bytes equal what that tool writes for the same input.
     *
     * @param src       the floats
     * @param srcOffset first index read
     * @param count     elements to encode, a multiple of {@link #blockSize()}
     * @param dst       writable destination
     * @param offset    byte offset of the first block written
     */
    void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset);

    /**
     * The fused dot product used for one activation row: {@code sum(decode(src)[i] * x[xOffset + i])} over
     * {@code count} elements, without materialising the decoded row.
     *
     * @param src     the encoded data
     * @param offset  byte offset of the first block
     * @param x       the activations
     * @param xOffset index of the first activation
     * @param count   elements, a multiple of {@link #blockSize()}
     * @return the dot product in float precision
     */
    float dot(MemorySegment src, long offset, float[] x, int xOffset, int count);

    /**
     * {@return how many floats {@link #prepareActivations} derives from {@code count} activations for {@link
     * #dotPrepared}; 0, the default, for a format that needs nothing prepared} Some formats' dot products need sums
     * that depend on the activations only, such as the K-quants' sums of each sub-block's activations for their
     * minimum terms; computed inside {@link #dot}, every weight row recomputes them. A backend that multiplies one
     * activation row with many weight rows prepares the row once and calls {@link #dotPrepared} instead.
     *
     * @param count elements of the activation row, a multiple of {@link #blockSize()}
     * @since 1.1
     */
    default int preparedActivations(int count) {
        return 0;
    }

    /**
     * Derives from {@code count} activations at {@code x[xOffset..]} the data {@link #dotPrepared} reads, into
     * {@code prepared[preparedOffset .. + preparedActivations(count))}. Only called when {@link #preparedActivations}
     * is positive; the layout is the format's own.
     *
     * @param x              the activations
     * @param xOffset        index of the first activation
     * @param count          elements, a multiple of {@link #blockSize()}
     * @param prepared       where the derived data goes
     * @param preparedOffset first index written
     * @since 1.1
     */
    default void prepareActivations(float[] x, int xOffset, int count, float[] prepared, int preparedOffset) {
    }

    /**
     * {@link #dot} with the activations' prepared data ({@link #prepareActivations} of the same {@code x}, {@code
     * xOffset} and {@code count}): the same product, to the same tolerance. The default ignores {@code prepared}.
     *
     * @param src            the encoded data
     * @param offset         byte offset of the first block
     * @param x              the activations
     * @param xOffset        index of the first activation
     * @param prepared       the prepared data
     * @param preparedOffset index of its first element
     * @param count          elements, a multiple of {@link #blockSize()}
     * @return the dot product in float precision
     * @since 1.1
     */
    default float dotPrepared(MemorySegment src, long offset, float[] x, int xOffset, float[] prepared,
                              int preparedOffset, int count) {
        return dot(src, offset, x, xOffset, count);
    }

    /**
     * {@link #dotPrepared} for {@code rows} weight rows, at {@code offset}, {@code offset + stride}, ..., with the same
     * activations: {@code out[outIndex + r]} gets the bits {@code dotPrepared} gives row {@code r}. A format may
     * override it to multiply several rows in one loop, each activation vector loaded once for all of them: with long
     * rows (a Llama FFN's down projection, 8,192 elements) a row's weights and the activations as floats together
     * overflow a 48 KiB L1, so a one-row dot reads its activations from L2 again for every row. The default makes
     * one call per row.
     *
     * @param src            the encoded data
     * @param offset         byte offset of the first row's first block
     * @param stride         bytes from one row to the next
     * @param rows           how many rows
     * @param x              the activations
     * @param xOffset        index of the first activation
     * @param prepared       the prepared data ({@link #prepareActivations})
     * @param preparedOffset index of its first element
     * @param count          elements of each row, a multiple of {@link #blockSize()}
     * @param out            where the products go
     * @param outIndex       index of the first row's product
     * @since 1.2
     */
    @Api.Experimental
    default void dotPreparedRows(MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                                 float[] prepared, int preparedOffset, int count, float[] out, int outIndex) {
        for (int r = 0; r < rows; r++) {
            out[outIndex + r] = dotPrepared(src, offset + r * stride, x, xOffset, prepared, preparedOffset, count);
        }
    }

    /**
     * {@return whether this format implements {@link #dotEncoded}}: a dot product with activations that are still
     * encoded in {@link #activationFormat()}, in integer arithmetic within each block, as llama.cpp's CPU dot
     * products compute it. The engine then hands quantized activations over encoded instead of rounding them to
     * floats and using {@link ComputeDevice#matmulExact}. The default is {@code false}.
     */
    default boolean hasEncodedDot() {
        return false;
    }

    /**
     * {@return whether {@link #dotEncoded} with activations in {@link #activationFormat()} is the exact dot product of
     * the decoded weights and decoded activations, up to double rounding}: both formats' decoders are exact in float
     * (a level times a scale that fit 24 bits together, as Q8_0's int8 code times its fp16 scale), each block's integer
     * sum is exact and the blocks are added in double. Any order of summation in double then gives the same float
     * after rounding, except within a few double ulps of a rounding boundary, so the engine may compute a product of
     * many activation rows as {@link ComputeDevice#matmulExact} over the decoded rows (a GEMM in double, on the CPU
     * device) and a decode step as {@link #dotEncoded}, and a prompt gives the same logits whatever its chunks. The
     * test kit checks the claim against FP64 to {@code 2^-40} of the products' magnitude. The default is {@code
     * false}: formats whose activation scale is a float32 (Q8_K), or that add blocks in float lanes.
     *
     * @since 1.5
     */
    @Api.Experimental
    default boolean encodedDotIsExact() {
        return false;
    }

    /**
     * The dot product of {@code count} weights with {@code count} activations encoded in the format named by
     * {@link #activationFormat()} (or by {@link #tokenActivationFormat()}, which has its layout): {@code sum(decode(src)[i] * decodeActivations(act)[i])}. Within a block the
     * products of the integer codes are summed exactly; each block's integer sum is multiplied by its two scales and
     * the blocks are added either in double (the result then differs from the exact dot product of the decoded values
     * by double rounding only) or in float lanes, as llama.cpp's x86 kernels add them (one float rounding per block
     * and lane); the format's documentation says which. The engine hands activations over in a heap segment over a
     * {@code byte[]} ({@link Blocks#heapBytes}); other segments must work too. Only called when {@link
     * #hasEncodedDot()} is {@code true}.
     *
     * @param src       the encoded weights
     * @param offset    byte offset of the first weight block
     * @param act       the encoded activations
     * @param actOffset byte offset of the first activation block
     * @param count     elements, a multiple of both formats' block sizes
     * @return the dot product in double precision
     * @throws UnsupportedOperationException if {@link #hasEncodedDot()} is {@code false}
     */
    default double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        throw new UnsupportedOperationException(id() + " has no dot product over encoded activations");
    }

    /**
     * {@link #dotEncoded} for a tile: {@code rows} weight rows, at {@code offset}, {@code offset + stride}, ..., times
     * {@code actRows} rows of encoded activations, at {@code actOffset}, {@code actOffset + actStride}, ...: {@code
     * out[outIndex + i * outStride + r]} gets {@code (float) dotEncoded(weight row r, activation row i)}, the same
     * bits. A format may override it to run the tile in one loop, so that what a call costs beyond its blocks (checks
     * of the activations' bounds, reading their array out of the segment, the final sum of the lanes) is paid once
     * for many rows (decode steps have rows of a few blocks: 2,048 elements are eight Q8_K blocks), and so that a
     * block of weights, unpacked once, meets several activation rows (prefill). The default makes one call per
     * product. Only called when {@link #hasEncodedDot()} is {@code true}.
     *
     * @param src       the encoded weights
     * @param offset    byte offset of the first weight row's first block
     * @param stride    bytes from one weight row to the next
     * @param rows      how many weight rows
     * @param act       the encoded activations
     * @param actOffset byte offset of the first activation row's first block
     * @param actStride bytes from one activation row to the next
     * @param actRows   how many activation rows
     * @param count     elements of each row, a multiple of both formats' block sizes
     * @param out       where the products go
     * @param outIndex  index of the first product
     * @param outStride distance in {@code out} from one activation row's products to the next
     * @throws UnsupportedOperationException if {@link #hasEncodedDot()} is {@code false}
     * @since 1.4
     */
    @Api.Experimental
    default void dotEncodedRows(MemorySegment src, long offset, long stride, int rows, MemorySegment act,
                                long actOffset, long actStride, int actRows, int count, float[] out, int outIndex,
                                int outStride) {
        for (int i = 0; i < actRows; i++) {
            for (int r = 0; r < rows; r++) {
                out[outIndex + i * outStride + r] = (float) dotEncoded(src, offset + r * stride, act,
                        actOffset + i * actStride, count);
            }
        }
    }

    /**
     * {@return a copy of {@code w} (a matrix in this format) laid out for decode steps' products (one activation row),
     * in {@code arena}, or empty where this format has no such layout or {@code w} does not fit it} A device that
     * calls it keeps the copy for the decode steps ({@link PackedMatrix}) and reads {@code w} for everything else, so
     * the copy adds its {@link PackedMatrix#byteSize()} to the process's memory (0 for a view of {@code w}'s own
     * bytes). The default is empty.
     *
     * @param w     the matrix, in this format
     * @param arena where the copy is allocated: one that several threads may use (shared or global), since the copy
     *              may be written and is read by many
     * @since 1.7
     */
    @Api.Experimental
    default Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        return Optional.empty();
    }

    /**
     * {@return whether the copies {@link #packForDecode} makes can stand in for their matrix in every product with
     * float32 activations, a prompt's included}: they give back the source's weights bit for bit ({@link
     * PackedMatrix#decodeColumns}) as well as their decode steps' products. A device may then make a matrix's copy
     * before its first product of any kind, read only the copy for those products, and let the source's pages go
     * where the source is a read-only mapping of a file ({@link MemorySegment#unload()}): the copy then takes the
     * place of the file's pages in the process's memory instead of adding to them. The default is {@code false}.
     *
     * @since 1.8
     */
    @Api.Experimental
    default boolean packedCopyDecodes() {
        return false;
    }
}
