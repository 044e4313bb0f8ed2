package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.PackedMatrix;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Optional;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;

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
        float[] sm = KQuants.SCALES_AND_MINS.get();
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            KQuants.scalesAndMins(b, o, sm); // d * scale, and -dmin * min: adding it is subtracting dmin * min
            int base = dstOffset + k * QK;
            for (int c = 0; c < 4; c++) {
                float d1 = sm[2 * c];
                float m1 = sm[8 + 2 * c];
                float d2 = sm[2 * c + 1];
                float m2 = sm[8 + 2 * c + 1];
                int q = o + 16 + 32 * c;
                int y = base + 64 * c;
                for (int l = 0; l < 32; l += KQuants.FLOATS.length()) {
                    // Widened to ints first, as in dot: cheaper than splitting and converting bytes.
                    IntVector v = (IntVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, q + l)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, KQuants.INTS, 0);
                    ((FloatVector) v.and(0x0F).convert(VectorOperators.I2F, 0)).mul(d1).add(m1).intoArray(dst, y + l);
                    ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                            .mul(d2).add(m2).intoArray(dst, y + 32 + l);
                }
            }
        }
    }

    /**
     * With 16 float lanes, on machines where a thread reads one stream of weights fastest ({@link
     * KQuants#PACK_FOR_DECODE}), a copy with 16 rows side by side ({@link Q4KColumns}): its decode products broadcast
     * each activation once for 32 rows where the file's layout loads a vector of prepared activations per 16 weights
     * of one row. The same bytes as the file's super-blocks, laid out again.
     */
    @Override
    public Optional<PackedMatrix> packForDecode(WeightMatrix w, Arena arena) {
        if (!w.format().id().equals(id())) {
            throw new IllegalArgumentException(w.name() + " is " + w.format().id() + ", not " + id());
        }
        return KQuants.PACK_FOR_DECODE ? Q4KColumns.pack(w, arena) : Optional.empty();
    }

    /**
     * True: a packed copy gives back each weight as {@code decode} does ({@link Q4KColumns#decodeColumns}), so a
     * prompt's products may read it too, and the copy (as many bytes as the file's super-blocks) can take their place
     * in memory.
     */
    @Override
    public boolean packedCopyDecodes() {
        return true;
    }

    /** Whether {@link #dotPrepared}'s packed form runs: 16 float lanes (AVX-512). */
    private static final boolean PACKED16 = KQuants.FLOATS.length() == 16;
    /** Floats a super-block prepares: two halves of 128 activations and 16 sums each when packed; else 16. */
    private static final int PREPARED_PER_BLOCK = PACKED16 ? 288 : 16;
    /** The packed form: the scales of the sub-blocks whose levels half {@code h}'s low (high) nibbles hold. */
    private static final VectorShuffle<Float> LOW0 = halves(0, 0);
    private static final VectorShuffle<Float> HIGH0 = halves(0, 1);
    private static final VectorShuffle<Float> LOW1 = halves(1, 0);
    private static final VectorShuffle<Float> HIGH1 = halves(1, 1);

    private static VectorShuffle<Float> halves(int h, int high) {
        return PACKED16 ? VectorShuffle.fromOp(FloatVector.SPECIES_512, i -> 4 * h + (i >= 8 ? 2 : 0) + high) : null;
    }

    /** The factor of the activations of nibble {@code s} in {@link #dotPacked16}'s order: {@code 2^-4s}, 1 for the top. */
    private static final float[] MASKED_SCALES = {1f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 1f};

    /** {@link #prepareActivations}' floats: 16 a super-block, or 288 with the packed form's reordered copy. */
    @Override
    public int preparedActivations(int count) {
        Blocks.checkCount(count, QK, id());
        return count / QK * PREPARED_PER_BLOCK;
    }

    /**
     * Per super-block the sums of its eight sub-blocks' activations, each the sub-block's vectors added lane by lane,
     * then the lanes by {@link KQuants#sum}'s fixed tree, for the minimum terms of {@link #dotPrepared}, which gets
     * them from one vector product with {@link KQuants#scalesAndMins}' layout (scales in lanes 0-7, mins in 8-15).
     * Without the packed form: sixteen floats, zeros where the scales are and the eight sums where the mins are. With
     * it, per half of 128 activations: the activations in the order the packed form takes the nibbles out of a lane
     * ({@code 16s + i} holds element {@code 32(2[i >= 8] + s % 2) + 4(i % 8) + s / 2} of the half: byte {@code s / 2}
     * of int lane {@code i}, low nibble for even {@code s}) times {@code 2^-4s} for {@code s < 7} (the packed
     * kernels mask those nibbles in place), then sixteen floats with the sums of the half's four sub-blocks in the
     * lanes of their mins and zeros elsewhere.
     */
    @Override
    public void prepareActivations(float[] x, int xOffset, int count, float[] prepared, int preparedOffset) {
        Blocks.checkCount(count, QK, id());
        var sp = KQuants.FLOATS;
        for (int k = 0; k < count / QK; k++) {
            int p = preparedOffset + PREPARED_PER_BLOCK * k;
            int xb = xOffset + k * QK;
            if (PACKED16) {
                for (int h = 0; h < 2; h++) {
                    int ph = p + 144 * h;
                    for (int s = 0; s < 8; s++) {
                        for (int i = 0; i < 16; i++) {
                            prepared[ph + 16 * s + i] = MASKED_SCALES[s]
                                    * x[xb + 128 * h + 32 * ((i >= 8 ? 2 : 0) + s % 2) + 4 * (i % 8) + s / 2];
                        }
                    }
                    Arrays.fill(prepared, ph + 128, ph + 144, 0f);
                }
            } else {
                Arrays.fill(prepared, p, p + 8, 0f);
            }
            for (int g = 0; g < 8; g++) {
                FloatVector sum = FloatVector.zero(sp);
                for (int l = 0; l < 32; l += sp.length()) {
                    sum = sum.add(FloatVector.fromArray(sp, x, xb + 32 * g + l));
                }
                // Where the mins are: lane 8 + g of the super-block's sixteen, or of its half's when packed.
                prepared[p + (PACKED16 ? 144 * (g / 4) + 128 : 0) + 8 + g] = KQuants.sum(sum);
            }
        }
    }

    /** Prepares {@code x} in a per-thread buffer, then {@link #dotPrepared} ({@link Blocks#dotByPreparing}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return Blocks.dotByPreparing(this, src, offset, x, xOffset, count);
    }

    /**
     * With 16 float lanes {@link #dotPacked16}. Otherwise fused, nothing decoded to memory: per sub-block of 32, {@code
     * sum(q * x)} in vector lanes (the nibbles widened to ints with zero extension, so the high one is a plain shift),
     * times {@code d * scale} into one of two accumulators; the minimum terms {@code -dmin * min * sum(x)} of a
     * super-block come from the prepared sums of activations in one vector product ({@link #prepareActivations}); lanes
     * are added in a fixed order at the end. The row is staged once: read in place instead, as the Q6_K dot reads its
     * super-blocks (each 16-byte header copied to a small array for {@link KQuants#scalesAndMins}, which compiled too
     * large to inline on a segment), it ran slower, {@code bench -m 1b-q4_k_m.gguf -p 16 -n 32 -r 2 --profile}, three
     * alternating pairs: {@code ffn_gate+up} 10.5, 9.0, 9.1 against 13.7, 12.5, 13.0 GB/s, tg32 14.66, 12.62, 12.88
     * against 17.60, 16.07, 17.37 tok/s (Zen 5 VM, 2026-12-04). Against summing {@code x} per sub-block here, as every
     * row did before the backend prepared the sums once per matrix product: 1.52x per 2,048-element row (median of 15
     * in-process A/B rounds, for 256 rows, in L2, and for 8,192). The eight scales and mins of a super-block are
     * unpacked together first ({@link KQuants#scalesAndMins}).
     */
    @Override
    public float dotPrepared(MemorySegment src, long offset, float[] x, int xOffset, float[] prepared,
                             int preparedOffset, int count) {
        Blocks.checkCount(count, QK, id());
        if (PACKED16) {
            return dotPacked16(src, offset, prepared, preparedOffset, count / QK);
        }
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        var sp = KQuants.FLOATS;
        FloatVector a1 = FloatVector.zero(sp);
        FloatVector a2 = a1;
        FloatVector mins = a1;
        float[] sm = KQuants.SCALES_AND_MINS.get();
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            KQuants.scalesAndMins(b, o, sm);
            for (int j = 0; j < 16; j += sp.length()) {
                mins = FloatVector.fromArray(sp, sm, j)
                        .fma(FloatVector.fromArray(sp, prepared, preparedOffset + 16 * k + j), mins);
            }
            int base = xOffset + k * QK;
            for (int c = 0; c < 4; c++) {
                int q = o + 16 + 32 * c;
                int y = base + 64 * c;
                FloatVector qx1 = FloatVector.zero(sp);
                FloatVector qx2 = qx1;
                for (int l = 0; l < 32; l += sp.length()) {
                    IntVector v = (IntVector) ByteVector.fromArray(KQuants.BYTES_PER_LANE, b, q + l)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, KQuants.INTS, 0);
                    qx1 = ((FloatVector) v.and(0x0F).convert(VectorOperators.I2F, 0))
                            .fma(FloatVector.fromArray(sp, x, y + l), qx1);
                    qx2 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0))
                            .fma(FloatVector.fromArray(sp, x, y + 32 + l), qx2);
                }
                a1 = qx1.fma(FloatVector.broadcast(sp, sm[2 * c]), a1);
                a2 = qx2.fma(FloatVector.broadcast(sp, sm[2 * c + 1]), a2);
            }
        }
        // KQuants.sum's tree written out (the same additions): called here, C2 left it out of line and boxed its
        // argument for every row (JFR allocation samples: about 2.6 GB over a tg64 run on the 1B Q4_K_M file).
        FloatVector v = a1.add(a2).add(mins);
        if (KQuants.L > 8) {
            v = v.add(v.rearrange(KQuants.X8));
        }
        if (KQuants.L > 4) {
            v = v.add(v.rearrange(KQuants.X4));
        }
        v = v.add(v.rearrange(KQuants.X2));
        return v.add(v.rearrange(KQuants.X1)).lane(0);
    }

    /**
     * With the packed form, rows longer than {@link Blocks#ONE_ROW_MAX_COUNT} elements two at a time ({@link
     * #pairPacked16}, through {@link KQuants#dotPreparedRows}); otherwise one call a row. Rows of 8,192 elements
     * prepare 36 KiB, which with the weights streaming through overflow L1: each prepared vector loaded once for two
     * rows, {@code bench -m 1b-q4_k_m.gguf -p 16 -n 64 -r 1 --verify-tokens 0 --profile}, three alternating pairs:
     * {@code ffn_down} (half of its matrices Q4_K) at 0.61-0.67 of the Q6_K output matrix's GB/s in the same process
     * against 0.50-0.53 one row at a time (Zen 5 VM, 2026-12-04).
     */
    @Override
    public void dotPreparedRows(MemorySegment src, long offset, long stride, int rows, float[] x, int xOffset,
                                float[] prepared, int preparedOffset, int count, float[] out, int outIndex) {
        Blocks.checkCount(count, QK, id());
        KQuants.dotPreparedRows(this, PACKED16 ? PAIRS : null, src, offset, stride, rows, x, xOffset, prepared,
                preparedOffset, count, out, outIndex);
    }

    private static final KQuants.PairKernel PAIRS = Q4KQuantizer::pairPacked16;

    /**
     * {@link #dotPrepared}'s packed form for 16 float lanes, reading the super-blocks where they are mapped: each
     * half's 64 bytes of nibbles in one vector, int lane {@code i} holding four bytes of sub-blocks {@code 4h} and
     * {@code 4h + 1} (lanes 0-7) or {@code 4h + 2} and {@code 4h + 3} (lanes 8-15); each nibble but the top one is
     * masked in place ({@code and}; the top one shifted down), converted and multiplied with the activations {@link
     * #prepareActivations} put in that order and scaled by {@code 2^-4s} for nibble {@code s} (a power of two: the
     * same products unless the scaled activation is subnormal, below 2^-102 in magnitude), the
     * products of low and of high nibbles added apart and each scaled once by its sub-blocks' {@code d * scale} (a lane
     * permute of the super-block's factors, {@link KQuants#factors16}); the minimum terms from one vector product per
     * half with the prepared sums. Against the staged form ({@link #dotPrepared}; it still runs with 8 lanes), {@code
     * bench -m 1b-q4_k_m.gguf -p 16 -n 64 -r 1 --verify-tokens 0 --profile}, three alternating pairs: {@code
     * ffn_gate+up} at 0.74-0.80 of the Q6_K output matrix's GB/s in the same process against 0.53-0.56 (17.3-20.9
     * against 11.5-14.8 GB/s; Zen 5 VM, 2026-12-04, the machine's speed moving by a quarter between runs). Masking in
     * place instead of a shift and a mask (six operations fewer a half): in a harness outside the repository (one
     * thread, 2,048-element rows streamed from 144 MiB, both builds alternating in one process) 1.07x in three
     * processes and 1.22, 1.23 and 0.97x in three more; in the model, four alternating pairs, {@code ffn_gate+up} at
     * 0.75 of the output matrix's GB/s in each against 0.72-0.74, tg64 26.45-27.75 against 26.66-27.20 tok/s
     * (2026-12-04, evening). Then only rows of up to {@link Blocks#ONE_ROW_MAX_COUNT} were read this way; since
     * 2026-12-05 every row is, the pair kernel included ({@link #pairPacked16}).
     *
     * <p>Conversions are written {@code convertShape(I2F, f, 0)}, with the species a constant: with {@code convert(I2F,
     * 0)} the result's species is looked up ({@code AbstractSpecies.computeSpecies}, too large to inline), C2 first
     * failed to intrinsify the conversions and tried again later, and in about a third of the processes (4 of 14) the
     * compiled kernel kept a boxed vector for one or two of the last {@code and}s of the loop body (JFR allocation
     * samples there; young collections 40,000-107,000 against 4,000-14,000 a run), tg64 2.4-10.9 against 20-24 tok/s.
     * Eight processes with {@code convertShape}: none.
     */
    private static float dotPacked16(MemorySegment src, long offset, float[] prepared, int preparedOffset,
                                     int blocks) {
        var f = FloatVector.SPECIES_512;
        FloatVector a0 = FloatVector.zero(f);
        FloatVector a1 = a0;
        FloatVector mins = a0;
        // Each nibble but the top one masked in place (its value times 16^s; the prepared activations carry 2^-4s),
        // the masks broadcast once, here (see Q4_0's dotOctets for what broadcasting them in the loop body did).
        IntVector m0 = IntVector.broadcast(IntVector.SPECIES_512, 0xF);
        IntVector m1 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0);
        IntVector m2 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00);
        IntVector m3 = IntVector.broadcast(IntVector.SPECIES_512, 0xF000);
        IntVector m4 = IntVector.broadcast(IntVector.SPECIES_512, 0xF_0000);
        IntVector m5 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0_0000);
        IntVector m6 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00_0000);
        long o = offset;
        int p = preparedOffset;
        for (int k = 0; k < blocks; k++, o += BYTES, p += PREPARED_PER_BLOCK) {
            FloatVector sm = KQuants.factors16((IntVector) ByteVector.fromMemorySegment(ByteVector.SPECIES_128, src, o,
                    ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0),
                    src.get(Blocks.I32, o));
            IntVector v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 16, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            FloatVector tl = ((FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, prepared, p));
            FloatVector th = ((FloatVector) v.and(m1)
                    .convertShape(VectorOperators.I2F, f, 0)).mul(FloatVector.fromArray(f, prepared, p + 16));
            tl = ((FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 32), tl);
            th = ((FloatVector) v.and(m3)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 48), th);
            tl = ((FloatVector) v.and(m4)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 64), tl);
            th = ((FloatVector) v.and(m5)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 80), th);
            tl = ((FloatVector) v.and(m6)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 96), tl);
            th = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 112), th);
            a0 = tl.fma(sm.rearrange(LOW0), a0);
            a1 = th.fma(sm.rearrange(HIGH0), a1);
            mins = sm.fma(FloatVector.fromArray(f, prepared, p + 128), mins);
            v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 80, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            tl = ((FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, prepared, p + 144));
            th = ((FloatVector) v.and(m1)
                    .convertShape(VectorOperators.I2F, f, 0)).mul(FloatVector.fromArray(f, prepared, p + 160));
            tl = ((FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 176), tl);
            th = ((FloatVector) v.and(m3)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 192), th);
            tl = ((FloatVector) v.and(m4)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 208), tl);
            th = ((FloatVector) v.and(m5)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 224), th);
            tl = ((FloatVector) v.and(m6)
                    .convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 240), tl);
            th = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, prepared, p + 256), th);
            a0 = tl.fma(sm.rearrange(LOW1), a0);
            a1 = th.fma(sm.rearrange(HIGH1), a1);
            mins = sm.fma(FloatVector.fromArray(f, prepared, p + 272), mins);
        }
        FloatVector v = a0.add(a1).add(mins);
        v = v.add(v.rearrange(KQuants.X8));
        v = v.add(v.rearrange(KQuants.X4));
        v = v.add(v.rearrange(KQuants.X2));
        return v.add(v.rearrange(KQuants.X1)).lane(0);
    }

    /**
     * {@link #dotPacked16} for two rows {@code stride} bytes apart in one loop (products {@code outStride} apart in
     * {@code out}), each prepared vector loaded once for both; each row's products and sums as {@code dotPacked16}
     * computes them, so the same bits. Each nibble but the top one masked in place, as there, where it was shifted
     * down and masked (seven shifts a half a row, on the one port that does 512-bit shifts and conversions on the
     * Intel Xeon VM's cores as published port tables list them; not measured, no counters in that VM). There, on
     * 2026-12-05: a harness outside the repository (this loop and the shifting one, 2,048-element rows, two threads,
     * alternating in one process, the last rounds of eight) 12.3-12.7 and 11.8-13.2 GB/s against 11.6-12.2 and
     * 11.6-12.3 streamed from 512 MiB (two processes), 18.4-18.7 against 14.5-17.3 in L2; {@code bench -m
     * 1b-q4_k_m.gguf -p 16 -n 32 -r 2 --profile}, three alternating pairs of processes, tg32 16.50, 16.32, 15.74
     * against 15.80, 15.62, 15.07 tok/s. On the Zen 5 VM of 2026-12-04, where pairs read only the
     * rows of over 4,096 elements, this form had run at 0.91-0.99x the shifting one over 8,192-element rows (C2
     * re-broadcast the masks inside the loop there); not measured there since (NOT VERIFIED on that VM).
     */
    private static void pairPacked16(MemorySegment src, long offset, long stride, float[] prepared, int preparedOffset,
                                     int blocks, float[] out, int outIndex, int outStride) {
        var f = FloatVector.SPECIES_512;
        FloatVector a0 = FloatVector.zero(f);
        FloatVector a1 = a0;
        FloatVector mins = a0;
        FloatVector b0 = a0;
        FloatVector b1 = a0;
        FloatVector minsB = a0;
        // dotPacked16's masks, broadcast once before the loop as there (see its note); written out again rather than
        // taken from a helper, which would return them boxed where C2 leaves it out of line.
        IntVector m0 = IntVector.broadcast(IntVector.SPECIES_512, 0xF);
        IntVector m1 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0);
        IntVector m2 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00);
        IntVector m3 = IntVector.broadcast(IntVector.SPECIES_512, 0xF000);
        IntVector m4 = IntVector.broadcast(IntVector.SPECIES_512, 0xF_0000);
        IntVector m5 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0_0000);
        IntVector m6 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00_0000);
        long o = offset;
        int p = preparedOffset;
        for (int k = 0; k < blocks; k++, o += BYTES, p += PREPARED_PER_BLOCK) {
            FloatVector sm = KQuants.factors16((IntVector) ByteVector.fromMemorySegment(ByteVector.SPECIES_128, src,
                    o, ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0),
                    src.get(Blocks.I32, o));
            FloatVector smB = KQuants.factors16((IntVector) ByteVector.fromMemorySegment(ByteVector.SPECIES_128, src,
                    o + stride, ByteOrder.LITTLE_ENDIAN)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0),
                    src.get(Blocks.I32, o + stride));
            IntVector v0 = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 16, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            IntVector vB0 = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + stride + 16,
                    ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            FloatVector x00 = FloatVector.fromArray(f, prepared, p);
            FloatVector tl = ((FloatVector) v0.and(m0).convertShape(VectorOperators.I2F, f, 0)).mul(x00);
            FloatVector tlB = ((FloatVector) vB0.and(m0).convertShape(VectorOperators.I2F, f, 0)).mul(x00);
            FloatVector x01 = FloatVector.fromArray(f, prepared, p + 16);
            FloatVector th = ((FloatVector) v0.and(m1).convertShape(VectorOperators.I2F, f, 0)).mul(x01);
            FloatVector thB = ((FloatVector) vB0.and(m1).convertShape(VectorOperators.I2F, f, 0)).mul(x01);
            FloatVector x02 = FloatVector.fromArray(f, prepared, p + 32);
            tl = ((FloatVector) v0.and(m2).convertShape(VectorOperators.I2F, f, 0)).fma(x02, tl);
            tlB = ((FloatVector) vB0.and(m2).convertShape(VectorOperators.I2F, f, 0)).fma(x02, tlB);
            FloatVector x03 = FloatVector.fromArray(f, prepared, p + 48);
            th = ((FloatVector) v0.and(m3).convertShape(VectorOperators.I2F, f, 0)).fma(x03, th);
            thB = ((FloatVector) vB0.and(m3).convertShape(VectorOperators.I2F, f, 0)).fma(x03, thB);
            FloatVector x04 = FloatVector.fromArray(f, prepared, p + 64);
            tl = ((FloatVector) v0.and(m4).convertShape(VectorOperators.I2F, f, 0)).fma(x04, tl);
            tlB = ((FloatVector) vB0.and(m4).convertShape(VectorOperators.I2F, f, 0)).fma(x04, tlB);
            FloatVector x05 = FloatVector.fromArray(f, prepared, p + 80);
            th = ((FloatVector) v0.and(m5).convertShape(VectorOperators.I2F, f, 0)).fma(x05, th);
            thB = ((FloatVector) vB0.and(m5).convertShape(VectorOperators.I2F, f, 0)).fma(x05, thB);
            FloatVector x06 = FloatVector.fromArray(f, prepared, p + 96);
            tl = ((FloatVector) v0.and(m6).convertShape(VectorOperators.I2F, f, 0)).fma(x06, tl);
            tlB = ((FloatVector) vB0.and(m6).convertShape(VectorOperators.I2F, f, 0)).fma(x06, tlB);
            FloatVector x07 = FloatVector.fromArray(f, prepared, p + 112);
            th = ((FloatVector) v0.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(x07, th);
            thB = ((FloatVector) vB0.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(x07, thB);
            a0 = tl.fma(sm.rearrange(LOW0), a0);
            a1 = th.fma(sm.rearrange(HIGH0), a1);
            b0 = tlB.fma(smB.rearrange(LOW0), b0);
            b1 = thB.fma(smB.rearrange(HIGH0), b1);
            FloatVector s0 = FloatVector.fromArray(f, prepared, p + 128);
            mins = sm.fma(s0, mins);
            minsB = smB.fma(s0, minsB);
            IntVector v1 = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 80, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            IntVector vB1 = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + stride + 80,
                    ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            FloatVector x10 = FloatVector.fromArray(f, prepared, p + 144);
            tl = ((FloatVector) v1.and(m0).convertShape(VectorOperators.I2F, f, 0)).mul(x10);
            tlB = ((FloatVector) vB1.and(m0).convertShape(VectorOperators.I2F, f, 0)).mul(x10);
            FloatVector x11 = FloatVector.fromArray(f, prepared, p + 160);
            th = ((FloatVector) v1.and(m1).convertShape(VectorOperators.I2F, f, 0)).mul(x11);
            thB = ((FloatVector) vB1.and(m1).convertShape(VectorOperators.I2F, f, 0)).mul(x11);
            FloatVector x12 = FloatVector.fromArray(f, prepared, p + 176);
            tl = ((FloatVector) v1.and(m2).convertShape(VectorOperators.I2F, f, 0)).fma(x12, tl);
            tlB = ((FloatVector) vB1.and(m2).convertShape(VectorOperators.I2F, f, 0)).fma(x12, tlB);
            FloatVector x13 = FloatVector.fromArray(f, prepared, p + 192);
            th = ((FloatVector) v1.and(m3).convertShape(VectorOperators.I2F, f, 0)).fma(x13, th);
            thB = ((FloatVector) vB1.and(m3).convertShape(VectorOperators.I2F, f, 0)).fma(x13, thB);
            FloatVector x14 = FloatVector.fromArray(f, prepared, p + 208);
            tl = ((FloatVector) v1.and(m4).convertShape(VectorOperators.I2F, f, 0)).fma(x14, tl);
            tlB = ((FloatVector) vB1.and(m4).convertShape(VectorOperators.I2F, f, 0)).fma(x14, tlB);
            FloatVector x15 = FloatVector.fromArray(f, prepared, p + 224);
            th = ((FloatVector) v1.and(m5).convertShape(VectorOperators.I2F, f, 0)).fma(x15, th);
            thB = ((FloatVector) vB1.and(m5).convertShape(VectorOperators.I2F, f, 0)).fma(x15, thB);
            FloatVector x16 = FloatVector.fromArray(f, prepared, p + 240);
            tl = ((FloatVector) v1.and(m6).convertShape(VectorOperators.I2F, f, 0)).fma(x16, tl);
            tlB = ((FloatVector) vB1.and(m6).convertShape(VectorOperators.I2F, f, 0)).fma(x16, tlB);
            FloatVector x17 = FloatVector.fromArray(f, prepared, p + 256);
            th = ((FloatVector) v1.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(x17, th);
            thB = ((FloatVector) vB1.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(x17, thB);
            a0 = tl.fma(sm.rearrange(LOW1), a0);
            a1 = th.fma(sm.rearrange(HIGH1), a1);
            b0 = tlB.fma(smB.rearrange(LOW1), b0);
            b1 = thB.fma(smB.rearrange(HIGH1), b1);
            FloatVector s1 = FloatVector.fromArray(f, prepared, p + 272);
            mins = sm.fma(s1, mins);
            minsB = smB.fma(s1, minsB);
        }
        FloatVector v = a0.add(a1).add(mins);
        FloatVector u = b0.add(b1).add(minsB);
        v = v.add(v.rearrange(KQuants.X8));
        u = u.add(u.rearrange(KQuants.X8));
        v = v.add(v.rearrange(KQuants.X4));
        u = u.add(u.rearrange(KQuants.X4));
        v = v.add(v.rearrange(KQuants.X2));
        u = u.add(u.rearrange(KQuants.X2));
        out[outIndex] = v.add(v.rearrange(KQuants.X1)).lane(0);
        out[outIndex + outStride] = u.add(u.rearrange(KQuants.X1)).lane(0);
    }

    /** Q4_K multiplies Q8_K activation codes in integer lanes ({@link #dotEncoded}). */
    @Override
    public boolean hasEncodedDot() {
        return true;
    }

    /**
     * {@code sum_blocks d_x * (d * sum_s sc_s * sum(q * x) - dmin * sum_s m_s * sum_s(x))} over Q8_K activations (the
     * sub-block sums of {@code x} from its group sums), each super-block's integer sums exact. With activations in a
     * heap segment ({@link Blocks#heapBytes}) and 256-bit vectors, {@link #dotInt16}; otherwise the same integers
     * in scalar code. Either way the super-blocks are added in double (added in float lanes, tiny-256-Q4_K_M's
     * logits moved 4.2e-3 from llama.cpp's dumps).
     */
    @Override
    public double dotEncoded(MemorySegment src, long offset, MemorySegment act, long actOffset, int count) {
        Blocks.checkCount(count, QK, id());
        int blocks = count / QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        byte[] a = Blocks.heapBytes(act);
        if (a != null && KQuants.SHORTS != null) {
            return dotInt16(b, a, Math.toIntExact(act.address() + actOffset), blocks);
        }
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            long x = actOffset + (long) k * Q8KQuantizer.BYTES;
            long scaled = 0;
            long mins = 0;
            for (int e = 0; e < QK; e++) {
                int s = e / 32;
                int qs = b[o + 16 + 32 * (e / 64) + e % 32] & 0xFF;
                int q = e % 64 < 32 ? qs & 0x0F : qs >>> 4;
                int xe = act.get(Blocks.I8, x + 4 + e);
                scaled += (long) KQuants.scale(b, o, s) * q * xe;
                mins += (long) KQuants.min(b, o, s) * xe;
            }
            double dx = act.get(Blocks.F32, x);
            sum += dx * (Blocks.fp16(b, o) * (double) scaled - Blocks.fp16(b, o + 2) * (double) mins);
        }
        return sum;
    }

    /**
     * The vector form of {@link #dotEncoded} over a staged row: per sub-block of 32, its nibbles (zero-extended to
     * int16 lanes, 16 at a time) times the activation codes (products at most 15 * 127), the two halves added per
     * lane; each int lane adds its two int16 halves ({@code (v + (v << 16)) >> 16}), is multiplied by the sub-block's
     * 6-bit scale and added to int lanes that sum the super-block. The minimum terms are one integer per super-block,
     * {@code sum_s m_s * (bsum_2s + bsum_2s+1)}, from the activations' group sums; both integers are scaled in double.
     */
    private static double dotInt16(byte[] b, byte[] a, int at, int blocks) {
        var s = KQuants.SHORTS;
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            int x = at + k * Q8KQuantizer.BYTES;
            int m = 0;
            for (int g = 0; g < 8; g++) {
                m += KQuants.min(b, o, g) * (Blocks.i16(a, x + 260 + 4 * g) + Blocks.i16(a, x + 262 + 4 * g));
            }
            IntVector isum = IntVector.zero(IntVector.SPECIES_256);
            for (int c = 0; c < 4; c++) {
                int q = o + 16 + 32 * c;
                int y = x + 4 + 64 * c;
                ShortVector w0 = (ShortVector) ByteVector.fromArray(KQuants.BYTES_128, b, q)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
                ShortVector w1 = (ShortVector) ByteVector.fromArray(KQuants.BYTES_128, b, q + 16)
                        .convertShape(VectorOperators.ZERO_EXTEND_B2S, s, 0);
                IntVector lo = w0.and((short) 0x0F)
                        .mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y).convertShape(VectorOperators.B2S, s, 0))
                        .add(w1.and((short) 0x0F).mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y + 16)
                                .convertShape(VectorOperators.B2S, s, 0))).reinterpretAsInts();
                IntVector hi = w0.lanewise(VectorOperators.LSHR, 4)
                        .mul((ShortVector) ByteVector.fromArray(KQuants.BYTES_128, a, y + 32)
                                .convertShape(VectorOperators.B2S, s, 0))
                        .add(w1.lanewise(VectorOperators.LSHR, 4).mul((ShortVector) ByteVector
                                .fromArray(KQuants.BYTES_128, a, y + 48).convertShape(VectorOperators.B2S, s, 0)))
                        .reinterpretAsInts();
                isum = isum.add(lo.add(lo.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16)
                                .mul(KQuants.scale(b, o, 2 * c)))
                        .add(hi.add(hi.lanewise(VectorOperators.LSHL, 16)).lanewise(VectorOperators.ASHR, 16)
                                .mul(KQuants.scale(b, o, 2 * c + 1)));
            }
            // The lanes' integer sum is exact in any order; the super-block as in the scalar form, in double.
            double dx = Blocks.f32(a, x);
            sum += dx * (Blocks.fp16(b, o) * (double) isum.reduceLanes(VectorOperators.ADD)
                    - Blocks.fp16(b, o + 2) * (double) m);
        }
        return sum;
    }

    /**
     * With the 16-lane packed form and activations in a heap segment, each activation row's Q8_K codes are converted
     * to floats once for the whole tile, in {@link #prepareActivations}' masked order and scaling, with each half's
     * sub-block sums of the codes where {@link #dotPacked16} keeps those of the activations, and every weight row runs
     * {@link #dotCodes16}: the same integer sums as {@link #dotEncoded}, so the same bits; otherwise one {@link
     * #dotEncoded} a product ({@link KQuants#dotEncodedRows}).
     */
    @Override
    public void dotEncodedRows(MemorySegment src, long offset, long stride, int rows, MemorySegment act,
                               long actOffset, long actStride, int actRows, int count, float[] out, int outIndex,
                               int outStride) {
        KQuants.dotEncodedRows(this, PACKED16 ? CODES : null, PREPARED_PER_BLOCK, src, offset, stride, rows, act,
                actOffset, actStride, actRows, count, out, outIndex, outStride);
    }

    /** The ints of a half's 128 code bytes that hold its even and its odd nibbles' codes ({@link #CODES}). */
    private static final IntVector CODE_INTS_EVEN = IntVector.fromArray(IntVector.SPECIES_512,
            new int[] {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, 0);
    private static final IntVector CODE_INTS_ODD = IntVector.fromArray(IntVector.SPECIES_512,
            new int[] {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}, 0);

    /** {@link #dotEncodedRows}' kernel: the codes in {@link #prepareActivations}' packed layout, {@link #dotCodes16}. */
    private static final KQuants.CodesKernel CODES = new KQuants.CodesKernel() {
        @Override
        public void prepare(byte[] a, int at, int blocks, float[] codes, int from) {
            for (int k = 0; k < blocks; k++) {
                int x = at + k * Q8KQuantizer.BYTES;
                int p = from + k * PREPARED_PER_BLOCK;
                for (int h = 0; h < 2; h++) {
                    int ph = p + 144 * h;
                    // Lane j of nibble t takes code 32 * (2 * (j / 8) + t % 2) + 4 * (j % 8) + t / 2 of the half:
                    // byte t / 2 of int 8 * (t % 2) + j % 8 + 16 * (j / 8) of its 128 bytes, picked from the two
                    // 64-byte loads by a two-vector permute, shifted to the top of the lane and back with its sign.
                    IntVector lo = ByteVector.fromArray(ByteVector.SPECIES_512, a, x + 4 + 128 * h).reinterpretAsInts();
                    IntVector hi = ByteVector.fromArray(ByteVector.SPECIES_512, a, x + 68 + 128 * h).reinterpretAsInts();
                    IntVector even = CODE_INTS_EVEN.selectFrom(lo, hi);
                    IntVector odd = CODE_INTS_ODD.selectFrom(lo, hi);
                    for (int t = 0; t < 8; t++) {
                        ((FloatVector) (t % 2 == 0 ? even : odd).lanewise(VectorOperators.LSHL, 24 - 8 * (t / 2))
                                .lanewise(VectorOperators.ASHR, 24)
                                .convertShape(VectorOperators.I2F, FloatVector.SPECIES_512, 0))
                                .mul(MASKED_SCALES[t]).intoArray(codes, ph + 16 * t);
                    }
                    for (int j = 0; j < 8; j++) {
                        int g = j - 4 * h; // sub-block 4h + g: its code sum in lane 8 + 4h + g, where its min is
                        codes[ph + 128 + j] = 0;
                        codes[ph + 136 + j] = g >= 0 && g < 4 ? Blocks.i16(a, x + 260 + 4 * (4 * h + g))
                                + Blocks.i16(a, x + 262 + 4 * (4 * h + g)) : 0;
                    }
                }
            }
        }

        @Override
        public double dot(MemorySegment src, long offset, byte[] a, int at, float[] codes, int blocks) {
            return dotCodes16(src, offset, a, at, codes, blocks);
        }

        @Override
        public void dotPair(MemorySegment src, long offset, byte[] a, int at0, int at1, float[] codes, int second,
                            int blocks, float[] out, int i0, int i1) {
            dotCodes16Pair(src, offset, a, at0, at1, codes, second, blocks, out, i0, i1);
        }
    };

    /**
     * {@link #dotEncoded} as {@link #dotPacked16} computes its float dot, over integers: each nibble masked in place
     * and multiplied by its activation code times {@code 2^-4s} (exact: the product is the nibble times the code), the
     * low and the high nibbles' products of a lane added apart and each times its sub-block's 6-bit scale; the
     * minimum term's lanes hold each sub-block's 6-bit min times its code sum. Every value is an integer below 2^22 in
     * magnitude, so float lanes hold it exactly. At each super-block's end the scaled lanes are folded to eight (still
     * below 2^24), the mins blended into the other eight, and both sums finished in int lanes: the two integers of
     * {@link #dotEncoded}, scaled as there, in double, the same bits.
     */
    private static double dotCodes16(MemorySegment src, long offset, byte[] a, int at, float[] codes, int blocks) {
        var f = FloatVector.SPECIES_512;
        IntVector m0 = IntVector.broadcast(IntVector.SPECIES_512, 0xF);
        IntVector m1 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0);
        IntVector m2 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00);
        IntVector m3 = IntVector.broadcast(IntVector.SPECIES_512, 0xF000);
        IntVector m4 = IntVector.broadcast(IntVector.SPECIES_512, 0xF_0000);
        IntVector m5 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0_0000);
        IntVector m6 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00_0000);
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int p = PREPARED_PER_BLOCK * k;
            // Scalars first: read after the vector work, a helper's call can stay out of line past C2's node-count
            // cutoff, with every live vector stored around it.
            double dx = Blocks.f32(a, at + k * Q8KQuantizer.BYTES);
            double d = Blocks.fp16(src, o);
            double dmin = Blocks.fp16(src, o + 2);
            FloatVector sm = KQuants.factors16((IntVector) ByteVector.fromMemorySegment(ByteVector.SPECIES_128, src, o,
                    ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0),
                    1f, -1f);
            IntVector v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 16, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            FloatVector tl = ((FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, codes, p));
            FloatVector th = ((FloatVector) v.and(m1).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, codes, p + 16));
            tl = ((FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 32), tl);
            th = ((FloatVector) v.and(m3).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 48), th);
            tl = ((FloatVector) v.and(m4).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 64), tl);
            th = ((FloatVector) v.and(m5).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 80), th);
            tl = ((FloatVector) v.and(m6).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 96), tl);
            th = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 112), th);
            FloatVector a0 = tl.mul(sm.rearrange(LOW0));
            FloatVector a1 = th.mul(sm.rearrange(HIGH0));
            FloatVector mins = sm.mul(FloatVector.fromArray(f, codes, p + 128));
            v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 80, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            tl = ((FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, codes, p + 144));
            th = ((FloatVector) v.and(m1).convertShape(VectorOperators.I2F, f, 0))
                    .mul(FloatVector.fromArray(f, codes, p + 160));
            tl = ((FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 176), tl);
            th = ((FloatVector) v.and(m3).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 192), th);
            tl = ((FloatVector) v.and(m4).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 208), tl);
            th = ((FloatVector) v.and(m5).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 224), th);
            tl = ((FloatVector) v.and(m6).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 240), tl);
            th = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0))
                    .fma(FloatVector.fromArray(f, codes, p + 256), th);
            a0 = tl.fma(sm.rearrange(LOW1), a0);
            a1 = th.fma(sm.rearrange(HIGH1), a1);
            mins = sm.fma(FloatVector.fromArray(f, codes, p + 272), mins);
            // Lane i < 8 of the fold: scaled lanes i and i + 8 (below 2^23); lanes 8-15: the mins' own lanes.
            FloatVector scaled = a0.add(a1);
            IntVector w = (IntVector) scaled.add(scaled.rearrange(KQuants.X8)).blend(mins, KQuants.MINS)
                    .convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0);
            w = w.add(w.rearrange(KQuants.IX4));
            w = w.add(w.rearrange(KQuants.IX2));
            w = w.add(w.rearrange(KQuants.IX1));
            sum += dx * (d * w.lane(0) - dmin * w.lane(8));
        }
        return sum;
    }

    /**
     * {@link #dotCodes16} of one weight row with two activation rows ({@code codes[0..]} and {@code codes[second..]}):
     * each nibble masked and converted once for both, each row's products, scaling and super-block sums as {@link
     * #dotCodes16} computes them (the same bits). Written out beside it, not shared: a helper that takes or returns
     * vectors boxes them where C2 leaves it out of line.
     */
    private static void dotCodes16Pair(MemorySegment src, long offset, byte[] a, int at0, int at1, float[] codes,
                                       int second, int blocks, float[] out, int i0, int i1) {
        var f = FloatVector.SPECIES_512;
        IntVector m0 = IntVector.broadcast(IntVector.SPECIES_512, 0xF);
        IntVector m1 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0);
        IntVector m2 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00);
        IntVector m3 = IntVector.broadcast(IntVector.SPECIES_512, 0xF000);
        IntVector m4 = IntVector.broadcast(IntVector.SPECIES_512, 0xF_0000);
        IntVector m5 = IntVector.broadcast(IntVector.SPECIES_512, 0xF0_0000);
        IntVector m6 = IntVector.broadcast(IntVector.SPECIES_512, 0xF00_0000);
        double sum0 = 0;
        double sum1 = 0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int p = PREPARED_PER_BLOCK * k;
            int q = second + p;
            double dx0 = Blocks.f32(a, at0 + k * Q8KQuantizer.BYTES);
            double dx1 = Blocks.f32(a, at1 + k * Q8KQuantizer.BYTES);
            double d = Blocks.fp16(src, o);
            double dmin = Blocks.fp16(src, o + 2);
            FloatVector sm = KQuants.factors16((IntVector) ByteVector.fromMemorySegment(ByteVector.SPECIES_128, src, o,
                    ByteOrder.LITTLE_ENDIAN).convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0),
                    1f, -1f);
            IntVector v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 16, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            FloatVector n = (FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0);
            FloatVector tl0 = n.mul(FloatVector.fromArray(f, codes, p));
            FloatVector tl1 = n.mul(FloatVector.fromArray(f, codes, q));
            n = (FloatVector) v.and(m1).convertShape(VectorOperators.I2F, f, 0);
            FloatVector th0 = n.mul(FloatVector.fromArray(f, codes, p + 16));
            FloatVector th1 = n.mul(FloatVector.fromArray(f, codes, q + 16));
            n = (FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 32), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 32), tl1);
            n = (FloatVector) v.and(m3).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 48), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 48), th1);
            n = (FloatVector) v.and(m4).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 64), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 64), tl1);
            n = (FloatVector) v.and(m5).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 80), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 80), th1);
            n = (FloatVector) v.and(m6).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 96), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 96), tl1);
            n = (FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 112), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 112), th1);
            FloatVector low0 = sm.rearrange(LOW0);
            FloatVector high0 = sm.rearrange(HIGH0);
            FloatVector a00 = tl0.mul(low0);
            FloatVector a01 = th0.mul(high0);
            FloatVector mins0 = sm.mul(FloatVector.fromArray(f, codes, p + 128));
            FloatVector a10 = tl1.mul(low0);
            FloatVector a11 = th1.mul(high0);
            FloatVector mins1 = sm.mul(FloatVector.fromArray(f, codes, q + 128));
            v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o + 80, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            n = (FloatVector) v.and(m0).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.mul(FloatVector.fromArray(f, codes, p + 144));
            tl1 = n.mul(FloatVector.fromArray(f, codes, q + 144));
            n = (FloatVector) v.and(m1).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.mul(FloatVector.fromArray(f, codes, p + 160));
            th1 = n.mul(FloatVector.fromArray(f, codes, q + 160));
            n = (FloatVector) v.and(m2).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 176), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 176), tl1);
            n = (FloatVector) v.and(m3).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 192), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 192), th1);
            n = (FloatVector) v.and(m4).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 208), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 208), tl1);
            n = (FloatVector) v.and(m5).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 224), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 224), th1);
            n = (FloatVector) v.and(m6).convertShape(VectorOperators.I2F, f, 0);
            tl0 = n.fma(FloatVector.fromArray(f, codes, p + 240), tl0);
            tl1 = n.fma(FloatVector.fromArray(f, codes, q + 240), tl1);
            n = (FloatVector) v.lanewise(VectorOperators.LSHR, 28).convertShape(VectorOperators.I2F, f, 0);
            th0 = n.fma(FloatVector.fromArray(f, codes, p + 256), th0);
            th1 = n.fma(FloatVector.fromArray(f, codes, q + 256), th1);
            FloatVector low1 = sm.rearrange(LOW1);
            FloatVector high1 = sm.rearrange(HIGH1);
            a00 = tl0.fma(low1, a00);
            a01 = th0.fma(high1, a01);
            mins0 = sm.fma(FloatVector.fromArray(f, codes, p + 272), mins0);
            a10 = tl1.fma(low1, a10);
            a11 = th1.fma(high1, a11);
            mins1 = sm.fma(FloatVector.fromArray(f, codes, q + 272), mins1);
            FloatVector scaled = a00.add(a01);
            IntVector w = (IntVector) scaled.add(scaled.rearrange(KQuants.X8)).blend(mins0, KQuants.MINS)
                    .convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0);
            w = w.add(w.rearrange(KQuants.IX4));
            w = w.add(w.rearrange(KQuants.IX2));
            w = w.add(w.rearrange(KQuants.IX1));
            sum0 += dx0 * (d * w.lane(0) - dmin * w.lane(8));
            scaled = a10.add(a11);
            w = (IntVector) scaled.add(scaled.rearrange(KQuants.X8)).blend(mins1, KQuants.MINS)
                    .convertShape(VectorOperators.F2I, IntVector.SPECIES_512, 0);
            w = w.add(w.rearrange(KQuants.IX4));
            w = w.add(w.rearrange(KQuants.IX2));
            w = w.add(w.rearrange(KQuants.IX1));
            sum1 += dx1 * (d * w.lane(0) - dmin * w.lane(8));
        }
        out[i0] = (float) sum0;
        out[i1] = (float) sum1;
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
