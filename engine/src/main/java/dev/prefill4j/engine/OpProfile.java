package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

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
 * also count their FLOPs (two per multiply-add: prefill is compute-bound, decode bound by the weights' stream). Not
 * thread-safe, like the session that fills it.
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
     */
    public record Entry(String operation, long calls, long nanos, long weightBytes, long flops) {
    }

    /** Per operation: calls, nanoseconds, weight bytes, FLOPs; in the order first seen. */
    private final Map<String, long[]> totals = new LinkedHashMap<>();
    /** Tensor name -> operation, so that a step does not build a string. */
    private final Map<String, String> operations = new HashMap<>();

    /** Creates an empty profile. */
    public OpProfile() {
    }

    /** Adds one run of a step. */
    void add(String operation, long nanos, long weightBytes, long flops) {
        long[] t = totals.computeIfAbsent(operation, o -> new long[4]);
        t[0]++;
        t[1] += nanos;
        t[2] += weightBytes;
        t[3] += flops;
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
        totals.forEach((op, t) -> list.add(new Entry(op, t[0], t[1], t[2], t[3])));
        return list;
    }

    /** {@return the nanoseconds of all operations} */
    public long totalNanos() {
        return totals.values().stream().mapToLong(t -> t[1]).sum();
    }
}
