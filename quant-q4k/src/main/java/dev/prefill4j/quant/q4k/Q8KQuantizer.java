package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

/**
 * Q8_K (GGUF type 15), the format llama.cpp quantizes activations to before they meet K-quant weights: 256 int8
 * with an fp32 scale, 292 bytes: {@code d} f32 at 0, {@code qs[256]} at 4, sixteen int16 group sums at 260.
 * Encoder = ggml's {@code quantize_row_q8_K_ref}: {@code iscale = -127 / max} (signed value of largest magnitude),
 * {@code q = min(127, nearest_int(iscale * x))}, {@code d = 1 / iscale}.
 */
public final class Q8KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 292;

    @Override public String id() { return "q8_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "Q8_K: 256 x int8 + f32 scale, K-quant activation format, type 15"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(15); }
    @Override public String activationFormat() { return "q8_k"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = src.get(Blocks.F32, o);
            for (int j = 0; j < QK; j++) {
                dst[dstOffset + b * QK + j] = d * src.get(Blocks.I8, o + 4 + j);
            }
        }
    }

    /** Decoded a super-block at a time into L1 and multiplied with vectors ({@link KQuants#dot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return KQuants.dot(this, src, offset, x, xOffset, count);
    }

    /**
     * Activations are encoded for every projection of every step (4.5% of a prompt's time on the 1B TQ2_0 file with
     * {@code --activations quantized} in scalar code), so with 16 float lanes a block goes 16 elements at a time: the
     * products {@code iscale * x} as the scalar form computes them, rounded half to even by adding and subtracting
     * {@code 1.5 * 2^23} (exact for magnitudes below 2^22, and these are at most 127), each group of 16 codes summed
     * in int lanes. The same bytes as the scalar form (QuantizeTest and the kit compare them).
     */
    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            long o = offset + (long) b * BYTES;
            float max = VECTOR ? signedMax(src, base) : KQuants.signedMax(src, base, QK);
            float amax = Math.abs(max);
            if (amax == 0) {
                dst.asSlice(o, BYTES).fill((byte) 0);
                continue;
            }
            float iscale = -127f / max;
            if (VECTOR) {
                FloatVector scale = FloatVector.broadcast(FloatVector.SPECIES_512, iscale);
                FloatVector magic = FloatVector.broadcast(FloatVector.SPECIES_512, ROUNDING);
                IntVector top = IntVector.broadcast(IntVector.SPECIES_512, 127);
                for (int g = 0; g < 16; g++) {
                    IntVector q = ((IntVector) FloatVector.fromArray(FloatVector.SPECIES_512, src, base + 16 * g)
                            .mul(scale).add(magic).sub(magic)
                            .convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0)).min(top);
                    q.convertShape(VectorOperators.I2B, ByteVector.SPECIES_128, 0)
                            .intoMemorySegment(dst, o + 4 + 16L * g, ByteOrder.LITTLE_ENDIAN);
                    dst.set(Blocks.I16, o + 260 + 2L * g, (short) q.reduceLanes(VectorOperators.ADD));
                }
            } else {
                for (int j = 0; j < QK; j++) {
                    dst.set(Blocks.I8, o + 4 + j, (byte) Math.min(127, Blocks.nearestInt(iscale * src[base + j])));
                }
                for (int g = 0; g < 16; g++) {
                    int sum = 0;
                    for (int j = 0; j < 16; j++) {
                        sum += dst.get(Blocks.I8, o + 4 + 16 * g + j);
                    }
                    dst.set(Blocks.I16, o + 260 + 2L * g, (short) sum);
                }
            }
            dst.set(Blocks.F32, o, 1 / iscale);
        }
    }

    /**
     * {@return the block's value of largest magnitude, sign kept, the first of them where {@code +m} and {@code -m}
     * both occur} (the scalar scan's choice): the largest and smallest values by lane-wise max and min (exact in any
     * order), a scan only where both reach the magnitude. A NaN is passed over, as by the scan ({@code ax > amax} is
     * false); the engine refuses non-finite activations before they are encoded.
     */
    private static float signedMax(float[] src, int base) {
        var f = FloatVector.SPECIES_512;
        FloatVector hi = FloatVector.fromArray(f, src, base);
        FloatVector lo = hi;
        for (int j = 16; j < QK; j += 16) {
            FloatVector v = FloatVector.fromArray(f, src, base + j);
            hi = hi.max(v);
            lo = lo.min(v);
        }
        float top = hi.reduceLanes(VectorOperators.MAX);
        float bottom = lo.reduceLanes(VectorOperators.MIN);
        if (Float.isNaN(top) || Float.isNaN(bottom) || top == -bottom) {
            return KQuants.signedMax(src, base, QK);
        }
        return top > -bottom ? Math.max(top, 0) : Math.min(bottom, 0);
    }

    /** Whether {@link #encode} takes 16 elements at a time (16 float lanes). */
    private static final boolean VECTOR = FloatVector.SPECIES_PREFERRED.length() >= 16;
    /** {@code 1.5 * 2^23}: added to and subtracted from a float below 2^22 in magnitude, it rounds half to even. */
    private static final float ROUNDING = 12582912f;
}
