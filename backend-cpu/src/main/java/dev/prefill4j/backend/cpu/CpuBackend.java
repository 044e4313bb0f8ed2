package dev.prefill4j.backend.cpu;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Availability;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;

/** The CPU backend provider: cheap to construct; {@link #create} starts the worker threads. */
public final class CpuBackend implements Backend {
    @Override public String id() { return "cpu"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public int priority() { return 100; }

    @Override
    public String description() {
        return "CPU, Vector API " + VectorOps.FLOATS.vectorBitSize() + "-bit (" + VectorOps.FLOATS.length()
                + " float lanes)";
    }

    @Override
    public Availability availability() {
        return Availability.available(description());
    }

    @Override
    public ComputeDevice create(BackendContext context) {
        return new CpuDevice(context.threads());
    }
}
