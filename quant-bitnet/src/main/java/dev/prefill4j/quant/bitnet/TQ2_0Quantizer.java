package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF TQ2_0 (type 35): 256 trits in 66 bytes, {@code qs[64]} then {@code d} fp16 at 64. Byte {@code qs[32c + m]}
 * (c = 0, 1) holds element {@code 128c + 32n + m} in bits {@code 2n, 2n+1} (n = 0..3); {@code y = (t - 1) * d}.
 */
public final class TQ2_0Quantizer implements Quantizer {
    static final int BYTES = 66;

    @Override public String id() { return "tq2_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF TQ2_0: ternary, 2 bits/trit + fp16 scale, 2.06 bits/weight, type 35"; }
    @Override public int blockSize() { return Ternary.QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(35); }
    @Override public String activationFormat() { return "q8_k"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        int blocks = count / Ternary.QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o + 64);
            int base = dstOffset + k * Ternary.QK;
            for (int c = 0; c < 2; c++) {
                for (int n = 0; n < 4; n++) {
                    int y = base + 128 * c + 32 * n;
                    for (int m = 0; m < 32; m++) {
                        dst[y + m] = (((b[o + 32 * c + m] >> (2 * n)) & 3) - 1) * d;
                    }
                }
            }
        }
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, Ternary.QK, id());
        for (int k = 0; k < count / Ternary.QK; k++) {
            int base = srcOffset + k * Ternary.QK;
            long o = offset + (long) k * BYTES;
            float d = Ternary.absMax(src, base);
            float id = d != 0 ? 1f / d : 0f;
            Blocks.fp16(dst, o + 64, d);
            for (int c = 0; c < 2; c++) {
                for (int m = 0; m < 32; m++) {
                    int q = 0;
                    for (int n = 0; n < 4; n++) {
                        q += (Ternary.trit(src[base + 128 * c + 32 * n + m], id) & 3) << (2 * n);
                    }
                    dst.set(Blocks.I8, o + 32 * c + m, (byte) q);
                }
            }
        }
    }

    /** Masked vector additions and subtractions over the unpacked trits ({@link Ternary#dot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        int blocks = count / Ternary.QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        return Ternary.dot(b, blocks, BYTES, 64, TQ2_0Quantizer::unpack, x, xOffset);
    }

    /** Element {@code 128 c + 32 n + m} is bits {@code 2n..2n+1} of byte {@code 32 c + m} (FORMATS.md §6.1). */
    private static void unpack(byte[] b, int o, byte[] trits) {
        for (int c = 0; c < 2; c++) {
            ByteVector q = ByteVector.fromArray(ByteVector.SPECIES_256, b, o + 32 * c);
            for (int n = 0; n < 4; n++) {
                q.lanewise(VectorOperators.ASHR, 2 * n).and((byte) 3).intoArray(trits, 128 * c + 32 * n);
            }
        }
    }
}
