package dev.prefill4j.cli;

import dev.prefill4j.engine.Engine;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code prefill4j bench}: prompt processing (ppN) and generation (tgN) speed in the manner of llama-bench:
 * a warm-up, then {@code -r} timed repetitions, each in a fresh session over deterministic random token ids.
 */
@Command(name = "bench", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Measure prompt processing (ppN: prefill N tokens) and text generation (tgN: N decode steps) "
                + "in tokens per second, llama-bench style: one warm-up, then -r repetitions; prints mean, standard "
                + "deviation and median.",
                "Without -m it benchmarks a synthetic model the engine generates in memory."})
final class BenchCommand implements Callable<Integer> {
    @Mixin
    EngineOptions engine;

    @Option(names = {"-p", "--n-prompt"}, split = ",", paramLabel = "N[,N...]", defaultValue = "128",
            description = "Prompt lengths to prefill (default: ${DEFAULT-VALUE}).")
    int[] prompts;

    @Option(names = {"-n", "--n-gen"}, paramLabel = "N", defaultValue = "16",
            description = "Decode steps for the tg test; 0 skips it (default: ${DEFAULT-VALUE}).")
    int gen;

    @Option(names = {"-r", "--repetitions"}, paramLabel = "R", defaultValue = "3",
            description = "Timed repetitions per test, after one warm-up (default: ${DEFAULT-VALUE}).")
    int reps;

    @Option(names = "--json", description = "Print JSON.")
    boolean json;

    /** Verification of the benchmarked configuration against the scalar reference is not built yet. */
    static final String VERIFICATION = "NOT VERIFIED — bench does not yet check its configuration against the "
            + "scalar reference; correctness is covered by the test suite";

    @Override
    public Integer call() {
        if (reps < 1 || gen < 0 || Arrays.stream(prompts).anyMatch(p -> p < 1)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "-r must be >= 1, -n >= 0, every -p >= 1");
        }
        List<Map<String, Object>> results = new ArrayList<>();
        try (Engine e = engine.openEngine(); LlamaModel model = engine.loadModel(e)) {
            int vocab = model.config().vocab();
            String name = model.synthetic() ? model.source() + " (synthetic)" : model.source();
            if (!json) {
                System.out.printf("| %-40s | %-8s | %9s | %8s | %-28s | %8s | %14s | %9s |%n", "model", "format", "size",
                        "params", "backend", "test", "t/s", "median");
            }
            List<String> tests = new ArrayList<>();
            for (int p : prompts) {
                tests.add("pp" + p);
            }
            if (gen > 0) {
                tests.add("tg" + gen);
            }
            for (String test : tests) {
                boolean pp = test.startsWith("pp");
                int n = Integer.parseInt(test.substring(2));
                double[] tps = new double[reps];
                for (int r = -1; r < reps; r++) {
                    System.err.printf("\rbench %s: %s %d/%d ", test, r < 0 ? "warm-up" : "run", Math.max(0, r + 1), reps);
                    int[] ids = new SplittableRandom(42 + r).ints(n, 3, vocab).toArray();
                    SessionOptions so = engine.sessionOptions(Math.min(model.config().contextLength(), Math.max(n + 1, 512)));
                    try (Session s = e.newSession(model, so)) {
                        long t0 = System.nanoTime();
                        if (pp) {
                            s.prefill(ids, false);
                        } else {
                            for (int id : ids) {
                                s.decode(id);
                            }
                        }
                        long dt = System.nanoTime() - t0;
                        if (r >= 0) {
                            tps[r] = n * 1e9 / dt;
                        }
                    }
                }
                System.err.print("\r" + " ".repeat(40) + "\r");
                double mean = Arrays.stream(tps).average().orElse(0);
                double sd = Math.sqrt(Arrays.stream(tps).map(x -> (x - mean) * (x - mean)).sum() / Math.max(1, reps - 1));
                double[] sorted = tps.clone();
                Arrays.sort(sorted);
                double median = reps % 2 == 1 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("model", name);
                row.put("synthetic", model.synthetic());
                row.put("format", model.formatSummary());
                row.put("size_bytes", model.weightBytes());
                row.put("params", model.config().parameters());
                row.put("backend", e.device().description());
                row.put("test", test);
                row.put("tokens_per_s_mean", mean);
                row.put("tokens_per_s_sd", sd);
                row.put("tokens_per_s_median", median);
                row.put("samples", tps);
                row.put("verification", VERIFICATION);
                results.add(row);
                if (!json) {
                    System.out.printf(Locale.ROOT, "| %-40s | %-8s | %6.1f MiB | %7.1fM | %-28s | %8s | %7.2f ± %5.2f | %9.2f |%n",
                            shorten(name, 40), model.formatSummary(), model.weightBytes() / 1048576.0,
                            model.config().parameters() / 1e6, e.device().description(), test, mean, sd, median);
                }
            }
        }
        if (json) {
            Map<String, Object> doc = new LinkedHashMap<>();
            doc.put("results", results);
            System.out.print(Json.write(doc));
        } else {
            System.out.println("verification: " + VERIFICATION);
        }
        return 0;
    }

    private static String shorten(String s, int n) {
        return s.length() <= n ? s : "…" + s.substring(s.length() - n + 1);
    }
}
