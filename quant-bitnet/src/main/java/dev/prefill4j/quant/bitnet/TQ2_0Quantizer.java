package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF TQ2_0 (type 35): 256 trits in 66 bytes, {@code qs[64]} then {@code d} fp16 at 64. Byte {@code qs[32c + m]}
 * (c = 0, 1) holds element {@code 128c + 32n + m} in bits {@code 2n, 2n+1} (n = 0..3); {@code y = (t - 1) * d}.
 */
public final class TQ2_0Quantizer extends TernaryQuantizer {
    static final int BYTES = 66;
    private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    @Override public String id() { return "tq2_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF TQ2_0: ternary, 2 bits/trit + fp16 scale, 2.06 bits/weight, type 35"; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(35); }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        int blocks = count / Ternary.QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o + 64);
            int base = dstOffset + k * Ternary.QK;
            // Bytes widened to int lanes, trits shifted out of them there (x86 has no byte shifts).
            for (int c = 0; c < 2; c++) {
                for (int m = 0; m < 32; m += Ternary.INTS.length()) {
                    IntVector packed = (IntVector) ByteVector.fromArray(Ternary.TRIT_LANES, b, o + 32 * c + m)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, Ternary.INTS, 0);
                    for (int n = 0; n < 4; n++) {
                        ((FloatVector) packed.lanewise(VectorOperators.LSHR, 2 * n).and(3).sub(1)
                                .convert(VectorOperators.I2F, 0)).mul(d).intoArray(dst, base + 128 * c + 32 * n + m);
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

    @Override
    int scaleAt() {
        return 64;
    }

    /**
     * As {@link Ternary#dot}, with the trits taken from the packed bytes: each vector of bytes is widened to int lanes
     * once, and trit {@code n} is shifted down to the lanes' low bits and turned into -1, 0, +1 by the lane permute,
     * which reads the low bits only (element {@code 128c + 32n + m}, FORMATS.md §6.1). The same products in the same
     * order as TQ1_0's, so the same bits. Read straight from the mapping, not staged into an array first: one thread
     * on a Zen 5 VM, 2,048-element rows, three pairs of processes, medians of 18 timings: 25.4 against 18.3 G weights/s
     * in L2, 21.0 against 14.8 streamed from memory; {@code bench -m 1b-tq2.gguf -p 16 -n 128 -r 2}, three alternating
     * pairs: tg128 median 18.6 -> 24.2 tok/s.
     */
    @Override
    float dotRow(MemorySegment src, long offset, int blocks, float[] x, int xOffset) {
        var floats = Ternary.floats();
        int lanes = floats.length();
        // With 4 lanes each load takes 8 bytes: the row is staged (Blocks.stage leaves slack after it), or the last
        // load of the last block could read past the tensor. Otherwise the row is read at its offset in src: a slice
        // of it (asSlice) was an object a row that C2 did not always remove (40 bytes a row, KernelInliningTest).
        boolean staged = lanes < 8;
        MemorySegment b = staged ? MemorySegment.ofArray(Blocks.stage(src, offset, blocks * BYTES)) : src;
        long at = staged ? 0 : offset;
        FloatVector acc = FloatVector.zero(floats);
        for (int k = 0; k < blocks; k++) {
            long o = at + (long) k * BYTES;
            int base = xOffset + k * Ternary.QK;
            FloatVector s0 = FloatVector.zero(floats);
            FloatVector s1 = s0;
            FloatVector s2 = s0;
            FloatVector s3 = s0;
            for (int c = 0; c < 2; c++) {
                for (int m = 0; m < 32; m += lanes) {
                    IntVector packed = (IntVector) ByteVector
                            .fromMemorySegment(Ternary.TRIT_LANES, b, o + 32 * c + m, ByteOrder.LITTLE_ENDIAN)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2I, Ternary.INTS, 0);
                    int e = base + 128 * c + m;
                    s0 = packed.selectFrom(Ternary.SIGNS).reinterpretAsFloats()
                            .fma(FloatVector.fromArray(floats, x, e), s0);
                    s1 = packed.lanewise(VectorOperators.LSHR, 2).selectFrom(Ternary.SIGNS).reinterpretAsFloats()
                            .fma(FloatVector.fromArray(floats, x, e + 32), s1);
                    s2 = packed.lanewise(VectorOperators.LSHR, 4).selectFrom(Ternary.SIGNS).reinterpretAsFloats()
                            .fma(FloatVector.fromArray(floats, x, e + 64), s2);
                    s3 = packed.lanewise(VectorOperators.LSHR, 6).selectFrom(Ternary.SIGNS).reinterpretAsFloats()
                            .fma(FloatVector.fromArray(floats, x, e + 96), s3);
                }
            }
            acc = s0.add(s1).add(s2.add(s3)).fma(FloatVector.broadcast(floats, Blocks.fp16(b, o + 64)), acc);
        }
        return Ternary.sum(acc);
    }

    @Override
    float dotPacked(MemorySegment src, long offset, int blocks, float[] prepared, int at) {
        return dotPacked16(src, offset, blocks, prepared, at);
    }

    /**
     * The float dot product with 16 lanes, a block a step, read in place: the block's 64 bytes of trits in one load
     * as 16 int lanes (lane {@code i} bytes {@code 4i..4i+3}); byte {@code b} of every lane is shifted down once, and
     * each of its four trits is one mask ({@code and}, in place) away from a vector of 16 codes 0, 1, 2 times
     * {@code 4^n}, converted to floats and multiplied with the activations {@link Ternary#prepare} put in that order
     * and scaled by {@code 4^-n}; the top trit is shifted down instead. The codes' offset of -1 comes from the prepared
     * negated sums, the first term of the first of four sums (one per {@code n}, added over {@code b}); the block's
     * {@code (s0 + s1) + (s2 + s3)} is scaled by its {@code d}, the lanes added by {@link Ternary#sum}'s tree.
     * Against {@link #dotRow} (a 16-byte load widened to int lanes per 64 trits, each trit a shift, the lane permute's
     * index wrap and the permute away from -1, 0, +1), a harness outside the repository (one thread, 2,048-element
     * rows of random codes streamed from 66 MiB, both kernels alternating in one process, four processes): 1.20-1.53x; in the model
     * ({@code bench -m 1b-tq2_0.gguf -p 16 -n 64 -r 1 --verify-tokens 0 --profile}, alternating processes, three
     * pairs) {@code ffn_gate+up} at 0.43-0.44 of the Q6_K output matrix's GB/s against 0.30-0.31, tg64 32.38-32.69
     * against 26.78-27.80 tok/s (Zen 5 VM, 2026-12-04). Rows of 8,192 ran slower than {@link #dotRow} (0.78x; two rows
     * a loop step sharing the activations' loads 0.83-0.89x, one float a block for the offsets instead of 16 no
     * better), so they keep it ({@link Ternary#packed}).
     * The int operands are broadcast once, before the loop: broadcast in the body, they left some of C2's compilations
     * of a kernel of this size to the Vector API's Java fallbacks (Q4_0's, {@code KernelInliningTest}).
     */
    static float dotPacked16(MemorySegment src, long offset, int blocks, float[] y, int at) {
        var f = FloatVector.SPECIES_512;
        var i2f = VectorOperators.I2F;
        IntVector m0 = IntVector.broadcast(IntVector.SPECIES_512, 0x03);
        IntVector m1 = IntVector.broadcast(IntVector.SPECIES_512, 0x0C);
        IntVector m2 = IntVector.broadcast(IntVector.SPECIES_512, 0x30);
        IntVector m3 = IntVector.broadcast(IntVector.SPECIES_512, 0xC0);
        FloatVector acc = FloatVector.zero(f);
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int p = at + k * Ternary.PREPARED_PER_BLOCK;
            // The scale read first: read last, the call stayed out of line (past C2's node-count cutoff for inlining)
            // and the live vectors were spilled around it every block.
            float d = Blocks.fp16(src, o + 64);
            IntVector v = ByteVector.fromMemorySegment(ByteVector.SPECIES_512, src, o, ByteOrder.LITTLE_ENDIAN)
                    .reinterpretAsInts();
            // Byte 0 of each lane; the activations of trit n of byte b at p + 64n + 16b.
            FloatVector s0 = ((FloatVector) v.and(m0).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p), FloatVector.fromArray(f, y, p + 256));
            FloatVector s1 = ((FloatVector) v.and(m1).convertShape(i2f, f, 0)).mul(FloatVector.fromArray(f, y, p + 64));
            FloatVector s2 = ((FloatVector) v.and(m2).convertShape(i2f, f, 0)).mul(FloatVector.fromArray(f, y, p + 128));
            FloatVector s3 = ((FloatVector) v.and(m3).convertShape(i2f, f, 0)).mul(FloatVector.fromArray(f, y, p + 192));
            IntVector w = v.lanewise(VectorOperators.LSHR, 8);
            s0 = ((FloatVector) w.and(m0).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 16), s0);
            s1 = ((FloatVector) w.and(m1).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 80), s1);
            s2 = ((FloatVector) w.and(m2).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 144), s2);
            s3 = ((FloatVector) w.and(m3).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 208), s3);
            w = v.lanewise(VectorOperators.LSHR, 16);
            s0 = ((FloatVector) w.and(m0).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 32), s0);
            s1 = ((FloatVector) w.and(m1).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 96), s1);
            s2 = ((FloatVector) w.and(m2).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 160), s2);
            s3 = ((FloatVector) w.and(m3).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 224), s3);
            w = v.lanewise(VectorOperators.LSHR, 24);
            s0 = ((FloatVector) w.and(m0).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 48), s0);
            s1 = ((FloatVector) w.and(m1).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 112), s1);
            s2 = ((FloatVector) w.and(m2).convertShape(i2f, f, 0)).fma(FloatVector.fromArray(f, y, p + 176), s2);
            s3 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 30).convertShape(i2f, f, 0))
                    .fma(FloatVector.fromArray(f, y, p + 240), s3);
            acc = s0.add(s1).add(s2.add(s3)).fma(FloatVector.broadcast(f, d), acc);
        }
        // Ternary.sum's tree written out: a helper taking a vector boxes it when C2 leaves it out of line.
        acc = acc.add(acc.rearrange(Ternary.X8));
        acc = acc.add(acc.rearrange(Ternary.X4));
        acc = acc.add(acc.rearrange(Ternary.X2));
        return acc.add(acc.rearrange(Ternary.X1)).lane(0);
    }

    /**
     * With fewer than 32 short lanes (AVX2, NEON; with 32, {@link #dotCodes32}): as {@link Ternary#dotQ8K}, with the
     * trits tested where they are packed, read straight from the mapping: the packed
     * bytes are widened to 16-bit lanes once, and trit {@code n} of lane {@code m} is +1 where {@code bits & (3 << 2n)
     * == 2 << 2n}, -1 where it is 0 (element {@code 128c + 32n + m}, FORMATS.md §6.1). Same sums, same bits as TQ1_0.
     * The activations are read from their array ({@link Blocks#heapBytes}); in any other segment the row is staged.
     * Before, every row was staged into an array first: {@code bench -m 1b-tq2_0.gguf -p 16 -n 64 -r 3 --activations
     * quantized}, three alternating pairs of processes, tg64 18.62, 18.72, 18.38 -> 21.92, 21.18, 20.63 tok/s. Read
     * through the segment instead of the array, the activations' loads shared one type profile with the mapped
     * weights' and the compiled method was thrown out again and again (4 GB/s).
     */
    @Override
    double dotEncodedRow(MemorySegment src, long offset, int blocks, MemorySegment act, long actOffset) {
        byte[] a = Blocks.heapBytes(act);
        if (a == null) {
            return super.dotEncodedRow(src, offset, blocks, act, actOffset);
        }
        int at = Math.toIntExact(act.address() + actOffset);
        int lanes = Ternary.SHORTS.length();
        double sum = 0;
        for (int k = 0; k < blocks; k++) {
            long o = offset + (long) k * BYTES;
            int ao = at + k * Ternary.Q8K_BYTES;
            ShortVector plus = ShortVector.zero(Ternary.SHORTS);
            ShortVector minus = plus;
            for (int c = 0; c < 2; c++) {
                for (int m = 0; m < 32; m += lanes) {
                    ShortVector packed = (ShortVector) ByteVector
                            .fromMemorySegment(Ternary.SHORT_LANES, src, o + 32 * c + m, ByteOrder.LITTLE_ENDIAN)
                            .convertShape(VectorOperators.ZERO_EXTEND_B2S, Ternary.SHORTS, 0);
                    for (int n = 0; n < 4; n++) {
                        ShortVector bits = packed.and((short) (3 << 2 * n));
                        ShortVector xq = (ShortVector) ByteVector
                                .fromArray(Ternary.SHORT_LANES, a, ao + 4 + 128 * c + 32 * n + m)
                                .convertShape(VectorOperators.B2S, Ternary.SHORTS, 0);
                        plus = plus.add(xq, bits.compare(VectorOperators.EQ, (short) (2 << 2 * n)));
                        minus = minus.add(xq, bits.compare(VectorOperators.EQ, (short) 0));
                    }
                }
            }
            sum += Ternary.term(Blocks.fp16(src, o + 64), Blocks.f32(a, ao), plus.sub(minus));
        }
        return sum;
    }

    @Override
    void dotCodesRows(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a, int at,
                      int actStride, int actRows, float[] out, int outIndex, int outStride) {
        dotCodes32(src, offset, stride, rows, blocks, a, at, actStride, actRows, out, outIndex, outStride);
    }

    /**
     * The integer dot products of a tile ({@link #dotEncodedRows}) with Q8_K activations, in 32 int16 lanes (AVX-512),
     * the weights read in place, an activation row at a time over all the weight rows. Each half block's 32 bytes of
     * trits are widened to 16-bit lanes once and XORed with {@code 0x55}, which turns each 2-bit code 0, 1, 2 into 1,
     * 0, 3, that is 1, 0, -1 as a signed 2-bit field: trit {@code n} of lane {@code m} (element {@code 128c + 32n + m})
     * shifted to the top of the lane and arithmetically back down is {@code -(t - 1)}, which multiplies the 32
     * activation codes of those elements, widened from their bytes ({@code vpmullw}); the eight products of a lane add
     * into one 16-bit sum ({@code |sum| <= 8 * 128}). Per block, pairs of lanes are added in int lanes ({@code (v + (v
     * << 16)) >> 16}), and the exact integers, converted, are scaled by {@code -d_w * d_x} (rounded once, in float)
     * into 16 float sums, added by a fixed tree at the end.
     * <p>Each lane holds its own elements' products, so its rounding is relative to them: with the codes taken as 0,
     * 1, 2 and the offset subtracted per block from Q8_K's group sums, lanes held sums of other elements that cancelled
     * only across lanes, and the kit's rows with a few large weights (most trits 0) came out 1.6e-4 off FP64. All
     * shifts are by vectors of counts ({@code vpsllvw}, {@code vpsravw}, {@code vpsllvd}): by int counts C2 kept a
     * count register per shift (16 of them), and a four-activation-row form of this kernel (each block's trits
     * shifted once for four rows: 47 against 35-37 G products/s in a harness) spilled its sums, and in some of C2's
     * compilations of it the int lanes' shifts by an int count were left to the Vector API's Java code (JFR: 148 GB
     * of {@code int[]} from {@code lanewiseShiftTemplate} in one {@code bench -p 512 -n 0 -r 1 --activations
     * per-token}, 22.5 tok/s); with vector counts it still ran at 26-104 tok/s from process to process, so it was
     * dropped, and per-token prompts take the float GEMM instead (the engine's {@code Session}). A harness outside
     * the repository (one thread, 2 MiB of rows, Zen 5 VM, 2026-12-04), one activation row through {@link
     * #dotEncodedRows} against the float dots ({@link #dotPacked16} with prepared activations for 2,048-element rows,
     * {@link #dotRow} for 8,192): 11.5-11.8 against 8.2-8.3 GB/s, and 12.4 against 6.5; a row a call ({@link
     * #dotEncoded}), 5.8-6.0 GB/s at 2,048 elements: hence the tiles.
     * <p>Activation rows go two at a time ({@link #dotCodes32Pair}: each block's trits loaded and shifted once for
     * both rows, each row's products and sums as {@link #dotCodes32Row} computes them, so the same bits; the kit
     * compares a tile with one-row products bit for bit). {@code bench -m 1b-tq2_0.gguf -p 512 -n 0 -r 2 --activations
     * quantized --verify-tokens 0}, alternating processes against the one-row form: pp512 87.91, 86.64, 82.95 against
     * 115.31, 117.18, 118.61 tok/s; the TQ1_0 file (its rows rewritten into this layout first) 72.85, 73.51 against
     * 88.60, 87.32 (Zen 5 VM, 2026-12-05). Three rows at a time: 94.9-123.3 tok/s over three processes, and C2's arena
     * for the larger method took bench's peak resident size from about 600 to 800-994 MiB; not kept.
     */
    static void dotCodes32(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a, int at,
                           int actStride, int actRows, float[] out, int outIndex, int outStride) {
        int i = 0;
        for (; i + 2 <= actRows; i += 2) {
            dotCodes32Pair(src, offset, stride, rows, blocks, a, at + i * actStride, at + (i + 1) * actStride, out,
                    outIndex + i * outStride, outIndex + (i + 1) * outStride);
        }
        for (; i < actRows; i++) {
            dotCodes32Row(src, offset, stride, rows, blocks, a, at + i * actStride, out, outIndex + i * outStride);
        }
    }

    /**
     * {@link #dotCodes32Row} for two activation rows at once, each block's trits taken apart once for both. Written out
     * beside it rather than shared: decode steps have one activation row and keep the smaller kernel, and a helper that
     * takes or returns vectors boxes them where C2 leaves it out of line (see the end of {@link #dotCodes32Row}).
     */
    private static void dotCodes32Pair(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a,
                                       int at0, int at1, float[] out, int outIndex0, int outIndex1) {
        var shorts = ShortVector.SPECIES_512;
        var half = ByteVector.SPECIES_256;
        var f = FloatVector.SPECIES_512;
        var shl = VectorOperators.LSHL;
        var sra = VectorOperators.ASHR;
        var b2s = VectorOperators.B2S;
        var zx = VectorOperators.ZERO_EXTEND_B2S;
        var i2f = VectorOperators.I2F;
        ShortVector flip = ShortVector.broadcast(shorts, (short) 0x55);
        ShortVector c8 = ShortVector.broadcast(shorts, (short) 8);
        ShortVector c10 = ShortVector.broadcast(shorts, (short) 10);
        ShortVector c12 = ShortVector.broadcast(shorts, (short) 12);
        ShortVector c14 = ShortVector.broadcast(shorts, (short) 14);
        IntVector c16 = IntVector.broadcast(IntVector.SPECIES_512, 16);
        for (int r = 0; r < rows; r++) {
            long row = offset + r * stride;
            FloatVector acc0 = FloatVector.zero(f);
            FloatVector acc1 = acc0;
            for (int k = 0; k < blocks; k++) {
                long o = row + (long) k * BYTES;
                int x = at0 + k * Ternary.Q8K_BYTES;
                int y = at1 + k * Ternary.Q8K_BYTES;
                float dw = -Blocks.fp16(src, o + 64);
                float scale0 = dw * Blocks.f32(a, x);
                float scale1 = dw * Blocks.f32(a, y);
                ShortVector q = ((ShortVector) ByteVector.fromMemorySegment(half, src, o, ByteOrder.LITTLE_ENDIAN)
                        .convertShape(zx, shorts, 0)).lanewise(VectorOperators.XOR, flip);
                ShortVector t0 = q.lanewise(shl, c14).lanewise(sra, c14);
                ShortVector t1 = q.lanewise(shl, c12).lanewise(sra, c14);
                ShortVector t2 = q.lanewise(shl, c10).lanewise(sra, c14);
                ShortVector t3 = q.lanewise(shl, c8).lanewise(sra, c14);
                q = ((ShortVector) ByteVector.fromMemorySegment(half, src, o + 32, ByteOrder.LITTLE_ENDIAN)
                        .convertShape(zx, shorts, 0)).lanewise(VectorOperators.XOR, flip);
                ShortVector t4 = q.lanewise(shl, c14).lanewise(sra, c14);
                ShortVector t5 = q.lanewise(shl, c12).lanewise(sra, c14);
                ShortVector t6 = q.lanewise(shl, c10).lanewise(sra, c14);
                ShortVector t7 = q.lanewise(shl, c8).lanewise(sra, c14);
                ShortVector s = t0
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 4).convertShape(b2s, shorts, 0));
                s = s.add(t1
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 36).convertShape(b2s, shorts, 0)));
                s = s.add(t2
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 68).convertShape(b2s, shorts, 0)));
                s = s.add(t3
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 100).convertShape(b2s, shorts, 0)));
                s = s.add(t4
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 132).convertShape(b2s, shorts, 0)));
                s = s.add(t5
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 164).convertShape(b2s, shorts, 0)));
                s = s.add(t6
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 196).convertShape(b2s, shorts, 0)));
                s = s.add(t7
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 228).convertShape(b2s, shorts, 0)));
                IntVector w = s.reinterpretAsInts();
                acc0 = ((FloatVector) w.add(w.lanewise(shl, c16)).lanewise(sra, c16).convertShape(i2f, f, 0))
                        .fma(FloatVector.broadcast(f, scale0), acc0);
                s = t0.mul((ShortVector) ByteVector.fromArray(half, a, y + 4).convertShape(b2s, shorts, 0));
                s = s.add(t1
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 36).convertShape(b2s, shorts, 0)));
                s = s.add(t2
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 68).convertShape(b2s, shorts, 0)));
                s = s.add(t3
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 100).convertShape(b2s, shorts, 0)));
                s = s.add(t4
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 132).convertShape(b2s, shorts, 0)));
                s = s.add(t5
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 164).convertShape(b2s, shorts, 0)));
                s = s.add(t6
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 196).convertShape(b2s, shorts, 0)));
                s = s.add(t7
                        .mul((ShortVector) ByteVector.fromArray(half, a, y + 228).convertShape(b2s, shorts, 0)));
                w = s.reinterpretAsInts();
                acc1 = ((FloatVector) w.add(w.lanewise(shl, c16)).lanewise(sra, c16).convertShape(i2f, f, 0))
                        .fma(FloatVector.broadcast(f, scale1), acc1);
            }
            acc0 = acc0.add(acc0.rearrange(Ternary.X8));
            acc0 = acc0.add(acc0.rearrange(Ternary.X4));
            acc0 = acc0.add(acc0.rearrange(Ternary.X2));
            out[outIndex0 + r] = acc0.add(acc0.rearrange(Ternary.X1)).lane(0);
            acc1 = acc1.add(acc1.rearrange(Ternary.X8));
            acc1 = acc1.add(acc1.rearrange(Ternary.X4));
            acc1 = acc1.add(acc1.rearrange(Ternary.X2));
            out[outIndex1 + r] = acc1.add(acc1.rearrange(Ternary.X1)).lane(0);
        }
    }

    /** {@link #dotCodes32} for one activation row at {@code a[at..]}. */
    private static void dotCodes32Row(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a,
                                      int at, float[] out, int outIndex) {
        var shorts = ShortVector.SPECIES_512;
        var half = ByteVector.SPECIES_256;
        var f = FloatVector.SPECIES_512;
        var shl = VectorOperators.LSHL;
        var sra = VectorOperators.ASHR;
        var b2s = VectorOperators.B2S;
        var zx = VectorOperators.ZERO_EXTEND_B2S;
        var i2f = VectorOperators.I2F;
        ShortVector flip = ShortVector.broadcast(shorts, (short) 0x55);
        ShortVector c8 = ShortVector.broadcast(shorts, (short) 8);
        ShortVector c10 = ShortVector.broadcast(shorts, (short) 10);
        ShortVector c12 = ShortVector.broadcast(shorts, (short) 12);
        ShortVector c14 = ShortVector.broadcast(shorts, (short) 14);
        IntVector c16 = IntVector.broadcast(IntVector.SPECIES_512, 16);
        for (int r = 0; r < rows; r++) {
            long row = offset + r * stride;
            FloatVector acc = FloatVector.zero(f);
            for (int k = 0; k < blocks; k++) {
                long o = row + (long) k * BYTES;
                int x = at + k * Ternary.Q8K_BYTES;
                // The scales read first, as in dotPacked16: read after the vector work, a call could stay out
                // of line.
                float scale = -(Blocks.fp16(src, o + 64) * Blocks.f32(a, x));
                // The two halves written out, not a loop over them: a loop ran at 0.7-0.9x (harness outside the
                // repository, one thread, 2,048-element rows, alternating processes: 8.1-10.6 against 8.9-11.7 GB/s).
                ShortVector q = ((ShortVector) ByteVector.fromMemorySegment(half, src, o, ByteOrder.LITTLE_ENDIAN)
                        .convertShape(zx, shorts, 0)).lanewise(VectorOperators.XOR, flip);
                ShortVector t0 = q.lanewise(shl, c14).lanewise(sra, c14);
                ShortVector t1 = q.lanewise(shl, c12).lanewise(sra, c14);
                ShortVector t2 = q.lanewise(shl, c10).lanewise(sra, c14);
                ShortVector t3 = q.lanewise(shl, c8).lanewise(sra, c14);
                q = ((ShortVector) ByteVector.fromMemorySegment(half, src, o + 32, ByteOrder.LITTLE_ENDIAN)
                        .convertShape(zx, shorts, 0)).lanewise(VectorOperators.XOR, flip);
                ShortVector t4 = q.lanewise(shl, c14).lanewise(sra, c14);
                ShortVector t5 = q.lanewise(shl, c12).lanewise(sra, c14);
                ShortVector t6 = q.lanewise(shl, c10).lanewise(sra, c14);
                ShortVector t7 = q.lanewise(shl, c8).lanewise(sra, c14);
                ShortVector s = t0
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 4).convertShape(b2s, shorts, 0));
                s = s.add(t1
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 36).convertShape(b2s, shorts, 0)));
                s = s.add(t2
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 68).convertShape(b2s, shorts, 0)));
                s = s.add(t3
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 100).convertShape(b2s, shorts, 0)));
                s = s.add(t4
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 132).convertShape(b2s, shorts, 0)));
                s = s.add(t5
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 164).convertShape(b2s, shorts, 0)));
                s = s.add(t6
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 196).convertShape(b2s, shorts, 0)));
                s = s.add(t7
                        .mul((ShortVector) ByteVector.fromArray(half, a, x + 228).convertShape(b2s, shorts, 0)));
                IntVector w = s.reinterpretAsInts();
                // convertShape with the species named: convert(I2F, 0) looks the result's species up at run time,
                // and C2's compilations of this kernel kept one vector a block boxed (80 bytes a block, measured in
                // a workout of dotEncodedRows like KernelWorkout's; 2026-12-05).
                acc = ((FloatVector) w.add(w.lanewise(shl, c16)).lanewise(sra, c16).convertShape(i2f, f, 0))
                        .fma(FloatVector.broadcast(f, scale), acc);
            }
            // Ternary.sum's tree written out, and the codes' loads: a helper taking or returning a vector boxes it
            // when C2 leaves it out of line (a helper for the loads did, twice a block).
            acc = acc.add(acc.rearrange(Ternary.X8));
            acc = acc.add(acc.rearrange(Ternary.X4));
            acc = acc.add(acc.rearrange(Ternary.X2));
            out[outIndex + r] = acc.add(acc.rearrange(Ternary.X1)).lane(0);
        }
    }

    /**
     * Straight from the block's bytes: lane {@code j}'s elements {@code 8j .. 8j + 7} are bits {@code 2n, 2n + 1} of
     * the eight consecutive bytes from {@code 32c + 8(j mod 4)}, with {@code c = j / 16} and {@code n = (j mod 16) / 4}
     * (element {@code 128c + 32n + m} is in byte {@code 32c + m}, {@link #unpack}), so one load of a long, a shift and
     * {@link Long#compress} (a single {@code pext} on x86 with BMI2) make a lane. Harness outside the repository
     * (eight matrices of the 1B TQ2_0 file, 31.4 MB, packed three times in one process): 1.23-1.44 GB/s once
     * compiled, 0.21-0.23 the first time, against 1.00-1.09 and 0.13 for the default, which unpacks each of the 256
     * trits and puts the lanes together one code at a time.
     */
    @Override
    boolean packLanes(MemorySegment src, long offset, short[] lanes, byte[] staged, byte[] trits) {
        for (int j = 0; j < 32; j++) {
            long bytes = src.get(I64, offset + 32 * (j / 16) + 8 * (j % 4));
            long codes = Long.compress(bytes >>> (2 * ((j % 16) / 4)), 0x0303030303030303L);
            if ((codes & (codes >>> 1) & 0x5555) != 0) {
                return false;
            }
            lanes[j] = (short) codes;
        }
        return true;
    }

    /** Element {@code 128 c + 32 n + m} is bits {@code 2n..2n+1} of byte {@code 32 c + m} (FORMATS.md §6.1). */
    @Override
    void unpack(byte[] b, int o, byte[] trits) {
        for (int c = 0; c < 2; c++) {
            ByteVector q = ByteVector.fromArray(ByteVector.SPECIES_256, b, o + 32 * c);
            for (int n = 0; n < 4; n++) {
                q.lanewise(VectorOperators.ASHR, 2 * n).and((byte) 3).intoArray(trits, 128 * c + 32 * n);
            }
        }
    }
}
