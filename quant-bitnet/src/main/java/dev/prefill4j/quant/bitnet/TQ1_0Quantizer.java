package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

/**
 * GGUF TQ1_0 (type 34): 256 trits in 54 bytes: {@code qs[48]} at 0, {@code qh[4]} at 48, {@code d} fp16 at 52.
 * Five trits per byte in base 3, first trit most significant, stored as the fixed-point fraction
 * {@code ceil(v * 256 / 243)}; trit {@code n} of byte {@code q} is {@code (((q * 3^n) mod 256) * 3) >> 8}.
 * {@code qs[m]} (m &lt; 32) holds elements {@code 32n + m}; {@code qs[32 + m]} (m &lt; 16) elements
 * {@code 160 + 16n + m}; {@code qh[j]} four trits, elements {@code 240 + 4n + j} (FORMATS.md §6.1).
 */
public final class TQ1_0Quantizer extends TernaryQuantizer {
    static final int BYTES = 54;
    private static final int[] POW3 = {1, 3, 9, 27, 81, 243};

    @Override public String id() { return "tq1_0"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "GGUF TQ1_0: ternary, 5 trits/byte + fp16 scale, 1.69 bits/weight, type 34"; }
    @Override public int blockBytes() { return BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(34); }

    /** Trit {@code n} (0 = most significant) of a packed byte: 0, 1 or 2. */
    static int trit(int packed, int n) {
        int q = (packed * POW3[n]) & 0xFF;
        return (q * 3) >> 8;
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        int blocks = count / Ternary.QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        byte[] trits = Ternary.trits();
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            unpack(b, o, trits);
            Ternary.decode(trits, Blocks.fp16(b, o + 52), dst, dstOffset + k * Ternary.QK);
        }
    }

    @Override
    int scaleAt() {
        return 52;
    }

    /**
     * The block's trits in element order (layout in the class comment), in int lanes: a vector of packed bytes gives
     * a vector of trits per power of three ({@code p = 3q}: the trit is {@code p >> 8}, the next {@code q} is
     * {@code p & 0xFF}); the last four bytes ({@code qh}) one at a time. Same trits as {@link #trit}.
     */
    @Override
    void unpack(byte[] staged, int o, byte[] trits) {
        int lanes = Ternary.INTS.length();
        for (int m = 0; m < 32; m += lanes) {
            unpackLanes(staged, o + m, trits, m, 32);
        }
        for (int m = 0; m < 16; m += lanes) {
            unpackLanes(staged, o + 32 + m, trits, 160 + m, 16);
        }
        for (int n = 0; n < 4; n++) {
            for (int j = 0; j < 4; j++) {
                trits[240 + 4 * n + j] = (byte) trit(staged[o + 48 + j] & 0xFF, n);
            }
        }
    }

    /**
     * Five trits of each packed byte {@code b[at + lane]} to {@code trits[to + stride * n + lane]}. With 4 int lanes
     * in scalar code: the narrowest byte vector has 8 lanes, and storing it would overwrite 4 trits already unpacked.
     */
    private static void unpackLanes(byte[] b, int at, byte[] trits, int to, int stride) {
        if (Ternary.INTS.length() < 8) {
            for (int lane = 0; lane < Ternary.INTS.length(); lane++) {
                for (int n = 0; n < 5; n++) {
                    trits[to + stride * n + lane] = (byte) trit(b[at + lane] & 0xFF, n);
                }
            }
            return;
        }
        IntVector q = (IntVector) ByteVector.fromArray(Ternary.TRIT_LANES, b, at)
                .convertShape(VectorOperators.ZERO_EXTEND_B2I, Ternary.INTS, 0);
        for (int n = 0; n < 5; n++) {
            IntVector p = q.mul(3);
            p.lanewise(VectorOperators.LSHR, 8).convertShape(VectorOperators.I2B, Ternary.TRIT_LANES, 0)
                    .reinterpretAsBytes().intoArray(trits, to + stride * n);
            q = p.and(0xFF);
        }
    }

    /**
     * The row rewritten block by block in TQ2_0's layout in a per-thread buffer, then TQ2_0's packed kernel over it: one
     * kernel for both formats, so the same bits. The trits go from one layout to the other in int lanes, without
     * unpacking them to memory: TQ2_0's byte {@code 32c + m} holds elements {@code 128c + 32n + m} in bits {@code 2n},
     * which for {@code c = 0} are trits 0-3 of {@code qs[m]}; for {@code c = 1} trit 4 of {@code qs[m]}, then for {@code
     * m < 16} trits 0, 2, 4 of {@code qs[32 + m]}, for {@code m >= 16} trits 1 and 3 of {@code qs[16 + m]} and trit
     * {@code (m - 16) / 4} of {@code qh[m % 4]} (FORMATS.md §6.1). Against unpacking to memory and the lane permute dot
     * ({@link Ternary#dot}), in the harness {@link TQ2_0Quantizer#dotPacked16} names: 1.28-1.32x; in the model (a
     * TQ1_0 file quantized from the same 1B F16 file) {@code ffn_gate+up} at 0.15-0.16 of the output matrix's GB/s
     * against 0.15-0.16, as fast (rewriting the trits in scalar code first made it 0.26-0.29x in the harness).
     */
    @Override
    float dotPacked(MemorySegment src, long offset, int blocks, float[] prepared, int at) {
        return transcoded(src, offset, blocks, prepared, at, null, 0, 0, 0, null, 0, 0);
    }

    /** Weight row by weight row, each rewritten as for {@link #dotPacked}, then TQ2_0's kernel. */
    @Override
    void dotCodesRows(MemorySegment src, long offset, long stride, int rows, int blocks, byte[] a, int at,
                      int actStride, int actRows, float[] out, int outIndex, int outStride) {
        for (int r = 0; r < rows; r++) {
            transcoded(src, offset + r * stride, blocks, null, 0, a, at, actStride, actRows, out, outIndex + r,
                    outStride);
        }
    }

    /**
     * The row rewritten in TQ2_0's layout in the per-thread buffer ({@link #dotPacked}), then TQ2_0's float kernel
     * over it with {@code prepared} activations ({@code a == null}), or its integer kernel with the Q8_K activations
     * in {@code a} into {@code products} ({@link #dotCodesRows}; returns 0). One method for both, the rewriting and the kernel's call in one
     * compilation, as the float path was before the integer one came: with the rewriting in a method of its own,
     * {@code KernelInliningTest}'s workout (every format in one process) measured TQ1_0's float dot at 16,384 bytes a
     * 64-row call in one run of four here and in one run of the build; none in five runs of this form.
     */
    private static float transcoded(MemorySegment src, long offset, int blocks, float[] prepared, int at, byte[] a,
                                    int actAt, int actStride, int actRows, float[] products, int outIndex,
                                    int outStride) {
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        Transcoded t = TRANSCODED.get();
        if (t.bytes.length < blocks * TQ2_0Quantizer.BYTES) {
            t = new Transcoded(new byte[blocks * TQ2_0Quantizer.BYTES]);
            TRANSCODED.set(t);
        }
        byte[] out = t.bytes;
        var bytes = ByteVector.SPECIES_128;
        var ints = IntVector.SPECIES_512;
        var widen = VectorOperators.ZERO_EXTEND_B2I;
        IntVector three = IntVector.broadcast(ints, 3);
        IntVector low = IntVector.broadcast(ints, 0xFF);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            int to = k * TQ2_0Quantizer.BYTES;
            IntVector lo = (IntVector) ByteVector.fromArray(bytes, b, o).convertShape(widen, ints, 0);
            IntVector hi = (IntVector) ByteVector.fromArray(bytes, b, o + 16).convertShape(widen, ints, 0);
            IntVector r = (IntVector) ByteVector.fromArray(bytes, b, o + 32).convertShape(widen, ints, 0);
            // qh[m % 4] in lane m - 16, times 3^((m - 16) / 4) modulo 256: its trit 0 is then the wanted one.
            IntVector h = IntVector.broadcast(ints, (b[o + 48] & 0xFF) | (b[o + 49] & 0xFF) << 8
                    | (b[o + 50] & 0xFF) << 16 | (b[o + 51] & 0xFF) << 24).lanewise(VectorOperators.LSHR, QH_SHIFTS)
                    .and(low).mul(QH_POWERS).and(low);
            IntVector c0lo = IntVector.zero(ints);
            IntVector c0hi = c0lo;
            IntVector c1lo = c0lo;
            IntVector c1hi = h.mul(three).lanewise(VectorOperators.LSHR, 8).lanewise(VectorOperators.LSHL, 6);
            for (int n = 0; n < 5; n++) { // trit n, most significant first: p = 3q, the trit p >> 8, then q = p & 0xFF
                IntVector pl = lo.mul(three);
                IntVector ph = hi.mul(three);
                IntVector pr = r.mul(three);
                lo = pl.and(low);
                hi = ph.and(low);
                r = pr.and(low);
                IntVector tl = pl.lanewise(VectorOperators.LSHR, 8);
                IntVector th = ph.lanewise(VectorOperators.LSHR, 8);
                IntVector tr = pr.lanewise(VectorOperators.LSHR, 8);
                if (n < 4) {
                    c0lo = c0lo.or(tl.lanewise(VectorOperators.LSHL, 2 * n));
                    c0hi = c0hi.or(th.lanewise(VectorOperators.LSHL, 2 * n));
                } else {
                    c1lo = c1lo.or(tl);
                    c1hi = c1hi.or(th);
                }
                if (n % 2 == 0) { // trits 0, 2, 4 of qs[32 + m] to bits 2, 4, 6
                    c1lo = c1lo.or(tr.lanewise(VectorOperators.LSHL, n + 2));
                } else if (n < 4) { // trits 1, 3 to bits 2, 4 of byte 48 + m
                    c1hi = c1hi.or(tr.lanewise(VectorOperators.LSHL, n + 1));
                }
            }
            c0lo.convertShape(VectorOperators.I2B, bytes, 0).reinterpretAsBytes().intoArray(out, to);
            c0hi.convertShape(VectorOperators.I2B, bytes, 0).reinterpretAsBytes().intoArray(out, to + 16);
            c1lo.convertShape(VectorOperators.I2B, bytes, 0).reinterpretAsBytes().intoArray(out, to + 32);
            c1hi.convertShape(VectorOperators.I2B, bytes, 0).reinterpretAsBytes().intoArray(out, to + 48);
            out[to + 64] = b[o + 52];
            out[to + 65] = b[o + 53];
        }
        if (a == null) {
            return TQ2_0Quantizer.dotPacked16(t.segment, 0, blocks, prepared, at);
        }
        TQ2_0Quantizer.dotCodes32(t.segment, 0, 0, 1, blocks, a, actAt, actStride, actRows, products, outIndex,
                outStride);
        return 0;
    }

    /** {@link #dotPacked}: lane {@code l} takes {@code qh[l % 4]} from the four bytes read as one little-endian int. */
    private static final IntVector QH_SHIFTS = IntVector.fromArray(IntVector.SPECIES_512,
            java.util.stream.IntStream.range(0, 16).map(l -> 8 * (l % 4)).toArray(), 0);
    /** {@link #dotPacked}: {@code 3^(l / 4)}, which brings trit {@code l / 4} of a byte to the top ({@link #trit}). */
    private static final IntVector QH_POWERS = IntVector.fromArray(IntVector.SPECIES_512,
            java.util.stream.IntStream.range(0, 16).map(l -> POW3[l / 4]).toArray(), 0);

    /** A per-thread buffer for {@link #dotPacked}, with its segment made once. */
    private record Transcoded(byte[] bytes, MemorySegment segment) {
        Transcoded(byte[] bytes) {
            this(bytes, MemorySegment.ofArray(bytes));
        }
    }

    private static final ThreadLocal<Transcoded> TRANSCODED = ThreadLocal.withInitial(() -> new Transcoded(new byte[0]));

    /** Packs trits, first most significant, then {@code ceil(v * 256 / 243)} (with a trailing zero trit for qh). */
    private static byte pack(int v) {
        return (byte) ((v * 256 + 242) / 243);
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Blocks.checkCount(count, Ternary.QK, id());
        for (int k = 0; k < count / Ternary.QK; k++) {
            int base = srcOffset + k * Ternary.QK;
            long o = offset + (long) k * BYTES;
            float d = Ternary.absMax(src, base);
            float id = d != 0 ? 1f / d : 0f;
            Blocks.fp16(dst, o + 52, d);
            for (int m = 0; m < 32; m++) {
                int v = 0;
                for (int n = 0; n < 5; n++) {
                    v = v * 3 + Ternary.trit(src[base + 32 * n + m], id);
                }
                dst.set(Blocks.I8, o + m, pack(v));
            }
            for (int m = 0; m < 16; m++) {
                int v = 0;
                for (int n = 0; n < 5; n++) {
                    v = v * 3 + Ternary.trit(src[base + 160 + 16 * n + m], id);
                }
                dst.set(Blocks.I8, o + 32 + m, pack(v));
            }
            for (int j = 0; j < 4; j++) {
                int v = 0;
                for (int n = 0; n < 4; n++) {
                    v = v * 3 + Ternary.trit(src[base + 240 + 4 * n + j], id);
                }
                dst.set(Blocks.I8, o + 48 + j, pack(v * 3));
            }
        }
    }
}
