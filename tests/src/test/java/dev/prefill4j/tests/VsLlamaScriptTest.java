package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code benchmarks/vs-llama} against a stand-in for llama-bench that reports fixed speeds (50 tok/s for prompts,
 * 20 for decode, in llama-bench's JSON): each run's ratio is prefill4j's own figure over the stand-in's for the same
 * test, the summary's ratio is the median of the rounds', and prefill4j's bench ran (verified) on a real file.
 */
class VsLlamaScriptTest {
    private static final Path SCRIPT = Path.of("../benchmarks/vs-llama");

    @TempDir
    Path dir;

    private static boolean available(String... cmd) {
        try {
            return new ProcessBuilder(cmd).redirectErrorStream(true).start().waitFor() == 0;
        } catch (Exception e) {
            return false;
        }
    }

    private Path standIn() throws Exception {
        Path stub = dir.resolve("llama-bench");
        Files.writeString(stub, """
                #!/usr/bin/env bash
                p=0; n=0
                while [ $# -gt 0 ]; do case "$1" in -p) p=$2; shift 2 ;; -n) n=$2; shift 2 ;; *) shift ;; esac; done
                echo "["
                for one in ${p//,/ }; do echo "{\\"n_prompt\\": $one, \\"n_gen\\": 0, \\"avg_ts\\": 50.0},"; done
                echo "{\\"n_prompt\\": 0, \\"n_gen\\": $n, \\"avg_ts\\": 20.0}]"
                """);
        assertTrue(stub.toFile().setExecutable(true));
        return stub;
    }

    private static String jq(Path json, String filter) throws Exception {
        Cli.Result r = Cli.exec(List.of("jq", "-r", filter, json.toString()));
        assertEquals(0, r.exit(), r.toString());
        return r.out().strip();
    }

    /**
     * Runs the script with the stand-in on the tiny F32 model, {@code options} first, its runs kept in {@code json};
     * asserts that it succeeded.
     */
    private Cli.Result runOnTinyModel(java.util.Map<String, String> env, Path json, String... options) throws Exception {
        assumeTrue(available("jq", "--version"), "jq is not installed; benchmarks/vs-llama needs it");
        Cli.cliJar();
        Path model = Models.require("tiny-256-F32.gguf");
        List<String> cmd = new java.util.ArrayList<>(List.of("bash", SCRIPT.toString(), "--llama-bench",
                standIn().toString()));
        cmd.addAll(List.of(options));
        cmd.addAll(List.of("--json", json.toString(), model.toString()));
        Cli.Result r = Cli.exec(cmd, env);
        assertEquals(0, r.exit(), r.toString());
        return r;
    }

    @Test
    void ratiosAreOursOverTheirsAndTheSummaryTakesTheMedian() throws Exception {
        Path json = dir.resolve("runs.json");
        Cli.Result r = runOnTinyModel(java.util.Map.of(), json, "-p", "8,16", "-n", "4", "-t", "1", "-r", "1", "-R",
                "2");
        String[] runs = jq(json, ".runs[] | [.round, .test, .llama_cpp, .prefill4j, .ratio] | @tsv").split("\n");
        assertEquals(6, runs.length, r.toString()); // 2 rounds x (pp8, pp16, tg4)
        double[] ppRatios = new double[2];
        for (String line : runs) {
            String[] f = line.split("\t");
            double theirs = Double.parseDouble(f[2]);
            double ours = Double.parseDouble(f[3]);
            assertEquals(f[1].startsWith("pp") ? 50.0 : 20.0, theirs, 0.0, line);
            assertTrue(f[1].equals("pp8") || f[1].equals("pp16") || f[1].equals("tg4"), line);
            assertTrue(ours > 0, line);
            assertEquals(ours / theirs, Double.parseDouble(f[4]), 1e-12 * ours / theirs, line);
            if (f[1].equals("pp8")) {
                ppRatios[Integer.parseInt(f[0]) - 1] = ours / theirs;
            }
        }
        double median = Arrays.stream(ppRatios).sum() / 2; // the median of two
        assertEquals(median, Double.parseDouble(jq(json, ".summary[] | select(.test == \"pp8\") | .ratio_median")),
                1e-12 * median);
        // Every run carries bench's heap count, and every run bench warned of is a round the summary names.
        assertEquals("6", jq(json, "[.runs[] | select(.heap_bytes_per_token > 0)] | length"), r.toString());
        assertEquals(jq(json, "[.runs[] | select(.heap_allocation_warning != null)] | length"),
                jq(json, "[.summary[].rounds_allocating[]] | length"), r.toString());
        assertTrue(r.out().contains("tiny-256-F32.gguf: VERIFIED"), r.out());
        assertTrue(r.out().contains(String.format(java.util.Locale.ROOT, "%.2f", median)), r.out());
    }

    /**
     * A round whose timed runs allocated far beyond the logits is named in the summary and in a warning: with the
     * prompt's micro-kernel kept interpreted (its vectors boxed), bench's {@code heap_allocation_warning} is set for
     * pp8, and the script carries it into the run, the summary's {@code rounds_allocating} and a line of its output.
     */
    @Test
    void roundsThatAllocateAreNamed() throws Exception {
        Path json = dir.resolve("runs.json");
        Cli.Result r = runOnTinyModel(java.util.Map.of("JAVA_TOOL_OPTIONS", CliTest.BOXED_KERNEL), json, "-p", "8",
                "-n", "0", "-t", "1", "-r", "1", "-R", "1");
        assertTrue(jq(json, ".runs[0].heap_allocation_warning").startsWith("the timed runs allocated "), r.toString());
        assertTrue(Double.parseDouble(jq(json, ".runs[0].heap_bytes_per_token")) > 0, r.toString());
        assertEquals("1", jq(json, ".summary[0].rounds_allocating | map(tostring) | join(\",\")"), r.toString());
        assertTrue(r.out().contains("WARNING: tiny-256-F32.gguf pp8: round(s) 1 allocated beyond the logits"),
                r.out());
    }

    /**
     * {@code --activations} reaches prefill4j's bench: per-token activations on a model with no ternary weights make
     * bench refuse, and the script says so with the command to run by hand; an unknown mode is refused first.
     */
    @Test
    void activationsGoToPrefill4jBench() throws Exception {
        assumeTrue(available("jq", "--version"), "jq is not installed; benchmarks/vs-llama needs it");
        Cli.cliJar();
        Path model = Models.require("tiny-256-F32.gguf");
        Cli.Result r = Cli.exec(List.of("bash", SCRIPT.toString(), "--llama-bench", standIn().toString(), "-p", "8",
                "-n", "0", "-t", "1", "-r", "1", "-R", "1", "--activations", "per-token", model.toString()));
        assertEquals(2, r.exit(), r.toString());
        assertTrue(r.err().contains("prefill4j bench failed") && r.err().contains("--activations per-token"), r.err());
        Cli.Result bad = Cli.exec(List.of("bash", SCRIPT.toString(), "--llama-bench", standIn().toString(),
                "--activations", "int4", model.toString()));
        assertEquals(2, bad.exit(), bad.toString());
        assertEquals("vs-llama: error: --activations takes f32, quantized or per-token, not 'int4'", bad.err().strip());
    }

    @Test
    void withoutLlamaBenchItSaysWhatIsMissing() throws Exception {
        assumeTrue(available("jq", "--version"), "jq is not installed; benchmarks/vs-llama needs it");
        Cli.Result r = Cli.exec(List.of("bash", SCRIPT.toString(), "model.gguf"));
        assertEquals(2, r.exit(), r.toString());
        assertEquals("vs-llama: error: --llama-bench PATH is required (see --help)", r.err().strip());
    }
}
