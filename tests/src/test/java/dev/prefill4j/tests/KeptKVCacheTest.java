package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.draft.PromptLookupDrafts;
import dev.prefill4j.engine.model.LlamaModel;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The ssd store's kept caches ({@code --kv-keep}/{@code --kv-resume}) and its faults: a resumed session continues
 * exactly as an uninterrupted one, a cache left by a killed process is refused, a full disk is a clear error that
 * leaves nothing behind.
 */
class KeptKVCacheTest {
    @TempDir
    Path dir;

    private SessionOptions options(KVElementType type, String keep, boolean resume) {
        Map<String, String> kv = new HashMap<>(Map.of("dir", dir.toString()));
        if (keep != null) {
            kv.put("keep", keep);
            kv.put("resume", Boolean.toString(resume));
        }
        // Pages of 4 positions: the prompt and the generation span several pages, written and read back.
        return SessionOptions.defaults().withKvType(type).withPageSize(4).withKvOptions(kv);
    }

    private static int[] concat(int[] a, int[] b) {
        return IntStream.concat(IntStream.of(a), IntStream.of(b)).toArray();
    }

    /**
     * Greedy and seeded sampling, F16 and Q8_0 elements: 10 tokens, close (kept), reopen, 14 more equal the 24 of an
     * uninterrupted run; so do bursts.
     */
    @ParameterizedTest
    @CsvSource({"F16,0", "Q8_0,0", "F16,0.8"})
    void aResumedSessionContinuesExactly(KVElementType type, float temperature) {
        SamplerConfig sampling = new SamplerConfig(temperature, 40, 0.95f, 3);
        try (Engine e = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel m = e.load(Models.require("stories260K-F32.gguf"))) {
            Generation whole;
            try (Session s = e.newSession(m, options(type, null, false))) {
                whole = s.generate(Models.PROMPT, 24, new Sampler(sampling), true, false, null);
            }
            int[] first;
            try (Session s = e.newSession(m, options(type, "story", false))) {
                first = s.generate(Models.PROMPT, 10, new Sampler(sampling), true, false, null).generatedIds();
            }
            assertTrue(Files.exists(dir.resolve("story.p4kv")) && Files.exists(dir.resolve("story.p4kv.meta")));
            assertEquals("rw-------", perms(dir.resolve("story.p4kv")));
            assertEquals("rw-------", perms(dir.resolve("story.p4kv.meta")));
            int[] rest;
            try (Session s = e.newSession(m, options(type, "story", true))) {
                assertEquals(Models.ids("1 403 407 261 378").length + 9, s.position());
                rest = s.resume(14, null, true, null).generatedIds();
            }
            assertArrayEquals(whole.generatedIds(), concat(first, rest));
            if (temperature == 0) {
                // And again from there with bursts: greedy either way.
                int[] more;
                try (Session s = e.newSession(m, options(type, "story", true))) {
                    more = s.resumeWithBursts(6, 4, PromptLookupDrafts.defaults(), true, null).generation().generatedIds();
                }
                try (Session s = e.newSession(m, options(type, null, false))) {
                    int[] all = s.generate(Models.PROMPT, 30, new Sampler(sampling), true, false, null).generatedIds();
                    assertArrayEquals(all, concat(concat(first, rest), more));
                }
            }
        }
    }

    /**
     * A generation whose reader stops it (the CLI's stdout closed: the token callback throws) leaves a kept cache
     * whose state is whole: resumed, it continues the uninterrupted greedy text from the tokens in its cache. The
     * pending token had been set only when a generation returned, so the cache resumed from a stale one (or none);
     * with bursts, drafts were handed out before the rejected ones were cut from the cache.
     */
    @ParameterizedTest
    @CsvSource({"1", "4"})
    void aGenerationStoppedByItsReaderResumesWhereItStopped(int burst) {
        SamplerConfig greedy = SamplerConfig.greedy();
        try (Engine e = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel m = e.load(Models.require("stories260K-F32.gguf"))) {
            int[] whole;
            try (Session s = e.newSession(m, options(KVElementType.F16, null, false))) {
                whole = s.generate(Models.PROMPT, 30, new Sampler(greedy), true, false, null).generatedIds();
            }
            List<Integer> seen = new java.util.ArrayList<>();
            java.util.function.IntConsumer reader = id -> {
                seen.add(id);
                if (seen.size() == 7) {
                    throw new IllegalStateException("the reader went away");
                }
            };
            try (Session s = e.newSession(m, options(KVElementType.F16, "stopped", false))) {
                IllegalStateException gone = assertThrows(IllegalStateException.class, () -> {
                    if (burst == 1) {
                        s.generate(Models.PROMPT, 30, new Sampler(greedy), true, false, reader);
                    } else {
                        s.generateWithBursts(Models.PROMPT, 30, burst, PromptLookupDrafts.defaults(), true, reader);
                    }
                });
                assertEquals("the reader went away", gone.getMessage());
            }
            assertEquals(IntStream.of(whole).limit(7).boxed().toList(), seen);
            try (Session s = e.newSession(m, options(KVElementType.F16, "stopped", true))) {
                int inCache = s.position() - Models.ids("1 403 407 261 378").length; // the next one is pending
                assertTrue(inCache >= 6 && inCache < 30, "generated tokens in the cache: " + inCache);
                int[] rest = s.resume(30 - inCache - 1, null, true, null).generatedIds();
                assertArrayEquals(java.util.Arrays.copyOfRange(whole, inCache + 1, 30), rest);
            }
        }
    }

