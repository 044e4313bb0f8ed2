package dev.prefill4j.engine.formats;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/** IEEE binary32 weights (GGUF type 0): decoding is a copy. */
public final class F32Quantizer implements Quantizer {
    @Override public String id() { return "f32"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "IEEE float32, GGUF type 0"; }
    @Override public int blockSize() { return 1; }
    @Override public int blockBytes() { return 4; }
    @Override public OptionalInt ggufType() { return OptionalInt.of(0); }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        MemorySegment.copy(src, Blocks.F32, offset, dst, dstOffset, count);
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        MemorySegment.copy(src, srcOffset, dst, Blocks.F32, offset, count);
    }

    /** Decoded a chunk at a time into L1 and multiplied with vectors ({@link FusedDot}). */
    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return FusedDot.byDecoding(this, src, offset, x, xOffset, count);
    }
}
