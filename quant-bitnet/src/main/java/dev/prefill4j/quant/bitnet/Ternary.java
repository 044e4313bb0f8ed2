package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.spi.Blocks;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/** What TQ1_0 and TQ2_0 share: 256-element blocks with one fp16 scale {@code d = max|x|} and trits {@code t} in 0..2. */
final class Ternary {
    static final int QK = 256;
    /** Float lanes of the dot product, at most 16; trits and ints in vectors with as many lanes. */
    private static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED.length() > 16
            ? FloatVector.SPECIES_512 : FloatVector.SPECIES_PREFERRED;
    /** With 4 float lanes, 8 (the narrowest byte vector): the widening takes the first 4. */
    static final VectorSpecies<Byte> TRIT_LANES =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(Math.max(64, FLOATS.length() * 8)));
    static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    /** A block's trits; 8 bytes of slack for the 8-byte loads of 4-lane kernels. */
    private static final ThreadLocal<byte[]> TRITS = ThreadLocal.withInitial(() -> new byte[QK + 8]);
    /** Short lanes of the integer dot product, at most 32; trits and activation codes in byte vectors as wide. */
    static final VectorSpecies<Short> SHORTS = ShortVector.SPECIES_PREFERRED.length() > 32
            ? ShortVector.SPECIES_512 : ShortVector.SPECIES_PREFERRED;
    static final VectorSpecies<Byte> SHORT_LANES =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(SHORTS.length() * 8));
    /** Whether the integer dot runs {@link TQ2_0Quantizer#dotCodes32} (32 short lanes: AVX-512). */
    static final boolean CODES32 = SHORTS.length() == 32;
    /** Q8_K, the activation format of both: {@code d} f32 at 0, {@code qs[256]} int8 at 4, group sums at 260. */
    static final int Q8K_BYTES = 292;

    /**
     * {@code (i & 3) - 1} as float bits in lane {@code i}: a lane permute ({@link IntVector#selectFrom}, which takes
     * the index modulo the lane count) turns trits 0, 1, 2 into -1, 0, +1 with no conversion, also when bits of the
     * next trit sit above them.
     */
    static final IntVector SIGNS = IntVector.fromArray(INTS, signs(INTS.length()), 0);
    static final VectorShuffle<Float> X8 = FLOATS.length() > 8 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 8) : null;
    static final VectorShuffle<Float> X4 = FLOATS.length() > 4 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 4) : null;
    static final VectorShuffle<Float> X2 = VectorShuffle.fromOp(FLOATS, i -> i ^ 2);
    static final VectorShuffle<Float> X1 = VectorShuffle.fromOp(FLOATS, i -> i ^ 1);

    private static int[] signs(int lanes) {
        int[] t = new int[lanes];
        for (int i = 0; i < lanes; i++) {
            t[i] = Float.floatToRawIntBits((i & 3) - 1);
        }
        return t;
    }

    /**
     * Whether the packed dot runs ({@link TQ2_0Quantizer#dotPacked16}): with 16 float lanes (AVX-512), activations
     * prepared in the order it takes the trits out of its int lanes ({@link #prepare}).
     */
    static final boolean PACKED16 = FLOATS.length() == 16;
    /**
     * {@return whether rows of {@code count} elements take the packed dot}: with 16 float lanes, for rows of up to 4,096
     * elements. On rows of 8,192 (the FFN's down projection; 34 KiB prepared) the packed dot ran at 0.78x of {@link
     * TQ2_0Quantizer#dotRow} in the harness its Javadoc names, and {@code ffn_down} took 8.44-9.31 against 7.89-7.96
     * ms a token in the model, so those rows keep the lane permute dot. Why was not found: with two rows a step (each
     * prepared vector loaded once) it ran at 0.83-0.89x, and with the prepared data cut to 32 KiB no better.
     */
    static boolean packed(int count) {
        return PACKED16 && count <= 4096;
    }

    /** Floats {@link #prepare} writes a block: 256 activations in the packed dot's order, then 16 negated sums. */
    static final int PREPARED_PER_BLOCK = 272;
    /** The element of a block whose trit sits in the lowest bits of int lane {@code i}: {@code 128[i >= 8] + 4(i % 8)}. */
    private static final int[] LANE_ELEMENTS = java.util.stream.IntStream.range(0, 16)
            .map(i -> 128 * (i / 8) + 4 * (i % 8)).toArray();

    /**
     * Activations for {@link TQ2_0Quantizer#dotPacked16}, per block of 256 at {@code at + 272k}: at {@code 16(4n + b)
     * + i} the activation whose trit int lane {@code i} of the block's 64 bytes holds in byte {@code b}, bits {@code
     * 2n} (element {@code 128[i >= 8] + 32n + 4(i % 8) + b}, FORMATS.md §6.1), times {@code 4^-n}, since the kernel
     * masks that trit in place, leaving it {@code 4^n} times its value (a power of two: the product rounds the same,
     * unless the scaled activation is subnormal, below 2^-120 in magnitude), except the top trit ({@code b = n = 3}),
     * which it shifts down; then at {@code 256 + i} minus the sum of lane {@code i}'s 16 activations (added in the
     * order of {@code 4n + b}), since the trits come out as 0, 1, 2, not -1, 0, +1.
     */
    static void prepare(float[] x, int xOffset, int blocks, float[] prepared, int at) {
        var f = FloatVector.SPECIES_512;
        for (int k = 0; k < blocks; k++) {
            int base = xOffset + k * QK;
            int p = at + k * PREPARED_PER_BLOCK;
            FloatVector sum = FloatVector.zero(f);
            for (int n = 0; n < 4; n++) {
                for (int b = 0; b < 4; b++) {
                    FloatVector v = FloatVector.fromArray(f, x, base + 32 * n + b, LANE_ELEMENTS, 0);
                    sum = sum.add(v);
                    v.mul(b == 3 && n == 3 ? 1f : Math.scalb(1f, -2 * n)).intoArray(prepared, p + 16 * (4 * n + b));
                }
            }
            sum.neg().intoArray(prepared, p + 256);
        }
    }

    /** {@return the float lanes of the dot product} */
    static VectorSpecies<Float> floats() {
        return FLOATS;
    }

    /**
     * The fused dot product over unpacked trits (TQ1_0's): per block, the format {@code q} unpacks its trits in element
     * order ({@link TernaryQuantizer#unpack}); each vector of trits becomes -1, 0, +1 by a lane permute ({@link
     * #SIGNS}) and is multiplied into one of four sums, one per {@code n}, in the order TQ2_0 packs them (element
     * {@code 128c + 32n + m} for {@code c}, then {@code m} a vector at a time), so the two formats give the same bits
     * ({@link TQ2_0Quantizer#dotRow}); the block sum {@code (s0 + s1) + (s2 + s3)} is scaled by the block's {@code
     * d}, and the lanes are added by a fixed tree ({@link #sum}). Four chains instead of one, whose 32 FMAs per block
     * with 8-lane vectors waited on each other: TQ2_0's gate/up products took 0.77 and 0.83 of their time in two of
     * three alternating pairs of processes and 1.03 in the third (Zen 3 VM). A multiply by -1, 0 or +1 is exact, so this is the masked addition and subtraction
     * of activations that ternary weights allow, at one FMA per vector.
     */
    static float dot(byte[] staged, int blocks, TernaryQuantizer q, float[] x, int xOffset) {
        int blockBytes = q.blockBytes();
        int scaleAt = q.scaleAt();
        int lanes = FLOATS.length();
        byte[] trits = TRITS.get();
        FloatVector acc = FloatVector.zero(FLOATS);
        for (int k = 0; k < blocks; k++) {
            int o = k * blockBytes;
            // The scale read first: read after the vector loops, the call came past C2's node-count cutoff for
            // inlining, stayed out of line and had the live vectors spilled around it every block.
            float d = Blocks.fp16(staged, o + scaleAt);
            q.unpack(staged, o, trits);
            int base = xOffset + k * QK;
            FloatVector s0 = FloatVector.zero(FLOATS);
            FloatVector s1 = s0;
            FloatVector s2 = s0;
            FloatVector s3 = s0;
            for (int c = 0; c < 2; c++) {
                for (int m = 0; m < 32; m += lanes) {
                    int e = 128 * c + m;
                    s0 = signs(trits, e).fma(FloatVector.fromArray(FLOATS, x, base + e), s0);
                    s1 = signs(trits, e + 32).fma(FloatVector.fromArray(FLOATS, x, base + e + 32), s1);
                    s2 = signs(trits, e + 64).fma(FloatVector.fromArray(FLOATS, x, base + e + 64), s2);
                    s3 = signs(trits, e + 96).fma(FloatVector.fromArray(FLOATS, x, base + e + 96), s3);
                }
            }
            acc = s0.add(s1).add(s2.add(s3)).fma(FloatVector.broadcast(FLOATS, d), acc);
        }
        // sum's tree written out: called here, C2 left it out of line past its node-count cutoff for inlining and
        // boxed the vector every row (-XX:+PrintInlining: NodeCountInliningCutoff).
        if (X8 != null) {
            acc = acc.add(acc.rearrange(X8));
        }
        if (X4 != null) {
            acc = acc.add(acc.rearrange(X4));
        }
        acc = acc.add(acc.rearrange(X2));
        return acc.add(acc.rearrange(X1)).lane(0);
    }

    /** {@return unpacked trits {@code trits[e..]} (0, 1, 2) as -1, 0, +1 float lanes, by the lane permute} */
    private static FloatVector signs(byte[] trits, int e) {
        return ((IntVector) ByteVector.fromArray(TRIT_LANES, trits, e)
                .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0)).selectFrom(SIGNS).reinterpretAsFloats();
    }

    /**
     * {@return the sum of the lanes of {@code v}} in a fixed order, the same in compiled and interpreted code (the two
     * formats must agree bit for bit): a tree of lane-wise additions, each lane added to the lane half the remaining
     * width away; {@code reduceLanes} leaves its order unspecified, and adding {@code lane(i)} in a loop compiles to
     * a jump table per lane.
     */
    static float sum(FloatVector v) {
        if (X8 != null) {
            v = v.add(v.rearrange(X8));
        }
        if (X4 != null) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0);
    }

    /**
     * The integer dot product of both ternary formats with Q8_K activations, as llama.cpp's: per block, the int8
     * activation codes are added in 16-bit lanes under masks, into one sum where the trit is +1 and another where it
     * is -1 (no multiplication by a weight; two sums, two independent chains of additions: 1.12x faster than one
     * chain of additions and subtractions, in-process A/B); the lanes' total is exact, since
     * {@code |sum| <= 256 * 127 < 2^15}; it is scaled by {@code d_w * d_x} ({@link #term}). The same trits give the
     * same bits in either format.
     *
     * @param q         the format, which unpacks the trits
     * @param act       Q8_K activations
     * @param actOffset byte offset of the first activation block
     */
    static double dotQ8K(byte[] staged, int blocks, TernaryQuantizer q, MemorySegment act, long actOffset) {
        int blockBytes = q.blockBytes();
        int scaleAt = q.scaleAt();
        byte[] trits = TRITS.get();
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * blockBytes;
            long ao = actOffset + (long) k * Q8K_BYTES;
            q.unpack(staged, o, trits);
            ShortVector plus = ShortVector.zero(SHORTS);
            ShortVector minus = plus;
            for (int e = 0; e < QK; e += SHORTS.length()) {
                ShortVector t = (ShortVector) ByteVector.fromArray(SHORT_LANES, trits, e)
                        .convertShape(VectorOperators.B2S, SHORTS, 0);
                ShortVector xq = codes(act, ao, e);
                plus = plus.add(xq, t.compare(VectorOperators.EQ, 2));
                minus = minus.add(xq, t.compare(VectorOperators.EQ, 0));
            }
            sum += term(Blocks.fp16(staged, o + scaleAt), act.get(Blocks.F32, ao), plus.sub(minus));
        }
        return sum;
    }

    /** {@return 16-bit lanes of the Q8_K codes {@code e..} of the block at {@code ao}} */
    private static ShortVector codes(MemorySegment act, long ao, int e) {
        return (ShortVector) ByteVector.fromMemorySegment(SHORT_LANES, act, ao + 4 + e, ByteOrder.LITTLE_ENDIAN)
                .convertShape(VectorOperators.B2S, SHORTS, 0);
    }

    /**
     * {@return a block's term of the dot product}: {@code d_w * d_x * sum} where the sum of the lanes is exact; the
     * product needs at most 11 + 24 + 15 significant bits, so it is exact in double, and the terms are added in
     * double.
     *
     * @param dw    the weights' block scale
     * @param dx    the activations' block scale (Q8_K's f32 {@code d})
     * @param lanes the block's integer sums in 16-bit lanes
     */
    static double term(float dw, float dx, ShortVector lanes) {
        return (double) dw * dx * lanes.reduceLanes(VectorOperators.ADD);
    }

    private Ternary() {
    }

    /** A one-row integer dot's result, written by the rows kernel ({@link TQ2_0Quantizer#dotCodes32}). */
    private static final ThreadLocal<float[]> ONE = ThreadLocal.withInitial(() -> new float[1]);

    /** {@return the calling thread's one-element array for a one-row integer dot} */
    static float[] one() {
        return ONE.get();
    }

    /** {@return the calling thread's array for one block's trits} */
    static byte[] trits() {
        return TRITS.get();
    }

    /** Writes {@code (t - 1) * d} for a block's trits {@code t} (0, 1, 2) to {@code dst[at..]}, in vector lanes. */
    static void decode(byte[] trits, float d, float[] dst, int at) {
        for (int e = 0; e < QK; e += FLOATS.length()) {
            ((FloatVector) ByteVector.fromArray(TRIT_LANES, trits, e).convertShape(VectorOperators.B2I, INTS, 0)
                    .lanewise(VectorOperators.SUB, 1).convert(VectorOperators.I2F, 0)).mul(d).intoArray(dst, at + e);
        }
    }

    /** {@code max|x|} of the block at {@code base}: the scale both formats store. */
    static float absMax(float[] x, int base) {
        float amax = 0;
        for (int j = 0; j < QK; j++) {
            amax = Math.max(amax, Math.abs(x[base + j]));
        }
        return amax;
    }

    /** The trit (0, 1, 2 for -1, 0, +1) of {@code v} at reciprocal scale {@code id}: {@code lroundf(v * id) + 1}. */
    static int trit(float v, float id) {
        return Blocks.roundHalfAway(v * id) + 1;
    }
}
