package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * Where a session's time goes, operation by operation: a {@link Session} given one ({@link Session#profile}) adds the
 * wall-clock time of every step of its forward pass to it. Matrix products are counted under their tensor's name
 * without the layer prefix ({@code blk.3.ffn_down.weight} counts as {@code ffn_down.weight}), with the bytes of
 * weights they read; the other steps under fixed names ({@code attention}, {@code rms_norm}, {@code rope}, {@code
 * kv_append}, {@code residual_add}, {@code finite_check}, {@code embedding}, {@code ffn_gate+up} for the fused
 * gate/up product with SwiGLU in its epilogue, {@code ffn (gate, up, down)} for the whole FFN where the device runs it
 * a block of hidden columns at a time (prefill passes of many rows, {@code ComputeDevice#feedForward}), the names
 * joined by {@code +} for a prompt's products of one input run together ({@code attn_q+attn_k+attn_v}, {@code
 * ComputeDevice#matmulAll}); with quantized
 * activations {@code activation_encode} for rounding a projection's input and {@code swiglu}). {@code prefill4j bench
 * --profile} prints it per test.
 *
 * <p>Every step is timed on the session's thread around a call that returns when all the device's threads are done,
 * so the times add up to the step's time (less the session's own bookkeeping). Two {@link System#nanoTime} calls a
 * step cost about 50 ns (25-26 ns a call on the Zen 5 VM the project is measured on): nothing against a 1B model's
 * decode step (about 200 steps in tens of milliseconds), but a noticeable share of a tiny model's. Matrix products
 * also count their FLOPs (two per multiply-add: prefill is compute-bound, decode bound by the weights' stream).
 *
 * <p>Made with a counter of the calling thread's allocated heap bytes ({@link #OpProfile(LongSupplier)}), it also
 * counts what each step allocates on the session's thread: a kernel that the JIT compiled with Vector API calls left
 * out of line boxes its vectors and allocates megabytes a token, and its step is the one that shows it. The device's
 * other threads run their share of the same tasks unseen, so with two threads a step's count is about half of what it
 * allocates in all. The counter's two reads a step add about 40 ns (about 21 ns a read of {@code
 * getCurrentThreadAllocatedBytes} on the Zen 5 VM, 2026-12-07). Not thread-safe, like the session that fills it.
 *
 * @since 1.1
 */
@Api.Experimental
public final class OpProfile {
    /**
     * One operation's totals.
     *
     * @param operation   the operation: a weight tensor's name without its layer prefix, or a step's name
     * @param calls       times it ran
     * @param nanos       wall-clock nanoseconds spent in it
     * @param weightBytes bytes of weights it read (0 for steps that read no weights)
     * @param flops       floating-point operations of its matrix products, two per multiply-add (0 for other steps)
     * @param heapBytes   heap bytes the session's thread allocated in it, or -1 where the profile has no counter
     */
    public record Entry(String operation, long calls, long nanos, long weightBytes, long flops, long heapBytes) {
    }

    /** Per operation: calls, nanoseconds, weight bytes, FLOPs, heap bytes; in the order first seen. */
    private final Map<String, long[]> totals = new LinkedHashMap<>();
    /** Tensor name -> operation, so that a step does not build a string. */
    private final Map<String, String> operations = new HashMap<>();
    /** The session thread's allocated heap bytes so far; {@code null} when not counted. */
    private final LongSupplier allocatedBytes;
    /** {@link #allocatedBytes} when the step being timed began ({@link #start}). */
    private long allocatedAtStart;

    /** Creates an empty profile that counts time, weight bytes and FLOPs. */
    public OpProfile() {
        this(null);
    }

    /**
     * Creates an empty profile that also counts each step's heap allocation on the session's thread.
     *
     * @param allocatedBytes the calling thread's allocated heap bytes so far, read as each step begins and ends, such
     *                       as {@code com.sun.management.ThreadMXBean::getCurrentThreadAllocatedBytes}; {@code null}
     *                       counts none
     * @since 1.11
     */
    public OpProfile(LongSupplier allocatedBytes) {
        this.allocatedBytes = allocatedBytes;
    }

    /** Marks the start of a step: its allocation is counted from here. */
    void start() {
        if (allocatedBytes != null) {
            allocatedAtStart = allocatedBytes.getAsLong();
        }
    }

    /** Adds one run of a step, begun at the last {@link #start}. */
    void add(String operation, long nanos, long weightBytes, long flops) {
        long heap = allocatedBytes == null ? 0 : allocatedBytes.getAsLong() - allocatedAtStart;
        long[] t = totals.computeIfAbsent(operation, o -> new long[5]);
        t[0]++;
        t[1] += nanos;
        t[2] += weightBytes;
        t[3] += flops;
        t[4] += heap;
    }

    /** {@return the operation a product with tensor {@code name} counts under: the name without "blk.N."} */
    String operationOf(String name) {
        return operations.computeIfAbsent(name, OpProfile::withoutLayer);
    }

    private static String withoutLayer(String name) {
        if (name.startsWith("blk.")) {
            int dot = name.indexOf('.', 4);
            if (dot > 4) {
                return name.substring(dot + 1);
            }
        }
        return name;
    }

    /** {@return the totals so far, one entry per operation in the order first run} */
    public List<Entry> entries() {
        List<Entry> list = new ArrayList<>(totals.size());
        totals.forEach((op, t) -> list.add(new Entry(op, t[0], t[1], t[2], t[3], allocatedBytes == null ? -1 : t[4])));
        return list;
    }

    /** {@return the nanoseconds of all operations} */
    public long totalNanos() {
        return totals.values().stream().mapToLong(t -> t[1]).sum();
    }
}
