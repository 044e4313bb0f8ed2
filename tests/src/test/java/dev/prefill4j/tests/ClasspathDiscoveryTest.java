package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Availability;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.engine.registry.PluginInfo;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Discovery on the class path (this test module runs there): built-ins via META-INF/services, broken providers. */
class ClasspathDiscoveryTest {
    /** A provider whose constructor throws, as a plugin with a broken static setup would. */
    public static final class ExplodingBackend implements Backend {
        public ExplodingBackend() {
            throw new IllegalStateException("boom: native library missing");
        }

        @Override public String id() { return "exploding"; }
        @Override public String apiVersion() { return ApiVersion.CURRENT; }
        @Override public Availability availability() { return Availability.available(""); }
        @Override public ComputeDevice create(BackendContext c) { throw new UnsupportedOperationException(); }
    }

    @Test
    void builtInsAreFoundOnTheClassPath() {
        PluginRegistry r = PluginRegistry.builder().properties(Map.of()).build();
        PluginInfo cpu = r.plugins().stream().filter(p -> p.id().equals("cpu")).findFirst().orElseThrow();
        assertTrue(cpu.module().startsWith("classpath:"), cpu.module());
        assertEquals("cpu", r.selectBackend(null).id());
        assertTrue(r.quantizer("q8_0").isPresent());
    }

    @Test
    void aProviderThatThrowsIsSkippedAndReported(@TempDir Path dir) throws Exception {
        Path services = dir.resolve("META-INF/services");
        Files.createDirectories(services);
        Files.writeString(services.resolve(Backend.class.getName()), ExplodingBackend.class.getName() + "\n");
        try (URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader())) {
            PluginRegistry r = PluginRegistry.builder().classLoader(loader).properties(Map.of()).build();
            assertTrue(r.problems().stream().anyMatch(p -> p.contains("boom: native library missing")), r.problems().toString());
            assertEquals("cpu", r.selectBackend(null).id(), "the other providers still load");
        }
    }
}
