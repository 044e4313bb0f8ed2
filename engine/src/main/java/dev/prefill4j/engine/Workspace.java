package dev.prefill4j.engine;

import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.engine.model.LlamaConfig;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A session's activation buffers, sized for a number of token rows: at most one chunk (13 MiB for the Llama-3.2-1B
 * geometry at a chunk of 256, 26 MiB at 512; 9 and 18 where the device runs the FFN in blocks of 2,048 hidden columns,
 * as the CPU device does with 16-lane vectors), fewer while the session has not needed more ({@link
 * Shape#rowsFor}). A closed session hands them to the next session its engine opens with the same geometry, so
 * opening and closing sessions does not leave that much garbage on the heap each time: arrays of this size go straight
 * to the old generation, which grew from 56 to 227 MiB over a benchmark's six sessions with no full collection, all of
 * it in the process's peak resident memory (1,092 MiB for the 1B Q4_0 file; 929 MiB with the buffers reused).
 * Contents are not cleared: every buffer is written before it is read.
 */
final class Workspace {
    /** Fewest rows a workspace is made for: a decode step needs one, a short prompt a few. */
    static final int MIN_ROWS = 16;

    /**
     * What the buffers' sizes depend on: rows, and per row what the model and the activation formats need; {@code
     * hidden} is how many of the FFN's hidden columns a pass holds at a time ({@code ffnDim}, or the device's {@link
     * dev.prefill4j.api.spi.ComputeDevice#feedForwardBlock} where it works in blocks).
     */
    record Shape(int rows, int dim, int qDim, int kvDim, int ffnDim, int hidden, boolean up, int quantizedPerRow,
                 long encodedRowBytes) {
        /**
         * {@return the buffers a session of {@code rows} token rows needs, the FFN's hidden columns all at once}
         *
         * @param c                 the model's geometry
         * @param rows              token rows (a prefill chunk at most)
         * @param activationFormats weight format -> activation format; empty for float32 activations
         */
        static Shape of(LlamaConfig c, int rows, Map<Quantizer, Quantizer> activationFormats) {
            return of(c, rows, activationFormats, c.ffnDim());
        }

        /**
         * {@return the buffers a session of {@code rows} token rows needs} Only quantized activations write the up
         * projection out (float32 ones get SwiGLU in the GEMM's epilogue, and may run the FFN in blocks of hidden
         * columns), decode rows where {@link Session#decodesPrompts} says a prompt's rows go decoded, and keep
         * rows encoded.
         *
         * @param c                 the model's geometry
         * @param rows              token rows (a prefill chunk at most)
         * @param activationFormats weight format -> activation format; empty for float32 activations
         * @param hidden            the FFN's hidden columns the device computes at a time; the whole width is used
         *                          with quantized activations, whose up projection is written out whole
         */
        static Shape of(LlamaConfig c, int rows, Map<Quantizer, Quantizer> activationFormats, int hidden) {
            int widest = Math.max(Math.max(c.dim(), c.qDim()), c.ffnDim());
            boolean decodes = activationFormats.entrySet().stream()
                    .anyMatch(e -> Session.decodesPrompts(e.getKey(), e.getValue()));
            long rowBytes = activationFormats.values().stream()
                    .mapToLong(q -> (widest + q.blockSize() - 1L) / q.blockSize() * q.blockBytes()).max().orElse(0);
            boolean up = !activationFormats.isEmpty();
            return new Shape(rows, c.dim(), c.qDim(), c.kvDim(), c.ffnDim(), up ? c.ffnDim() : hidden, up,
                    decodes ? widest : 0, activationFormats.isEmpty() ? 0 : Math.max(1, rowBytes));
        }

        /** {@return whether the FFN runs in blocks of hidden columns, its output then in a buffer of its own} */
        boolean blocked() {
            return hidden < ffnDim;
        }

        /**
         * {@return whether buffers made for this shape serve a session of shape {@code needed}: at least its rows,
         * and every size per row the same} Field by field, not through the record's {@code equals}: that one is
         * made at its first call ({@code java.lang.runtime.ObjectMethods}, some thirty classes of method handles
         * spun), which came as a process's second session took the first one's buffers, with the whole model
         * resident. A component added to this record belongs here too.
         *
         * @param needed the shape a session asks for
         */
        boolean serves(Shape needed) {
            return rows >= needed.rows && dim == needed.dim && qDim == needed.qDim && kvDim == needed.kvDim
                    && ffnDim == needed.ffnDim && hidden == needed.hidden && up == needed.up
                    && quantizedPerRow == needed.quantizedPerRow && encodedRowBytes == needed.encodedRowBytes;
        }

        /** {@return this shape for {@code n} rows} @param n token rows */
        Shape withRows(int n) {
            return new Shape(n, dim, qDim, kvDim, ffnDim, hidden, up, quantizedPerRow, encodedRowBytes);
        }

        /**
         * {@return the rows to make a workspace for when {@code needed} rows are asked for: the next power of two, at
         * least {@link #MIN_ROWS}, at most {@code chunk}} Doubling bounds what growing leaves behind to less than the
         * final size; a session that prefills 16 tokens and decodes holds 16 rows, not a whole chunk's.
         *
         * @param needed rows of the forward pass about to run
         * @param chunk  the session's prefill chunk
         */
        static int rowsFor(int needed, int chunk) {
            int pow = needed <= MIN_ROWS ? MIN_ROWS : Integer.highestOneBit(needed - 1) << 1;
            return Math.min(chunk, pow);
        }

        /** {@return the bytes of the buffers' contents: what the constructor below allocates, array by array} */
        long bytes() {
            long floats = (long) rows * (dim + Math.max(dim, qDim) + 2L * kvDim + Math.max(hidden, Math.max(dim, qDim))
                    + (blocked() ? dim : 0) + (up ? ffnDim : 0) + quantizedPerRow);
            return Float.BYTES * floats + rows * encodedRowBytes;
        }
    }

    final Shape shape;
    final float[] x;
    final float[] xb;
    final float[] k;
    final float[] v;
    /**
     * The FFN's hidden activations (SwiGLU of gate and up; {@link Shape#hidden} columns of them at a time); before them
     * in each layer, in its first {@code max(qDim, dim)} columns, the queries and then the output projection's result
     * (attention reads the queries and writes into {@link #xb}, free by then): the two uses never overlap, so they
     * share one buffer.
     */
    final float[] gate;
    /** The FFN's output where it runs in blocks ({@link Shape#blocked}), all of which read its input; else null. */
    final float[] ffnOut;
    /** {@code null} unless the shape asks for it. */
    final float[] up;
    /** {@code null} unless the shape asks for it. */
    final float[] quantized;
    /**
     * {@code null} unless the shape asks for it. Over a {@code byte[]}, so that formats' encoded dot products index
     * the array ({@link dev.prefill4j.api.spi.Blocks#heapBytes}).
     */
    final MemorySegment encoded;

    private Workspace(Shape s) {
        this.shape = s;
        int n = s.rows();
        this.x = new float[n * s.dim()];
        this.xb = new float[n * Math.max(s.dim(), s.qDim())];
        this.k = new float[n * s.kvDim()];
        this.v = new float[n * s.kvDim()];
        this.gate = new float[n * Math.max(s.hidden(), Math.max(s.dim(), s.qDim()))];
        this.ffnOut = s.blocked() ? new float[n * s.dim()] : null;
        this.up = s.up() ? new float[n * s.ffnDim()] : null;
        this.quantized = s.quantizedPerRow() > 0 ? new float[n * s.quantizedPerRow()] : null;
        this.encoded = s.encodedRowBytes() > 0
                ? MemorySegment.ofArray(new byte[Math.toIntExact(n * s.encodedRowBytes())]) : null;
    }

    /**
     * One idle workspace kept for the next session: an engine holds one of these. It keeps the buffers of the last
     * closed session (one set, whatever its shape) until a session takes them or the engine is closed.
     */
    static final class Pool {
        private final AtomicReference<Workspace> idle = new AtomicReference<>();

        /**
         * {@return the idle workspace if it has this shape with at least its rows, otherwise a new one of {@code
         * shape}} A larger idle one is taken as it is: its memory is in use already.
         *
         * @param shape sizes needed
         */
        Workspace take(Shape shape) {
            Workspace w = idle.getAndSet(null);
            return w != null && w.shape.serves(shape) ? w : new Workspace(shape);
        }

        /** Keeps {@code w} for the next session; its session must not use it any more. @param w the workspace */
        void give(Workspace w) {
            idle.set(w);
        }

        /** Drops the idle workspace. */
        void clear() {
            idle.set(null);
        }
    }
}
