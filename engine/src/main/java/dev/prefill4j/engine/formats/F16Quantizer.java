package dev.prefill4j.engine.formats;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Optional;
import java.util.OptionalInt;

/**
 * IEEE binary16 weights (GGUF type 1). Encoding rounds to nearest even, as ggml's
 * {@code ggml_compute_fp32_to_fp16} does (FORMATS.md §0); {@link Float#floatToFloat16} matches it.
 */
public final class F16Quantizer implements Quantizer {
    @Override public String id() { return "f16"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "IEEE float16, GGUF type 1"; }
    @Override public int blockSize() { return 1; }
    @Override public int blockBytes() { return 2; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(1); }
    @Override public String activationFormat() { return "f16"; }

    /** Per-thread staging for bulk copies; decoding a GEMM tile must not allocate. */
    private static final ThreadLocal<short[]> STAGE = ThreadLocal.withInitial(() -> new short[0]);

    /** {@return {@code count} 16-bit values from {@code offset} of {@code src}, in a per-thread array} */
    static short[] stage(MemorySegment src, long offset, int count) {
        short[] h = STAGE.get();
        if (h.length < count) {
            h = new short[count];
            STAGE.set(h);
        }
        MemorySegment.copy(src, Blocks.I16, offset, h, 0, count);
        return h;
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        // A bulk copy, then a plain array loop that C2 vectorizes with the float16 conversion instruction.
        short[] h = stage(src, offset, count);
        for (int i = 0; i < count; i++) {
            dst[dstOffset + i] = Float.float16ToFloat(h[i]);
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        for (int i = 0; i < count; i++) {
            dst.set(Blocks.I16, offset + 2L * i, Float.floatToFloat16(src[srcOffset + i]));
        }
    }

    /** Read straight from {@code src} and multiplied with vectors ({@link FusedDot#f16}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return FusedDot.f16(this, src, offset, x, xOffset, count);
    }

    /** Four rows at a time where vectors have 16 float lanes ({@link FusedDot#f16Rows}); each row's bits as {@link #dot}'s. */
    @Override
    public void dotPreparedRows(MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                                float[] prepared, int preparedOffset, int count, float[] out, int outIndex) {
        FusedDot.f16Rows(this, src, offset, stride, rows, x, xOffset, count, out, outIndex);
    }

    /**
     * {@return the matrix's own rows, checked once for infinities and NaN, for decode steps ({@link FiniteF16Rows}:
     * nothing is copied, {@code arena} is not used), or empty where a weight is an infinity or a NaN (its rows then
     * go through {@link #dot}, which finds such values) or vectors are too narrow for the in-place kernel}
     * The check reads the whole matrix once, at its first decode step.
     */
    @Override
    public Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        if (!FusedDot.f16InPlace() || !FusedDot.f16AllFinite(w.data().asSlice(0, w.rowBytes() * w.rows()))) {
            return Optional.empty();
        }
        return Optional.of(new FiniteF16Rows(w));
    }
}
