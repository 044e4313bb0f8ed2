package dev.prefill4j.quant.bitnet;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

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

    /**
     * Visits every element of a block as (element index, trit): the layout in one place for decode and dot.
     */
    interface TritSink {
        void accept(int element, int trit);
    }

    static void forEachTrit(byte[] b, int o, TritSink sink) {
        for (int n = 0; n < 5; n++) {
            for (int m = 0; m < 32; m++) {
                sink.accept(32 * n + m, trit(b[o + m] & 0xFF, n));
            }
        }
        for (int n = 0; n < 5; n++) {
            for (int m = 0; m < 16; m++) {
                sink.accept(160 + 16 * n + m, trit(b[o + 32 + m] & 0xFF, n));
            }
        }
        for (int n = 0; n < 4; n++) {
            for (int j = 0; j < 4; j++) {
                sink.accept(240 + 4 * n + j, trit(b[o + 48 + j] & 0xFF, n));
            }
        }
    }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        Blocks.checkCount(count, Ternary.QK, id());
        int blocks = count / Ternary.QK;
        byte[] b = Blocks.stage(src, offset, blocks * BYTES);
        for (int k = 0; k < blocks; k++) {
            int o = k * BYTES;
            float d = Blocks.fp16(b, o + 52);
            int base = dstOffset + k * Ternary.QK;
            forEachTrit(b, o, (e, t) -> dst[base + e] = (t - 1) * d);
        }
    }

    @Override
    int scaleAt() {
        return 52;
    }

    @Override
    void unpack(byte[] staged, int o, byte[] trits) {
        forEachTrit(staged, o, (e, t) -> trits[e] = (byte) t);
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
