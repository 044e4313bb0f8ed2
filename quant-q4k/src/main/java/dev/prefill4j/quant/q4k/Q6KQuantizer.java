package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF Q6_K (type 14): 256 weights in 210 bytes: {@code ql[128]} low nibbles at 0, {@code qh[64]} high 2-bit pairs
 * at 128, sixteen int8 scales at 192, {@code d} fp16 at 208; {@code y = d * sc * (q - 32)} (FORMATS.md §2).
 * Encoder: ggml's {@code quantize_row_q6_K_ref}.
 */
public final class Q6KQuantizer implements Quantizer {
    static final int QK = 256;
    static final int BYTES = 210;

    @Override public String id() { return "q6_k"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF Q6_K: 256 x 6-bit, int8 scales per 16, 6.56 bits/weight, type 14"; }
    @Override public int blockSize() { return QK; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(14); }
    @Override public String activationFormat() { return "q8_k"; }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o + 208);
            for (int h = 0; h < 2; h++) {
                int ql = o + 64 * h;
                int qh = o + 128 + 32 * h;
                int sc = o + 192 + 8 * h;
                int y = dstOffset + k * QK + 128 * h;
                // Lanes never straddle the 16-element scale groups: at most 16 lanes, starting at multiples of them.
                // Bytes widened to int lanes first; the bits are joined there (x86 has no byte shifts).
                for (int l = 0; l < 32; l += KQuants.FLOATS.length()) {
                    int is = sc + l / 16;
                    IntVector lo = KQuants.widen(b, ql + l);
                    IntVector lo2 = KQuants.widen(b, ql + l + 32);
                    IntVector hb = KQuants.widen(b, qh + l);
                    store(lo.and(0x0F).or(hb.and(0x03).lanewise(VectorOperators.LSHL, 4)), d * b[is], dst, y + l);
                    store(lo2.and(0x0F).or(hb.and(0x0C).lanewise(VectorOperators.LSHL, 2)), d * b[is + 2], dst,
                            y + l + 32);
                    store(lo.lanewise(VectorOperators.LSHR, 4).or(hb.and(0x30)), d * b[is + 4], dst, y + l + 64);
                    store(lo2.lanewise(VectorOperators.LSHR, 4).or(hb.lanewise(VectorOperators.LSHR, 2).and(0x30)),
                            d * b[is + 6], dst, y + l + 96);
                }
            }
        }
    }

    /** Levels 0..63 in {@code q}: {@code (q - 32) * scale} as floats at {@code dst[at..]}. */
    private static void store(IntVector q, float scale, float[] dst, int at) {
        ((FloatVector) q.sub(32).convert(VectorOperators.I2F, 0)).mul(scale).intoArray(dst, at);
    }

    /**
     * Fused, for 16 or 8 float lanes (elsewhere decoded a super-block at a time, {@link KQuants#dot}): the bits of four
     * 6-bit levels are joined in int lanes, {@code (q - 32) * x} is scaled by {@code d * scale} of its 16-element group
     * into one of four running sums. 2.3x the decode-then-dot (DotAB, 2,048 x 2,048, in-process); the 16 scales of a
     * super-block converted and multiplied by {@code d} in one vector, each spread over the lanes by a permute
     * ({@link KQuants#LANE}) instead of a scalar conversion, product and broadcast per group: 1.22x again (in-process
     * A/B, 256 rows of 2,048 in L2, 15 rounds, same products). Written out in one
     * method on purpose: the same arithmetic through helpers that take and return vectors compiled to boxed vectors
     * (allocations in the loop, seen in C2's code) and ran at 0.83x.
     */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        int lanes = KQuants.FLOATS.length();
        if (lanes != 16 && lanes != 8) {
            return KQuants.dot(this, src, offset, x, xOffset, count);
        }
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        var sp = KQuants.FLOATS;
        FloatVector a0 = FloatVector.zero(sp);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o + 208);
            // The sub-block scales times d, lane j for sub-block j: the products d * b[is] of the scalar form. All 16
            // in one vector of 16 lanes; with 8 lanes the 8 of each half of the super-block, which are all that
            // half uses.
            FloatVector scales = ((FloatVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, o + 192)
                    .convertShape(VectorOperators.B2F, sp, 0)).mul(d);
            for (int h = 0; h < 2; h++) {
                int ql = o + 64 * h;
                int qh = o + 128 + 32 * h;
                int y = xOffset + k * QK + 128 * h;
                if (lanes == 8 && h == 1) {
                    scales = ((FloatVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, o + 200)
                            .convertShape(VectorOperators.B2F, sp, 0)).mul(d);
                }
                int first = lanes == 16 ? 8 * h : 0;
                for (int l = 0; l < 32; l += lanes) {
                    IntVector lo = KQuants.widen(b, ql + l);
                    IntVector lo2 = KQuants.widen(b, ql + l + 32);
                    IntVector hb = KQuants.widen(b, qh + l);
                    int is = first + l / 16;
                    FloatVector q0 = (FloatVector) lo.and(0x0F).or(hb.and(0x03).lanewise(VectorOperators.LSHL, 4))
                            .sub(32).convert(VectorOperators.I2F, 0);
                    FloatVector q1 = (FloatVector) lo2.and(0x0F).or(hb.and(0x0C).lanewise(VectorOperators.LSHL, 2))
                            .sub(32).convert(VectorOperators.I2F, 0);
                    FloatVector q2 = (FloatVector) lo.lanewise(VectorOperators.LSHR, 4).or(hb.and(0x30))
                            .sub(32).convert(VectorOperators.I2F, 0);
                    FloatVector q3 = (FloatVector) lo2.lanewise(VectorOperators.LSHR, 4)
                            .or(hb.lanewise(VectorOperators.LSHR, 2).and(0x30)).sub(32).convert(VectorOperators.I2F, 0);
                    a0 = q0.mul(FloatVector.fromArray(sp, x, y + l)).fma(scales.rearrange(KQuants.LANE[is]), a0);
                    a1 = q1.mul(FloatVector.fromArray(sp, x, y + l + 32))
                            .fma(scales.rearrange(KQuants.LANE[is + 2]), a1);
                    a2 = q2.mul(FloatVector.fromArray(sp, x, y + l + 64))
                            .fma(scales.rearrange(KQuants.LANE[is + 4]), a2);
                    a3 = q3.mul(FloatVector.fromArray(sp, x, y + l + 96))
                            .fma(scales.rearrange(KQuants.LANE[is + 6]), a3);
                }
            }
        }
        return KQuants.sum(a0.add(a1).add(a2.add(a3)));
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, QK, id());
        int[] levels = new int[QK];
        float[] scales = new float[16];
        for (int b = 0; b < count / QK; b++) {
            int base = srcOffset + b * QK;
            long o = offset + (long) b * BYTES;
            float maxScale = 0;
            float maxAbsScale = 0;
            for (int g = 0; g < 16; g++) {
                float scale = KQuants.makeQx(16, 32, src, base + 16 * g, levels, 16 * g);
                scales[g] = scale;
                if (Math.abs(scale) > maxAbsScale) {
                    maxAbsScale = Math.abs(scale);
                    maxScale = scale;
                }
            }
            if (maxAbsScale < 1e-15f) {
                dst.asSlice(o, BYTES).fill((byte) 0);
                continue;
            }
            float iscale = -128f / maxScale;
            Blocks.fp16(dst, o + 208, 1 / iscale);
            for (int g = 0; g < 16; g++) {
                dst.set(Blocks.I8, o + 192 + g, (byte) Math.min(127, Blocks.nearestInt(iscale * scales[g])));
            }
            float dd = Blocks.fp16(dst, o + 208);
            for (int g = 0; g < 16; g++) {
                float d = dd * dst.get(Blocks.I8, o + 192 + g);
                if (d == 0) {
                    continue;
                }
                for (int i = 0; i < 16; i++) {
                    int l = Blocks.nearestInt(src[base + 16 * g + i] / d);
                    levels[16 * g + i] = Math.max(-32, Math.min(31, l)) + 32;
                }
            }
            for (int h = 0; h < 2; h++) {
                int j = 128 * h;
                for (int l = 0; l < 32; l++) {
                    int q1 = levels[j + l] & 0x0F;
                    int q2 = levels[j + l + 32] & 0x0F;
                    int q3 = levels[j + l + 64] & 0x0F;
                    int q4 = levels[j + l + 96] & 0x0F;
                    dst.set(Blocks.I8, o + 64 * h + l, (byte) (q1 | (q3 << 4)));
                    dst.set(Blocks.I8, o + 64 * h + l + 32, (byte) (q2 | (q4 << 4)));
                    dst.set(Blocks.I8, o + 128 + 32 * h + l, (byte) ((levels[j + l] >>> 4)
                            | ((levels[j + l + 32] >>> 4) << 2) | ((levels[j + l + 64] >>> 4) << 4)
                            | ((levels[j + l + 96] >>> 4) << 6)));
                }
            }
        }
    }
}
