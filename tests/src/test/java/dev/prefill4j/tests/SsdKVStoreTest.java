package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVStore;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.draft.PromptLookupDrafts;
import dev.prefill4j.engine.model.LlamaModel;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The ssd KV store, with 4-position pages so that prompts and generations really go through the file. */
class SsdKVStoreTest {
    @TempDir
    Path dir;

    static Generation run(Engine e, LlamaModel m, SessionOptions o) {
        try (Session s = e.newSession(m, o)) {
            return s.generate(Models.PROMPT, 24, new Sampler(SamplerConfig.greedy()), true, true, null);
        }
    }

    /** Same ids and logits as the in-memory store (to 1e-6, measured: identical) for F16 and Q8_0 elements. */
    @ParameterizedTest
    @CsvSource({"stories260K-F32,F16", "stories260K-F32,Q8_0", "tiny-256-F32,F16", "tiny-256-F32,Q8_0"})
    void sameOutputsAsTheMemoryStore(String name, KVElementType type) {
        SessionOptions base = SessionOptions.defaults().withKvType(type).withPageSize(4);
        try (Engine mem = Engine.builder().threads(2).kvStore("memory").build();
             Engine ssd = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel m = mem.load(Models.require(name + ".gguf"))) {
            Generation a = run(mem, m, base);
            Generation b = run(ssd, m, base.withKvOptions(Map.of("dir", dir.toString())));
            assertArrayEquals(a.generatedIds(), b.generatedIds());
            assertTrue(Models.maxAbsDiff(a.promptLogits(), b.promptLogits()) <= 1e-6);
            try (Session s = ssd.newSession(m, base.withKvOptions(Map.of("dir", dir.toString())))) {
                // Bursts truncate rejected positions, often inside pages already written to disk.
                var g = s.generateWithBursts(Models.PROMPT, 24, 8, PromptLookupDrafts.defaults(), true, null);
                assertArrayEquals(a.generatedIds(), g.generation().generatedIds());
            }
        }
        assertEquals(List.of(), files(), "cache files are removed on close");
    }

    /**
     * A run killed with SIGKILL, as the OOM killer kills, leaves no cache file in {@code --kv-dir}: the store removes
     * the file's name as soon as the file is open, and the kernel frees its space when the process ends. The name had
     * stayed until the session closed, so any abnormal exit left the whole cache behind.
     */
    @Test
    void aKilledRunLeavesNoCacheFile() throws Exception {
        assumeTrue(Files.isDirectory(Path.of("/proc/self/fd")), "no /proc/PID/fd to see the open cache file through");
        List<String> cmd = Cli.command("run", "-m", Models.require("tiny-256-F32.gguf").toString(), "-n", "2000",
                "--temp", "0", "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-page", "16");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .start();
        try {
            long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(120);
            List<Path> open = List.of();
            while (open.isEmpty() && p.isAlive() && System.nanoTime() < deadline) {
                open = openCacheFiles(p.pid(), dir);
                Thread.sleep(20);
            }
            assertTrue(!open.isEmpty() && p.isAlive(), "the run never held a cache file in " + dir + " open");
            assertEquals(List.of(), files(), "nothing in the directory while the cache is in use");
        } finally {
            p.destroyForcibly().waitFor(60, java.util.concurrent.TimeUnit.SECONDS);
        }
        assertEquals(List.of(), files(), "nothing in the directory after SIGKILL");
    }

    /**
     * The cache files in {@code dir} that process {@code pid} holds open, as {@code /proc/PID/fd/N} paths, which open
     * the file even after its name is gone; empty where there is no {@code /proc}.
     */
    static List<Path> openCacheFiles(long pid, Path dir) {
        String prefix;
        try {
            prefix = dir.toRealPath().resolve("prefill4j-kv-").toString(); // as the kernel names an open file
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        try (Stream<Path> s = Files.list(Path.of("/proc", Long.toString(pid), "fd"))) {
            return s.filter(fd -> {
                try {
                    return Files.readSymbolicLink(fd).toString().startsWith(prefix);
                } catch (java.io.IOException closed) {
                    return false; // closed since it was listed
                }
            }).toList();
        } catch (java.io.IOException | java.io.UncheckedIOException e) {
            return List.of(); // no /proc, or the process ended
        }
    }

    private List<Path> files() {
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(p -> p.getFileName().toString().startsWith("prefill4j-kv-")).toList();
        } catch (java.io.IOException e) {
            throw new AssertionError(e);
        }
    }

    private KVCache open(KVElementType type) {
        KVStore store = dev.prefill4j.engine.registry.PluginRegistry.load().selectKVStore("ssd");
        return store.open(new KVConfig(2, 32, 64, type, 4, Map.of("dir", dir.toString())));
    }

    @Test
    void aFlippedByteOnDiskIsDetectedAndNamed() throws Exception {
        try (KVCache cache = open(KVElementType.F32)) {
            float[] rows = new float[8 * 32];
            for (int i = 0; i < rows.length; i++) {
                rows[i] = i * 0.25f;
            }
            cache.append(1, 0, 8, rows, rows);
            float[] got = new float[32];
            cache.page(1, 1).key(0, 0, 32, got, 0);
            assertEquals(4 * 32 * 0.25f, got[0]);
            assertEquals(List.of(), files(), "the cache file has no name while open");
            Path file = openCacheFiles(ProcessHandle.current().pid(), dir).get(0);
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file)));
            // Slots run K, V per page and pages per layer: layer 1, page 0 starts at slot 2 x 16 pages; flip a byte of
            // its V payload, after the 64-byte header.
            long slot = 16384; // 64-byte header + 4 positions x 32 floats, rounded up to 16 KiB
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                long at = (2 * 16 + 1) * slot + 64 + 100;
                java.nio.ByteBuffer one = java.nio.ByteBuffer.allocate(1);
                ch.read(one, at);
                one.flip();
                byte b = one.get(0);
                ch.write(java.nio.ByteBuffer.wrap(new byte[] {(byte) (b ^ 0x40)}), at);
            }
            KVCache c = cache;
            PrefillException e = assertThrows(PrefillException.class, () -> c.page(1, 0));
            assertTrue(e.getMessage().contains("page 0 of layer 1 (positions 0..3, V)") && e.getMessage().contains("CRC32C"),
                    e.getMessage());
            // The same page through a read-ahead, as attention reads it.
            c.readAhead(1, 0, 2);
            PrefillException streamed = assertThrows(PrefillException.class, () -> c.page(1, 0));
            assertTrue(streamed.getMessage().contains("page 0 of layer 1 (positions 0..3, V)"), streamed.getMessage());
            c.readAhead(1, 0, 0);
        }
        assertFalse(files().iterator().hasNext());
    }

    @Test
    void aMissingDirectoryIsAClearError() {
        KVStore store = dev.prefill4j.engine.registry.PluginRegistry.load().selectKVStore("ssd");
        PrefillException none = assertThrows(PrefillException.class,
                () -> store.open(new KVConfig(1, 32, 8, KVElementType.F16, 4, Map.of())));
        assertTrue(none.getMessage().contains("--kv-dir"), none.getMessage());
        PrefillException missing = assertThrows(PrefillException.class,
                () -> store.open(new KVConfig(1, 32, 8, KVElementType.F16, 4, Map.of("dir", dir.resolve("no").toString()))));
        assertTrue(missing.getMessage().contains("not a directory"), missing.getMessage());
    }
}
