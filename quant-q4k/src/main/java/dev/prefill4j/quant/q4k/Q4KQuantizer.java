package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

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

    /** Sub-block {@code j}'s 6-bit scale (index 0) and min (index 1) from the 12 packed bytes at {@code o + 4}. */
    static int scale(MemorySegment s, long o, int j) {
        return j < 4 ? Blocks.u8(s, o + 4 + j) & 63
                : (Blocks.u8(s, o + 4 + j + 4) & 0x0F) | ((Blocks.u8(s, o + 4 + j - 4) >>> 6) << 4);
    }

    static int min(MemorySegment s, long o, int j) {
        return j < 4 ? Blocks.u8(s, o + 4 + j + 4) & 63
                : (Blocks.u8(s, o + 4 + j + 4) >>> 4) | ((Blocks.u8(s, o + 4 + j) >>> 6) << 4);
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            float dmin = Blocks.fp16(src, o + 2);
            int base = dstOffset + b * QK;
            for (int c = 0; c < 4; c++) {
                float d1 = d * scale(src, o, 2 * c);
                float m1 = dmin * min(src, o, 2 * c);
                float d2 = d * scale(src, o, 2 * c + 1);
                float m2 = dmin * min(src, o, 2 * c + 1);
                for (int l = 0; l < 32; l++) {
                    int q = Blocks.u8(src, o + 16 + 32 * c + l);
                    dst[base + 64 * c + l] = d1 * (q & 0x0F) - m1;
                    dst[base + 64 * c + 32 + l] = d2 * (q >>> 4) - m2;
                }
            }
        }
    }

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, QK, id());
        float sum = 0;
        for (int b = 0; b < count / QK; b++) {
            long o = offset + (long) b * BYTES;
            float d = Blocks.fp16(src, o);
            float dmin = Blocks.fp16(src, o + 2);
            int base = xOffset + b * QK;
            for (int c = 0; c < 4; c++) {
                float d1 = d * scale(src, o, 2 * c);
                float m1 = dmin * min(src, o, 2 * c);
                float d2 = d * scale(src, o, 2 * c + 1);
                float m2 = dmin * min(src, o, 2 * c + 1);
                float s = 0;
                for (int l = 0; l < 32; l++) {
                    int q = Blocks.u8(src, o + 16 + 32 * c + l);
                    s += (d1 * (q & 0x0F) - m1) * x[base + 64 * c + l] + (d2 * (q >>> 4) - m2) * x[base + 64 * c + 32 + l];
                }
                sum += s;
            }
        }
        return sum;
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        int[] levels = new int[QK];
        int[] aux = new int[32];
        float[] weights = new float[32];
        float[] mins = new float[8];
        float[] scales = new float[8];
        float[] sub = new float[32];
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            long o = offset + (long) b * BYTES;
            float maxScale = 0;
            float maxMin = 0;
            for (int j = 0; j < 8; j++) {
                float sumX2 = 0;
                for (int l = 0; l < 32; l++) {
                    float v = src[base + 32 * j + l];
                    sub[l] = v;
                    sumX2 += v * v;
                }
                float avX = (float) Math.sqrt(sumX2 / 32f);
                for (int l = 0; l < 32; l++) {
                    weights[l] = avX + Math.abs(sub[l]);
                }
                float[] theMin = new float[1];
                scales[j] = KQuants.makeQkx2(32, 15, sub, weights, levels, 32 * j, theMin, aux, -1f, 0.1f, 20);
                mins[j] = theMin[0];
                if (scales[j] > maxScale) {
                    maxScale = scales[j];
                }
                if (mins[j] > maxMin) {
                    maxMin = mins[j];
                }
            }
            float invScale = maxScale > 0 ? 63f / maxScale : 0f;
            float invMin = maxMin > 0 ? 63f / maxMin : 0f;
            byte[] packed = new byte[12];
            for (int j = 0; j < 8; j++) {
                // uint8_t ls = nearest_int(...): the int is narrowed to a byte before MIN(63, ls).
                int ls = Math.min(63, Blocks.nearestInt(invScale * scales[j]) & 0xFF);
                int lm = Math.min(63, Blocks.nearestInt(invMin * mins[j]) & 0xFF);
                if (j < 4) {
                    packed[j] = (byte) ls;
                    packed[j + 4] = (byte) lm;
                } else {
                    packed[j + 4] = (byte) ((ls & 0x0F) | ((lm & 0x0F) << 4));
                    packed[j - 4] |= (byte) ((ls >>> 4) << 6);
                    packed[j] |= (byte) ((lm >>> 4) << 6);
                }
            }
            Blocks.fp16(dst, o, maxScale / 63f);
            Blocks.fp16(dst, o + 2, maxMin / 63f);
            MemorySegment.copy(MemorySegment.ofArray(packed), 0, dst, o + 4, 12);
            float d = Blocks.fp16(dst, o);
            float dmin = Blocks.fp16(dst, o + 2);
            for (int j = 0; j < 8; j++) {
                float dj = d * scale(dst, o, j);
                if (dj == 0) {
                    continue;
                }
                float dm = dmin * min(dst, o, j);
                for (int l = 0; l < 32; l++) {
                    int q = Blocks.nearestInt((src[base + 32 * j + l] + dm) / dj);
                    levels[32 * j + l] = Math.max(0, Math.min(15, q));
                }
            }
            for (int c = 0; c < 4; c++) {
                for (int l = 0; l < 32; l++) {
                    dst.set(Blocks.I8, o + 16 + 32 * c + l,
                            (byte) (levels[64 * c + l] | (levels[64 * c + 32 + l] << 4)));
                }
            }
        }
    }
}
