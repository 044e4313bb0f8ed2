package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.function.IntConsumer;

/**
 * An open compute device that runs the graph's operations on row-major float activations.
 *
 * <p>Activations are {@code float[]} laid out {@code [rows][width]}. A device is used by one inference
 * session at a time (calls are not concurrent); internally it may use many threads. Outputs are fully
 * overwritten. NaN/Inf detection is the engine's job, not the device's.
 *
 * @since 0.1
 */
@Api.Stable
public interface ComputeDevice extends AutoCloseable {
    /** {@return a short description, e.g. instruction set and thread count} */
    String description();

    /** {@return worker threads in use} */
    int threads();

    /**
     * {@code out[r][o] = sum_i w[o][i] * x[r][i]} for {@code r < rows}, {@code o < w.rows()}.
     *
     * @param w    weights, {@code [w.rows()][w.cols()]}
     * @param x    activations {@code [rows][w.cols()]}
     * @param rows activation rows (tokens)
     * @param out  results {@code [rows][w.rows()]}
     */
    void matmul(WeightMatrix w, float[] x, int rows, float[] out);

    /**
     * {@link #matmul} of one input by several matrices ({@code outs[i] = x * ws[i]}, the same values as one call each),
     * as a layer's query, key and value projections are. Devices override it to share the work that depends only on
     * the input: the CPU device lays a prompt's rows out for its micro-kernel once for all the matrices and runs their
     * panels as one set of tasks. The default calls {@link #matmul} for each.
     *
     * @param ws   weight matrices, all with {@code x}'s row width as their column count
     * @param x    activations {@code [rows][cols]}
     * @param rows activation rows
     * @param outs results, {@code outs[i]} {@code [rows][ws[i].rows()]}
     * @throws IllegalArgumentException if {@code ws} and {@code outs} differ in length
     * @since 1.10
     */
    default void matmulAll(WeightMatrix[] ws, float[] x, int rows, float[]... outs) {
        if (ws.length != outs.length) {
            throw new IllegalArgumentException(ws.length + " matrices but " + outs.length + " outputs");
        }
        for (int i = 0; i < ws.length; i++) {
            matmul(ws[i], x, rows, outs[i]);
        }
    }

    /**
     * As {@link #matmul}, but each dot product is accumulated in double precision and rounded to float once, so the
     * result is the exact dot product of the given floats, correctly rounded. The engine uses it with quantized
     * activations: llama.cpp's integer dot products are exact within a block, and float accumulation would differ
     * from them in the last bit, which can flip a downstream int8 rounding.
     *
     * @param w    weights
     * @param x    activations {@code [rows][w.cols()]}
     * @param rows activation rows
     * @param out  results {@code [rows][w.rows()]}
     */
    void matmulExact(WeightMatrix w, float[] x, int rows, float[] out);

    /**
     * {@code out[r][o] = (float) w.format().dotEncoded(row o of w, row r of act)}: the product with activations still
     * encoded in the weights' {@link Quantizer#activationFormat()}, for formats whose {@link Quantizer#hasEncodedDot()}
     * is {@code true}. Activation row {@code r} starts at byte {@code r * actRowBytes}. The default computes every
     * product on the calling thread; devices run it on their workers.
     *
     * @param w           weights whose format has an encoded dot product
     * @param act         encoded activations, {@code rows} rows of {@code actRowBytes}
     * @param actRowBytes bytes per encoded activation row
     * @param rows        activation rows
     * @param out         results {@code [rows][w.rows()]}
     */
    default void matmulEncoded(WeightMatrix w, MemorySegment act, long actRowBytes, int rows, float[] out) {
        int n = w.rows();
        for (int r = 0; r < rows; r++) {
            for (int o = 0; o < n; o++) {
                out[r * n + o] = (float) w.format().dotEncoded(w.data(), w.rowBytes() * o, act, actRowBytes * r, w.cols());
            }
        }
    }

    /**
     * RMSNorm: {@code out[r][i] = x[r][i] / sqrt(mean_i(x[r]^2) + eps) * weight[i]}.
     *
     * @param x      input {@code [rows][weight.length]}
     * @param rows   rows
     * @param weight gains
     * @param eps    epsilon inside the square root
     * @param out    output, may be {@code x}
     */
    void rmsNorm(float[] x, int rows, float[] weight, float eps, float[] out);

