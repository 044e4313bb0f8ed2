package dev.prefill4j.engine.formats;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Quantizer;
import java.lang.foreign.MemorySegment;
import java.util.OptionalInt;

/**
 * Q8_0 blocks as llama.cpp's CPU code makes them from activations on x86, the input format of its Q4_0, Q5_0, Q8_0
 * (and, as Q8_1 with the same values, Q4_1 and Q5_1) dot products: the block layout and decoding of {@link
 * Q8_0Quantizer}, but encoded as {@code quantize_row_q8_0} in ggml-cpu/arch/x86/quants.c does, with the inverse
 * scale {@code 127 / max|x|} and products rounded half to even, where the reference quantizer (used for weights)
 * takes {@code 1 / d} and rounds half away from zero. The two differ in the last bit of the inverse scale and on
 * exact ties, and ties are common in activations that come straight from quantized embeddings (their values are
 * small multiples of one scale): on tiny-256-Q4_0 the reference rounding leaves the logits 1.7e-2 from llama.cpp's,
 * this one 3.6e-7. No GGUF type: it exists for {@code --activations quantized}.
 */
public final class Q8_0ActivationQuantizer implements Quantizer {
    /** Its id, named by the formats whose dot products take it. */
    public static final String ID = "q8_0-activations";
    private final Q8_0Quantizer blocks = new Q8_0Quantizer();

    @Override public String id() { return ID; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public String description() { return "Q8_0 as llama.cpp's x86 code quantizes activations (127/amax, half to even)"; }
    @Override public int blockSize() { return Q8_0Quantizer.QK; }
    @Override public int blockBytes() { return Q8_0Quantizer.BLOCK_BYTES; }
    @Override public OptionalInt ggufType() { return OptionalInt.empty(); }

    @Override
    public void decode(MemorySegment src, long offset, float[] dst, int dstOffset, int count) {
        blocks.decode(src, offset, dst, dstOffset, count);
    }

    @Override
    public void encode(float[] src, int srcOffset, int count, MemorySegment dst, long offset) {
        Q8_0Quantizer.encode(src, srcOffset, count, dst, offset, true);
    }

    @Override
    public float dot(MemorySegment src, long offset, float[] x, int xOffset, int count) {
        return blocks.dot(src, offset, x, xOffset, count);
    }
}
