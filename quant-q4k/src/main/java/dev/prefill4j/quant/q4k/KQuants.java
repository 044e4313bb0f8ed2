package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * The scale searches of ggml's K-quant reference quantizers (ggml-quants.c {@code make_qkx2_quants},
 * {@code make_qx_quants}), restated in float arithmetic in the same order, so the chosen scales — and hence the
 * bytes — match llama-quantize's.
 */
final class KQuants {
    /** Float lanes of the decoders, at most 16; bytes in vectors with as many lanes. */
    static final VectorSpecies<Float> FLOATS = FloatVector.SPECIES_PREFERRED.length() > 16
            ? FloatVector.SPECIES_512 : FloatVector.SPECIES_PREFERRED;
    /**
     * With 4 float lanes, 8 (the narrowest byte vector): the widening takes the first 4; the K-quants read staged
     * arrays ({@code Blocks.stage}), which have slack after the data for the 4 bytes read beyond.
     */
    static final VectorSpecies<Byte> BYTES_PER_LANE =
            VectorSpecies.of(byte.class, VectorShape.forBitSize(Math.max(64, FLOATS.length() * 8)));
    static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, FLOATS.vectorShape());
    /**
     * Sixteen int16 lanes (one Q6_K scale group, half a Q4_K sub-block's nibbles) for the encoded dot products, where vectors
     * have 256 bits or more (AVX2, AVX-512); {@code null} elsewhere, where their scalar forms run.
     */
    static final VectorSpecies<Short> SHORTS =
            FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 256 ? ShortVector.SPECIES_256 : null;
    static final VectorSpecies<Byte> BYTES_128 = ByteVector.SPECIES_128;
    /**
     * Whether Q4_K and Q6_K offer packed copies for decode steps ({@link Q4KQuantizer#packForDecode}, {@link
     * Q6KQuantizer#packForDecode}): where a thread reads one stream of weights fastest ({@link Blocks#PAIRED_GROUPS},
     * which {@code -Ddev.prefill4j.oneRowMaxCount} sets), as on the Zen 5 VM they were measured faster on. On the
     * Intel Xeon VM (2026-12-07; 2 vCPUs, AVX-512, family 6 model 167 as its hypervisor reports it) both copies made
     * decode slower: {@code bench -m 1b-q4_k_m.gguf -p 16 -n 32 -r 2 --verify-tokens 0 --profile}, three alternating
     * pairs, tg32 14.26, 14.39, 14.19 tok/s with them against 16.73, 17.21, 17.17 with the file's layout ({@code
     * -Ddev.prefill4j.cpu.packedDecode=false}; {@code ffn_gate+up} 10.8-11.0 against 12.6-13.4 GB/s, {@code ffn_down}
     * 10.7-10.9 against 15.2-15.8); with only Q6_K's copy 15.81 and 15.01, with only Q4_K's 14.14 and 14.02, with
     * neither 16.91 and 16.83 (two rounds); with the copies' pairs interleaved as on Zen 5, 13.78 and 13.96 against
     * 17.04 and 16.76. Prompts gained nothing from them there ({@code -p 512 -n 32 -r 2}, two alternating pairs: pp512
     * 155.31 and 177.74 tok/s with, 166.87 and 167.75 without).
     */
    static final boolean PACK_FOR_DECODE = Blocks.PAIRED_GROUPS;

    /** Per-thread buffer of one decoded super-block for {@link #dot}. */
    private static final ThreadLocal<float[]> DECODED = ThreadLocal.withInitial(() -> new float[256]);

    private KQuants() {
    }

    /**
     * The fused dot product of the K formats (the CPU backend's decode-step kernel): each 256-element super-block is
     * decoded by the format's vector decoder into a per-thread buffer that stays in L1 and multiplied with the
     * activations in two vector accumulators, whose lanes are added first to last.
     */
    static float dot(Quantizer q, MemorySegment src, long offset, float[] x, int xOffset, int count) {
        Blocks.checkCount(count, 256, q.id());
        float[] w = DECODED.get();
        FloatVector acc0 = FloatVector.zero(FLOATS);
        FloatVector acc1 = acc0;
        int step = FLOATS.length();
        for (int b = 0; b < count / 256; b++) {
            q.decode(src, offset + (long) b * q.blockBytes(), w, 0, 256);
            int xo = xOffset + 256 * b;
            for (int i = 0; i < 256; i += 2 * step) {
                acc0 = FloatVector.fromArray(FLOATS, w, i).fma(FloatVector.fromArray(FLOATS, x, xo + i), acc0);
                acc1 = FloatVector.fromArray(FLOATS, w, i + step).fma(FloatVector.fromArray(FLOATS, x, xo + i + step), acc1);
            }
        }
        return sum(acc0.add(acc1));
    }

    /** A format's kernel for two rows at a time: {@link #dotPreparedRows}. */
    @FunctionalInterface
    interface PairKernel {
        /**
         * Writes {@code dotPrepared} of the rows at {@code offset} and {@code offset + stride} to {@code out[outIndex]}
         * and {@code out[outIndex + outStride]}, each with the bits a call of its own would give.
         */
        void pair(MemorySegment src, long offset, long stride, float[] prepared, int preparedOffset, int blocks,
                  float[] out, int outIndex, int outStride);
    }

    /**
     * {@link Quantizer#dotPreparedRows} of the K formats: with a {@code pairs} kernel and rows longer than {@link
     * Blocks#ONE_ROW_MAX_COUNT} elements, two rows at a time, half the run apart so that the pairs read two continuous
     * streams of weights, then the odd row alone; otherwise one {@code dotPrepared} a row. On the Intel Xeon VM of
     * 2026-12-05, where that limit is 0, Q6_K's pairs were faster at 2,048 elements too ({@code bench -m
     * 1b-q4_k_m.gguf -p 16 -n 32 -r 2 --profile}, two alternating pairs: the Q6_K output matrix 12.7 GB/s one row at a
     * time against 15.2-15.6).
     */
    static void dotPreparedRows(Quantizer q, PairKernel pairs, MemorySegment src, long offset, long stride, int rows,
                                float[] x, int xOffset, float[] prepared, int preparedOffset, int count, float[] out,
                                int outIndex) {
        int r = 0;
        if (pairs != null && count > Blocks.ONE_ROW_MAX_COUNT) {
            int half = rows / 2;
            for (int i = 0; i < half; i++) {
                pairs.pair(src, offset + i * stride, half * stride, prepared, preparedOffset, count / 256, out,
                        outIndex + i, half);
            }
            r = 2 * half;
        }
        for (; r < rows; r++) {
            out[outIndex + r] = q.dotPrepared(src, offset + r * stride, x, xOffset, prepared, preparedOffset, count);
        }
    }

    /**
     * Lane permutes of a fixed tree over 16 int lanes (each lane to the one {@code 8}, {@code 4}, {@code 2}, {@code 1}
     * away), for the encoded kernels' exact integer sums; {@code null} without 16 float lanes.
     */
    static final VectorShuffle<Integer> IX8 = intTree(8);
    static final VectorShuffle<Integer> IX4 = intTree(4);
    static final VectorShuffle<Integer> IX2 = intTree(2);
    static final VectorShuffle<Integer> IX1 = intTree(1);

    private static VectorShuffle<Integer> intTree(int bit) {
        return FLOATS.length() == 16 ? VectorShuffle.fromOp(IntVector.SPECIES_512, i -> i ^ bit) : null;
    }

    /** A format's integer dot product over activation codes made floats ({@link #dotEncodedRows}). */
    interface CodesKernel {
        /**
         * Lays out the Q8_K activation row at {@code a[at..]} ({@code blocks} super-blocks) in {@code codes} from
         * {@code from} on, as {@link #dot} reads it (from 0) and {@link #dotPair} (from 0 and from its {@code
         * second}).
         */
        void prepare(byte[] a, int at, int blocks, float[] codes, int from);

        /** {@return {@code dotEncoded} of the row at {@code offset} with that activation row, the same bits} */
        double dot(MemorySegment src, long offset, byte[] a, int at, float[] codes, int blocks);

        /**
         * {@link #dot} of the row at {@code offset} with two activation rows, {@code a[at0..]} laid out in {@code
         * codes[0..]} and {@code a[at1..]} in {@code codes[second..]}, each result the same bits as {@link #dot}'s,
         * into {@code out[i0]} and {@code out[i1]} as floats.
         */
        void dotPair(MemorySegment src, long offset, byte[] a, int at0, int at1, float[] codes, int second,
                     int blocks, float[] out, int i0, int i1);
    }

    /** {@link #dotEncodedRows}' activation codes as floats, one buffer a thread. */
    private static final ThreadLocal<float[]> CODES = ThreadLocal.withInitial(() -> new float[0]);

    /**
     * {@link Quantizer#dotEncodedRows} of Q4_K and Q6_K: with a {@code kernel} (16 float lanes) and activations in a
     * heap segment, each activation row's codes laid out as floats once for the whole tile (a per-thread buffer of
     * {@code floatsPerBlock} a super-block, two rows' worth), then the kernel over every weight row, two activation
     * rows at a time ({@link CodesKernel#dotPair}: each weight's level converted once for both) and one alone where
     * their count is odd; otherwise one {@code dotEncoded} a product. Pairs against one row at a time, {@code bench -m
     * 1b-q4_k_m.gguf -p 512 -n 0 -r 2 --activations quantized --verify-tokens 0}, six alternating pairs of runs in one
     * build: pp512 26.32, 32.31, 29.09, 28.56, 33.43, 32.50 against 26.99, 23.32, 23.31, 26.44, 27.12, 26.44 tok/s
     * (Zen 5 VM, 2026-12-05).
     */
    static void dotEncodedRows(Quantizer q, CodesKernel kernel, int floatsPerBlock, MemorySegment src, long offset,
                               long stride, int rows, MemorySegment act, long actOffset, long actStride, int actRows,
                               int count, float[] out, int outIndex, int outStride) {
        Blocks.checkCount(count, 256, q.id());
        byte[] a = kernel != null ? Blocks.heapBytes(act) : null;
        if (a == null) {
            for (int i = 0; i < actRows; i++) {
                for (int r = 0; r < rows; r++) {
                    out[outIndex + i * outStride + r] = (float) q.dotEncoded(src, offset + r * stride, act,
                            actOffset + i * actStride, count);
                }
            }
            return;
        }
        int blocks = count / 256;
        int second = blocks * floatsPerBlock;
        float[] codes = CODES.get();
        if (codes.length < 2 * second) {
            codes = new float[2 * second];
            CODES.set(codes);
        }
        int i = 0;
        for (; i + 2 <= actRows; i += 2) {
            int at0 = Math.toIntExact(act.address() + actOffset + i * actStride);
            int at1 = Math.toIntExact(act.address() + actOffset + (i + 1) * actStride);
            kernel.prepare(a, at0, blocks, codes, 0);
            kernel.prepare(a, at1, blocks, codes, second);
            for (int r = 0; r < rows; r++) {
                kernel.dotPair(src, offset + r * stride, a, at0, at1, codes, second, blocks, out,
                        outIndex + i * outStride + r, outIndex + (i + 1) * outStride + r);
            }
        }
        for (; i < actRows; i++) {
            int at = Math.toIntExact(act.address() + actOffset + i * actStride);
            kernel.prepare(a, at, blocks, codes, 0);
            for (int r = 0; r < rows; r++) {
                out[outIndex + i * outStride + r] = (float) kernel.dot(src, offset + r * stride, a, at, codes, blocks);
            }
        }
    }

    /** {@return bytes {@code b[at..]} zero-extended to int lanes, where a decoder joins the bits of its levels} */
    static IntVector widen(byte[] b, int at) {
        return (IntVector) ByteVector.fromArray(BYTES_PER_LANE, b, at).convertShape(VectorOperators.ZERO_EXTEND_B2I, INTS, 0);
    }

    static final int L = FLOATS.length();
    static final VectorShuffle<Float> X8 = L > 8 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 8) : null;
    static final VectorShuffle<Float> X4 = L > 4 ? VectorShuffle.fromOp(FLOATS, i -> i ^ 4) : null;
    static final VectorShuffle<Float> X2 = VectorShuffle.fromOp(FLOATS, i -> i ^ 2);
    static final VectorShuffle<Float> X1 = VectorShuffle.fromOp(FLOATS, i -> i ^ 1);

    /**
     * {@return the sum of the lanes of {@code v}} in a fixed order that is the same in compiled and interpreted code:
     * a tree of lane-wise additions, each lane added to the lane half the remaining width away ({@code reduceLanes}
     * leaves its order unspecified; adding {@code lane(i)} in a loop compiles to a jump table per lane).
     */
    static float sum(FloatVector v) {
        if (L > 8) {
            v = v.add(v.rearrange(X8));
        }
        if (L > 4) {
            v = v.add(v.rearrange(X4));
        }
        v = v.add(v.rearrange(X2));
        return v.add(v.rearrange(X1)).lane(0);
    }


    /**
     * Per-thread buffer for {@link #scalesAndMins} (the Q4_K and Q5_K decoders and the Q4_K dot) and for the Q6_K dot's
     * scaled sub-block scales; none of them calls another while it holds the buffer.
     */
    static final ThreadLocal<float[]> SCALES_AND_MINS = ThreadLocal.withInitial(() -> new float[16]);
    /** Lanes 0-7 scales, 8-15 mins: where each lane's low bits are, in the 16 bytes from a super-block's start. */
    private static final VectorShuffle<Integer> LOW_BITS = VectorShuffle.fromValues(IntVector.SPECIES_512,
            4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    /** Where the two high bits of the lanes of sub-blocks 4-7 are (the top bits of the first eight scale bytes). */
    private static final VectorShuffle<Integer> HIGH_BITS = VectorShuffle.fromValues(IntVector.SPECIES_512,
            0, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0, 0, 8, 9, 10, 11);
    /** Sub-blocks 0-3: the 6 bits are all in one byte. */
    private static final VectorMask<Integer> FIRST_FOUR = VectorMask.fromLong(IntVector.SPECIES_512, 0x0F0F);
    /** The same with 8 lanes, one for each sub-block. */
    private static final VectorMask<Integer> FIRST_FOUR_8 =
            FLOATS.length() == 8 ? VectorMask.fromLong(INTS, 0x0F) : null;
    /** Mins of sub-blocks 4-7: their low bits are the high nibble. */
    private static final VectorMask<Integer> HIGH_NIBBLE = VectorMask.fromLong(IntVector.SPECIES_512, 0xF000);
    /** Lanes 8-15: the mins, scaled by {@code -dmin}. */
    static final VectorMask<Float> MINS = VectorMask.fromLong(FloatVector.SPECIES_512, 0xFF00);

    /**
     * A Q4_K/Q5_K super-block's factors at {@code b[o..]} (staged): {@code out[j] = d * scale(j)} and
     * {@code out[8 + j] = -dmin * min(j)}, j &lt; 8, the same products as {@link #scale} and {@link #min} give. With
     * 16-lane vectors the 12 packed bytes are unpacked in int lanes (two permutes, a few masks), where 16 scalar
     * extractions, conversions and products cost a third of the fused Q4_K dot's time; with 8 lanes (AVX2) from three
     * overlapping 8-byte windows, one lane per sub-block, with shifts, masks and one blend each for scales and mins.
     */
    static void scalesAndMins(byte[] b, int o, float[] out) {
        // One small method per width: all three in one body came to 382 bytes of bytecode, over C2's limit for hot
        // callees (FreqInlineSize, 325), and the Q4_K dot then called it once per super-block (a call in C2's loop).
        if (FLOATS.length() == 8) {
            scalesAndMins8(b, o, out);
        } else {
            scalesAndMinsOther(b, o, out);
        }
    }

    private static void scalesAndMinsOther(byte[] b, int o, float[] out) {
        if (FLOATS.length() == 16) {
            scalesAndMins16(b, o, out);
            return;
        }
        float d = Blocks.fp16(b, o);
        float dmin = Blocks.fp16(b, o + 2);
        for (int j = 0; j < 8; j++) {
            out[j] = d * scale(b, o, j);
            out[8 + j] = -dmin * min(b, o, j);
        }
    }

    /**
     * {@link #scalesAndMins} in 8 lanes. Lane j of three 8-byte windows: a = b[4 + j], c = b[8 + j], e = b[j] (offsets
     * from o). Scales: a &amp; 63 for j &lt; 4, (c &amp; 15) | (e &gt;&gt; 6) &lt;&lt; 4 after; mins: c &amp; 63, then
     * (c &gt;&gt; 4) | (a &gt;&gt; 6) &lt;&lt; 4.
     */
    private static void scalesAndMins8(byte[] b, int o, float[] out) {
        float d = Blocks.fp16(b, o);
        float dmin = Blocks.fp16(b, o + 2);
        IntVector a = widen(b, o + 4);
        IntVector c = widen(b, o + 8);
        IntVector e = widen(b, o);
        IntVector sc = c.and(0x0F).or(e.lanewise(VectorOperators.LSHR, 6).lanewise(VectorOperators.LSHL, 4))
                .blend(a.and(63), FIRST_FOUR_8);
        IntVector mn = c.lanewise(VectorOperators.LSHR, 4).or(a.lanewise(VectorOperators.LSHR, 6)
                .lanewise(VectorOperators.LSHL, 4)).blend(c.and(63), FIRST_FOUR_8);
        ((FloatVector) sc.convert(VectorOperators.I2F, 0)).mul(d).intoArray(out, 0);
        ((FloatVector) mn.convert(VectorOperators.I2F, 0)).mul(-dmin).intoArray(out, 8);
    }

    /** {@link #scalesAndMins} in 16 lanes: scales in lanes 0-7, mins in 8-15 ({@link #factors16}). */
    private static void scalesAndMins16(byte[] b, int o, float[] out) {
        IntVector w = (IntVector) ByteVector.fromArray(ByteVector.SPECIES_128, b, o)
                .convertShape(VectorOperators.ZERO_EXTEND_B2I, IntVector.SPECIES_512, 0);
        factors16(w, Blocks.fp16(b, o), Blocks.fp16(b, o + 2)).intoArray(out, 0);
    }

    /**
     * {@link #factors16(IntVector, float, float)} with {@code d} and {@code dmin} from the super-block's first four
     * bytes read as one little-endian int {@code dAndDmin}: one load where two fp16 reads were (each with its bounds
     * check). With the kernels' offsets stepped instead of multiplied, 1.02-1.09x the Q4_K decode kernel's speed over
     * 2,048-element rows streamed from memory and 0.99-1.02x with them in L2 (harness outside the repository, one
     * thread, alternating in one process; Zen 5 VM, 2026-12-05); in the model ({@code bench -m 1b-q4_k_m.gguf -p 16 -n
     * 64 -r 2 --profile}, four alternating pairs) within the machine's drift: tg64 22.1-26.2 against 22.1-26.4 tok/s,
     * {@code ffn_gate+up} 37.3-38.1% of the step against 37.7-38.5%.
     */
    static FloatVector factors16(IntVector w, int dAndDmin) {
        return factors16(w, Float.float16ToFloat((short) dAndDmin), Float.float16ToFloat((short) (dAndDmin >>> 16)));
    }

    /**
     * {@return a Q4_K/Q5_K super-block's factors in 16 lanes, as {@link #scalesAndMins} stores them} from its first 16
     * bytes zero-extended to int lanes {@code w}, and its {@code d} and {@code dmin}: the 12 packed bytes unpacked by
     * two lane permutes and a few masks. Called at the top of the kernels' loop bodies, where C2 still inlines it (a
     * call it left out of line would box the vectors; {@code KernelInliningTest}).
     */
    static FloatVector factors16(IntVector w, float d, float dmin) {
        IntVector low = w.rearrange(LOW_BITS);
        IntVector six = low.blend(low.lanewise(VectorOperators.LSHR, 4), HIGH_NIBBLE).and(0x0F)
                .or(w.rearrange(HIGH_BITS).lanewise(VectorOperators.LSHR, 6).lanewise(VectorOperators.LSHL, 4))
                .blend(low.and(63), FIRST_FOUR);
        return ((FloatVector) six.convertShape(VectorOperators.I2F, FloatVector.SPECIES_512, 0))
                .mul(FloatVector.broadcast(FloatVector.SPECIES_512, d).blend(-dmin, MINS));
    }

    /**
     * Sub-block {@code j}'s 6-bit scale from the 12 packed bytes at {@code o + 4} of a staged array (Q4_K and Q5_K
     * layout).
     */
    static int scale(byte[] b, int o, int j) {
        return j < 4 ? b[o + 4 + j] & 63 : (b[o + 4 + j + 4] & 0x0F) | (((b[o + 4 + j - 4] & 0xFF) >>> 6) << 4);
    }

    /** Sub-block {@code j}'s 6-bit min, likewise. */
    static int min(byte[] b, int o, int j) {
        return j < 4 ? b[o + 4 + j + 4] & 63 : ((b[o + 4 + j + 4] & 0xFF) >>> 4) | (((b[o + 4 + j] & 0xFF) >>> 6) << 4);
    }

    /**
     * The shared part of ggml's {@code quantize_row_q4_K_ref} and {@code quantize_row_q5_K_ref} for one 256-element
     * block: per sub-block of 32 an affine search ({@link #makeQkx2} with weights {@code sqrt(mean x^2) + |x|}),
     * 6-bit scales and mins relative to the block maxima, {@code d}/{@code dmin} as fp16 at {@code o}/{@code o + 2},
     * the packed scales at {@code o + 4}, and finally the levels re-quantized against the stored values.
     *
     * @param levels receives 256 levels in {@code 0..nmax}
     */
    static void encodeAffineBlock(float[] src, int base, MemorySegment dst, long o, int nmax, float rmin, int nstep,
                                  int[] levels) {
        int[] aux = new int[32];
        float[] weights = new float[32];
        float[] sub = new float[32];
        float[] mins = new float[8];
        float[] scales = new float[8];
        float[] theMin = new float[1];
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
            scales[j] = makeQkx2(32, nmax, sub, weights, levels, 32 * j, theMin, aux, rmin, 0.1f, nstep);
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
            float dj = d * scale(packed, -4, j); // packed holds the bytes stored at o + 4
            if (dj == 0) {
                continue;
            }
            float dm = dmin * min(packed, -4, j);
            for (int l = 0; l < 32; l++) {
                int q = Blocks.nearestInt((src[base + 32 * j + l] + dm) / dj);
                levels[32 * j + l] = Math.max(0, Math.min(nmax, q));
            }
        }
    }

    /**
     * Affine search for one sub-block: levels {@code 0..nmax} with a scale and a non-positive offset, minimising the
     * weighted squared error over {@code nstep + 1} candidate scales around {@code nmax / (max - min)}.
     *
     * @return the scale; {@code theMin[0]} receives {@code -min} (non-negative); levels go to {@code out[outOffset..]}
     */
    static float makeQkx2(int n, int nmax, float[] x, float[] weights, int[] out, int outOffset, float[] theMin,
                          int[] aux, float rmin, float rdelta, int nstep) {
        float min = x[0];
        float max = x[0];
        float sumW = weights[0];
        float sumX = sumW * x[0];
        for (int i = 1; i < n; i++) {
            if (x[i] < min) {
                min = x[i];
            }
            if (x[i] > max) {
                max = x[i];
            }
            float w = weights[i];
            sumW += w;
            sumX += w * x[i];
        }
        if (min > 0) {
            min = 0;
        }
        if (max == min) {
            for (int i = 0; i < n; i++) {
                out[outOffset + i] = 0;
            }
            theMin[0] = -min;
            return 0f;
        }
        float iscale = nmax / (max - min);
        float scale = 1 / iscale;
        float bestError = 0;
        for (int i = 0; i < n; i++) {
            int l = Math.max(0, Math.min(nmax, Blocks.nearestInt(iscale * (x[i] - min))));
            out[outOffset + i] = l;
            float diff = scale * l + min - x[i];
            bestError += weights[i] * (diff * diff);
        }
        for (int is = 0; is <= nstep; is++) {
            iscale = (rmin + rdelta * is + nmax) / (max - min);
            float sumL = 0;
            float sumL2 = 0;
            float sumXL = 0;
            for (int i = 0; i < n; i++) {
                int l = Math.max(0, Math.min(nmax, Blocks.nearestInt(iscale * (x[i] - min))));
                aux[i] = l;
                float w = weights[i];
                sumL += w * l;
                sumL2 += w * l * l;
                sumXL += w * l * x[i];
            }
            float det = sumW * sumL2 - sumL * sumL;
            if (det > 0) {
                float thisScale = (sumW * sumXL - sumX * sumL) / det;
                float thisMin = (sumL2 * sumX - sumL * sumXL) / det;
                if (thisMin > 0) {
                    thisMin = 0;
                    thisScale = sumXL / sumL2;
                }
                float error = 0;
                for (int i = 0; i < n; i++) {
                    float diff = thisScale * aux[i] + thisMin - x[i];
                    error += weights[i] * (diff * diff);
                }
                if (error < bestError) {
                    for (int i = 0; i < n; i++) {
                        out[outOffset + i] = aux[i];
                    }
                    bestError = error;
                    scale = thisScale;
                    min = thisMin;
                }
            }
        }
        theMin[0] = -min;
        return scale;
    }

    /**
     * {@return the first of {@code x[from..from+n)} of largest magnitude, sign kept} (0 if all are zero), as ggml's
     * scans find it: a later value of equal magnitude does not replace it, and a NaN is passed over.
     */
    static float signedMax(float[] x, int from, int n) {
        float max = 0;
        float amax = 0;
        for (int i = 0; i < n; i++) {
            float ax = Math.abs(x[from + i]);
            if (ax > amax) {
                amax = ax;
                max = x[from + i];
            }
        }
        return max;
    }

    /**
     * Symmetric search for one group (rmse_type 1: weights {@code x^2}): levels {@code -nmax..nmax-1} stored as
     * {@code l + nmax}, candidate scales {@code -(nmax + 0.1 is) / max} for {@code is = -9..9}.
     *
     * @return the scale; levels go to {@code out[outOffset..]}
     */
    static float makeQx(int n, int nmax, float[] x, int xOffset, int[] out, int outOffset) {
        float max = signedMax(x, xOffset, n);
        float amax = Math.abs(max);
        if (amax < 1e-15f) { // GROUP_MAX_EPS
            for (int i = 0; i < n; i++) {
                out[outOffset + i] = 0;
            }
            return 0f;
        }
        float iscale = -nmax / max;
        float sumLX = 0;
        float sumL2 = 0;
        for (int i = 0; i < n; i++) {
            float v = x[xOffset + i];
            int l = Math.max(-nmax, Math.min(nmax - 1, Blocks.nearestInt(iscale * v)));
            out[outOffset + i] = l + nmax;
            float w = v * v;
            sumLX += w * v * l;
            sumL2 += w * l * l;
        }
        float scale = sumL2 != 0 ? sumLX / sumL2 : 0f;
        float best = scale * sumLX;
        for (int is = -9; is <= 9; is++) {
            if (is == 0) {
                continue;
            }
            iscale = -(nmax + 0.1f * is) / max;
            sumLX = 0;
            sumL2 = 0;
            for (int i = 0; i < n; i++) {
                float v = x[xOffset + i];
                int l = Math.max(-nmax, Math.min(nmax - 1, Blocks.nearestInt(iscale * v)));
                float w = v * v;
                sumLX += w * v * l;
                sumL2 += w * l * l;
            }
            if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
                for (int i = 0; i < n; i++) {
                    int l = Blocks.nearestInt(iscale * x[xOffset + i]);
                    out[outOffset + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, l));
                }
                scale = sumLX / sumL2;
                best = scale * sumLX;
            }
        }
        return scale;
    }
}
