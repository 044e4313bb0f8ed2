package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Optional;
import java.util.stream.IntStream;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * A Q4_K matrix laid out with 16 rows side by side, one row a float lane: the decode steps' products with float32
 * activations and the prompts' panels ({@link #decodeColumns}) read it instead of the file's super-blocks. In the file
 * a product of one activation row works along a row: the nibbles of one vector are 128 elements of that row, and the
 * activations have to be laid out in the nibbles' order and loaded as vectors, one per 16 weights ({@link
 * Q4KQuantizer#dotPrepared}). Here a 16-byte load widened to 16 int lanes holds one byte of each of 16 rows; its two
 * nibbles are elements {@code 64c + i} and {@code 64c + 32 + i} of every row (sub-blocks {@code 2c} and {@code 2c +
 * 1}), masked in place, converted to floats and multiplied with the broadcast activations {@code x[64c + i]} and
 * {@code x[64c + 32 + i]} into 16 rows' sums at once; each sub-block's sums are then scaled by the 16 rows' {@code d
 * * scale} and the minimum terms come from the 16 rows' {@code min} times the sub-block's sum of activations. The
 * layout is this project's own, the same idea as Q4_0's copy ({@code Q4_0Columns} in the q4_0 module).
 *
 * <p>Layout: the rows' super-blocks in units of a pair of groups of 16 rows (a last group without a pair alone),
 * unit after unit and, within a unit, super-block after super-block ({@link Blocks#groupBlockOffset} gives
 * where each starts). A unit's super-block of {@code U} groups takes {@code U} times {@value #GROUP_BLOCK_BYTES} bytes,
 * as its rows' super-blocks take in the file, in the order the kernel reads them: the groups' fp16 {@code d} (16 a
 * group, group after group), their fp16 {@code dmin}, one little-endian int a row with the two high bits of the scale
 * of sub-block {@code j} at bits {@code 2j} and of its min at bits {@code 16 + 2j}; then one section per pair of
 * sub-blocks {@code 2c} and {@code 2c + 1}: for each of the two, 16 bytes a group, byte {@code l} holding the low four
 * bits of row {@code l}'s 6-bit scale in its low nibble and of its 6-bit min in its high nibble; then for each {@code i
 * < 32}, 16 bytes a group, byte {@code l} holding row {@code l}'s {@code qs[32c + i]} as the file does. So {@link
 * #dotRows}, which takes a pair at a time, reads a pair's bytes in the order they lie, the nibbles of both groups side
 * by side. Laid out instead with each group's super-block whole and a pair's two one after the other, the kernel read
 * 15 GB/s from L2 but 8.5 streamed from memory; with the nibbles side by side and the low scale bits at the end of the
 * unit's header, 12.8 streamed (one thread, harness outside the repository, Zen 5 VM, 2026-12-06).
 *
 * <p>A matrix with an infinite or NaN {@code d} or {@code dmin} is not packed (they are converted in int lanes by a
 * shift and a multiply that keep every finite fp16, subnormals included, and not those); its products read the file as
 * before. NOT VERIFIED on CPUs without 16 float lanes: nothing is packed there. Its speed was measured faster on an
 * AMD Zen 5 VM, with pairs as units; on an Intel Xeon VM it was slower than the file's layout with or without
 * pairs, so the format makes no copy where a thread reads several streams fastest ({@link KQuants#PACK_FOR_DECODE}).
 */
final class Q4KColumns extends KColumns {
    /** Bytes of one super-block of one group: what the 16 rows' super-blocks take in the file. */
    static final int GROUP_BLOCK_BYTES = GROUP * Q4KQuantizer.BYTES;
    /** Sub-blocks of 32 elements in a super-block. */
    private static final int SUBS = 8;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** The float bits of {@code q} in lane {@code q}: a nibble as a lane index selects its level (in the panels). */
    private static final IntVector LEVELS = IntVector.fromArray(IntVector.SPECIES_512,
            IntStream.range(0, 16).map(q -> Float.floatToRawIntBits(q)).toArray(), 0);

    private Q4KColumns(WeightMatrix source, MemorySegment packed) {
        super(source, packed, GROUP_BLOCK_BYTES);
    }

    /**
     * {@return {@code w} packed, or empty where it cannot be}: without 16 float lanes, with rows not a multiple of
     * {@value #GROUP}, or with a {@code d} or {@code dmin} that is infinite or NaN ({@link KColumns#pack})
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena) {
        return pack(w, arena, GROUP_BLOCK_BYTES, Q4KColumns::new);
    }

    /** Bytes a group ahead of a unit's fields: {@code d} 0, {@code dmin} 32, the scales' high bits 64, sections 128. */
    private static final int DMIN = 2 * GROUP;
    private static final int HIGH = 4 * GROUP;
    private static final int HEAD = 8 * GROUP;
    /** Bytes a group of one section: two sub-blocks' low scale bits, then 32 bytes of nibbles. */
    private static final int SECTION = 34 * GROUP;

    @Override
    boolean packBlock(byte[][] rows, int units, int u, byte[] unit) {
        for (int l = 0; l < GROUP; l++) {
            byte[] row = rows[l];
            for (int h = 0; h < 2; h++) { // d, then dmin
                if ((row[2 * h + 1] & 0x7C) == 0x7C) { // exponent all ones: infinite or NaN
                    return false;
                }
                int at = units * DMIN * h + 2 * GROUP * u + 2 * l;
                unit[at] = row[2 * h];
                unit[at + 1] = row[2 * h + 1];
            }
            int high = 0;
            for (int j = 0; j < SUBS; j++) {
                int sc = KQuants.scale(row, 0, j);
                int m = KQuants.min(row, 0, j);
                unit[units * (HEAD + SECTION * (j / 2)) + GROUP * (units * (j % 2) + u) + l] =
                        (byte) ((sc & 0x0F) | (m & 0x0F) << 4);
                high |= (sc >>> 4) << (2 * j) | (m >>> 4) << (16 + 2 * j);
            }
            for (int k = 0; k < 4; k++) {
                unit[units * HIGH + 4 * GROUP * u + 4 * l + k] = (byte) (high >>> (8 * k));
            }
            for (int i = 0; i < 128; i++) {
                int at = units * (HEAD + SECTION * (i / 32)) + GROUP * (units * (2 + i % 32) + u) + l;
                unit[at] = row[16 + i];
            }
        }
        return true;
    }

    /** The activations themselves, which the kernel broadcasts one at a time, then the sum of each sub-block's 32. */
    @Override
    public int preparedFloats() {
        return source().cols() + source().cols() / 32;
    }

    @Override
    public void prepareFloats(float[] x, int xOffset, float[] prepared) {
        int cols = source().cols();
        System.arraycopy(x, xOffset, prepared, 0, cols);
        var sp = KQuants.FLOATS;
        for (int s = 0; s < cols / 32; s++) {
            FloatVector sum = FloatVector.zero(sp);
            for (int l = 0; l < 32; l += sp.length()) {
                sum = sum.add(FloatVector.fromArray(sp, x, xOffset + 32 * s + l));
            }
            prepared[cols + s] = KQuants.sum(sum);
        }
    }

    /**
     * {@link #dotRows}' step for one section of one super-block of two groups, the pair of sub-blocks {@code 2c} and
     * {@code 2c + 1}: 32 byte loads of each group, each widened to 16 int lanes, its low and high nibbles masked in
     * place ({@code & 0x0F} and {@code & 0xF0}), converted to floats and multiplied with {@code x[64c + i]} and {@code
     * x[64c + 32 + i]} (each broadcast once for both groups) into four running sums (low and high nibbles of each
     * group; the high nibbles' sums, 16 times their levels', are scaled by 2^-4 after the loop: exact, so the same
     * bits as the levels themselves would give, short of overflow or subnormal sums); each sub-block's sum times the 16
     * rows' 6-bit scales, and the sub-block's activation sum times their mins; those two sums times {@code d} and
     * {@code dmin} added into the rows' products at {@code out[at]} and {@code out[at2]}. Each row's product is {@code
     * sum over sub-blocks of d * scale * sum(q x) - dmin * min * sum(x)}, as the format's {@code dot} computes it, to
     * float rounding.
     *
     * <p>The nibbles were first looked up as floats by lane permute of a 16-entry table (a shift, the permute's index
     * wrap and {@code vpermd} for the high one); masked in place and converted, the shift and the wrap go. Harness
     * (outside the repository, one thread, 2 MiB of rows): 18.67-19.53 against 16.80-17.33 GB/s; streamed by two
     * threads, even (24.8-27.8 against 25.6-27.6). In the model, {@code bench -m 1b-q4_k_m.gguf -p 16 -n 64 -r 2
     * --verify-tokens 0 --profile}, eleven alternating pairs (Zen 5 VM, 2026-12-06): tg64 faster in eight, e.g. 31.81,
     * 30.63, 32.74, 32.35 against 23.41, 29.22, 30.80, 29.41 tok/s, {@code ffn_gate+up} 0.81-0.93 of the permute form's
     * time in those eight.
     *
     * <p>{@code bench -m 1b-q4_k_m.gguf -p 16 -n 32 -r 2 -t 1 --profile --verify-tokens 0}, against the file's layout
     * ({@code -Ddev.prefill4j.cpu.packedDecode=false}) in the same build, four alternating pairs: {@code ffn_gate+up}
     * 13.3-14.8 against 11.3-12.5 GB/s, tg32 16.83, 15.94, 15.70, 15.94 against 16.04, 15.65, 15.54, 14.70 tok/s. With
     * two threads the gain mostly goes (with a super-block a call, four pairs: tg64 29.76, 30.56, 26.25, 29.22 against
     * 29.54, 28.53, 28.80, 29.03 tok/s; {@code ffn_gate+up} 22.1-23.3 against 21.7-22.2 GB/s): both layouts then read
     * at about 22-23 GB/s, which the Q4_0 file's copy passes (26.8), for reasons not found (Zen 5 VM, 2026-12-06).
     *
     * <p>A method of its own, called once a section, so that C2 compiles it whole after a few hundred calls rather than
     * on stack replacement inside a longer loop: with the super-block's four sections in one method, called from
     * {@code dotRows}' loops, the compilation on stack replacement took an arena of 250-265 MB (87 MB with a
     * super-block a call; the normal compilations 31-35 MB; {@code -XX:CompileCommand=memstat}), and while it ran
     * during the first prompt the process's peak RSS rose past the model's aim.
     *
     * @param base  where group one's unit starts this super-block; {@code units} groups in it, the group {@code u1}-th
     * @param base2 the same for group two
     * @param b     the super-block
     * @param c     the section
     */
    @Override
    void section(long base, int units, int u1, long base2, int units2, int v2, float[] prepared, int b, int c,
                 float[] out, int at, int at2) {
        int xb = b * Q4KQuantizer.QK; // the super-block's first activation
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_128;
        var b2i = VectorOperators.ZERO_EXTEND_B2I;
        var halves = ShortVector.SPECIES_256;
        var s2i = VectorOperators.S2I;
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        MemorySegment w = copy();
        int sums = source().cols() + xb / 32;
        long sectionAt = base + HEAD * units + GROUP * u1;
        long sectionAt2 = base2 + HEAD * units2 + GROUP * v2;
        long sectionBytes = (long) SECTION * units;
        long sectionBytes2 = (long) SECTION * units2;
        long next = (long) GROUP * units; // from one sub-block's or byte's 16 bytes to the next
        long next2 = (long) GROUP * units2;
        // The super-block's d, dmin and the scales' high bits (read again by each of its sections, from L1), then the
        // section's low scale bits and nibbles, in the order they lie. The fp16 factors as in Q4_0's copy (SCALE_BITS).
        long dAt = base + 2L * GROUP * u1;
        long dAt2 = base2 + 2L * GROUP * v2;
        long dminAt = dAt + (long) DMIN * units;
        long dminAt2 = dAt2 + (long) DMIN * units2;
        FloatVector d = ((IntVector) ShortVector.fromMemorySegment(halves, w, dAt, LE).convertShape(s2i, ints, 0))
                .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
        FloatVector d2 = ((IntVector) ShortVector.fromMemorySegment(halves, w, dAt2, LE).convertShape(s2i, ints, 0))
                .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
        FloatVector dmin = ((IntVector) ShortVector.fromMemorySegment(halves, w, dminAt, LE).convertShape(s2i, ints, 0))
                .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
        FloatVector dmin2 = ((IntVector) ShortVector.fromMemorySegment(halves, w, dminAt2, LE).convertShape(s2i, ints,
                0)).lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
        IntVector high = IntVector.fromMemorySegment(ints, w, base + HIGH * units + 4L * GROUP * u1, LE);
        IntVector high2 = IntVector.fromMemorySegment(ints, w, base2 + HIGH * units2 + 4L * GROUP * v2, LE);
        FloatVector s0 = FloatVector.zero(f);
        FloatVector s1 = s0;
        FloatVector s2 = s0;
        FloatVector s3 = s0;
        int x = xb + 64 * c;
        long lowAt = sectionAt + sectionBytes * c;
        long lowAt2 = sectionAt2 + sectionBytes2 * c;
        long q0 = lowAt + 2 * next;
        long q20 = lowAt2 + 2 * next2;
        for (int i = 0; i < 32; i++) {
            FloatVector x0 = FloatVector.broadcast(f, prepared[x + i]);
            FloatVector x1 = FloatVector.broadcast(f, prepared[x + 32 + i]);
            IntVector q = (IntVector) ByteVector.fromMemorySegment(bytes, w, q0 + next * i, LE)
                    .convertShape(b2i, ints, 0);
            s0 = ((FloatVector) q.and(0x0F).convertShape(VectorOperators.I2F, f, 0)).fma(x0, s0);
            s1 = ((FloatVector) q.and(0xF0).convertShape(VectorOperators.I2F, f, 0)).fma(x1, s1);
            IntVector q2 = (IntVector) ByteVector.fromMemorySegment(bytes, w, q20 + next2 * i, LE)
                    .convertShape(b2i, ints, 0);
            s2 = ((FloatVector) q2.and(0x0F).convertShape(VectorOperators.I2F, f, 0)).fma(x0, s2);
            s3 = ((FloatVector) q2.and(0xF0).convertShape(VectorOperators.I2F, f, 0)).fma(x1, s3);
        }
        s1 = s1.mul(0x1p-4f);
        s3 = s3.mul(0x1p-4f);
        // Sub-blocks 2c (low nibbles) and 2c + 1 (high): the 6-bit scales and mins of the 16 rows, each
        // its low four bits and its two high bits moved to bits 4-5 (written out here: a helper returning
        // a vector may be left out of line, and then boxes it).
        int j = 2 * c;
        int sh = 2 * j;
        FloatVector x0 = FloatVector.broadcast(f, prepared[sums + j]);
        FloatVector x1 = FloatVector.broadcast(f, prepared[sums + j + 1]);
        IntVector lo = (IntVector) ByteVector.fromMemorySegment(bytes, w, lowAt, LE)
                .convertShape(b2i, ints, 0);
        IntVector lo1 = (IntVector) ByteVector.fromMemorySegment(bytes, w, lowAt + next, LE)
                .convertShape(b2i, ints, 0);
        IntVector hs = high.lanewise(VectorOperators.LSHR, sh);
        FloatVector t = s0.mul((FloatVector) lo.and(0x0F).or(hs.and(3).lanewise(VectorOperators.LSHL, 4))
                .convertShape(VectorOperators.I2F, f, 0));
        t = s1.fma((FloatVector) lo1.and(0x0F).or(hs.and(12).lanewise(VectorOperators.LSHL, 2))
                .convertShape(VectorOperators.I2F, f, 0), t);
        IntVector hm = high.lanewise(VectorOperators.LSHR, 16 + sh);
        FloatVector u = ((FloatVector) lo.lanewise(VectorOperators.LSHR, 4).or(hm.and(3).lanewise(VectorOperators.LSHL,
                4)).convertShape(VectorOperators.I2F, f, 0)).mul(x0);
        u = ((FloatVector) lo1.lanewise(VectorOperators.LSHR, 4).or(hm.and(12).lanewise(VectorOperators.LSHL,
                2)).convertShape(VectorOperators.I2F, f, 0)).fma(x1, u);
        IntVector lo2 = (IntVector) ByteVector.fromMemorySegment(bytes, w, lowAt2, LE)
                .convertShape(b2i, ints, 0);
        IntVector lo21 = (IntVector) ByteVector.fromMemorySegment(bytes, w, lowAt2 + next2, LE)
                .convertShape(b2i, ints, 0);
        IntVector hs2 = high2.lanewise(VectorOperators.LSHR, sh);
        FloatVector t2 = s2.mul((FloatVector) lo2.and(0x0F).or(hs2.and(3).lanewise(VectorOperators.LSHL, 4))
                .convertShape(VectorOperators.I2F, f, 0));
        t2 = s3.fma((FloatVector) lo21.and(0x0F).or(hs2.and(12).lanewise(VectorOperators.LSHL, 2))
                .convertShape(VectorOperators.I2F, f, 0), t2);
        IntVector hm2 = high2.lanewise(VectorOperators.LSHR, 16 + sh);
        FloatVector u2 = ((FloatVector) lo2.lanewise(VectorOperators.LSHR, 4).or(hm2.and(3).lanewise(
                VectorOperators.LSHL, 4)).convertShape(VectorOperators.I2F, f, 0)).mul(x0);
        u2 = ((FloatVector) lo21.lanewise(VectorOperators.LSHR, 4).or(hm2.and(12).lanewise(
                VectorOperators.LSHL, 2)).convertShape(VectorOperators.I2F, f, 0)).fma(x1, u2);
        FloatVector sum = FloatVector.fromArray(f, out, at).add(t.mul(d).sub(u.mul(dmin)));
        FloatVector sum2 = FloatVector.fromArray(f, out, at2).add(t2.mul(d2).sub(u2.mul(dmin2)));
        sum.intoArray(out, at);
        sum2.intoArray(out, at2);
    }

    /**
     * A super-block of 16 rows column by column: the nibbles of a byte load are elements {@code 64c + i} and {@code 64c
     * + 32 + i} of 16 rows, already transposed. Each value is {@code q * (d * scale) + (-dmin * min)} in that order, the
     * format's {@code decode} to the bit (both factors are exact products in float).
     */
    @Override
    void decodeBlock(long base, int units, int u, float[] dst, int at, int dstStride) {
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_128;
        var b2i = VectorOperators.ZERO_EXTEND_B2I;
        var halves = ShortVector.SPECIES_256;
        var s2i = VectorOperators.S2I;
        IntVector levels = LEVELS;
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        MemorySegment w = copy();
        long next = (long) GROUP * units;
        long section = (long) SECTION * units;
        long dAt = base + 2L * GROUP * u;
        FloatVector d = ((IntVector) ShortVector.fromMemorySegment(halves, w, dAt, LE).convertShape(s2i, ints, 0))
                .lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS).reinterpretAsFloats().mul(bias);
        FloatVector dmin = ((IntVector) ShortVector.fromMemorySegment(halves, w, dAt + (long) DMIN * units, LE)
                .convertShape(s2i, ints, 0)).lanewise(VectorOperators.LSHL, 13).and(SCALE_BITS)
                .reinterpretAsFloats().mul(bias);
        IntVector high = IntVector.fromMemorySegment(ints, w, base + HIGH * units + 4L * GROUP * u, LE);
        long sectionAt = base + HEAD * units + GROUP * u;
        for (int j = 0; j < SUBS; j++) {
            long lowAt = sectionAt + section * (j / 2) + next * (j % 2);
            IntVector lo = (IntVector) ByteVector.fromMemorySegment(bytes, w, lowAt, LE).convertShape(b2i, ints, 0);
            // The 6-bit scales and mins as in section.
            FloatVector factor = d.mul((FloatVector) lo.and(0x0F).or(high.lanewise(VectorOperators.LSHR, 2 * j)
                    .and(3).lanewise(VectorOperators.LSHL, 4)).convertShape(VectorOperators.I2F, f, 0));
            FloatVector offset = dmin.mul((FloatVector) lo.lanewise(VectorOperators.LSHR, 4).or(high.lanewise(
                    VectorOperators.LSHR, 16 + 2 * j).and(3).lanewise(VectorOperators.LSHL, 4)).convertShape(
                    VectorOperators.I2F, f, 0)).neg();
            boolean highNibble = (j & 1) == 1;
            long q0 = sectionAt + section * (j / 2) + 2 * next;
            int col = at + 32 * j * dstStride;
            for (int i = 0; i < 32; i++) {
                IntVector q = (IntVector) ByteVector.fromMemorySegment(bytes, w, q0 + next * i, LE)
                        .convertShape(b2i, ints, 0);
                IntVector level = highNibble ? q.lanewise(VectorOperators.LSHR, 4) : q.and(0x0F);
                level.selectFrom(levels).reinterpretAsFloats().mul(factor).add(offset)
                        .intoArray(dst, col + i * dstStride);
            }
        }
    }
}
