package dev.prefill4j.benchmarks;

import java.util.Arrays;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;
import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Does Java reach the CPU's integer multiply-add instructions ({@code vpmaddwd}; with AVX-512 VNNI {@code vpdpwssd}
 * and {@code vpdpbusd})? Each benchmark is a dot product of 4096 elements, L1-resident; the {@code ops} counter (2 per
 * element: multiply and add) per second compares them with the float FMA dot. A path that reached a fused
 * int16/int8 multiply-add would beat the float dot by the ratio of lanes per instruction (2x for int16 pairs, 4x for
 * int8 quads on 512-bit registers); one that widens and multiplies lane by lane would not.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = "--add-modules=jdk.incubator.vector")
public class IntDotBenchmark {
    static final int N = 4096;
    private static final VectorSpecies<Float> F = FloatVector.SPECIES_512;
    private static final VectorSpecies<Byte> B = ByteVector.SPECIES_256;
    private static final VectorSpecies<Short> S = ShortVector.SPECIES_512;
    private static final VectorSpecies<Short> S256 = ShortVector.SPECIES_256;
    private static final VectorSpecies<Integer> I = IntVector.SPECIES_512;

    private final float[] fa = new float[N];
    private final float[] fb = new float[N];
    private final byte[] ba = new byte[N];
    private final byte[] bb = new byte[N];
    private final short[] sa = new short[N];
    private final short[] sb = new short[N];
    private final int[] pairSums = new int[N / 2];

    /** Counts multiply and add operations. */
    @State(Scope.Thread)
    @AuxCounters(AuxCounters.Type.OPERATIONS)
    public static class Ops {
        /** Operations done (2 per element). */
        public long ops;
    }

    /** Random int8 values (as Q8_0 blocks hold), the same values as shorts and floats. */
    @Setup
    public void setUp() {
        SplittableRandom r = new SplittableRandom(3);
        for (int i = 0; i < N; i++) {
            ba[i] = (byte) r.nextInt(-127, 128);
            bb[i] = (byte) r.nextInt(-127, 128);
            sa[i] = ba[i];
            sb[i] = bb[i];
            fa[i] = ba[i];
            fb[i] = bb[i];
        }
    }

    /** {@return the dot product} The float reference: four FMA accumulators. @param ops counter */
    @Benchmark
    public float floatFma(Ops ops) {
        FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < N; i += 4 * F.length()) {
            a0 = FloatVector.fromArray(F, fa, i).fma(FloatVector.fromArray(F, fb, i), a0);
            a1 = FloatVector.fromArray(F, fa, i + 16).fma(FloatVector.fromArray(F, fb, i + 16), a1);
            a2 = FloatVector.fromArray(F, fa, i + 32).fma(FloatVector.fromArray(F, fb, i + 32), a2);
            a3 = FloatVector.fromArray(F, fa, i + 48).fma(FloatVector.fromArray(F, fb, i + 48), a3);
        }
        ops.ops += 2L * N;
        return a0.add(a1).add(a2).add(a3).reduceLanes(VectorOperators.ADD);
    }

    /** {@return the dot product} A plain int8 loop, left to C2's auto-vectorizer. @param ops counter */
    @Benchmark
    public int int8Loop(Ops ops) {
        int s = 0;
        for (int i = 0; i < N; i++) {
            s += ba[i] * bb[i];
        }
        ops.ops += 2L * N;
        return s;
    }

    /**
     * {@return the dot product} A plain int16 loop of pairs of products ({@code MulAddS2I}, C2's node for them),
     * summed in the loop: C2 leaves this reduction scalar (JDK 25); {@link #int16PairsIntoArray} is the shape it
     * vectorizes.
     *
     * @param ops counter
     */
    @Benchmark
    public int int16PairLoop(Ops ops) {
        int s = 0;
        for (int i = 0; i < N; i += 2) {
            s += sa[i] * sb[i] + sa[i + 1] * sb[i + 1];
        }
        ops.ops += 2L * N;
        return s;
    }

    /**
     * {@return the dot product} The int16 pairs in the element-wise shape of the JDK's own test for C2's {@code
     * MulAddS2I} node ({@code out[i] += a[2i] * b[2i] + a[2i + 1] * b[2i + 1]}, {@code out} cleared first), then
     * {@code out} summed: the one shape found here in which C2 emits {@code vpdpwssd} (JDK 25, AVX-512 VNNI; read in
     * its code with a disassembler plug-in), while {@link #int16PairLoop}, the same products summed in the loop,
     * stays scalar. The price is {@code out}'s N/2 ints written and read again.
     *
     * @param ops counter
     */
    @Benchmark
    public int int16PairsIntoArray(Ops ops) {
        int[] out = pairSums;
        Arrays.fill(out, 0);
        for (int i = 0; i < N / 2; i++) {
            out[i] += sa[2 * i] * sb[2 * i] + sa[2 * i + 1] * sb[2 * i + 1];
        }
        int s = 0;
        for (int v : out) {
            s += v;
        }
        ops.ops += 2L * N;
        return s;
    }

    /**
     * {@return the dot product} The Vector API on int8: 32 bytes widened to 32 shorts, multiplied (int8 products fit
     * int16), widened to ints and added; the API has no multiply-add-pairs operation to express {@code vpmaddwd}.
     *
     * @param ops counter
     */
    @Benchmark
    public int int8VectorApi(Ops ops) {
        IntVector acc0 = IntVector.zero(I);
        IntVector acc1 = acc0;
        for (int i = 0; i < N; i += B.length()) {
            ShortVector a = (ShortVector) ByteVector.fromArray(B, ba, i).convertShape(VectorOperators.B2S, S, 0);
            ShortVector b = (ShortVector) ByteVector.fromArray(B, bb, i).convertShape(VectorOperators.B2S, S, 0);
            ShortVector p = a.mul(b);
            acc0 = acc0.add((IntVector) p.convertShape(VectorOperators.S2I, I, 0));
            acc1 = acc1.add((IntVector) p.convertShape(VectorOperators.S2I, I, 1));
        }
        ops.ops += 2L * N;
        return acc0.add(acc1).reduceLanes(VectorOperators.ADD);
    }

    /** {@return the dot product} The Vector API on int16: widened to ints, multiplied and added. @param ops counter */
    @Benchmark
    public int int16VectorApi(Ops ops) {
        IntVector acc0 = IntVector.zero(I);
        IntVector acc1 = acc0;
        for (int i = 0; i < N; i += 2 * I.length()) {
            IntVector a0 = (IntVector) ShortVector.fromArray(S256, sa, i).convertShape(VectorOperators.S2I, I, 0);
            IntVector b0 = (IntVector) ShortVector.fromArray(S256, sb, i).convertShape(VectorOperators.S2I, I, 0);
            IntVector a1 = (IntVector) ShortVector.fromArray(S256, sa, i + 16).convertShape(VectorOperators.S2I, I, 0);
            IntVector b1 = (IntVector) ShortVector.fromArray(S256, sb, i + 16).convertShape(VectorOperators.S2I, I, 0);
            acc0 = acc0.add(a0.mul(b0));
            acc1 = acc1.add(a1.mul(b1));
        }
        ops.ops += 2L * N;
        return acc0.add(acc1).reduceLanes(VectorOperators.ADD);
    }
}
