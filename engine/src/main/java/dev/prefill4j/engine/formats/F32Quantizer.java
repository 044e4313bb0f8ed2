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

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int i = 0;
        for (; i + 4 <= count; i += 4) {
            long o = offset + 4L * i;
            s0 += src.get(Blocks.F32, o) * x[xOffset + i];
            s1 += src.get(Blocks.F32, o + 4) * x[xOffset + i + 1];
            s2 += src.get(Blocks.F32, o + 8) * x[xOffset + i + 2];
            s3 += src.get(Blocks.F32, o + 12) * x[xOffset + i + 3];
        }
        for (; i < count; i++) {
            s0 += src.get(Blocks.F32, offset + 4L * i) * x[xOffset + i];
        }
        return (s0 + s1) + (s2 + s3);
    }
}
