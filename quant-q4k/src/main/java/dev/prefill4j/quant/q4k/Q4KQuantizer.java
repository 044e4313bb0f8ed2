package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF Q4_K (type 12): 256 weights in 144 bytes: {@code d} fp16 at 0, {@code dmin} fp16 at 2, twelve bytes of
 * packed 6-bit (scale, min) pairs for eight sub-blocks of 32 at 4, and 128 bytes of nibbles at 16. Element
 * {@code 64c + l} is the low nibble of {@code qs[32c + l]} (sub-block {@code 2c}), element {@code 64c + 32 + l} its
 * high nibble (sub-block {@code 2c + 1}); {@code y = d*sc*q - dmin*m} (FORMATS.md §2).
 *
 * <p>The encoder follows ggml's {@code quantize_row_q4_K_ref} step for step, in float arithmetic, so that its
 * bytes equal llama-quantize's (without an importance matrix).
 */
public final class Q4KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 144;

    @Override public String id() { return "q4_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q4_K: 256 x 4-bit, 6-bit sub-block scales/mins, 4.5 bits/weight, type 12"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(12); }
    @Override public String activationFormat() { return "q8_k"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        MemorySegment staged = MemorySegment.ofArray(b);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o);
            float dmin = Blocks.fp16(b, o + 2);
            int base = dstOffset + k * QK;
            for (int c = 0; c < 4; c++) {
                float d1 = d * KQuants.scale(staged, o, 2 * c);
                float m1 = dmin * KQuants.min(staged, o, 2 * c);
                float d2 = d * KQuants.scale(staged, o, 2 * c + 1);
                float m2 = dmin * KQuants.min(staged, o, 2 * c + 1);
                int q = o + 16 + 32 * c;
                int y = base + 64 * c;
                for (int l = 0; l < 32; l += KQuants.FLOATS.length()) {
                    ByteVector v = ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, q + l);
                    ((FloatVector) v.and((byte) 0x0F).convertShape(VectorOperators.B2F, KQuants.FLOATS, 0))
                            .mul(d1).sub(m1).intoArray(dst, y + l);
                    ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).and((byte) 0x0F)
                            .convertShape(VectorOperators.B2F, KQuants.FLOATS, 0))
                            .mul(d2).sub(m2).intoArray(dst, y + 32 + l);
                }
            }
        }
    }

    /** Decoded a super-block at a time into L1 and multiplied with vectors ({@link KQuants#dot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return KQuants.dot(this, src, offset, x, xOffset, count);
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        int[] levels = new int[QK];
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            KQuants.encodeAffineBlock(src, srcOffset + b * QK, dst, o, 15, -1f, 20, levels);
            for (int c = 0; c < 4; c++) {
                for (int l = 0; l < 32; l++) {
                    dst.set(Blocks.I8, o + 16 + 32 * c + l,
                            (byte) (levels[64 * c + l] | (levels[64 * c + 32 + l] << 4)));
                }
            }
        }
    }
}