    /**
     * Rotary embedding in the "normal" (GPT-J, adjacent pairs) form llama.cpp uses for the {@code llama}
     * architecture: within each head, pairs {@code (2i, 2i+1)} for {@code 2i < ropeDim} rotate by
     * {@code pos * base^(-2i/ropeDim) / divisors[i]}; the rest of the head is left as is.
     *
     * @param x        {@code [rows][heads * headDim]}, rotated in place
     * @param rows     rows; row {@code r} is at position {@code startPos + r}
     * @param heads    heads per row
     * @param headDim  elements per head
     * @param ropeDim  rotated elements per head (even, at most {@code headDim})
     * @param startPos position of row 0
     * @param base     frequency base (theta)
     * @param divisors what each pair's frequency is divided by ({@code ropeDim / 2} values: Llama 3.1's frequency
     *                 factors times a linear scaling factor), or {@code null} for none; not modified, and the same
     *                 array for the same values (an implementation may key cached angles on its identity)
     * @since 0.1
     */
    void rope(float[] x, int rows, int heads, int headDim, int ropeDim, int startPos, float base, float[] divisors);

    /**
     * {@link #rope(float[], int, int, int, int, int, float, float[])} without divisors.
     *
     * @param x        {@code [rows][heads * headDim]}, rotated in place
     * @param rows     rows; row {@code r} is at position {@code startPos + r}
     * @param heads    heads per row
     * @param headDim  elements per head
     * @param ropeDim  rotated elements per head (even, at most {@code headDim})
     * @param startPos position of row 0
     * @param base     frequency base (theta)
     */
    default void rope(float[] x, int rows, int heads, int headDim, int ropeDim, int startPos, float base) {
        rope(x, rows, heads, headDim, ropeDim, startPos, base, null);
    }

    /**
     * SwiGLU: {@code gate[i] = silu(gate[i]) * up[i]} for {@code i < n}.
     *
     * @param gate gate projection, overwritten with the result
     * @param up   up projection
     * @param n    elements
     */
    void swiglu(float[] gate, float[] up, int n);

    /**
     * The feed-forward input projection: {@code out[r][o] = silu(x[r] . gate[o]) * (x[r] . up[o])}, with the same
     * values as {@link #matmul} of each matrix followed by {@link #swiglu}. Devices override it to apply SwiGLU in the
     * GEMM's epilogue, so that the gate and up products are never written out as two {@code [rows][ffn]} tensors; the
     * default does exactly that, with a temporary for the up product.
     *
     * @param gate gate weights {@code [ffn][cols]}
     * @param up   up weights, the same shape as {@code gate}
     * @param x    activations {@code [rows][cols]}
     * @param rows activation rows
     * @param out  results {@code [rows][ffn]}
     * @throws IllegalArgumentException if the two matrices differ in shape
     */
    default void matmulSwiGLU(WeightMatrix gate, WeightMatrix up, float[] x, int rows, float[] out) {
        if (gate.rows() != up.rows() || gate.cols() != up.cols()) {
            throw new IllegalArgumentException("gate " + gate.rows() + "x" + gate.cols() + " and up " + up.rows() + "x"
                    + up.cols() + " differ in shape");
        }
        float[] u = new float[rows * up.rows()];
        matmul(gate, x, rows, out);
        matmul(up, x, rows, u);
        swiglu(out, u, rows * gate.rows());
    }

    /**
     * {@return how many of the FFN's hidden columns {@link #feedForward} computes at a time for these matrices}: the
     * width per row of the {@code hidden} buffer it needs, {@code gate.rows()} where it does not work in blocks. The
     * default works on the whole width.
     *
     * @param gate gate weights {@code [ffn][dim]}
     * @param up   up weights, the same shape as {@code gate}
     * @param down down weights {@code [dim][ffn]}
     * @since 1.3
     */
    default int feedForwardBlock(WeightMatrix gate, WeightMatrix up, WeightMatrix down) {
        return gate.rows();
    }

