package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.util.spi.ToolProvider;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Minimal runtime images built with the JDK's own jlink through {@link ToolProvider}: discovery works inside them,
 * models run, and a model that needs a format the image lacks is refused with the module to add.
 */
class JlinkImageTest {
    @TempDir
    static Path dir;
    /** engine, CLI and CPU backend: no format plugins. */
    static Path minimal;
    /** the same plus quant-q4_0, but not quant-q4k. */
    static Path withQ4_0;

    static Path link(String name, String modules) {
        Path image = dir.resolve(name);
        ToolProvider jlink = ToolProvider.findFirst("jlink").orElseThrow(() -> new AssertionError("no jlink in this JDK"));
        StringWriter log = new StringWriter();
        int rc = jlink.run(new PrintWriter(log), new PrintWriter(log),
                "--module-path", Cli.cliJar() + java.io.File.pathSeparator + Cli.modules(), "--add-modules", modules,
                "--strip-debug", "--no-header-files", "--no-man-pages", "--output", image.toString());
        assertEquals(0, rc, log.toString());
        return image;
    }

    @BeforeAll
    static void link() {
        minimal = link("minimal", "dev.prefill4j.cli,dev.prefill4j.backend.cpu");
        withQ4_0 = link("q4_0", "dev.prefill4j.cli,dev.prefill4j.backend.cpu,dev.prefill4j.quant.q4_0");
    }

    @Test
    void pluginsInsideTheImage() throws Exception {
        Cli.Result r = Cli.runImage(minimal, "plugins");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("cpu") && r.out().contains("dev.prefill4j.backend.cpu"), r.out());
        assertTrue(r.out().contains("memory") && r.out().contains("q8_0"), r.out());
        assertFalse(r.out().contains("q4_0") || r.out().contains("skipped"), r.out());
        Cli.Result q = Cli.runImage(withQ4_0, "plugins");
        assertTrue(q.out().contains("q4_0") && q.out().contains("q5_0") && q.out().contains("dev.prefill4j.quant.q4_0"), q.out());
        assertFalse(q.out().contains("q4_k"), q.out());
    }

    @Test
    void aModelRunsInsideTheImage() throws Exception {
        Cli.Result r = Cli.runImage(minimal, "run", "-m", Models.require("stories260K-F32.gguf").toString(), "-n", "32",
                "--temp", "0", "--kv-type", "f32", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
    }

    @Test
    void aFormatTheImageLacksIsNamed() throws Exception {
        Cli.Result r = Cli.runImage(minimal, "run", "-m", Models.require("stories260K-Q4_0.gguf").toString(), "-n", "1");
        CliTest.assertOneLineError(r, "is GGUF type 2 (Q4_0): add module dev.prefill4j.quant.q4_0");
    }

    /** quant-q4_0 without quant-q4k: the Q4_0 file runs (ids as llama.cpp's), the Q4_K_M file is refused. */
    @Test
    void anImageWithQ4_0ButNotQ4k() throws Exception {
        Cli.Result r = Cli.runImage(withQ4_0, "run", "-m", Models.require("stories260K-Q4_0.gguf").toString(), "-n", "32",
                "--temp", "0", "--kv-type", "f32", "--activations", "quantized", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.ids("466 473 473 483 482 292 465 473 473 472 473 473 473 473 473 473 473 473 473 473 "
                + "473 473 473 473 473 473 473 473 465 465 465 465"), Cli.jsonIds(r.out(), "generated_ids"));
        Cli.Result k = Cli.runImage(withQ4_0, "run", "-m", Models.require("tiny-256-Q4_K_M.gguf").toString(), "-n", "1");
        CliTest.assertOneLineError(k, "(Q4_K): add module dev.prefill4j.quant.q4k");
    }
}
