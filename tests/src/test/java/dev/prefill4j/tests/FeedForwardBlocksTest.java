package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.AttentionKernel;
import dev.prefill4j.api.spi.Availability;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntConsumer;
import org.junit.jupiter.api.Test;

/**
 * A session whose device computes the FFN a block of hidden columns at a time ({@link ComputeDevice#feedForward})
 * sizes its FFN buffer for one block, sends prefill passes of many rows through {@code feedForward} with the FFN's
 * output in a buffer of its own, and computes what a session of the plain CPU device computes, bit for bit. The device
 * here is the CPU device claiming blocks of 256 of tiny-256's 768 hidden columns and running {@code feedForward}'s
 * default (the whole width in a temporary), so the session's side is what is tested; the CPU device's own blocks are
 * tested in backend-cpu ({@code CpuKernelsTest}), the 1B geometry's by {@code prefill4j bench}'s verification.
 */
class FeedForwardBlocksTest {
    private static final String ID = "cpu-ffn-blocks";

    @Test
    void aSessionWhoseDeviceWorksInBlocksComputesWhatThePlainOneDoes() {
        int[] ids = new SplittableRandom(5).ints(40, 3, 512).toArray();
        float[] expected;
        try (Engine e = Engine.builder().threads(2).build()) {
            expected = run(e, ids);
        }
        PluginRegistry plain = PluginRegistry.load();
        Backend cpu = plain.selectBackend("cpu");
        Attention cpuAttention = plain.selectAttention("cpu", null);
        AtomicInteger blocked = new AtomicInteger();
        PluginRegistry registry = PluginRegistry.builder()
                .add(new BlocksBackend(cpu, blocked))
                .add(new BlocksAttention(cpuAttention))
                .build();
        try (Engine e = Engine.builder().registry(registry).backend(ID).threads(2).build()) {
            assertArrayEquals(expected, run(e, ids), "logits of the prompt's 40 positions and of 3 decode steps");
        }
        // 40 rows of 768 hidden columns pass the 64 rows x 256 columns the session holds: the prompt's pass runs each
        // of the 4 layers' FFN through feedForward; a decode step's single row fits and runs the two products apart.
        assertEquals(4, blocked.get(), "feedForward calls");
    }

    private static float[] run(Engine e, int[] ids) {
        try (LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f32", 3, null);
             Session s = e.newSession(m, SessionOptions.defaults())) {
            return WorkspaceReuseTest.run(s, ids);
        }
    }

    private record BlocksBackend(Backend cpu, AtomicInteger blocked) implements Backend {
        @Override public String id() { return ID; }
        @Override public String apiVersion() { return ApiVersion.CURRENT; }
        @Override public Availability availability() { return cpu.availability(); }
        @Override public ComputeDevice create(BackendContext context) {
            return new BlocksDevice(cpu.create(context), blocked);
        }
    }

    private record BlocksAttention(Attention cpu) implements Attention {
        @Override public String id() { return ID + "-attention"; }
        @Override public String apiVersion() { return ApiVersion.CURRENT; }
        @Override public String backendId() { return ID; }
        @Override public AttentionKernel create(ComputeDevice device) { return cpu.create(device); }
    }

    /** The CPU device, but computing the FFN 256 hidden columns at a time as far as its caller can tell. */
    private record BlocksDevice(ComputeDevice d, AtomicInteger blocked) implements ComputeDevice {
        @Override public int feedForwardBlock(WeightMatrix gate, WeightMatrix up, WeightMatrix down) {
            return Math.min(256, gate.rows());
        }

        @Override public void feedForward(WeightMatrix gate, WeightMatrix up, WeightMatrix down, float[] x, int rows,
                                          float[] hidden, float[] out) {
            blocked.incrementAndGet();
            ComputeDevice.super.feedForward(gate, up, down, x, rows, hidden, out);
        }

        @Override public String description() { return d.description(); }
        @Override public int threads() { return d.threads(); }
        @Override public void matmul(WeightMatrix w, float[] x, int rows, float[] out) { d.matmul(w, x, rows, out); }
        @Override public void matmulExact(WeightMatrix w, float[] x, int rows, float[] out) {
            d.matmulExact(w, x, rows, out);
        }
        @Override public void matmulEncoded(WeightMatrix w, MemorySegment act, long actRowBytes, int rows,
                                            float[] out) {
            d.matmulEncoded(w, act, actRowBytes, rows, out);
        }
        @Override public void rmsNorm(float[] x, int rows, float[] weight, float eps, float[] out) {
            d.rmsNorm(x, rows, weight, eps, out);
        }
        @Override public void rope(float[] x, int rows, int heads, int headDim, int ropeDim, int startPos,
                                   float base, float[] divisors) {
            d.rope(x, rows, heads, headDim, ropeDim, startPos, base, divisors);
        }
        @Override public void swiglu(float[] gate, float[] up, int n) { d.swiglu(gate, up, n); }
        @Override public void matmulSwiGLU(WeightMatrix gate, WeightMatrix up, float[] x, int rows, float[] out) {
            d.matmulSwiGLU(gate, up, x, rows, out);
        }
        @Override public void parallelFor(int tasks, IntConsumer task) { d.parallelFor(tasks, task); }
        @Override public void warmUp(List<WeightMatrix> matrices) { d.warmUp(matrices); }
        @Override public void close() { d.close(); }
    }
}