    /**
     * The whole feed-forward block: {@code out = down . swiglu(gate . x, up . x)}, with the values of {@link
     * #matmulSwiGLU} into {@code hidden} followed by {@link #matmul} of {@code down}. A device may compute the hidden
     * columns {@link #feedForwardBlock} at a time, the down product continuing its sums from one block to the next,
     * so that {@code hidden} needs {@code rows * feedForwardBlock(...)} floats rather than {@code rows * ffn}: for the
     * Llama-3.2-1B geometry at 256 rows, 2 MiB instead of 8. The default runs the two products on the whole width,
     * in {@code hidden} where it holds {@code rows * ffn} floats and in a temporary otherwise.
     *
     * @param gate   gate weights {@code [ffn][dim]}
     * @param up     up weights, the same shape as {@code gate}
     * @param down   down weights {@code [dim][ffn]}
     * @param x      activations {@code [rows][dim]}
     * @param rows   activation rows
     * @param hidden scratch of at least {@code rows * feedForwardBlock(gate, up, down)} floats; its contents after
     *               the call are unspecified
     * @param out    results {@code [rows][dim]}
     * @throws IllegalArgumentException if the matrices' shapes do not chain, or {@code hidden} is too small
     * @since 1.3
     */
    default void feedForward(WeightMatrix gate, WeightMatrix up, WeightMatrix down, float[] x, int rows,
                             float[] hidden, float[] out) {
        int ffn = gate.rows();
        if (down.cols() != ffn) {
            throw new IllegalArgumentException("down " + down.rows() + "x" + down.cols() + " does not take gate's "
                    + ffn + " outputs");
        }
        if (hidden.length < (long) rows * feedForwardBlock(gate, up, down)) {
            throw new IllegalArgumentException("hidden holds " + hidden.length + " floats, fewer than " + rows
                    + " rows of " + feedForwardBlock(gate, up, down));
        }
        float[] h = hidden.length >= (long) rows * ffn ? hidden : new float[rows * ffn];
        matmulSwiGLU(gate, up, x, rows, h);
        matmul(down, h, rows, out);
    }

    /**
     * Runs {@code task.accept(i)} for {@code i < tasks} on the device's worker threads and returns when all
     * have finished. Attention kernels use it to share the device's threads.
     *
     * @param tasks number of tasks
     * @param task  the work, called concurrently
     */
    void parallelFor(int tasks, IntConsumer task);

    /**
     * Measures this device's peak FP32 fused multiply-add rate with a short calibrated loop on all its threads
     * (independent accumulator chains, no memory traffic). Benchmarks report achieved FLOP/s against it.
     *
     * @return GFLOP/s (one FMA counts as 2 FLOP), or {@code NaN} if the device cannot measure it
     */
    default double measurePeakGflops() {
        return Double.NaN;
    }

    /**
     * Measures sustained memory read bandwidth by streaming a buffer much larger than the caches on all threads.
     *
     * @return GB/s (10^9 bytes), or {@code NaN} if the device cannot measure it
     */
    default double measureReadBandwidth() {
        return Double.NaN;
    }

    /**
     * Readies the one-row products of decode steps ({@link #matmul} with one activation row) for these matrices'
     * formats before a session needs them, by running them on the first rows of each matrix. The engine calls it once
     * per format (for the output matrix), before a session's first prefill, while little of the model is resident: a
     * device whose code is compiled at run time (the CPU device's, by the JVM) then compiles it now, and the
     * compiler's temporary memory adds to a small resident set instead of to the whole model's when the first one-row
     * product runs. Results are unchanged. The default does nothing.
     *
     * @param matrices one matrix of each format to ready; only their first rows are read
     * @since 1.1
     */
    default void warmUp(List<WeightMatrix> matrices) {
    }

    /**
     * {@return the matrix this device's products of {@code w} read from now on}: {@code w} itself by default. A device
     * may copy a file's weights into memory of its own (the CPU device, onto huge pages, for its decode steps) and
     * return the copy: the same format, shape and bytes in other memory, whose products give the bits {@code w}'s
     * would. The engine reads its warm-ups' first rows of a matrix, and by default ({@link #decodeRow}) the token
     * embedding's rows, from what this returns, so that those reads neither bring back pages of the file that the
     * device let go nor send a format's code to two kinds of memory. Idempotent.
     *
     * @param w a matrix of the model
     * @since 1.12
     */
    default WeightMatrix resident(WeightMatrix w) {
        return w;
    }

    /**
     * Decodes row {@code row} of {@code w} into {@code dst[dstOffset ..]}, {@code w.cols()} floats with the bits of
     * its format's {@code decode}: the engine's token embedding lookup. The default decodes the row of {@link
     * #resident}; a device that holds a packed copy standing in for {@code w} ({@link Quantizer#packedCopyDecodes})
     * may read that instead, so that the lookups bring back none of the file's pages it let go (the CPU device's
     * copies on a 1B Q8_0 file: 27-28 MiB of the tied embedding mapped again around the looked-up rows with each
     * 512-token prompt).
     *
     * @param w         a matrix of the model
     * @param row       the row
     * @param dst       where the row's floats go
     * @param dstOffset the first of them
     * @since 1.13
     */
    default void decodeRow(WeightMatrix w, int row, float[] dst, int dstOffset) {
        WeightMatrix r = resident(w);
        r.format().decode(r.data(), r.rowBytes() * row, dst, dstOffset, r.cols());
    }

    /** Stops the device's threads. Idempotent. */
    @Override
    void close();
}