    @Test
    void aKeptCacheIsRefusedForAnotherModelAndWhileInUse() {
        try (Engine e = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel f32 = e.load(Models.require("stories260K-F32.gguf"));
             LlamaModel q8 = e.load(Models.require("stories260K-Q8_0.gguf"));
             LlamaModel tiny = e.load(Models.require("tiny-256-F32.gguf"))) {
            SessionOptions keep = options(KVElementType.F16, "k", false).withContextLength(128);
            try (Session s = e.newSession(f32, keep)) {
                s.generate(Models.PROMPT, 3, new Sampler(SamplerConfig.greedy()), true, false, null);
                PrefillException busy = assertThrows(PrefillException.class,
                        () -> e.newSession(f32, options(KVElementType.F16, "k", true).withContextLength(128)));
                assertTrue(busy.getMessage().contains("in use"), busy.getMessage());
            }
            PrefillException exists = assertThrows(PrefillException.class, () -> e.newSession(f32, keep));
            assertTrue(exists.getMessage().contains("already exists") && exists.getMessage().contains("--kv-resume"),
                    exists.getMessage());
            SessionOptions resume = options(KVElementType.F16, "k", true).withContextLength(128);
            // Same geometry, other weights: the session state's model fingerprint differs.
            PrefillException other = assertThrows(PrefillException.class, () -> e.newSession(q8, resume));
            assertTrue(other.getMessage().contains("another model"), other.getMessage());
            PrefillException geometry = assertThrows(PrefillException.class, () -> e.newSession(tiny, resume));
            assertTrue(geometry.getMessage().contains("layers"), geometry.getMessage());
            PrefillException kvType = assertThrows(PrefillException.class,
                    () -> e.newSession(f32, options(KVElementType.Q8_0, "k", true).withContextLength(128)));
            assertTrue(kvType.getMessage().contains("KV type F16"), kvType.getMessage());
            // None of the refusals damaged it.
            try (Session s = e.newSession(f32, resume)) {
                assertEquals(Models.ids("1 403 407 261 378").length + 2, s.position());
                assertEquals(2, s.resume(2, null, true, null).generatedIds().length);
            }
            PrefillException none = assertThrows(PrefillException.class,
                    () -> e.newSession(f32, options(KVElementType.F16, "nothing", true)));
            assertTrue(none.getMessage().contains("no kept KV cache"), none.getMessage());
        }
    }

