package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Optional;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * A Q6_K matrix laid out with 16 rows side by side, one row an int lane: the decode steps' products with float32
 * activations and the prompts' panels ({@link #decodeColumns}) read it instead of the file's super-blocks. The file's
 * row kernel ({@link Q6KQuantizer#dotPrepared}) loads a vector of prepared activations for every 16 weights, 1.25
 * floats a weight; over a Llama FFN's down projection (8,192 elements a row) those are 40 KiB, which with the weights
 * streaming past do not stay in the 48 KiB L1, and the kernel reads half as fast as over 2,048-element rows. Here each
 * activation is broadcast once for 16 rows (32 with two groups a step), so the activations' traffic is a sixteenth of
 * the weights'.
 *
 * <p>Each row's 6-bit levels are kept in int lanes, 16 levels in three ints: levels at bits 0, 6, 12, 18 and 24 of
 * each int (15 levels), and a sixteenth split over the three ints' bits 30-31 (its bits 0-1 in the first, 2-3 in the
 * second, 4-5 in the third). A level is read in place: the int {@code and} its six bits' mask, converted to float,
 * is the level times {@code 2^p}, exactly (six significant bits), and the activation it multiplies was scaled by
 * {@code 2^-p} when prepared ({@link #prepareFloats}; a power of two, so the same products unless the scaled
 * activation is subnormal, below 2^-102 in magnitude, as in the file's row kernel). The sixteenth is joined at bits
 * 24-29 by two bitwise blends. The {@code - 32} of the levels comes from each sub-block's sum of activations.
 *
 * <p>Layout: units of a pair of groups of 16 rows (a last group without a pair alone; as Q4_K's copy, {@link
 * Q4KColumns}), super-block after super-block; a unit's super-block of {@code U} groups takes {@code U} times {@value
 * #GROUP_BLOCK_BYTES} bytes, as its rows' super-blocks take in the file: the groups' fp16 {@code d} (16 a group), then
 * four sections of 64 elements (sub-blocks {@code 4s .. 4s + 3}): the four sub-blocks' int8 scales (16 bytes a group,
 * sub-block after sub-block), then four triples of ints, each int 64 bytes a group, the groups side by side. Slot
 * {@code k} of triple {@code t} (slots 0-4 in the first int, 5-9 in the second, 10-14 in the third, 15 split) holds
 * element {@code 4t + k / 4} of sub-block {@code 4s + k % 4}: each triple feeds every sub-block's running sum four
 * times, so that the kernel's products run in eight independent chains. The layout is this project's own.
 *
 * <p>A matrix with an infinite or NaN {@code d} is not packed (its products read the file as before). NOT VERIFIED on
 * CPUs without 16 float lanes: nothing is packed there. Nor where a thread reads several streams of weights fastest
 * ({@link KQuants#PACK_FOR_DECODE}: slower than the file's layout on an Intel Xeon VM).
 */
final class Q6KColumns extends KColumns {
    /** Bytes of one super-block of one group: what the 16 rows' super-blocks take in the file. */
    static final int GROUP_BLOCK_BYTES = GROUP * Q6KQuantizer.BYTES;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** Bytes a group of one section: four sub-blocks' scales, then four triples of ints. */
    private static final int SECTION = 4 * GROUP + 4 * 3 * 4 * GROUP;
    /** Bytes a group ahead of the first section: the 16 rows' {@code d}. */
    private static final int HEAD = 2 * GROUP;

    private Q6KColumns(WeightMatrix source, MemorySegment packed) {
        super(source, packed, GROUP_BLOCK_BYTES);
    }

    /**
     * {@return {@code w} packed, or empty where it cannot be}: without 16 float lanes, with rows not a multiple of
     * {@value #GROUP}, or with a {@code d} that is infinite or NaN ({@link KColumns#pack})
     */
    static Optional<PackedMatrix> pack(WeightMatrix w, Arena arena) {
        return pack(w, arena, GROUP_BLOCK_BYTES, Q6KColumns::new);
    }

    /** The bit of the int where slot {@code k}'s level is read (slot 15 is joined there). */
    private static int position(int k) {
        return k < 15 ? 6 * (k % 5) : 24;
    }

    /** The element of a super-block that slot {@code k} of triple {@code t} of section {@code s} holds. */
    private static int element(int s, int t, int k) {
        return 16 * (4 * s + k % 4) + 4 * t + k / 4;
    }

    /** {@return element {@code e}'s level (0-63) in a row's super-block of the file, staged in {@code b}} */
    private static int level(byte[] b, int e) {
        int h = e / 128;
        int r = e % 128;
        int l = r % 32;
        int quarter = r / 32;
        int ql = b[64 * h + l + 32 * (quarter & 1)] & 0xFF;
        int qh = b[128 + 32 * h + l] & 0xFF;
        return (quarter < 2 ? ql & 0x0F : ql >>> 4) | ((qh >>> 2 * quarter) & 3) << 4;
    }

    @Override
    boolean packBlock(byte[][] rows, int units, int u, byte[] unit) {
        int[] ints = new int[3];
        for (int l = 0; l < GROUP; l++) {
            byte[] row = rows[l];
            if ((row[209] & 0x7C) == 0x7C) { // d's exponent all ones: infinite or NaN
                return false;
            }
            unit[2 * GROUP * u + 2 * l] = row[208];
            unit[2 * GROUP * u + 2 * l + 1] = row[209];
            for (int s = 0; s < 4; s++) {
                int section = units * (HEAD + SECTION * s);
                for (int j = 0; j < 4; j++) {
                    unit[section + GROUP * (units * j + u) + l] = row[192 + 4 * s + j];
                }
                for (int t = 0; t < 4; t++) {
                    Arrays.fill(ints, 0);
                    for (int k = 0; k < 16; k++) {
                        int q = level(row, element(s, t, k));
                        if (k < 15) {
                            ints[k / 5] |= q << position(k);
                        } else {
                            for (int i = 0; i < 3; i++) {
                                ints[i] |= ((q >>> 2 * i) & 3) << 30;
                            }
                        }
                    }
                    for (int i = 0; i < 3; i++) {
                        int at = section + units * 4 * GROUP + 4 * GROUP * (units * (3 * t + i) + u) + 4 * l;
                        for (int k = 0; k < 4; k++) {
                            unit[at + k] = (byte) (ints[i] >>> 8 * k);
                        }
                    }
                }
            }
        }
        return true;
    }

    /**
     * Per section (64 elements) and triple, the activations of its 16 slots, each scaled by {@code 2^-p} for the bit
     * {@code p} its level is read at; then for each sub-block of 16, {@code -32} times the sum of its activations.
     */
    @Override
    public int preparedFloats() {
        return source().cols() + source().cols() / 16;
    }

    /** For each prepared float of a super-block, the element it takes ({@link #element}). */
    private static final int[] ELEMENTS = new int[Q6KQuantizer.QK];
    /** For each slot, the factor of its activation: {@code 2^-p}, {@code p} the bit its level is read at. */
    private static final float[] SCALES = new float[16];

    static {
        for (int i = 0; i < Q6KQuantizer.QK; i++) {
            ELEMENTS[i] = element(i / 64, i / 16 % 4, i % 16);
        }
        for (int k = 0; k < 16; k++) {
            SCALES[k] = Math.scalb(1f, -position(k));
        }
    }

    @Override
    public void prepareFloats(float[] x, int xOffset, float[] prepared) {
        int cols = source().cols();
        for (int b = 0; b < cols; b += Q6KQuantizer.QK) {
            for (int i = 0; i < Q6KQuantizer.QK; i++) {
                prepared[b + i] = x[xOffset + b + ELEMENTS[i]] * SCALES[i % 16];
            }
        }
        for (int j = 0; j < cols / 16; j++) {
            float sum = 0;
            for (int e = 0; e < 16; e++) {
                sum += x[xOffset + 16 * j + e];
            }
            prepared[cols + j] = -32 * sum;
        }
    }

    /** Masks of the levels read in place, at bits 0, 6, 12, 18 and 24. */
    private static final int M0 = 0x3F;
    private static final int M6 = 0x3F << 6;
    private static final int M12 = 0x3F << 12;
    private static final int M18 = 0x3F << 18;
    private static final int M24 = 0x3F << 24;

    /**
     * {@link #dotRows}' step for one section of one super-block of two groups (sub-blocks {@code 4s .. 4s + 3}): each
     * activation broadcast once for both groups, each level read in place; each sub-block's sum plus its activations'
     * {@code -32} sum, times the rows' scales, all times {@code d}, added to the 16 rows' products at {@code out[at]}
     * and {@code out[at2]}. Each row's product is {@code sum over sub-blocks of d * scale * (sum(q x) - 32 sum(x))}, the
     * format's {@code dot} to float rounding. The vector work is written out (a helper returning a vector may be left
     * out of line, and then boxes it).
     *
     * <p>Every Vector API call here that C2 dispatches on the vector's class is one this method makes itself: the
     * {@code lanewise} forms rather than {@code and}, {@code fma}, {@code add(float)}, {@code mul} or {@code
     * reinterpretAsFloats}, which make that call inside the Vector API, and {@code length()} asked before {@code
     * intoArray}. C2 takes the class of a vector it does not know yet (a loaded or converted one, a call's result) from
     * the call site's profile, and where such guesses have already failed at a site, it compiles the call there as a
     * real virtual call for other classes, which takes the vector as an object: from then on a compilation reaching the
     * site boxes vectors there at every step (read from the compilations' trees, not from HotSpot's source). The sites
     * inside the Vector API are shared by every kernel in the process, and the deoptimization log ({@code
     * -Xlog:deoptimization=debug}) showed four such failures at {@code FloatVector.intoArray}'s and at {@code
     * FloatVector.mul}'s in each of six Q4_K_M decode processes, 4.6-6.4 s in. About one such process in ten made
     * 180-226 young collections a second and ran {@code ffn_down} at 12.6-14.9 ms instead of about 8, its compilation
     * of this method (PrintInlining) with calls reached through those sites' profiles, the species check's failure call
     * parsed and intrinsics retried; that it was compiled after the failures, the others before, is inferred (NOT
     * VERIFIED: no compile times were logged with them). A site in this method has this method's profile only. Shifts
     * by a constant keep the scalar form (an immediate) where the vector's class is already known from a call before;
     * by a broadcast vector (a variable shift) {@code ffn_down} took 1.17x the time (medians of eight alternating
     * pairs).
     *
     * @param base  where group one's unit starts this super-block; {@code units} groups in it, the group {@code u1}-th
     * @param base2 the same for group two
     * @param b     the super-block
     * @param s     the section
     */
    @Override
    void section(long base, int units, int u1, long base2, int units2, int u2, float[] prepared, int b, int s,
                 float[] out, int at, int at2) {
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var i2f = VectorOperators.I2F;
        var and = VectorOperators.AND;
        var fma = VectorOperators.FMA;
        var shr = VectorOperators.LSHR;
        var blend = VectorOperators.BITWISE_BLEND;
        MemorySegment w = copy();
        IntVector m0 = IntVector.broadcast(ints, M0);
        IntVector m6 = IntVector.broadcast(ints, M6);
        IntVector m12 = IntVector.broadcast(ints, M12);
        IntVector m18 = IntVector.broadcast(ints, M18);
        IntVector m24 = IntVector.broadcast(ints, M24);
        IntVector t26 = IntVector.broadcast(ints, 3 << 26);
        IntVector t28 = IntVector.broadcast(ints, 3 << 28);
        long sec = base + (long) units * (HEAD + SECTION * s);
        long sec2 = base2 + (long) units2 * (HEAD + SECTION * s);
        long next = 4L * GROUP * units; // from one int of a triple to the next
        long next2 = 4L * GROUP * units2;
        long lv = sec + next + 4L * GROUP * u1;
        long lv2 = sec2 + next2 + 4L * GROUP * u2;
        FloatVector a0 = FloatVector.zero(f);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        FloatVector c0 = a0;
        FloatVector c1 = a0;
        FloatVector c2 = a0;
        FloatVector c3 = a0;
        int y = Q6KQuantizer.QK * b + 64 * s;
        for (int t = 0; t < 4; t++, y += 16) {
            long o = lv + 3 * next * t;
            long o2 = lv2 + 3 * next2 * t;
            IntVector i0 = IntVector.fromMemorySegment(ints, w, o, LE);
            IntVector i1 = IntVector.fromMemorySegment(ints, w, o + next, LE);
            IntVector i2 = IntVector.fromMemorySegment(ints, w, o + 2 * next, LE);
            IntVector j0 = IntVector.fromMemorySegment(ints, w, o2, LE);
            IntVector j1 = IntVector.fromMemorySegment(ints, w, o2 + next2, LE);
            IntVector j2 = IntVector.fromMemorySegment(ints, w, o2 + 2 * next2, LE);
            // Slot k to sub-block k % 4: a (c) the first (second) group's sums of sub-blocks 4s .. 4s + 3.
            FloatVector x = FloatVector.broadcast(f, prepared[y]);
            a0 = ((FloatVector) i0.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, a0);
            c0 = ((FloatVector) j0.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, c0);
            x = FloatVector.broadcast(f, prepared[y + 1]);
            a1 = ((FloatVector) i0.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, a1);
            c1 = ((FloatVector) j0.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, c1);
            x = FloatVector.broadcast(f, prepared[y + 2]);
            a2 = ((FloatVector) i0.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, a2);
            c2 = ((FloatVector) j0.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, c2);
            x = FloatVector.broadcast(f, prepared[y + 3]);
            a3 = ((FloatVector) i0.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, a3);
            c3 = ((FloatVector) j0.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, c3);
            x = FloatVector.broadcast(f, prepared[y + 4]);
            a0 = ((FloatVector) i0.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, a0);
            c0 = ((FloatVector) j0.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, c0);
            x = FloatVector.broadcast(f, prepared[y + 5]);
            a1 = ((FloatVector) i1.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, a1);
            c1 = ((FloatVector) j1.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, c1);
            x = FloatVector.broadcast(f, prepared[y + 6]);
            a2 = ((FloatVector) i1.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, a2);
            c2 = ((FloatVector) j1.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, c2);
            x = FloatVector.broadcast(f, prepared[y + 7]);
            a3 = ((FloatVector) i1.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, a3);
            c3 = ((FloatVector) j1.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, c3);
            x = FloatVector.broadcast(f, prepared[y + 8]);
            a0 = ((FloatVector) i1.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, a0);
            c0 = ((FloatVector) j1.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, c0);
            x = FloatVector.broadcast(f, prepared[y + 9]);
            a1 = ((FloatVector) i1.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, a1);
            c1 = ((FloatVector) j1.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, c1);
            x = FloatVector.broadcast(f, prepared[y + 10]);
            a2 = ((FloatVector) i2.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, a2);
            c2 = ((FloatVector) j2.lanewise(and, m0).convertShape(i2f, f, 0)).lanewise(fma, x, c2);
            x = FloatVector.broadcast(f, prepared[y + 11]);
            a3 = ((FloatVector) i2.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, a3);
            c3 = ((FloatVector) j2.lanewise(and, m6).convertShape(i2f, f, 0)).lanewise(fma, x, c3);
            x = FloatVector.broadcast(f, prepared[y + 12]);
            a0 = ((FloatVector) i2.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, a0);
            c0 = ((FloatVector) j2.lanewise(and, m12).convertShape(i2f, f, 0)).lanewise(fma, x, c0);
            x = FloatVector.broadcast(f, prepared[y + 13]);
            a1 = ((FloatVector) i2.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, a1);
            c1 = ((FloatVector) j2.lanewise(and, m18).convertShape(i2f, f, 0)).lanewise(fma, x, c1);
            x = FloatVector.broadcast(f, prepared[y + 14]);
            a2 = ((FloatVector) i2.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, a2);
            c2 = ((FloatVector) j2.lanewise(and, m24).convertShape(i2f, f, 0)).lanewise(fma, x, c2);
            // Slot 15: its bits 0-1, 2-3 and 4-5 from the three ints' bits 30-31, joined at bits 24-29.
            x = FloatVector.broadcast(f, prepared[y + 15]);
            IntVector top = i0.lanewise(shr, 6).lanewise(blend, i1.lanewise(shr, 4), t26)
                    .lanewise(blend, i2.lanewise(shr, 2), t28).lanewise(and, m24);
            a3 = ((FloatVector) top.convertShape(i2f, f, 0)).lanewise(fma, x, a3);
            IntVector top2 = j0.lanewise(shr, 6).lanewise(blend, j1.lanewise(shr, 4), t26)
                    .lanewise(blend, j2.lanewise(shr, 2), t28).lanewise(and, m24);
            c3 = ((FloatVector) top2.convertShape(i2f, f, 0)).lanewise(fma, x, c3);
        }
        // Each sub-block's sum plus -32 times its activations' sum, times the rows' scales; all times d.
        var bytes = ByteVector.SPECIES_128;
        var b2f = VectorOperators.B2F;
        var add = VectorOperators.ADD;
        var mul = VectorOperators.MUL;
        int sums = source().cols() + 16 * b + 4 * s;
        long sc = sec + (long) GROUP * u1;
        long sc2 = sec2 + (long) GROUP * u2;
        long nextScale = (long) GROUP * units;
        long nextScale2 = (long) GROUP * units2;
        FloatVector x0 = FloatVector.broadcast(f, prepared[sums]);
        FloatVector x1 = FloatVector.broadcast(f, prepared[sums + 1]);
        FloatVector x2 = FloatVector.broadcast(f, prepared[sums + 2]);
        FloatVector x3 = FloatVector.broadcast(f, prepared[sums + 3]);
        FloatVector r = a0.lanewise(add, x0).lanewise(mul, (FloatVector) ByteVector.fromMemorySegment(bytes, w, sc, LE)
                .convertShape(b2f, f, 0));
        r = a1.lanewise(add, x1).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w, sc + nextScale, LE)
                .convertShape(b2f, f, 0), r);
        r = a2.lanewise(add, x2).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w,
                sc + 2 * nextScale, LE).convertShape(b2f, f, 0), r);
        r = a3.lanewise(add, x3).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w,
                sc + 3 * nextScale, LE).convertShape(b2f, f, 0), r);
        FloatVector r2 = c0.lanewise(add, x0).lanewise(mul, (FloatVector) ByteVector.fromMemorySegment(bytes, w, sc2,
                LE).convertShape(b2f, f, 0));
        r2 = c1.lanewise(add, x1).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w,
                sc2 + nextScale2, LE).convertShape(b2f, f, 0), r2);
        r2 = c2.lanewise(add, x2).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w,
                sc2 + 2 * nextScale2, LE).convertShape(b2f, f, 0), r2);
        r2 = c3.lanewise(add, x3).lanewise(fma, (FloatVector) ByteVector.fromMemorySegment(bytes, w,
                sc2 + 3 * nextScale2, LE).convertShape(b2f, f, 0), r2);
        // The fp16 d as in Q4_K's copy (SCALE_BITS); reinterpretShape for reinterpretAsFloats (the same bits).
        var halves = ShortVector.SPECIES_256;
        var s2i = VectorOperators.S2I;
        FloatVector bias = FloatVector.broadcast(f, FP16_BIAS);
        IntVector by13 = IntVector.broadcast(ints, 13);
        IntVector scaleBits = IntVector.broadcast(ints, SCALE_BITS);
        FloatVector d = ((FloatVector) ((IntVector) ShortVector.fromMemorySegment(halves, w, base + 2L * GROUP * u1, LE)
                .convertShape(s2i, ints, 0)).lanewise(VectorOperators.LSHL, by13).lanewise(and, scaleBits)
                .reinterpretShape(f, 0)).lanewise(mul, bias);
        FloatVector d2 = ((FloatVector) ((IntVector) ShortVector.fromMemorySegment(halves, w, base2 + 2L * GROUP * u2,
                LE).convertShape(s2i, ints, 0)).lanewise(VectorOperators.LSHL, by13).lanewise(and, scaleBits)
                .reinterpretShape(f, 0)).lanewise(mul, bias);
        // Both sums read before either is stored: a group computed as both stores the same bits twice.
        FloatVector sum = r.lanewise(fma, d, FloatVector.fromArray(f, out, at));
        FloatVector sum2 = r2.lanewise(fma, d2, FloatVector.fromArray(f, out, at2));
        // One lane a row, checked here so that intoArray, which asks the vector its length and species, is reached
        // with the vector's class known (the guess made at this call, from this method's profile): in most
        // compilations, not all (the performance notes, Kernels, 2026-12-07).
        if (sum.length() != GROUP || sum2.length() != GROUP) {
            throw new AssertionError("a section's sums have one lane a row");
        }
        sum.intoArray(out, at);
        sum2.intoArray(out, at2);
    }

    /** {@link #decodeBlock}'s {@code d * scale} of a section's four sub-blocks, 16 rows each: a buffer a thread. */
    private static final ThreadLocal<float[]> FACTORS = ThreadLocal.withInitial(() -> new float[4 * GROUP]);

    /**
     * A super-block of 16 rows column by column: each value is {@code (q - 32) * (d * scale)}, the format's {@code decode}
     * to the bit (the level's bits taken out of its int exactly, {@code d * scale} the same float product).
     */
    @Override
    void decodeBlock(long base, int units, int u, float[] dst, int at, int dstStride) {
        var f = FloatVector.SPECIES_512;
        var ints = IntVector.SPECIES_512;
        var bytes = ByteVector.SPECIES_128;
        var halves = ShortVector.SPECIES_256;
        IntVector t26 = IntVector.broadcast(ints, 3 << 26);
        IntVector t28 = IntVector.broadcast(ints, 3 << 28);
        MemorySegment w = copy();
        float[] factors = FACTORS.get();
        long next = 4L * GROUP * units;
        FloatVector d = ((IntVector) ShortVector.fromMemorySegment(halves, w, base + 2L * GROUP * u, LE)
                .convertShape(VectorOperators.S2I, ints, 0)).lanewise(VectorOperators.LSHL, 13)
                .and(SCALE_BITS).reinterpretAsFloats().mul(FP16_BIAS);
        for (int s = 0; s < 4; s++) {
            long sec = base + (long) units * (HEAD + SECTION * s);
            long lv = sec + next + 4L * GROUP * u;
            for (int j = 0; j < 4; j++) { // the section's four sub-blocks' d * scale, for the slots below
                d.mul((FloatVector) ByteVector.fromMemorySegment(bytes, w, sec + (long) GROUP * (units * j + u), LE)
                        .convertShape(VectorOperators.B2F, f, 0)).intoArray(factors, GROUP * j);
            }
            for (int t = 0; t < 4; t++) {
                long o = lv + 3 * next * t;
                int col = at + (64 * s + 4 * t) * dstStride;
                for (int i = 0; i < 3; i++) {
                    IntVector v = IntVector.fromMemorySegment(ints, w, o + next * i, LE);
                    for (int k = 5 * i; k < 5 * i + 5; k++) {
                        IntVector level = v.lanewise(VectorOperators.LSHR, position(k)).and(0x3F);
                        ((FloatVector) level.sub(32).convertShape(VectorOperators.I2F, f, 0))
                                .mul(FloatVector.fromArray(f, factors, GROUP * (k % 4)))
                                .intoArray(dst, col + (16 * (k % 4) + k / 4) * dstStride);
                    }
                }
                IntVector level = IntVector.fromMemorySegment(ints, w, o, LE)
                        .lanewise(VectorOperators.LSHR, 6)
                        .lanewise(VectorOperators.BITWISE_BLEND, IntVector.fromMemorySegment(ints, w, o + next, LE)
                                .lanewise(VectorOperators.LSHR, 4), t26)
                        .lanewise(VectorOperators.BITWISE_BLEND, IntVector.fromMemorySegment(ints, w, o + 2 * next,
                                LE).lanewise(VectorOperators.LSHR, 2), t28)
                        .lanewise(VectorOperators.LSHR, 24);
                ((FloatVector) level.sub(32).convertShape(VectorOperators.I2F, f, 0))
                        .mul(FloatVector.fromArray(f, factors, GROUP * 3))
                        .intoArray(dst, col + (16 * 3 + 3) * dstStride);
            }
        }
    }
}
