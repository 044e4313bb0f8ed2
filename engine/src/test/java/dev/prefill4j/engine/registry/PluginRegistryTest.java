package dev.prefill4j.engine.registry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Availability;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgmlType;
import java.lang.foreign.MemorySegment;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PluginRegistryTest {
    record FakeBackend(String id, String apiVersion, int priority, boolean available) implements Backend {
        @Override
        public Availability availability() {
            return available ? Availability.available("fake") : Availability.unavailable("no fake device here");
        }

        @Override
        public ComputeDevice create(BackendContext context) {
            throw new UnsupportedOperationException("fake");
        }
    }

    record FakeFormat(String id, int type) implements Quantizer {
        @Override public String apiVersion() { return ApiVersion.CURRENT; }
        @Override public int blockSize() { return 1; }
        @Override public int blockBytes() { return 4; }
        @Override public OptionalInt ggufType() { return OptionalInt.of(type); }
        @Override public void decode(MemorySegment s, long o, float[] d, int off, int n) { }
        @Override public void encode(float[] s, int so, int n, MemorySegment d, long o) { }
        @Override public float dot(MemorySegment s, long o, float[] x, int xo, int n) { return 0; }
    }

    private static PluginRegistry.Builder isolated(Map<String, String> props) {
        return PluginRegistry.builder().discovery(false).properties(props);
    }

    @Test
    void discoversTheBuiltInsThroughServiceLoaderWithTheirModule() {
        PluginRegistry r = PluginRegistry.builder().properties(Map.of()).build();
        for (String id : List.of("f32", "f16", "bf16", "q8_0")) {
            PluginInfo info = r.plugins().stream().filter(p -> p.id().equals(id)).findFirst().orElseThrow();
            assertEquals("Quantizer", info.spi());
            assertEquals("dev.prefill4j.engine", info.module());
            assertEquals(ApiVersion.CURRENT, info.apiVersion());
        }
        assertEquals("memory", r.selectKVStore(null).id());
        assertEquals("q8_0", r.requireFormat(GgmlType.byName("Q8_0").orElseThrow(), "t").id());
    }

    @Test
    void duplicateIdsAreAHardError() {
        PrefillException e = assertThrows(PrefillException.class, () -> isolated(Map.of())
                .add(new FakeBackend("x", ApiVersion.CURRENT, 1, true))
                .add(new FakeBackend("x", ApiVersion.CURRENT, 2, true)).build());
        assertEquals(PrefillException.Code.PLUGIN, e.code());
        assertTrue(e.getMessage().contains("two Backend providers have the id 'x'"), e.getMessage());
    }

    @Test
    void incompatibleOrMalformedProvidersAreSkippedAndReported() {
        PluginRegistry r = isolated(Map.of())
                .add(new FakeBackend("old", "2.0", 1, true))
                .add(new FakeBackend("Bad Id", ApiVersion.CURRENT, 1, true))
                .add(new FakeBackend("good", ApiVersion.CURRENT, 1, true)).build();
        assertEquals(List.of("good"), r.plugins().stream().map(PluginInfo::id).toList());
        assertEquals(2, r.problems().size(), r.problems().toString());
        assertTrue(r.problems().stream().anyMatch(p -> p.contains("'old'") && p.contains("built against API 2.0")));
        assertTrue(r.problems().stream().anyMatch(p -> p.contains("malformed id 'Bad Id'")));
    }

    @Test
    void aProviderThatFailsToLoadIsSkippedAndTheRestLoad(@TempDir Path dir) throws Exception {
        Path services = dir.resolve("META-INF/services");
        Files.createDirectories(services);
        Files.writeString(services.resolve(Backend.class.getName()), "com.example.NoSuchBackend\n");
        try (URLClassLoader loader = new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader())) {
            PluginRegistry r = PluginRegistry.builder().classLoader(loader).properties(Map.of())
                    .add(new FakeBackend("good", ApiVersion.CURRENT, 1, true)).build();
            assertTrue(r.problems().stream().anyMatch(p -> p.contains("com.example.NoSuchBackend")), r.problems().toString());
            assertEquals("good", r.selectBackend(null).id());
        }
    }

    @Test
    void selectionByPriorityAvailabilityAndExplicitChoice() {
        PluginRegistry r = isolated(Map.of())
                .add(new FakeBackend("fast", ApiVersion.CURRENT, 200, false))
                .add(new FakeBackend("slow", ApiVersion.CURRENT, 10, true))
                .add(new FakeBackend("mid", ApiVersion.CURRENT, 50, true)).build();
        assertEquals("mid", r.selectBackend(null).id(), "highest priority among available");
        assertEquals("slow", r.selectBackend("slow").id());
        PrefillException unavailable = assertThrows(PrefillException.class, () -> r.selectBackend("fast"));
        assertTrue(unavailable.getMessage().contains("no fake device here"), unavailable.getMessage());
        PrefillException unknown = assertThrows(PrefillException.class, () -> r.selectBackend("gpu"));
        assertTrue(unknown.getMessage().contains("[fast, mid, slow]"), unknown.getMessage());
        PluginRegistry byProperty = isolated(Map.of(PluginRegistry.PROP_BACKEND, "slow"))
                .add(new FakeBackend("slow", ApiVersion.CURRENT, 10, true))
                .add(new FakeBackend("mid", ApiVersion.CURRENT, 50, true)).build();
        assertEquals("slow", byProperty.selectBackend(null).id());
    }

    @Test
    void exclusionSwitchesProvidersOff() {
        PluginRegistry r = isolated(Map.of(PluginRegistry.PROP_EXCLUDE, "mid, other"))
                .add(new FakeBackend("slow", ApiVersion.CURRENT, 10, true))
                .add(new FakeBackend("mid", ApiVersion.CURRENT, 50, true)).build();
        assertEquals("slow", r.selectBackend(null).id());
        assertTrue(r.problems().stream().anyMatch(p -> p.contains("'mid' excluded")));
    }

    @Test
    void aMissingFormatNamesTheModuleToAdd() {
        PluginRegistry r = isolated(Map.of()).build();
        PrefillException e = assertThrows(PrefillException.class,
                () -> r.requireFormat(GgmlType.byId(12).orElseThrow(), "blk.0.attn_q.weight"));
        assertEquals(PrefillException.Code.MISSING_FORMAT, e.code());
        assertEquals("tensor blk.0.attn_q.weight is GGUF type 12 (Q4_K): add module dev.prefill4j.quant.q4k "
                + "(artifact dev.prefill4j:quant-q4k) to the module path or image [P4J-MISSING-FORMAT]", e.getMessage());
    }

    @Test
    void twoFormatsClaimingOneGgufTypeNeedAChoice() {
        assertThrows(PrefillException.class, () -> isolated(Map.of())
                .add(new FakeFormat("a", 77)).add(new FakeFormat("b", 77)).build());
        PluginRegistry r = isolated(Map.of(PluginRegistry.PROP_FORMAT, "b"))
                .add(new FakeFormat("a", 77)).add(new FakeFormat("b", 77)).build();
        assertEquals("b", r.forGgufType(new GgmlType(77, "X", 1, 4, null)).orElseThrow().id());
    }
}
