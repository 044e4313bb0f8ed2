package dev.prefill4j.quant.q4_0;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.stream.IntStream;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
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
    /** With 4 float lanes, 8 (the narrowest byte vector): the widening takes the first 4. */
    static final VectorSpecies<Byte> BYTES_PER_LANE =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(Math.max(64, FLOATS.length() * 8)));
    static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    /**
     * Sixteen int16 lanes (a block's half) for {@link #dotEncoded}, where vectors have 256 bits or more (AVX2,
     * AVX-512); {@code null} elsewhere, where the scalar form runs.
     */
    static final VectorSpecies<Short> SHORTS =
            FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 256 ? ShortVector.SPECIES_256 : null;
    static final VectorSpecies<Byte> BYTES_128 = ByteVector.SPECIES_128;
    /**
     * Doubles that {@link #dotInt16} widens a block's eight int lanes of sums to: all eight in one vector with 512-bit
     * vectors, else four a part.
     */
    static final VectorSpecies<Double> DOUBLES =
            FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 512 ? DoubleVector.SPECIES_512 : DoubleVector.SPECIES_256;
    /** Bytes of a {@code q8_0-activations} block: fp16 {@code d}, then 32 int8 codes. */
    static final int ACT_BYTES = 34;
    static final int QK = 32;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
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
     * One float per block: the sum of its 32 activations, for the {@code -8} of every weight ({@link #dotPrepared}).
     * With 16 float lanes, {@code count + count / 8}: the activations in the order {@link #dotOctets} reads the
     * nibbles, and the sums it takes the {@code -8} from ({@link #prepareOctets}); none for rows longer than {@link
     * #ONE_ROW_MAX_COUNT}, which the table dot reads with {@code x} alone.
     */
    @Override
    public int preparedActivations(int count) {
        Blocks.checkCount(count, QK, id());
        return OCTETS ? (count <= ONE_ROW_MAX_COUNT ? count + count / 8 : 0) : count / QK;
    }

    /**
     * Each block's sum of activations, vector lanes added lane-wise, then by {@link Lanes#sum}'s fixed tree; with 16
     * float lanes, {@link #prepareOctets}.
     */
    @Override
    public void prepareActivations(float[] x, int xOffset, int count, float[] prepared, int preparedOffset) {
        Blocks.checkCount(count, QK, id());
        if (OCTETS) {
            if (count <= ONE_ROW_MAX_COUNT) {
                prepareOctets(x, xOffset, count, prepared, preparedOffset);
            }
            return;
        }
        for (int k = 0; k < count / QK; k++) {
            FloatVector sum = FloatVector.zero(FLOATS);
            for (int j = 0; j < QK; j += FLOATS.length()) {
                sum = sum.add(FloatVector.fromArray(FLOATS, x, xOffset + k * QK + j));
            }
            prepared[preparedOffset + k] = Lanes.sum(sum);
        }
    }

    /** Prepares {@code x} in a per-thread buffer, then {@link #dotPrepared} ({@link Blocks#dotByPreparing}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return Blocks.dotByPreparing(this, src, offset, x, xOffset, count);
    }

    /**
     * Vectorized and fused, read straight from the mapping: per block the nibbles are widened to ints, converted to
     * floats, multiplied by the block's {@code d} and accumulated against the activations ({@code sum q * d * x}); the
     * {@code -8} of every weight comes once per block as {@code -8 * d * sum(x)} from the prepared sums, in a scalar
     * running sum; four accumulators (two vectors of each nibble half), lanes added in a fixed order at the end. With
     * 16 lanes eight blocks a step from activations prepared in the order of the nibbles' bits ({@link #dotOctets});
     * rows longer than {@link #ONE_ROW_MAX_COUNT} (which {@link #dotPreparedRows} reads three at a time) and machines
     * without 32 int16 lanes a block a step, the nibbles selecting their values from a table ({@link #dotByTable});
     * with 8 lanes a block at a time, its four products added first and multiplied by {@code d} once, into one running
     * sum (JMH {@code Matmul -p format=q4_0 -p rows=1 -p threads=1 -jvmArgsAppend -XX:MaxVectorSize=32}, 8 lanes on the
     * Zen 5 VM, three alternating forks: 2,726-2,771 against 2,925-2,962 ops/s for the four-sum form, 2026-12-03; not
     * measured on an AVX2 machine); with 4, blocks in pairs. Against the earlier form (row staged into an array, {@code
     * q - 8} per weight, each block's products summed before one multiply by {@code d}), one thread on a Zen 3 VM
     * (AVX2), 2,048-element rows, medians of 12 in-process rounds in each of two processes: 1.23x and 1.33x with rows
     * streamed from memory, 1.22x and 1.0x with rows in L2 (the pair loop with 8 lanes: 1.10-1.12x and 0.94-1.13x).
     * Reading the mapping directly lets the loads of the next cache lines overlap the arithmetic, where the staging
     * copy of each row waited for all of it first. A row with an odd number of blocks has its last one summed in scalar
     * code (pair loop only; the 8-lane loop takes every block).
     */
    @Override
    public float dotPrepared(MemorySegment src, long offset, float[] x, int xOffset, float[] prepared,
                             int preparedOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        if (OCTETS && count <= ONE_ROW_MAX_COUNT) {
            float sum = dotOctets(src, offset, prepared, preparedOffset, count);
            if (Float.isNaN(sum)) { // an infinite or NaN d (or activation): the exact conversion
                return dotByTable(src, offset, x, xOffset, blocks);
            }
            int done = count / OCTET * 8;
            return done == blocks ? sum
                    : sum + dotByTable(src, offset + (long) done * BYTES, x, xOffset + done * QK, blocks - done);
        }
        if (LEVELS != null) {
            return dotByTable(src, offset, x, xOffset, blocks);
        }
        // With 4 lanes each load takes 8 bytes: the row is staged (Blocks.stage leaves slack after it), or the last
        // load of the last block could read past the tensor.
        MemorySegment row = FLOATS.length() < 8 ? MemorySegment.ofArray(Blocks.stage(src, offset, blocks * BYTES))
                : src.asSlice(offset, (long) blocks * BYTES);
        FloatVector lo0 = FloatVector.zero(FLOATS);
        FloatVector hi0 = lo0;
        FloatVector lo1 = lo0;
        FloatVector hi1 = lo0;
        float minus8 = 0;
        if (FLOATS.length() == 8) {
            // 8 lanes (AVX2): a block is two vectors of each nibble half, each into its own accumulator. Going a
            // block at a time measured faster there than a pair of blocks with an inner loop over the vectors.
            for (int k = 0; k < blocks; k++) {
                long o = (long) k * BYTES;
                int base = xOffset + k * QK;
                float d = Blocks.fp16(row, o);
                minus8 += d * prepared[preparedOffset + k];
                IntVector qa = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, row, o + 2, LE)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
                IntVector qb = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, row, o + 10, LE)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
                // The block's four products added first, then scaled by d once (one multiply and four FMAs a block
                // where there were four multiplies and four FMAs).
                FloatVector t = ((FloatVector) qa.and(0x0F).convert(VectorOperators.I2F, 0))
                        .mul(FloatVector.fromArray(FLOATS, x, base));
                t = ((FloatVector) qa.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                        .fma(FloatVector.fromArray(FLOATS, x, base + 16), t);
                t = ((FloatVector) qb.and(0x0F).convert(VectorOperators.I2F, 0))
                        .fma(FloatVector.fromArray(FLOATS, x, base + 8), t);
                t = ((FloatVector) qb.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                        .fma(FloatVector.fromArray(FLOATS, x, base + 24), t);
                lo0 = t.fma(FloatVector.broadcast(FLOATS, d), lo0);
            }
            return Lanes.sum(lo0) - 8 * minus8;
        }
        // Both blocks of a pair written out here, not in a helper that returns a vector: C2 sometimes compiled such a
        // helper on its own (when it had inlined this method into a caller and ran out of inlining budget), each call
        // then boxed its result, and decode of the 1B model ran at about half speed in those processes.
        for (int p = 0, pairs = blocks / 2; p < pairs; p++) {
            long o = (long) p * 2 * BYTES;
            int base = xOffset + p * 2 * QK;
            float d0 = Blocks.fp16(row, o);
            float d1 = Blocks.fp16(row, o + BYTES);
            minus8 += d0 * prepared[preparedOffset + 2 * p] + d1 * prepared[preparedOffset + 2 * p + 1];
            FloatVector dv0 = FloatVector.broadcast(FLOATS, d0);
            FloatVector dv1 = FloatVector.broadcast(FLOATS, d1);
            for (int j = 0; j < 16; j += FLOATS.length()) {
                IntVector q0 = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, row, o + 2 + j, LE)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
                IntVector q1 = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, row, o + BYTES + 2 + j, LE)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
                lo0 = ((FloatVector) q0.and(0x0F).convert(VectorOperators.I2F, 0)).mul(dv0)
                        .fma(FloatVector.fromArray(FLOATS, x, base + j), lo0);
                hi0 = ((FloatVector) q0.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0)).mul(dv0)
                        .fma(FloatVector.fromArray(FLOATS, x, base + 16 + j), hi0);
                lo1 = ((FloatVector) q1.and(0x0F).convert(VectorOperators.I2F, 0)).mul(dv1)
                        .fma(FloatVector.fromArray(FLOATS, x, base + QK + j), lo1);
                hi1 = ((FloatVector) q1.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0)).mul(dv1)
                        .fma(FloatVector.fromArray(FLOATS, x, base + QK + 16 + j), hi1);
            }
        }
        return Lanes.sum(lo0.add(hi0).add(lo1.add(hi1))) - 8 * minus8 + lastBlock(src, offset, x, xOffset, blocks);
    }

    /**
     * Whether {@link #dotPrepared} takes eight blocks a step ({@link #dotOctets}): with 16 float lanes and 32 int16
     * lanes (AVX-512 with BW), where the two-vector lane permute it gathers the nibbles with is one instruction.
     */
    static final boolean OCTETS = FLOATS.length() == 16 && ShortVector.SPECIES_PREFERRED.length() == 32;
    private static final VectorSpecies<Short> SHORTS_512 = ShortVector.SPECIES_512;
    /** Elements and bytes of the eight blocks {@link #dotOctets} takes a step. */
    private static final int OCTET = 8 * QK;
    private static final int OCTET_BYTES = 8 * BYTES;
    /**
     * Lane permutes of {@link #dotOctets}, in int16 units (a block is 9 of them, its {@code d} the first): the
     * {@code qs} of blocks 0-3 from the step's first two 64-byte loads (at 0 and 64), of blocks 4-7 from its second
     * and third (at 64 and 80), each block's 8 units into 4 int lanes; and each block's {@code d} into the high half of
     * its 4 int lanes, zeros (from a zero vector, index 32) into the low half.
     */
    private static final ShortVector QS_LOW = permute((b, u) -> 9 * b + 1 + u);
    private static final ShortVector QS_HIGH = permute((b, u) -> {
        int at = 9 * (4 + b) + 1 + u;
        return at < 64 ? at - 32 : 32 + at - 40;
    });
    private static final ShortVector D_LOW = permute((b, u) -> u % 2 == 0 ? 32 : 9 * b);
    private static final ShortVector D_HIGH = permute((b, u) -> u % 2 == 0 ? 32 : 9 * (4 + b) - 32);
    private static final ShortVector NO_SHORTS = ShortVector.zero(SHORTS_512);
    /** 2^112: the fp16 bits moved to a float's place are the value times 2^-112 (exactly, subnormals included). */
    private static final float FP16_BIAS = 0x1p112f;
    /** The exponent bits of an fp16 in the high half of an int: all set for infinity and NaN. */
    private static final int FP16_EXPONENT = 0x7C00_0000;

    private interface UnitIndex {
        int of(int block, int unit);
    }

    /** {@return 32 int16 lanes: lane {@code 8b + u} is {@code index.of(b, u)}} (b &lt; 4, u &lt; 8) */
    private static ShortVector permute(UnitIndex index) {
        if (!OCTETS) {
            return null;
        }
        short[] lanes = new short[32];
        for (int b = 0; b < 4; b++) {
            for (int u = 0; u < 8; u++) {
                lanes[8 * b + u] = (short) index.of(b, u);
            }
        }
        return ShortVector.fromArray(SHORTS_512, lanes, 0);
    }

    /**
     * Activations for {@link #dotOctets}, per 128 elements (four blocks) {@code g}: at {@code 128g + 16s + 4b + m}
     * the activation that nibble {@code s} of int lane {@code 4b + m} multiplies (block {@code b}'s byte {@code 4m +
     * s/2}, element {@code 4m + s/2 + 16(s % 2)}), times {@code 2^-4s} for {@code s < 7}, since the kernel masks nibble
     * {@code s} in place, leaving it {@code 16^s} times its value (a power of two: the product's rounding is the same,
     * unless the scaled activation is subnormal, below 2^-98 in magnitude); then, after all {@code count}, at {@code
     * count + 16g + 4b + m}, {@code -8} times the sum of the 8 activations of that lane (added in the order of
     * {@code s}).
     */
    private static void prepareOctets(float[] x, int xOffset, int count, float[] prepared, int at) {
        for (int g = 0; g < count / 128; g++) {
            FloatVector sum = FloatVector.zero(FLOATS);
            for (int s = 0; s < 8; s++) { // a gather of the 16 lanes' activations, s / 2 + 16(s % 2) on
                int first = xOffset + 128 * g + s / 2 + 16 * (s % 2);
                FloatVector v = FloatVector.fromArray(FLOATS, x, first, LANE_ELEMENTS, 0);
                sum = sum.add(v);
                v.mul(s < 7 ? Math.scalb(1f, -4 * s) : 1f).intoArray(prepared, at + 128 * g + 16 * s);
            }
            sum.mul(-8f).intoArray(prepared, at + count + 16 * g);
        }
    }

    /** The element of a group of four blocks whose nibble 0 int lane {@code 4b + m} holds: {@code 32b + 4m}. */
    private static final int[] LANE_ELEMENTS = IntStream.range(0, 16).map(l -> 32 * (l / 4) + 4 * (l % 4)).toArray();

    /**
     * {@link #dotPrepared} with 16 float lanes, eight blocks (144 bytes) a step, read in place: three 64-byte loads (at
     * 0, 64 and 80) and two-vector lane permutes gather four blocks' {@code qs} into 16 int lanes (four a block), so
     * that each of the eight nibbles of an int lane is one mask ({@code and}, in place) or the top one shift away from
     * a vector of 16 weights, converted to floats and multiplied with the activations prepared in that order ({@link
     * #prepareOctets}); the {@code -8} comes from the prepared sums. Each block's {@code d} is gathered into its four
     * lanes the same way (into an int's high half) and converted by bit moves and one multiply: the fp16's exponent
     * and mantissa shifted into a float's place give its value times 2^-112. Infinite and NaN {@code d}, which that
     * conversion would not keep, make it return NaN, and {@link #dotPrepared} then takes the row to {@link
     * #dotByTable}, as it does the blocks after the last full eight (no call in here: a vector live across one was
     * boxed in some compilations).
     * About 13 instructions a block in C2's code against about 18 for the table dot one block a step, which on the
     * Zen 5 VM's cores (about 3.3 a cycle either way) set the speed: a harness outside the repository (one thread, rows of 2,048 of
     * random codes) 14.6-15.6 GB/s against 11.9-12.5 with 512 rows in L2, 13.1-13.7 against 11.0-11.7 streamed from
     * memory; in the model ({@code bench -m 1b-q4_0.gguf -p 16 -n 64 -r 1 --verify-tokens 0 --profile}, alternating
     * processes) {@code ffn_gate+up} at 0.78-0.80 of the Q6_K output matrix's GB/s against 0.69-0.74 (2026-12-04,
     * docs/performance-notes.md: "Eight Q4_0 blocks a loop step"). Four blocks a step (two loads) was no faster: the
     * bounds checks of each segment load cost as much as the instructions saved. The body is near what C2 compiles
     * whole: with its int operands (masks, the fp16 bias) broadcast in the loop, some compilations left the last
     * intrinsics to the Vector API's Java fallbacks ({@code KernelInliningTest}'s allocation check); broadcast once
     * before the loop, none in twenty-seven workouts, and as fast.
     */
    private static float dotOctets(MemorySegment src, long offset, float[] y, int at, int count) {
        int steps = count / OCTET;
        int sums = at + count;
        FloatVector acc = FloatVector.zero(FLOATS);
        IntVector exponents = IntVector.zero(INTS);
        // Written out in this method, as the other kernels here are: a helper taking and returning vectors can be
        // compiled on its own and box them.
        var f = FLOATS;
        var i2f = VectorOperators.I2F;
        // Every int operand broadcast once, here, not by each operation (see the Javadoc).
        IntVector m0 = IntVector.broadcast(INTS, 0xF);
        IntVector m1 = IntVector.broadcast(INTS, 0xF0);
        IntVector m2 = IntVector.broadcast(INTS, 0xF00);
        IntVector m3 = IntVector.broadcast(INTS, 0xF000);
        IntVector m4 = IntVector.broadcast(INTS, 0xF_0000);
        IntVector m5 = IntVector.broadcast(INTS, 0xF0_0000);
        IntVector m6 = IntVector.broadcast(INTS, 0xF00_0000);
        IntVector exponentBits = IntVector.broadcast(INTS, FP16_EXPONENT);
        IntVector notCopies = IntVector.broadcast(INTS, 0x8FFF_FFFF);
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        for (int i = 0; i < steps; i++) {
            long o = offset + (long) i * OCTET_BYTES;
            int p = at + i * OCTET;
            ShortVector a = ShortVector.fromMemorySegment(SHORTS_512, src, o, LE);
            ShortVector b = ShortVector.fromMemorySegment(SHORTS_512, src, o + 64, LE);
            ShortVector c = ShortVector.fromMemorySegment(SHORTS_512, src, o + 80, LE);
            IntVector q;
            IntVector h;
            FloatVector t;
            FloatVector u;
            // Blocks 0-3 (qs from a and b, d from a), then blocks 4-7 (qs from b and c, d from b).
            q = QS_LOW.selectFrom(a, b).reinterpretAsInts();
            h = D_LOW.selectFrom(a, NO_SHORTS).reinterpretAsInts();
            t = ((FloatVector) q.and(m0).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p), FloatVector.fromArray(f, y, sums + i * 32));
            u = ((FloatVector) q.and(m1).convertShape(i2f, f, 0)).mul(FloatVector.fromArray(f, y, p + 16));
            t = ((FloatVector) q.and(m2).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 32), t);
            u = ((FloatVector) q.and(m3).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 48), u);
            t = ((FloatVector) q.and(m4).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 64), t);
            u = ((FloatVector) q.and(m5).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 80), u);
            t = ((FloatVector) q.and(m6).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 96), t);
            u = ((FloatVector) q.lanewise(VectorOperators.LSHR, 28).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p + 112), u);
            exponents = exponents.max(h.and(exponentBits));
            acc = t.add(u).fma(h.lanewise(VectorOperators.ASHR, 3).and(notCopies).reinterpretAsFloats().mul(bias),
                    acc);
            q = QS_HIGH.selectFrom(b, c).reinterpretAsInts();
            h = D_HIGH.selectFrom(b, NO_SHORTS).reinterpretAsInts();
            t = ((FloatVector) q.and(m0).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p + 128), FloatVector.fromArray(f, y, sums + i * 32 + 16));
            u = ((FloatVector) q.and(m1).convertShape(i2f, f, 0)).mul(FloatVector.fromArray(f, y, p + 144));
            t = ((FloatVector) q.and(m2).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 160), t);
            u = ((FloatVector) q.and(m3).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 176), u);
            t = ((FloatVector) q.and(m4).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 192), t);
            u = ((FloatVector) q.and(m5).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 208), u);
            t = ((FloatVector) q.and(m6).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 224), t);
            u = ((FloatVector) q.lanewise(VectorOperators.LSHR, 28).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p + 240), u);
            exponents = exponents.max(h.and(exponentBits));
            acc = t.add(u).fma(h.lanewise(VectorOperators.ASHR, 3).and(notCopies).reinterpretAsFloats().mul(bias),
                    acc);
        }
        // The lane tree of Lanes.sum written out (see dotByTable).
        FloatVector v = acc;
        v = v.add(v.rearrange(Lanes.X8));
        v = v.add(v.rearrange(Lanes.X4));
        v = v.add(v.rearrange(Lanes.X2));
        float sum = v.add(v.rearrange(Lanes.X1)).lane(0);
        return exponents.reduceLanes(VectorOperators.MAX) == FP16_EXPONENT ? Float.NaN : sum;
    }

    /**
     * The float bits of {@code q - 8} for {@code q = 0..15}, one per lane of a 16-lane int vector: a nibble used as a
     * lane index selects its weight's value ({@code vpermd}) in one instruction, where widening it to a float and
     * subtracting 8 took two or more.
     */
    private static final IntVector LEVELS = FLOATS.length() == 16
            ? IntVector.fromArray(INTS, IntStream.range(0, 16)
                    .map(q -> Float.floatToRawIntBits(q - 8)).toArray(), 0)
            : null;

    /**
     * {@link #dotPrepared} with 16 float lanes, a block an iteration: each nibble half selects its values {@code q - 8}
     * from {@link #LEVELS} by lane permute (exact), the block's two halves are multiplied with the activations and
     * added in one vector, and that vector is accumulated times the block's {@code d}: one FMA a block where the
     * conversion form ({@code q} converted to float, times {@code d}, the {@code -8} from prepared sums) took two
     * multiplies and two FMAs. Read at absolute offsets of {@code src}, one running sum. Until 2026-12-03 it took two
     * blocks an iteration from a slice of the row, two running sums: as fast with 2,048-element rows, but slower with
     * the FFN's 8,192-element ones, which decode read at about half the bytes per second of the others ({@code bench
     * --profile}). A harness outside the repository (one thread, rows of the 1B file's geometry streamed from memory,
     * Zen 5 VM): 8,192 elements 7.3-7.6 GB/s with the pair loop against 9.1-10.5 with this one, 2,048 elements
     * 12.2-13.0 against 12.4; {@code bench -m 1b-q4_0.gguf -p 16 -n 64 -r 3 --profile}, six alternating pairs: {@code
     * ffn_down.weight} 11.5-13.1 GB/s against 12.5-14.4 (five of six pairs faster). Reads {@code x} itself, not the
     * prepared activations.
     */
    private static float dotByTable(MemorySegment src, long offset, float[] x, int xOffset, int blocks) {
        IntVector levels = LEVELS;
        FloatVector acc = FloatVector.zero(FLOATS);
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int base = xOffset + k * QK;
            IntVector q = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, src, o + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
            FloatVector t = q.and(0x0F).selectFrom(levels).reinterpretAsFloats()
                    .fma(FloatVector.fromArray(FLOATS, x, base), q.lanewise(VectorOperators.LSHR, 4)
                            .selectFrom(levels).reinterpretAsFloats().mul(FloatVector.fromArray(FLOATS, x, base + 16)));
            acc = t.fma(FloatVector.broadcast(FLOATS, Blocks.fp16(src, o)), acc);
        }
        // The lane tree of Lanes.sum written out: a call boxed its argument where C2 left it out of line.
        FloatVector v = acc;
        v = v.add(v.rearrange(Lanes.X8));
        v = v.add(v.rearrange(Lanes.X4));
        v = v.add(v.rearrange(Lanes.X2));
        return v.add(v.rearrange(Lanes.X1)).lane(0);
    }

    /**
     * Rows of at most this many elements are read one at a time by {@link #dotPreparedRows}, longer ones three at a
     * time: with 16 KiB of activations or less, a row and the activations stay in L1, and one stream of weights a
     * thread runs faster than three. In-process harness on the Zen 5 VM (rows of the 1B Q4_0 file streamed from
     * memory, {@code dotPreparedRows} over 256 rows at a time, the middle two of six timings, two processes each):
     * two threads, 2,048 elements, one row at a time 17.5-21.7 GB/s against 14.8-18.8 for three; one thread 11.0-12.0
     * against 7.8-9.1; 4,096 elements 15.6-16.6 against 15.0-16.3 (two threads) and 7.8-8.9 against 7.6-8.3 (one);
     * 8,192 elements 10.9-11.5 against 14.1-17.8 (two threads), 8.4-8.8 against 10.8-10.9 (one). That is {@link
     * Blocks#ONE_ROW_MAX_COUNT}'s default; on the Intel Xeon VM of 2026-12-05, where it is 0, three rows at a time
     * were faster at 2,048 elements too: {@code bench -m 1b-q4_0.gguf -p 16 -n 64 -r 2 --profile}, two alternating
     * pairs, {@code ffn_gate+up} 10.3-10.4 GB/s through {@link #dotOctets} against 12.6-12.8, tg64 14.40-14.66
     * against 16.13-16.43 tok/s (a harness outside the repository, rows streamed from memory with two threads:
     * 8.6-10.3 against 10.0-11.5 GB/s; with the rows in L2 {@code dotOctets} was the faster, 15.4-16.1 against
     * 12.1-13.6).
     */
    static final int ONE_ROW_MAX_COUNT = Blocks.ONE_ROW_MAX_COUNT;

    /**
     * With 16 float lanes and rows longer than {@link #ONE_ROW_MAX_COUNT}, three rows at a time ({@link
     * #tripleByTable}), a third of the run apart so that the groups read three continuous streams of weights, the one
     * or two left over with the rows before them (computed twice, to the same bits: the one-row path for these rows,
     * {@link #dotByTable}, is otherwise used so rarely that it can still be running in C1's code, which boxes every
     * vector, long after the rest is compiled); otherwise one call a row.
     */
    @Override
    public void dotPreparedRows(MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                                float[] prepared, int preparedOffset, int count, float[] out, int outIndex) {
        Blocks.checkCount(count, QK, id());
        int r = 0;
        if (LEVELS != null && count > ONE_ROW_MAX_COUNT && rows >= 3) {
            int q = rows / 3;
            for (int i = 0; i < q; i++) {
                tripleByTable(src, offset + i * stride, q * stride, x, xOffset, count / QK, out, outIndex + i, q);
            }
            if (3 * q < rows) { // the last three rows again: those already done get the same bits
                tripleByTable(src, offset + (rows - 3) * stride, stride, x, xOffset, count / QK, out,
                        outIndex + rows - 3, 1);
            }
            return;
        }
        for (; r < rows; r++) {
            out[outIndex + r] = dotPrepared(src, offset + r * stride, x, xOffset, prepared, preparedOffset, count);
        }
    }

    /**
     * {@link #dotByTable} for three rows {@code stride} bytes apart in one loop (products {@code outStride} apart in
     * {@code out}), each block's two activation vectors loaded once for the three; each row's products and running
     * sum as {@code dotByTable} computes them, so the same bits.
     */
    private static void tripleByTable(MemorySegment src, long offset, long stride, float[] x, int xOffset, int blocks,
                                      float[] out, int outIndex, int outStride) {
        IntVector levels = LEVELS;
        FloatVector a0 = FloatVector.zero(FLOATS);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int base = xOffset + k * QK;
            FloatVector xl = FloatVector.fromArray(FLOATS, x, base);
            FloatVector xh = FloatVector.fromArray(FLOATS, x, base + 16);
            IntVector q = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, src, o + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
            a0 = q.and(0x0F).selectFrom(levels).reinterpretAsFloats().fma(xl, q.lanewise(VectorOperators.LSHR, 4)
                    .selectFrom(levels).reinterpretAsFloats().mul(xh)).fma(FloatVector.broadcast(FLOATS,
                    Blocks.fp16(src, o)), a0);
            q = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, src, o + stride + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
            a1 = q.and(0x0F).selectFrom(levels).reinterpretAsFloats().fma(xl, q.lanewise(VectorOperators.LSHR, 4)
                    .selectFrom(levels).reinterpretAsFloats().mul(xh)).fma(FloatVector.broadcast(FLOATS,
                    Blocks.fp16(src, o + stride)), a1);
            q = (IntVector) ByteVector.fromMemorySegment(BYTES_PER_LANE, src, o + 2 * stride + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
            a2 = q.and(0x0F).selectFrom(levels).reinterpretAsFloats().fma(xl, q.lanewise(VectorOperators.LSHR, 4)
                    .selectFrom(levels).reinterpretAsFloats().mul(xh)).fma(FloatVector.broadcast(FLOATS,
                    Blocks.fp16(src, o + 2 * stride)), a2);
        }
        // dotByTable's lane tree for each row, written out.
        a0 = a0.add(a0.rearrange(Lanes.X8));
        a1 = a1.add(a1.rearrange(Lanes.X8));
        a2 = a2.add(a2.rearrange(Lanes.X8));
        a0 = a0.add(a0.rearrange(Lanes.X4));
        a1 = a1.add(a1.rearrange(Lanes.X4));
        a2 = a2.add(a2.rearrange(Lanes.X4));
        a0 = a0.add(a0.rearrange(Lanes.X2));
        a1 = a1.add(a1.rearrange(Lanes.X2));
        a2 = a2.add(a2.rearrange(Lanes.X2));
        out[outIndex] = a0.add(a0.rearrange(Lanes.X1)).lane(0);
        out[outIndex + outStride] = a1.add(a1.rearrange(Lanes.X1)).lane(0);
        out[outIndex + 2 * outStride] = a2.add(a2.rearrange(Lanes.X1)).lane(0);
    }

    /**
     * {@return the product of the last block of the row at {@code offset} when it has an odd number of them (pair
     * loops), else 0}: scalar, read at absolute offsets (a row slice passed here could escape).
     */
    private static float lastBlock(MemorySegment src, long offset, float[] x, int xOffset, int blocks) {
        if (blocks % 2 == 0) {
            return 0;
        }
        long o = offset + (long) (blocks - 1) * BYTES;
        int base = xOffset + (blocks - 1) * QK;
        float last = 0;
        for (int j = 0; j < 16; j++) {
            int q = Blocks.u8(src, o + 2 + j);
            last += ((q & 0x0F) - 8) * x[base + j] + ((q >>> 4) - 8) * x[base + 16 + j];
        }
        return last * Blocks.fp16(src, o);
    }

    /**
     * With 16 float lanes, a copy with 16 rows side by side ({@link Q4_0Columns}): its decode products take seven
     * vector operations per 32 weights in its source (C2's code not read) where {@link #tripleByTable} takes more. The same bytes as
     * the file's blocks, laid out again.
     */
    @Override
    public Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        if (!w.format().id().equals(id())) {
            throw new IllegalArgumentException(w.name() + " is " + w.format().id() + ", not " + id());
        }
        return Q4_0Columns.pack(w, arena);
    }

    /**
     * True: a packed copy gives back each weight as {@code decode} does ({@link Q4_0Columns#decodeColumns}), so a
     * prompt's products may read it too, and the copy (as many bytes as the file's blocks) can take their place in
     * memory.
     */
    @Override
    public boolean packedCopyDecodes() {
        return true;
    }

    /** Q4_0 multiplies {@code q8_0-activations} codes in integer lanes ({@link #dotEncoded}). */
    @Override
    public boolean hasEncodedDot() {
        return true;
    }

    /**
     * True: a level {@code q - 8} times an fp16 scale and an int8 code times an fp16 scale are exact in float, each
     * block's integer sum is exact, and {@link #dotEncoded} adds the blocks in double.
     */
    @Override
    public boolean encodedDotIsExact() {
        return true;
    }

    /**
     * {@code sum_blocks d_w * d_x * sum((q - 8) * x)} over {@code q8_0-activations} blocks: each block's integer sum
     * exact, times the product of the two fp16 scales (exact in float), the blocks added in double, so the result is
     * the exact dot product of the decoded values up to double rounding ({@link #encodedDotIsExact}). Activations in
     * a heap segment ({@link Blocks#heapBytes}) with 256-bit vectors take the vector form ({@link #dotInt16}); others
     * the scalar form.
     */
    @Override
    public double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] a = Blocks.heapBytes(act);
        if (a != null && SHORTS != null) {
            return dotInt16(src, offset, a, Math.toIntExact(act.address() + actOffset),
                    blocks);
        }
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            long x = actOffset + (long) k * ACT_BYTES;
            int isum = 0;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(src, o + 2 + j);
                isum += ((q & 0x0F) - 8) * act.get(Blocks.I8, x + 2 + j) + ((q >>> 4) - 8) * act.get(Blocks.I8, x + 18 + j);
            }
            sum += (double) Blocks.fp16(src, o) * Blocks.fp16(act, x) * isum;
        }
        return sum;
    }

    /**
     * The vector form of {@link #dotEncoded}, two blocks an iteration. A block's 16 bytes widen to 16 int16 lanes; the
     * low and high nibbles less 8 times the 32 int8 codes (widened likewise) are int16 products of at most 8 * 128 in
     * magnitude, two added per lane; each int lane then adds its two int16 halves ({@code (v + (v << 16)) >> 16}:
     * exact, the sum is below 2^15), is widened to double and accumulated times {@code d_w * d_x} (each term exact in
     * double), so only the additions of terms round, in double. The API has no {@code vpmaddwd}/{@code vpmaddubsw},
     * but int16 lanes do 16 products an instruction where float lanes do 8. Until 2026-12-05 the terms were added in
     * float lanes, as llama.cpp's x86 dot adds them; in double, prompts can take the exact GEMM and still agree with
     * decode steps ({@link #encodedDotIsExact}), at the same speed on AVX-512 (docs/performance-notes.md, Kernels).
     */
    private static double dotInt16(MemorySegment row, long offset, byte[] a, int at, int blocks) {
        var s = SHORTS;
        var dv = DOUBLES;
        DoubleVector acc0 = DoubleVector.zero(dv);
        DoubleVector acc1 = acc0;
        DoubleVector acc2 = acc0; // the upper halves' sums where a double vector holds four lanes (AVX2)
        DoubleVector acc3 = acc0;
        int pairs = blocks / 2;
        for (int p = 0; p < pairs; p++) {
            long o = offset + (long) p * 2 * BYTES;
            int x = at + p * 2 * ACT_BYTES;
            double d0 = Blocks.fp16(row, o) * Blocks.fp16(a, x);
            double d1 = Blocks.fp16(row, o + BYTES) * Blocks.fp16(a, x + ACT_BYTES);
            ShortVector w0 = (ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
            ShortVector lo0 = (ShortVector) ByteVector.fromArray(BYTES_128, a, x + 2).convertShape(VectorOperators.B2S, s, 0);
            ShortVector hi0 = (ShortVector) ByteVector.fromArray(BYTES_128, a, x + 18).convertShape(VectorOperators.B2S, s, 0);
            IntVector v0 = w0.and((short) 0x0F).sub((short) 8).mul(lo0)
                    .add(w0.lanewise(VectorOperators.LSHR, 4).sub((short) 8).mul(hi0)).reinterpretAsInts();
            IntVector sum0 = v0.add(v0.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16);
            DoubleVector s0 = DoubleVector.broadcast(dv, d0);
            acc0 = ((DoubleVector) sum0.convertShape(VectorOperators.I2D, dv, 0)).fma(s0, acc0);
            ShortVector w1 = (ShortVector) ByteVector.fromMemorySegment(BYTES_128, row, o + BYTES + 2, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
            ShortVector lo1 = (ShortVector) ByteVector.fromArray(BYTES_128, a, x + ACT_BYTES + 2)
                    .convertShape(VectorOperators.B2S, s, 0);
            ShortVector hi1 = (ShortVector) ByteVector.fromArray(BYTES_128, a, x + ACT_BYTES + 18)
                    .convertShape(VectorOperators.B2S, s, 0);
            IntVector v1 = w1.and((short) 0x0F).sub((short) 8).mul(lo1)
                    .add(w1.lanewise(VectorOperators.LSHR, 4).sub((short) 8).mul(hi1)).reinterpretAsInts();
            IntVector sum1 = v1.add(v1.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16);
            DoubleVector s1 = DoubleVector.broadcast(dv, d1);
            acc1 = ((DoubleVector) sum1.convertShape(VectorOperators.I2D, dv, 0)).fma(s1, acc1);
            if (dv.length() == 4) {
                acc2 = ((DoubleVector) sum0.convertShape(VectorOperators.I2D, dv, 1)).fma(s0, acc2);
                acc3 = ((DoubleVector) sum1.convertShape(VectorOperators.I2D, dv, 1)).fma(s1, acc3);
            }
        }
        double last = 0;
        if (blocks % 2 != 0) { // an odd last block in scalar code
            long o = offset + (long) (blocks - 1) * BYTES;
            int x = at + (blocks - 1) * ACT_BYTES;
            int isum = 0;
            for (int j = 0; j < 16; j++) {
                int q = Blocks.u8(row, o + 2 + j);
                isum += ((q & 0x0F) - 8) * a[x + 2 + j] + ((q >>> 4) - 8) * a[x + 18 + j];
            }
            last = (double) (Blocks.fp16(row, o) * Blocks.fp16(a, x)) * isum;
        }
        // The lanes in a fixed tree, written out: a helper taking the vector could stay a call and box it.
        DoubleVector t = acc0.add(acc1).add(acc2.add(acc3));
        double sum = dv.length() == 8
                ? ((t.lane(0) + t.lane(4)) + (t.lane(2) + t.lane(6))) + ((t.lane(1) + t.lane(5)) + (t.lane(3) + t.lane(7)))
                : (t.lane(0) + t.lane(2)) + (t.lane(1) + t.lane(3));
        return sum + last;
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
