package dev.prefill4j.benchmarks;

import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * The CPU backend's matrix product per weight format, on a 2048 x 2048 weight matrix (the Llama-3.2-1B hidden size)
 * against {@code rows} activation rows: 1 is a decode step, 64 and 512 prefill. The {@code flops} counter (2 per
 * multiply-add) per second is the achieved FLOP/s; compare it with {@link FmaPeakBenchmark} run the same way.
 * Weights are Gaussian, encoded by the format's own quantizer. The fork grants native access, as the launcher does,
 * so that the backend starts its kernels' buffers on cache lines (its {@code LineAlignment}).
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Warmup(iterations = 2, time = 2)
@Measurement(iterations = 3, time = 2)
@Fork(value = 1, jvmArgsAppend = {"--add-modules=jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED"})
public class MatmulBenchmark {
    static final int N = 2048;
    static final int K = 2048;

    @Param({"f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_k", "q6_k"})
    public String format;

    @Param({"1", "64", "512"})
    public int rows;

    @Param({"0"})
    public int threads;

    private ComputeDevice device;
    private WeightMatrix weights;
    private float[] x;
    private float[] out;
    private Arena arena;

    /** Builds the device and the encoded weights. */
    @Setup(Level.Trial)
    public void setUp() {
        PluginRegistry registry = PluginRegistry.load();
        Quantizer q = registry.quantizer(format).orElseThrow(() -> new IllegalStateException("no format " + format));
        device = registry.selectBackend(null).create(new BackendContext(
                threads > 0 ? threads : Runtime.getRuntime().availableProcessors()));
        SplittableRandom rnd = new SplittableRandom(1);
        float[] w = new float[N * K];
        for (int i = 0; i < w.length; i++) {
            w[i] = (float) (rnd.nextGaussian() * 0.02);
        }
        arena = Arena.ofShared();
        long rowBytes = q.byteSize(K);
        MemorySegment data = arena.allocate(rowBytes * N, 64);
        for (int r = 0; r < N; r++) {
            q.encode(w, r * K, K, data, r * rowBytes);
        }
        weights = new WeightMatrix("bench", q, data, N, K);
        x = new float[rows * K];
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) rnd.nextGaussian();
        }
        out = new float[rows * N];
    }

    /** Frees the device and the weights. */
    @TearDown(Level.Trial)
    public void tearDown() {
        device.close();
        arena.close();
    }

    /** {@return one output element, so the work is not dead} @param flops the FLOP counter */
    @Benchmark
    public float matmul(Flops flops) {
        device.matmul(weights, x, rows, out);
        flops.flops += 2L * rows * N * K;
        return out[out.length - 1];
    }
}
