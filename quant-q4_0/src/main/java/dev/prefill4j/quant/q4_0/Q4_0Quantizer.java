package dev.prefill4j.quant.q4_0;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

/**
 * GGUF Q4_0 (type 2): 32 weights in 18 bytes, {@code d} fp16 at 0, {@code qs[16]} at 2. Byte {@code qs[j]} holds
 * element {@code j} in its low nibble and element {@code j+16} in its high nibble; {@code y = (q - 8) * d}
 * (FORMATS.md §1).
 *
 * <p>Encoder = ggml's {@code quantize_row_q4_0_ref}: {@code max} is the signed value of largest magnitude (first
 * wins), {@code d = max / -8}, {@code q = min(15, (int)(x / d + 8.5))} with C's truncating cast, the reciprocal
 * taken from the fp32 {@code d}.
 */
public final class Q4_0Quantizer implements Quantizer {
    /** Float lanes of the decoder, at most 16 (half a block); bytes in vectors with as many lanes. */
    static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED.length() > 16
            ? FloatVector.SPECIES_512 : FloatVector.SPECIES_PREFERRED;
    static final VectorSpecies<Byte> BYTES_PER_LANE =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(FLOATS.length() * 8));
    static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    static final int QK = 32;
    static final int BYTES = 18;

    @Override public String id() { return "q4_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q4_0: 32 x 4-bit + fp16 scale, 4.5 bits/weight, type 2"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(2); }
    @Override public String activationFormat() { return "q8_0-activations"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES + 2;
            float d = Blocks.fp16(b, o - 2);
            int base = dstOffset + k * QK;
            for (int j = 0; j < 16; j += FLOATS.length()) {
                // Widened to ints first, as in dot: cheaper than splitting and converting bytes.
                IntVector q = (IntVector) ByteVector.fromArray(BYTES_PER_LANE, b, o + j)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
                ((FloatVector) q.and(0x0F).sub(8).convert(VectorOperators.I2F, 0)).mul(d).intoArray(dst, base + j);
                ((FloatVector) q.lanewise(VectorOperators.LSHR, 4).sub(8).convert(VectorOperators.I2F, 0)).mul(d)
                        .intoArray(dst, base + 16 + j);
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            float d = signedAbsMax(src, base) / -8f;
            float id = d != 0 ? 1f / d : 0f;
            long o = offset + (long) b * BYTES;
            Blocks.fp16(dst, o, d);
            for (int j = 0; j < 16; j++) {
                // (int8_t)(x + 8.5f) truncates toward zero, then MIN(15, ...).
                int q0 = Math.min(15, (byte) (int) (src[base + j] * id + 8.5f));
                int q1 = Math.min(15, (byte) (int) (src[base + j + 16] * id + 8.5f));
                dst.set(Blocks.I8, o + 2 + j, (byte) ((q0 & 0xFF) | (q1 << 4)));
            }
        }
    }

    /**
     * Vectorized and fused: per block, the nibbles are widened to ints and converted to floats in registers and
     * multiplied with the activations; the block sum is scaled by {@code d} into one of two accumulators (even and
     * odd blocks, two independent chains), whose lanes are added in a fixed order at the end. Widening bytes to ints
     * before splitting the nibbles measured 1.4x faster than splitting them as bytes (no byte shifts on x86); widening
     * with zero extension (the high nibble is then a plain shift, no mask) and a loop over pairs of blocks, whose
     * indices the JIT proves in bounds once, measured 1.11x faster again per 2,048-element row (1.26x together with
     * the single 16-bit load of {@link Blocks#fp16(byte[], int)}), with the same bits.
     */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        FloatVector even = FloatVector.zero(FLOATS);
        FloatVector odd = even;
        int blocks = count / QK;
        byte[] bytes = Blocks.stage(src, offset, blocks * BYTES);
        int pairs = blocks / 2;
        for (int p = 0; p < pairs; p++) {
            int o = p * 2 * BYTES;
            int base = xOffset + p * 2 * QK;
            FloatVector s0 = block(bytes, o, x, base);
            FloatVector s1 = block(bytes, o + BYTES, x, base + QK);
            even = s0.fma(FloatVector.broadcast(FLOATS, Blocks.fp16(bytes, o)), even);
            odd = s1.fma(FloatVector.broadcast(FLOATS, Blocks.fp16(bytes, o + BYTES)), odd);
        }
        if (blocks % 2 != 0) {
            int b = blocks - 1;
            int o = b * BYTES;
            even = block(bytes, o, x, xOffset + b * QK).fma(FloatVector.broadcast(FLOATS, Blocks.fp16(bytes, o)), even);
        }
        return Lanes.sum(even.add(odd));
    }

    /** {@return lane-wise sum over one block of {@code (q - 8) * x}} */
    private static FloatVector block(byte[] src, int o, float[] x, int base) {
        FloatVector s = FloatVector.zero(FLOATS);
        for (int j = 0; j < 16; j += FLOATS.length()) {
            IntVector q = (IntVector) ByteVector.fromArray(BYTES_PER_LANE, src, o + 2 + j)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
            FloatVector lo = (FloatVector) q.and(0x0F).sub(8).convert(VectorOperators.I2F, 0);
            FloatVector hi = (FloatVector) q.lanewise(VectorOperators.LSHR, 4).sub(8).convert(VectorOperators.I2F, 0);
            s = lo.fma(FloatVector.fromArray(FLOATS, x, base + j), s);
            s = hi.fma(FloatVector.fromArray(FLOATS, x, base + 16 + j), s);
        }
        return s;
    }

    /** The value of largest magnitude in a 32-element block, sign kept; the first wins ties (ggml's scan order). */
    static float signedAbsMax(float[] src, int base) {
        float amax = 0;
        float max = 0;
        for (int j = 0; j < QK; j++) {
            float v = src[base + j];
            if (amax < Math.abs(v)) {
                amax = Math.abs(v);
                max = v;
            }
        }
        return max;
    }
}
