package dev.prefill4j.benchmarks;

import org.openjdk.jmh.annotations.AuxCounters;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;

/** A JMH counter of floating-point operations (2 per multiply-add): JMH reports it per second beside each result. */
@State(Scope.Thread)
@AuxCounters(AuxCounters.Type.OPERATIONS)
public class Flops {
    /** Floating-point operations done. */
    public long flops;
}
