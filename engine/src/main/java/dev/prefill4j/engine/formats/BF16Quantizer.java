package dev.prefill4j.engine.formats;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/**
 * bfloat16 weights (GGUF type 30): the upper 16 bits of a binary32. Encoding follows ggml's
 * {@code ggml_compute_fp32_to_bf16} (ggml-impl.h): round to nearest even, NaN kept quiet.
 */
public final class BF16Quantizer implements Quantizer {
    @Override public String id() { return "bf16"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "bfloat16, GGUF type 30"; }
    @Override public int blockSize() { return 1; }
    @Override public int blockBytes() { return 2; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(30); }
    @Override public String activationFormat() { return "bf16"; }

    private static final VectorSpecies<Short> HALVES =
            VectorSpecies.of(short.class, VectorShape.forBitSize(FusedDot.FLOATS.length() * 16));
    private static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FusedDot.FLOATS.vectorShape());

    static float toFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    static short fromFloat(float f) {
        int bits = Float.floatToRawIntBits(f);
        if ((bits & 0x7FFFFFFF) > 0x7F800000) {
            return (short) ((bits >>> 16) | 64);
        }
        return (short) ((bits + (0x7FFF + ((bits >>> 16) & 1))) >>> 16);
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        // A bulk copy, then vectors: C2 left the scalar loop unvectorized (1.7 G weights/s in the dot product).
        short[] h = F16Quantizer.stage(src, offset, count);
        int i = 0;
        for (int step = FusedDot.FLOATS.length(); i + step <= count; i += step) {
            // Sign extension fills the bits that the shift then moves out: the same bits as zero extension.
            ((IntVector) ShortVector.fromArray(HALVES, h, i).convertShape(VectorOperators.S2I, INTS, 0))
                    .lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().intoArray(dst, dstOffset + i);
        }
        for (; i < count; i++) {
            dst[dstOffset + i] = toFloat(h[i]);
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        for (int i = 0; i < count; i++) {
            dst.set(Blocks.I16, offset + 2L * i, fromFloat(src[srcOffset + i]));
        }
    }

    /** Decoded a chunk at a time into L1 and multiplied with vectors ({@link FusedDot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return FusedDot.byDecoding(this, src, offset, x, xOffset, count);
    }
}
