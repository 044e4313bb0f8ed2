package dev.prefill4j.benchmarks;

import java.util.concurrent.TimeUnit;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Threads;
import org.openjdk.jmh.annotations.Warmup;

/**
 * The FP32 FMA peak the way JMH measures the kernels: twelve independent vector FMA chains (enough to cover the FMA
 * latency on two ports) per thread, registers only. Run with {@code -t N} for N threads.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = "--add-modules=jdk.incubator.vector")
@Threads(1)
public class FmaPeakBenchmark {
    private static final VectorSpecies<Float> S = FloatVector.SPECIES_PREFERRED;
    private static final int STEPS = 100_000;
    private final float seed = 1.0001f;

    /** {@return the chains' sum} @param flops the FLOP counter */
    @Benchmark
    public float fma(Flops flops) {
        FloatVector m = FloatVector.broadcast(S, 0.9999f);
        FloatVector c = FloatVector.broadcast(S, 1e-4f);
        FloatVector a0 = FloatVector.broadcast(S, seed), a1 = a0.add(1), a2 = a0.add(2), a3 = a0.add(3);
        FloatVector a4 = a0.add(4), a5 = a0.add(5), a6 = a0.add(6), a7 = a0.add(7);
        FloatVector a8 = a0.add(8), a9 = a0.add(9), a10 = a0.add(10), a11 = a0.add(11);
        for (int i = 0; i < STEPS; i++) {
            a0 = a0.fma(m, c);
            a1 = a1.fma(m, c);
            a2 = a2.fma(m, c);
            a3 = a3.fma(m, c);
            a4 = a4.fma(m, c);
            a5 = a5.fma(m, c);
            a6 = a6.fma(m, c);
            a7 = a7.fma(m, c);
            a8 = a8.fma(m, c);
            a9 = a9.fma(m, c);
            a10 = a10.fma(m, c);
            a11 = a11.fma(m, c);
        }
        flops.flops += 2L * 12 * S.length() * STEPS;
        return a0.add(a1).add(a2).add(a3).add(a4).add(a5).add(a6).add(a7).add(a8).add(a9).add(a10).add(a11)
                .lane(0);
    }
}