    /**
     * SIGTERM (as Ctrl-C) while a kept run generates: the generation stops at the next token, the session closes as
     * after a finished run, and the cache resumes the uninterrupted text. It had been left unclosed, and
     * refused as a crashed process's cache.
     */
    @Test
    void aSignalDuringAKeptRunSavesItWhereItStopped() throws Exception {
        String model = Models.require("tiny-256-F32.gguf").toString();
        Path out = dir.resolve("stdout.txt");
        Path err = dir.resolve("stderr.txt");
        // Sampled, not greedy: greedy text on this random-weight model falls into a cycle of two tokens, under which
        // an error of two positions would pass unseen.
        Process p = new ProcessBuilder(Cli.command("run", "-m", model, "-n", "2000", "--temp", "0.8", "--seed", "7",
                "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-keep", "signal", "--kv-page", "16"))
                .redirectOutput(out.toFile()).redirectError(err.toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (p.isAlive() && Files.size(out) < 20 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertTrue(p.isAlive(), "the run ended before the signal: " + Files.readString(err));
        p.destroy(); // SIGTERM
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(143, p.exitValue(), Files.readString(err));
        assertTrue(Files.readString(err).contains("prefill4j: stopped before it finished"), Files.readString(err));
        // The kept sampler continues its random sequence (no --seed).
        Cli.Result resumed = Cli.run("run", "-m", model, "-n", "4", "--temp", "0.8", "--json", "--kv", "ssd",
                "--kv-dir", dir.toString(), "--kv-resume", "signal", "--kv-page", "16");
        assertEquals(0, resumed.exit(), resumed.toString());
        java.util.regex.Matcher at = java.util.regex.Pattern.compile("\"position\": (\\d+)").matcher(resumed.out());
        assertTrue(at.find(), resumed.out());
        int prompt = 14; // the default prompt's tokens on this model (BOS included)
        int inCache = Integer.parseInt(at.group(1)) - 4 - prompt; // generated tokens kept before this run's 4
        assertTrue(inCache > 0 && inCache < 1990, "generated tokens kept: " + inCache);
        Cli.Result whole = Cli.run("run", "-m", model, "-n", Integer.toString(inCache + 5), "--temp", "0.8", "--seed",
                "7", "--json");
        assertEquals(prompt, Cli.jsonIds(whole.out(), "prompt_ids").length, whole.toString());
        assertArrayEquals(java.util.Arrays.copyOfRange(Cli.jsonIds(whole.out(), "generated_ids"), inCache + 1,
                inCache + 5), Cli.jsonIds(resumed.out(), "generated_ids"));
    }

    /** A cache whose process was killed (SIGKILL) while using it is detected on reopen and not trusted. */
    @Test
    void aCacheLeftByAKilledProcessIsRefused() throws Exception {
        Path model = Models.require("tiny-256-F32.gguf");
        List<String> cmd = Cli.command("run", "-m", model.toString(), "-n", "2000", "--temp", "0", "--kv", "ssd",
                "--kv-dir", dir.toString(), "--kv-keep", "crash", "--kv-page", "16");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .start();
        Path data = dir.resolve("crash.p4kv");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (p.isAlive() && (!Files.exists(data) || Files.size(data) < 64 * 16384) && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(p.isAlive(), "the run ended before it could be killed");
        p.destroyForcibly().waitFor(60, TimeUnit.SECONDS);
        assertTrue(Files.exists(data), "a killed process leaves its kept cache behind");
        Cli.Result r = Cli.run("run", "-m", model.toString(), "-n", "4", "--temp", "0", "--kv", "ssd", "--kv-dir",
                dir.toString(), "--kv-resume", "crash", "--kv-page", "16");
        assertEquals(1, r.exit(), r.toString());
        assertTrue(r.err().contains("was not closed cleanly") && r.err().contains("not trusted")
                && r.err().contains("process " + p.pid()), r.toString());
    }

    /**
     * A full disk, as the kernel enforces it on a process (RLIMIT_FSIZE, {@code ulimit -f}): the write fails with a
     * one-line error naming the page, the run exits 1, and the cache file is removed.
     */
    @Test
    void aFileSizeLimitIsAClearErrorAndLeavesNothing() throws Exception {
        Path bash = Path.of("/bin/bash");
        assumeTrue(Files.isExecutable(bash), "no /bin/bash to set a file-size limit");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String cmd = "ulimit -f 1024 && exec '" + java + "' --module-path '" + Cli.cliJar() + File.pathSeparator
                + Cli.modules() + "' --add-modules ALL-MODULE-PATH -m dev.prefill4j.cli/dev.prefill4j.cli.Main run -m '"
                + Models.require("tiny-256-F32.gguf") + "' -n 400 --temp 0 --kv ssd --kv-dir '" + dir + "' --kv-type f32"
                + " --kv-page 16";
        Cli.Result r = Cli.exec(List.of(bash.toString(), "-c", cmd));
        assertEquals(1, r.exit(), r.toString());
        assertTrue(r.err().contains("writing KV page") && r.err().contains("File too large")
                && r.err().contains("[P4J-IO]") && !r.err().contains("\tat "), r.toString());
        assertEquals(List.of(), list());
    }

    /**
     * A really full file system: a 1 MiB tmpfs (it supports direct I/O on this kernel). Mounting needs root; where it
     * is refused the test is skipped and {@link #aFileSizeLimitIsAClearErrorAndLeavesNothing} covers the path.
     */
    @Test
    void aFullFileSystemIsAClearErrorAndLeavesNothing() throws Exception {
        Path mnt = Files.createDirectory(dir.resolve("small"));
        Cli.Result mount = Cli.exec(List.of("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt.toString()));
        assumeTrue(mount.exit() == 0, "cannot mount a small file system here (needs root): " + mount.err().strip());
        try {
            Cli.Result r = Cli.run("run", "-m", Models.require("tiny-256-F32.gguf").toString(), "-n", "400", "--temp", "0",
                    "--kv", "ssd", "--kv-dir", mnt.toString(), "--kv-type", "f32", "--kv-page", "16");
            assertEquals(1, r.exit(), r.toString());
            assertTrue(r.err().contains("writing KV page") && r.err().contains("No space left on device")
                    && r.err().contains("[P4J-IO]"), r.toString());
            try (Stream<Path> s = Files.list(mnt)) {
                assertEquals(List.of(), s.toList(), "the cache file is removed");
            }
        } finally {
            Cli.exec(List.of("umount", mnt.toString()));
        }
    }

    private List<Path> list() throws java.io.IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.toList();
        }
    }

    private static String perms(Path p) {
        try {
            return PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
        } catch (java.io.IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void aKeptCacheSurvivesItsSessionOnlyWhenAsked() throws Exception {
        try (Engine e = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel m = e.load(Models.require("stories260K-F32.gguf"))) {
            try (Session s = e.newSession(m, options(KVElementType.F16, null, false))) {
                s.generate(Models.PROMPT, 4, new Sampler(SamplerConfig.greedy()), true, false, null);
                // in use, open, and already without a name (SsdKVStoreTest.aKilledRunLeavesNoCacheFile)
                assertEquals(1, SsdKVStoreTest.openCacheFiles(ProcessHandle.current().pid(), dir).size());
                assertEquals(List.of(), list());
            }
            assertEquals(List.of(), SsdKVStoreTest.openCacheFiles(ProcessHandle.current().pid(), dir));
            assertEquals(List.of(), list());
        }
    }

    /**
     * A text that goes on ({@code continueWith}: the pending token, then the new text without BOS) answers as one
     * prefill of the whole id sequence does, decoded greedily step by step here; and the same across a kept cache.
     */
    @Test
    void aTextThatGoesOnAnswersAsTheWholeSequenceDoes() {
        String more = " and then the dog";
        try (Engine e = Engine.builder().threads(2).kvStore("ssd").build();
             LlamaModel m = e.load(Models.require("stories260K-F32.gguf"))) {
            Generation first;
            Generation then;
            try (Session s = e.newSession(m, options(KVElementType.F32, null, false))) {
                first = s.generate(Models.PROMPT, 6, new Sampler(SamplerConfig.greedy()), true, false, null);
                then = s.continueWith(more, 6, null, true, null);
            }
            int[] moreIds = m.tokenizer().encode(more, false);
            int[] firstGen = first.generatedIds();
            assertArrayEquals(concat(new int[] {firstGen[firstGen.length - 1]}, moreIds), then.promptIds(),
                    "the pending token, then the text without BOS");
            int[] whole = concat(concat(first.promptIds(), firstGen), moreIds);
            int[] expected = new int[6];
            try (Session s = e.newSession(m, options(KVElementType.F32, null, false))) {
                Sampler greedy = new Sampler(SamplerConfig.greedy());
                float[] logits = s.prefill(whole, false);
                for (int i = 0; i < expected.length; i++) {
                    expected[i] = greedy.sample(logits);
                    logits = i + 1 < expected.length ? s.decode(expected[i]) : null;
                }
            }
            assertArrayEquals(expected, then.generatedIds());
            try (Session s = e.newSession(m, options(KVElementType.F32, "talk", false))) {
                s.generate(Models.PROMPT, 6, new Sampler(SamplerConfig.greedy()), true, false, null);
            }
            try (Session s = e.newSession(m, options(KVElementType.F32, "talk", true))) {
                assertEquals(firstGen[firstGen.length - 1], s.pendingToken());
                assertArrayEquals(expected, s.continueWith(more, 6, null, true, null).generatedIds());
            }
        }
    }

    /** The CLI round trip users run: keep, resume, and the same ids as one run; a store that cannot keep is refused. */
    @Test
    void theCliKeepsAndResumes() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Cli.Result whole = Cli.run("run", "-m", model, "-n", "16", "--temp", "0", "--json");
        Cli.Result first = Cli.run("run", "-m", model, "-n", "6", "--temp", "0", "--json", "--kv", "ssd", "--kv-dir",
                dir.toString(), "--kv-keep", "cli");
        Cli.Result rest = Cli.run("run", "-m", model, "-n", "10", "--temp", "0", "--json", "--kv", "ssd", "--kv-dir",
                dir.toString(), "--kv-resume", "cli");
        assertEquals(0, first.exit(), first.toString());
        assertEquals(0, rest.exit(), rest.toString());
        assertTrue(rest.out().contains("\"resumed\": true"), rest.out());
        assertArrayEquals(Cli.jsonIds(whole.out(), "generated_ids"),
                concat(Cli.jsonIds(first.out(), "generated_ids"), Cli.jsonIds(rest.out(), "generated_ids")));
        Cli.Result memory = Cli.run("run", "-m", model, "-n", "2", "--kv-keep", "x");
        assertEquals(2, memory.exit(), "a usage error: " + memory);
        assertTrue(memory.err().contains("does not keep caches") && memory.err().contains("--kv ssd"), memory.toString());
    }
}
