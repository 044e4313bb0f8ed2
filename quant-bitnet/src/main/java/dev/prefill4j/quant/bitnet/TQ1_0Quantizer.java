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
