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
 * A minimal runtime image holding only the engine, the CLI and the CPU backend (no format plugins), built with
 * the JDK's own jlink through {@link ToolProvider}: discovery works inside it, a model runs, and a model that
 * needs a format the image lacks is refused with the module to add.
 */
class JlinkImageTest {
    @TempDir
    static Path dir;
    static Path image;

    @BeforeAll
    static void link() {
        image = dir.resolve("image");
        ToolProvider jlink = ToolProvider.findFirst("jlink").orElseThrow(() -> new AssertionError("no jlink in this JDK"));
        StringWriter log = new StringWriter();
        int rc = jlink.run(new PrintWriter(log), new PrintWriter(log),
                "--module-path", Cli.cliJar() + java.io.File.pathSeparator + Cli.modules(),
                "--add-modules", "dev.prefill4j.cli,dev.prefill4j.backend.cpu",
                "--strip-debug", "--no-header-files", "--no-man-pages", "--output", image.toString());
        assertEquals(0, rc, log.toString());
    }

    @Test
    void pluginsInsideTheImage() throws Exception {
        Cli.Result r = Cli.runImage(image, "plugins");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("cpu") && r.out().contains("dev.prefill4j.backend.cpu"), r.out());
        assertTrue(r.out().contains("memory") && r.out().contains("q8_0"), r.out());
        assertFalse(r.out().contains("skipped"), r.out());
    }

    @Test
    void aModelRunsInsideTheImage() throws Exception {
        Cli.Result r = Cli.runImage(image, "run", "-m", Models.require("stories260K-F32.gguf").toString(), "-n", "32",
                "--temp", "0", "--kv-type", "f32", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
    }

    @Test
    void aFormatTheImageLacksIsNamed() throws Exception {
        Cli.Result r = Cli.runImage(image, "run", "-m", Models.require("stories260K-Q4_0.gguf").toString(), "-n", "1");
        CliTest.assertOneLineError(r, "is GGUF type 2 (Q4_0): add module dev.prefill4j.quant.q4_0");
    }
}
