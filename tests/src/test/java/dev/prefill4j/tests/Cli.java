package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Runs {@code prefill4j} as users do: a child JVM on the module path, or the java launcher of a jlink image. */
final class Cli {
    record Result(int exit, String out, String err) {
        @Override
        public String toString() {
            return "exit " + exit + "\n--- stdout\n" + out + "--- stderr\n" + err;
        }
    }

    private Cli() {
    }

    static Path cliJar() {
        Path p = Path.of(System.getProperty("prefill4j.cliJar", "../cli/target/prefill4j-cli.jar"));
        assumeTrue(Files.isRegularFile(p), "the CLI jar is not built: run ./mvnw package first");
        return p;
    }

    static Path modules() {
        return Path.of(System.getProperty("prefill4j.modules", "../cli/target/modules"));
    }

    /** {@code java --module-path cli.jar:modules --add-modules ALL-MODULE-PATH -m dev.prefill4j.cli ...}. */
    static Result run(String... args) throws IOException, InterruptedException {
        return run(java.util.Map.of(), args);
    }

    /** {@link #run(String...)} with {@code env} added to the environment (e.g. a locale). */
    static Result run(java.util.Map<String, String> env, String... args) throws IOException, InterruptedException {
        return exec(command(args), env);
    }

    /** The command line that {@link #run(String...)} runs, for a test that starts and stops the process itself. */
    static List<String> command(String... args) {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                // as the launcher: huge pages under KV reads, decode buffers on cache-line boundaries
                "--enable-native-access=dev.prefill4j.kvstore.ssd,dev.prefill4j.backend.cpu",
                "--module-path", cliJar() + java.io.File.pathSeparator + modules(),
                "--add-modules", "ALL-MODULE-PATH", "-m", "dev.prefill4j.cli/dev.prefill4j.cli.Main"));
        cmd.addAll(List.of(args));
        return cmd;
    }

    /** Runs {@code image/bin/java -m dev.prefill4j.cli ...}. */
    static Result runImage(Path image, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(image.resolve("bin/java").toString(), "-m",
                "dev.prefill4j.cli/dev.prefill4j.cli.Main"));
        cmd.addAll(List.of(args));
        return exec(cmd);
    }

    static Result exec(List<String> cmd) throws IOException, InterruptedException {
        return exec(cmd, java.util.Map.of());
    }

    static Result exec(List<String> cmd, java.util.Map<String, String> env) throws IOException, InterruptedException {
        Path out = Files.createTempFile("prefill4j", ".out");
        Path err = Files.createTempFile("prefill4j", ".err");
        try {
            ProcessBuilder pb = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile());
            pb.environment().putAll(env);
            Process p = pb.start();
            if (!p.waitFor(300, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("timed out: " + cmd);
            }
            // new String(...) replaces malformed UTF-8: a model may stream any bytes.
            return new Result(p.exitValue(), new String(Files.readAllBytes(out), StandardCharsets.UTF_8),
                    new String(Files.readAllBytes(err), StandardCharsets.UTF_8).replace("WARNING: Using incubator modules: jdk.incubator.vector\n", ""));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    /** The ids of a JSON array field, e.g. {@code "generated_ids": [1, 2]}. */
    static int[] jsonIds(String json, String field) {
        int i = json.indexOf("\"" + field + "\": [");
        if (i < 0) {
            throw new AssertionError("no " + field + " in " + json);
        }
        int start = json.indexOf('[', i) + 1;
        String body = json.substring(start, json.indexOf(']', start)).trim();
        return body.isEmpty() ? new int[0] : Models.ids(body.replace(",", " "));
    }
}
