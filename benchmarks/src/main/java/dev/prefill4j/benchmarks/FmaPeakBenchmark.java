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
 * latency on two ports) per thread, registers only, each chain the addend of its FMA (as in the bench's own
 * calibration, where the other way round spilled on AVX2). Run with {@code -t N} for N threads.
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
            a0 = m.fma(c, a0);
            a1 = m.fma(c, a1);
            a2 = m.fma(c, a2);
            a3 = m.fma(c, a3);
            a4 = m.fma(c, a4);
            a5 = m.fma(c, a5);
            a6 = m.fma(c, a6);
            a7 = m.fma(c, a7);
            a8 = m.fma(c, a8);
            a9 = m.fma(c, a9);
            a10 = m.fma(c, a10);
            a11 = m.fma(c, a11);
        }
        flops.flops += 2L * 12 * S.length() * STEPS;
        return a0.add(a1).add(a2).add(a3).add(a4).add(a5).add(a6).add(a7).add(a8).add(a9).add(a10).add(a11)
                .lane(0);
    }
}
