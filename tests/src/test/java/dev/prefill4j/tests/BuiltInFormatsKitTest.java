package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.testkit.QuantizerTestKit;
import java.util.List;
import java.util.ServiceLoader;
import org.junit.jupiter.api.Test;

/**
 * The plugin kit on the engine's built-in Q8_0 and F16 with the CPU backend on the path: the engine module's own
 * tests have no backend, so its kit runs skip the GEMM checks (float, exact and encoded GEMM, and for Q8_0, whose
 * integer products are exact, {@code matmulExact} over decoded activations giving {@code matmulEncoded}'s bits).
 * Tolerances as in the engine's FormatsTest: Q8_0 half a level plus the fp16 rounding of its scale, F16 2^-11.
 */
class BuiltInFormatsKitTest {
    @Test
    void q8_0PassesTheKitOnTheCpuBackend() {
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(format("q8_0"), new QuantizerTestKit.Tolerance(1.13 / 254, 1e-5)));
    }

    @Test
    void f16PassesTheKitOnTheCpuBackend() {
        assertEquals(List.of("cpu"), QuantizerTestKit.verify(format("f16"), new QuantizerTestKit.Tolerance(0x1p-11, 1e-5)));
    }

    private static Quantizer format(String id) {
        return ServiceLoader.load(Quantizer.class).stream().map(ServiceLoader.Provider::get)
                .filter(q -> q.id().equals(id)).findFirst().orElseThrow(() -> new AssertionError(id + " not found"));
    }
}
