package dev.prefill4j.cli;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.engine.OpProfile;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.draft.PromptLookupDrafts;
import dev.prefill4j.engine.model.LlamaConfig;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.verify.Verification;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
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
 * {@code prefill4j bench}: prompt processing (ppN) and generation (tgN) speed in the manner of llama-bench: a
 * warm-up (a pp test's of at least {@link #PP_WARM_UP_TOKENS} prompt tokens, a tg test's of at least
 * {@link #TG_WARM_UP_TOKENS} steps), then {@code -r} timed repetitions in the same
 * session, emptied before each (as llama-bench clears its context's cache), over deterministic random token ids;
 * with the machine's measured FMA peak and read bandwidth, achieved GFLOP/s, bytes per decoded token, peak resident
 * memory, the heap the timed runs allocated, and a verification label from an FP64 reference run of the same
 * configuration.
 */
@Command(name = "bench", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Measure prompt processing (ppN: prefill N tokens) and text generation (tgN: N decode steps) "
                + "in tokens per second, llama-bench style: a warm-up (for ppN at least " + BenchCommand.PP_WARM_UP_TOKENS
                + " prompt tokens in passes of N, for tgN at least " + BenchCommand.TG_WARM_UP_TOKENS + " decode steps, "
                + "so that the JIT has compiled the kernels), then "
                + "-r repetitions; prints mean, standard deviation and median, achieved GFLOP/s against this "
                + "machine's measured FP32 FMA peak, bytes read per decoded token against measured read bandwidth, "
                + "peak resident memory (of loading the model and the pp/tg runs, against the model + KV cache + 15%%; "
                + "and with what runs after them), heap bytes allocated a token in the timed runs (with a WARNING where "
                + "they show a kernel running in code that boxes its vectors, whose speed is not the engine's), and "
                + "whether the configuration matches the scalar FP64 reference on a short prompt (its first half "
                + "prefilled, the rest decoded a token at a time).",
                "Without -m it benchmarks a synthetic model the engine generates in memory: by default the "
                + "Llama-3.2-1B geometry in Q4_0 (--synthetic llama-1b --type q4_0; about 20 s to generate). Before "
                + "generating it, bench readies the kernels on one layer of that shape (a few seconds), so that the "
                + "JIT compiles them while little memory is in use."})
final class BenchCommand implements Callable<Integer> {
    /**
     * Decode steps of a tg test's warm-up, at least: the per-step path (the session's projections, RoPE, attention's
     * tasks, the device's dispatch) runs a few hundred calls a token, and a warm-up of 16 steps left C2 compiling
     * parts of it during the timed runs (seen with {@code -XX:+PrintCompilation}), on a core the decode needs. On the
     * 1B TQ2_0 file (Zen 5 VM, 2026-12-04) tg16 read 33.7 and 38.9 tok/s with 16 warm-up steps where tg64 read 40.8
     * and 41.1; with 64 warm-up steps, 40.3 against tg64's 40.6.
     */
    static final int TG_WARM_UP_TOKENS = 64;

    /**
     * Prompt tokens of a pp test's warm-up, at least, in passes of its own length. One pass of a short prompt leaves
     * the JIT short of compiling the prompt's kernels: on the 1B Q4_0 file ({@code -p 16,64 -n 0 -r 3}, Zen 5 VM,
     * 2026-12-07, two processes each) pp16 read 59.47 +- 19.02 and 56.41 +- 23.76 tok/s after one 16-token pass,
     * allocating 1.4 and 2.6 MiB a token (boxed vectors), against 92.65 +- 2.69 and 98.20 +- 3.20 and 38.9 KiB a token
     * after 16 passes (256 tokens); 512 tokens gave no more (91.07 +- 2.83).
     */
    static final int PP_WARM_UP_TOKENS = 256;

    /**
     * Heap bytes a token and layer, beyond the logits handed back, above which a test's timed runs are reported as
     * not the engine's speed. The kernels allocate nothing; the dispatch around them small objects (a worker pool's
     * loop, attention's per-block tasks): 1.8 KiB a prompt token and 49 KiB a decode step beyond the logits on
     * the 16-layer 1B files (Q4_0 and Q4_K_M, {@code -p 512 -n 16 -r 2}, Zen 5 VM, 2026-12-07), about 3 KiB a layer.
     * A kernel compiled with Vector API calls left out of line boxes every vector it touches: the collapses seen on
     * those files (one process in twelve to twenty) ran 200-1,000 young collections a second of a 1.3 MiB eden, 14-20
     * MiB a token, about 1 MiB a layer; before the JIT has compiled the kernels at all (one 16-token warm-up pass, before
     * {@link #PP_WARM_UP_TOKENS}), pp16 on the four-layer tiny synthetic model allocated 1.1 MiB a token, 287 KiB a
     * layer, and on the 1B Q4_0 file 1.4-2.6 MiB a token.
     */
    static final long ALLOCATION_WARNING_BYTES_PER_LAYER = 64 * 1024;
    /**
     * Clears a test's progress line. A constant: concatenated where the first test ends, it spun a class (string
     * concatenation's method handles) between the timed tests (see {@link #row}).
     */
    private static final String CLEAR_PROGRESS = "\r" + " ".repeat(40) + "\r";

    @Mixin
    EngineOptions engine;

    @Option(names = {"-p", "--n-prompt"}, split = ",", paramLabel = "N[,N...]", defaultValue = "128",
            description = "Prompt lengths to prefill; a test longer than the model's trained context runs past it "
                    + "(speed only), as llama-bench's do, and says so (default: ${DEFAULT-VALUE}).")
    int[] prompts;

    @Option(names = {"-n", "--n-gen"}, paramLabel = "N", defaultValue = "16",
            description = "Decode steps for the tg test; 0 skips it (default: ${DEFAULT-VALUE}).")
    int gen;

    @Option(names = {"-r", "--repetitions"}, paramLabel = "R", defaultValue = "3",
            description = "Timed repetitions per test, after one warm-up (default: ${DEFAULT-VALUE}).")
    int reps;

    @Option(names = "--verify-tokens", paramLabel = "N", defaultValue = "7",
            description = "Tokens of the FP64 reference check, half prefilled and half decoded; 0 skips it (label NOT "
                    + "VERIFIED) (default: ${DEFAULT-VALUE}).")
    int verifyTokens;

    @Option(names = "--context", paramLabel = "N", defaultValue = "0",
            description = "Also measure decode at depth N: the KV cache is filled with synthetic K/V (labelled "
                    + "'synthetic KV'), then passes of --burst tokens are timed at that depth (default: off).")
    int context;

    @Option(names = "--burst", paramLabel = "K", defaultValue = "1",
            description = "Tokens verified per pass: with --context, passes of K tokens are timed after passes of one; "
                    + "and greedy generation with bursts of K is compared with plain greedy generation (ids, "
                    + "acceptance, tokens/s) (default: ${DEFAULT-VALUE}).")
    int burst;

    @Option(names = "--depth-passes", paramLabel = "N", defaultValue = "4",
            description = "Timed passes per burst size in the --context test, after one warm-up (default: "
                    + "${DEFAULT-VALUE}).")
    int depthPasses;

    @Option(names = "--profile", description = "Also time every operation of the pp and tg tests' timed runs (each "
            + "weight matrix by tensor name, attention, norms, RoPE, KV append, ...) and print, per test, the "
            + "milliseconds per token each takes, its share of the run and, for weight matrices, the GB/s of weights it "
            + "reads (tg) or the GFLOP/s it computes (pp), and the heap it allocates a token on the session's thread "
            + "(megabytes mark a kernel running in code that boxes its vectors). Adds about 100 ns per operation: "
            + "nothing for a 1B model, a visible share for a tiny one.")
    boolean profile;

    @Option(names = "--json", description = "Print JSON.")
    boolean json;

    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        // What the JVM holds before any model is touched: the floor under every peak below (tens of MiB), which the
        // aim (model + KV cache + 15%) does not cover and which dominates a tiny model's peak.
        long startRss = residentBytes("VmRSS:");
        engine.checkCombinations();
        // Every number checked here, before any work (--depth-passes had been refused only after every pp and tg
        // test ran), and every one out of range named at once.
        List<String> bad = new ArrayList<>();
        atLeast(bad, "-r", reps, 1);
        atLeast(bad, "-n", gen, 0);
        atLeast(bad, "--verify-tokens", verifyTokens, 0);
        atLeast(bad, "every -p", Arrays.stream(prompts).min().orElse(1), 1);
        atLeast(bad, "--context", context, 0);
        atLeast(bad, "--burst", burst, 1);
        atLeast(bad, "--depth-passes", depthPasses, 1);
        if (!bad.isEmpty()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, String.join("; ", bad));
        }
        // Without a model, bench's default is the Llama-3.2-1B geometry in Q4_0, generated in memory.
        var parsed = spec.commandLine().getParseResult();
        if (engine.model == null && !parsed.hasMatchedOption("--synthetic")) {
            engine.synthetic = "llama-1b";
        }
        if (engine.model == null && !parsed.hasMatchedOption("--type")) {
            engine.type = "q4_0";
        }
        List<Map<String, Object>> results = new ArrayList<>();
        Map<String, Object> machine = new LinkedHashMap<>();
        String verification;
        long peakRssBeforeCalibration;
        long peakRssPpTg;
        long modelBytes;
        long largestKvBytes = 0;
        // A synthetic model's kernels are readied on one of its layers, for the longest prompt (Engine.readyKernels).
        try (Engine e = calibrated(engine.openEngine());
             LlamaModel model = engine.loadModel(e, Math.max(1, Arrays.stream(prompts).max().orElse(0)))) {
            LlamaConfig c = model.config();
            SessionOptions base = engine.sessionOptions(0);
            String name = model.synthetic() ? model.source() + " (synthetic)" : model.source();
            List<String> tests = new ArrayList<>();
            List<Timed> timed = new ArrayList<>();
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
                // The FMA peak is measured right before every timed run as well: this machine's speed can drift by
                // tens of percent between the runs and a calibration at the end, so each run is compared with the peak
                // of its own moment and the median of those ratios is reported.
                double[] peaks = new double[reps];
                // Heap bytes every thread allocated during each timed run (-1: not counted by this JVM).
                long[] heap = new long[reps];
                OpProfile ops = profile ? new OpProfile(currentThreadAllocatedBytes()) : null;
                long timedNanos = 0;
                // At least 512 positions where the model was trained for them, and always the test's own: a test
                // longer than the trained context runs past it, as llama-bench lets it (its speed is what is measured).
                int ctx = Math.max(n + 1, Math.min(c.contextLength(), 512));
                if (n > c.contextLength()) {
                    System.err.printf("bench %s: runs past the model's trained context of %d positions (speed only: "
                            + "the outputs there mean nothing)%n", test, c.contextLength());
                }
                largestKvBytes = Math.max(largestKvBytes, (long) c.layers() * 2 * ctx * base.kvType().rowBytes(c.kvDim()));
                int warmUp = warmUpTokens(pp, n, ctx);
                int warmUpPasses = warmUpPasses(pp, n);
                // One session a test, emptied before each run, as llama-bench clears one context's cache between its
                // repetitions: the KV pages the warm-up touched are the runs' (a session of its own per run had
                // each pp512 run zero and fault in 16 MiB of new pages, about 0.8% of an F16 run).
                try (Session s = e.newSession(model, base.withContextLength(ctx))) {
                    for (int r = -warmUpPasses; r < reps; r++) {
                        System.err.printf("\rbench %s: %s %d/%d ", test, r < 0 ? "warm-up" : "run",
                                r < 0 ? warmUpPasses + r + 1 : r + 1, r < 0 ? warmUpPasses : reps);
                        int[] ids = new SplittableRandom(42 + r).ints(r < 0 ? warmUp : n, 3, c.vocab()).toArray();
                        if (r >= 0) {
                            peaks[r] = e.device().measurePeakGflops();
                        }
                        s.truncate(0);
                        s.profile(r >= 0 ? ops : null);
                        long a0 = heapAllocatedBytes();
                        long t0 = System.nanoTime();
                        if (pp) {
                            s.prefill(ids, false);
                        } else {
                            for (int id : ids) {
                                s.decode(id);
                            }
                        }
                        long dt = System.nanoTime() - t0;
                        long a1 = heapAllocatedBytes();
                        if (r >= 0) {
                            heap[r] = a0 < 0 || a1 < 0 ? -1 : a1 - a0;
                            tps[r] = n * 1e9 / dt;
                            timedNanos += dt;
                        }
                    }
                }
                System.err.print(CLEAR_PROGRESS);
                timed.add(new Timed(test, pp, n, ctx, warmUp * warmUpPasses, warmUpPasses, tps, peaks, heap, ops,
                        timedNanos));
            }
            // The rows are made once every test has run: their code (streams, sorting, the model's summary, string
            // concatenation) runs for the first time there, and its lambdas and method handles spun classes between
            // the pp and tg tests, whose compilation by C2 (MethodType.makeImpl, 22 MB of arena, -XX:CompileCommand=
            // MemStat) came on top of the whole resident model.
            for (Timed t : timed) {
                results.add(row(t, e, model, base, name));
            }
            // The aim is for loading the model and running the pp/tg tests: read here, before what comes on top of
            // them: the depth tests' synthetic KV (a million positions in RAM, or the SSD store's buffers), the burst
            // comparison, and the check against the scalar FP64 reference (a second forward pass, its logits and the
            // compilation of its code: 6-8 MiB on the 1B Q4_0 file, Intel Xeon VM, 2026-12-05).
            peakRssPpTg = peakResidentBytes();
            if (context > 0) {
                results.addAll(depthTests(e, model, base, name));
            }
            if (burst > 1) {
                results.add(burstGeneration(e, model, base, name));
            }
            // Verified after the timed runs, not before: the first timed session then compiles its kernels while the
            // model's pages are still coming in, and the check's own arrays (both sides' logits at every position, 3.5
            // MiB each for a 128K vocabulary) do not sit under the sessions' buffers. The 1B Q4_0 file's peak RSS
            // (pp512 + tg16 -r 2, 2026-12-03, alternating): 858.6, 860.2, 858.3 MiB verifying first (with a
            // System.gc() after it), 856.9, 856.0, 855.9 verifying last.
            if (verifyTokens > 0) {
                System.err.print("verifying against the FP64 reference (" + verifyTokens + " tokens)...");
                verification = Verification.run(e, model, base, verifyTokens).label();
                System.err.print("\r" + " ".repeat(60) + "\r");
            } else {
                verification = "NOT VERIFIED — skipped with --verify-tokens 0";
            }
            for (Map<String, Object> row : results) {
                row.replace("verification", verification);
            }
            // Calibrated after the timed runs, when the JIT's compiler threads no longer compete for the cores.
            System.err.print("measuring FP32 FMA peak and read bandwidth...");
            peakRssBeforeCalibration = peakResidentBytes();
            modelBytes = modelFileBytes(model);
            double calibrated = e.device().measurePeakGflops();
            double bandwidth = e.device().measureReadBandwidth();
            System.err.print("\r" + " ".repeat(50) + "\r");
            // The machine's peak is the highest of all the FMA measurements of this run: interference (other load, two
            // vCPUs placed on one core) can only make a measurement low, and on a shared VM the calibration alone came
            // out at half the peaks measured minutes before (pp2048 at "141.6%" of it).
            int measured = 1;
            double peak = calibrated;
            for (Map<String, Object> row : results) {
                if (row.get("fma_peak_gflops_at_runs") instanceof double[] at) {
                    measured += at.length;
                    peak = Math.max(peak, Arrays.stream(at).max().orElse(0));
                }
            }
            machine.put("device", e.device().description());
            machine.put("fp32_fma_peak_gflops", peak);
            machine.put("fp32_fma_peak_measurements", measured);
            machine.put("fp32_fma_peak_final_calibration_gflops", calibrated);
            machine.put("read_bandwidth_gb_s", bandwidth);
            for (Map<String, Object> row : results) {
                row.put("percent_of_fma_peak", 100 * (double) row.get("gflops") / peak);
                if (row.containsKey("read_gb_s")) {
                    row.put("percent_of_read_bandwidth", 100 * (double) row.get("read_gb_s") / bandwidth);
                }
            }
            if (!json) {
                System.out.printf(Locale.ROOT, "machine: %s, FP32 FMA peak %.1f GFLOP/s (the highest of %d measurements; "
                        + "the one after the runs %.1f), read bandwidth %.1f GB/s (measured)%n",
                        e.device().description(), peak, measured, calibrated, bandwidth);
                System.out.printf("| %-40s | %-8s | %9s | %8s | %8s | %15s | %9s | %8s | %6s |%n", "model", "format", "size",
                        "params", "test", "t/s", "median", "GFLOP/s", "% peak");
                for (Map<String, Object> row : results) {
                    System.out.printf(Locale.ROOT, "| %-40s | %-8s | %5.0f MiB | %7.1fM | %8s | %7.2f ± %5.2f | %9.2f | %8.1f | %5.1f%% |%n",
                            shorten(name, 40), model.formatSummary(), model.weightBytes() / 1048576.0, c.parameters() / 1e6,
                            row.get("test"), (double) row.get("tokens_per_s_mean"), (double) row.get("tokens_per_s_sd"),
                            (double) row.get("tokens_per_s_median"), (double) row.get("gflops"),
                            (double) row.get("percent_of_fma_peak"));
                    if (row.containsKey("percent_of_fma_peak_at_runs")) {
                        double[] at = (double[]) row.get("fma_peak_gflops_at_runs");
                        System.out.printf(Locale.ROOT, "  %s: %.1f%% of the FMA peak measured right before each run "
                                + "(median; peaks %.0f-%.0f GFLOP/s)%n", row.get("test"),
                                (double) row.get("percent_of_fma_peak_at_runs"), Arrays.stream(at).min().orElse(0),
                                Arrays.stream(at).max().orElse(0));
                    }
                    if (row.containsKey("read_gb_s")) {
                        System.out.printf(Locale.ROOT, "  %s: %.1f MB read per token (weights + mean KV), %.1f GB/s = %.0f%% of read bandwidth%n",
                                row.get("test"), (double) row.get("bytes_per_token") / 1e6, (double) row.get("read_gb_s"),
                                (double) row.get("percent_of_read_bandwidth"));
                    }
                    if (row.get("heap_bytes_per_token") instanceof Double perToken) {
                        System.out.printf("  %s: %s a token allocated on the heap (the logits handed back: %s)%n",
                                row.get("test"), bytes(perToken), bytes((double) row.get("returned_bytes_per_token")));
                    }
                    if (row.get("heap_allocation_warning") instanceof String warning) {
                        System.out.printf("  %s: WARNING: %s%n", row.get("test"), warning);
                    }
                    if (row.get("operations") instanceof List<?> list) {
                        // Decode is bound by the weights' stream, prefill by arithmetic: each gets its own rate.
                        boolean prefill = row.get("test").toString().startsWith("pp");
                        int tokens = Integer.parseInt(row.get("test").toString().substring(2));
                        System.out.printf(Locale.ROOT, "  %s by operation (%.1f%% of the timed runs' time):%n",
                                row.get("test"), 100 * (double) row.get("profiled_share"));
                        System.out.printf("    %-24s %12s %8s %9s %14s %12s%n", "operation", "ms/token", "share",
                                prefill ? "calls/run" : "calls/tok", prefill ? "GFLOP/s" : "weights read",
                                "heap/token*");
                        for (Object o : list) {
                            Map<?, ?> op = (Map<?, ?>) o;
                            String rate = prefill && op.containsKey("gflops")
                                    ? String.format(Locale.ROOT, "%.1f", (double) op.get("gflops"))
                                    : !prefill && op.containsKey("weight_read_gb_s")
                                    ? String.format(Locale.ROOT, "%.1f GB/s", (double) op.get("weight_read_gb_s")) : "";
                            double calls = (double) op.get("calls_per_token") * (prefill ? tokens : 1);
                            String heap = op.get("session_thread_heap_bytes_per_token") instanceof Double b
                                    ? bytes(b) : "";
                            System.out.printf(Locale.ROOT, "    %-24s %12.4f %7.1f%% %9.1f %14s %12s%n",
                                    op.get("operation"), (double) op.get("ms_per_token"),
                                    100 * (double) op.get("share"), calls, rate, heap);
                        }
                        System.out.println("    * heap allocated on the session's thread only (the device's other "
                                + "threads run their share of each step unseen); megabytes a token mark a kernel "
                                + "running in code that boxes its vectors");
                    }
                    if (row.containsKey("kv_read_gb_s")) {
                        System.out.printf(Locale.ROOT, "  %s (synthetic KV, %s store, %s, pages of %d): %.2f verified tokens/s "
                                + "(median), %.2f passes/s, %.1f MB of KV %s per pass, %.2f GB/s; filled in %.1f s%n",
                                row.get("test"), row.get("kv_store"), row.get("kv_type"), (int) row.get("kv_page_positions"),
                                (double) row.get("verified_tokens_per_s"), (double) row.get("passes_per_s"),
                                (long) row.get("kv_bytes_per_pass") / 1e6,
                                (boolean) row.get("kv_bytes_read_from_storage") ? "read from storage" : "attended",
                                (double) row.get("kv_read_gb_s"), (double) row.get("fill_seconds"));
                        if (row.containsKey("direct_io_read_gb_s")) {
                            System.out.printf(Locale.ROOT, "    plain direct-I/O sequential read of as many bytes of the same file "
                                    + "(the store's buffer and request size) right before each pass: %.2f GB/s (median); the passes read at %.0f%% of it "
                                    + "(median of per-pass ratios)%n", (double) row.get("direct_io_read_gb_s"),
                                    (double) row.get("percent_of_direct_io"));
                        }
                        if (row.containsKey("speedup_vs_burst1")) {
                            System.out.printf(Locale.ROOT, "    bursts of %d: %.1fx the verified tokens/s of one token per pass%n",
                                    (int) row.get("burst"), (double) row.get("speedup_vs_burst1"));
                        }
                    }
                    if (row.containsKey("acceptance_rate")) {
                        System.out.printf(Locale.ROOT, "  %s: same ids as greedy; %d passes, %.0f%% of drafts accepted, %.2f tokens per "
                                + "pass, %.2f accepted tokens/s vs %.2f greedy (%.2fx)%n", row.get("test"),
                                (int) row.get("passes"), 100 * (double) row.get("acceptance_rate"),
                                (double) row.get("tokens_per_pass"), (double) row.get("accepted_tokens_per_s"),
                                (double) row.get("greedy_tokens_per_s"), (double) row.get("speedup_vs_greedy"));
                    }
                }
            }
        }
        // Both read before the calibration buffers were allocated: the peak of loading the model and running the
        // pp/tg tests, and the peak with what ran after them (depth and burst tests, the reference check).
        long peakRss = peakRssBeforeCalibration;
        String rssNote = "model load and runs, before calibration";
        // The aim for peak memory: the model (its file, or its weights when synthetic) plus the largest KV cache of the
        // pp/tg tests, plus 15%; compared with the peak of loading the model and running the pp/tg tests.
        long budget = (long) ((modelBytes + largestKvBytes) * 1.15);
        if (json) {
            Map<String, Object> doc = new LinkedHashMap<>();
            doc.put("machine", machine);
            doc.put("results", results);
            doc.put("peak_resident_bytes", peakRss);
            doc.put("peak_resident_note", rssNote);
            doc.put("peak_resident_bytes_pp_tg", peakRssPpTg);
            doc.put("start_resident_bytes", startRss);
            doc.put("model_bytes", modelBytes);
            doc.put("kv_cache_bytes", largestKvBytes);
            doc.put("resident_budget_bytes", budget);
            doc.put("verification", verification);
            System.out.print(Json.write(doc));
        } else {
            List<String> later = new ArrayList<>();
            if (context > 0 || burst > 1) {
                later.add("the --context/--burst tests");
            }
            if (verifyTokens > 0) {
                later.add("the reference check");
            }
            String with = later.isEmpty() ? "" : String.format(Locale.ROOT, "; %.1f MiB with %s after them",
                    peakRss / 1048576.0, String.join(" and ", later));
            String verdict = peakRssPpTg <= budget ? "within"
                    : String.format(Locale.ROOT, "%.0f%% over", 100.0 * peakRssPpTg / budget - 100) + (startRss < 0 ? ""
                            : String.format(Locale.ROOT, " (the JVM alone held %.1f MiB when bench started)",
                                    startRss / 1048576.0));
            System.out.println(peakRss < 0 ? "peak resident memory: unknown (no /proc/self/status)"
                    : String.format(Locale.ROOT, "peak resident memory: %.1f MiB (model load and the pp/tg runs%s); "
                            + "model %.1f MiB + KV cache %.1f MiB + 15%% = %.1f MiB: %s", peakRssPpTg / 1048576.0, with,
                            modelBytes / 1048576.0, largestKvBytes / 1048576.0, budget / 1048576.0, verdict));
            System.out.println("verification: " + verification);
        }
        return 0;
    }

    /**
     * {@return the operations of {@code ops} as JSON-ready maps, slowest first}: per token of the {@code tokens} timed,
     * calls, milliseconds, weight bytes and FLOPs, the share of {@code timedNanos} (the timed runs' wall-clock time),
     * and for matrix products the rates they read weights at and computed at.
     */
    private static List<Map<String, Object>> operations(OpProfile ops, long tokens, long timedNanos) {
        List<Map<String, Object>> list = new ArrayList<>();
        ops.entries().stream().sorted((a, b) -> Long.compare(b.nanos(), a.nanos())).forEach(op -> {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("operation", op.operation());
            m.put("calls_per_token", (double) op.calls() / tokens);
            m.put("ms_per_token", op.nanos() / 1e6 / tokens);
            m.put("share", (double) op.nanos() / timedNanos);
            if (op.weightBytes() > 0) {
                m.put("weight_bytes_per_token", (double) op.weightBytes() / tokens);
                m.put("weight_read_gb_s", (double) op.weightBytes() / op.nanos());
            }
            if (op.flops() > 0) {
                m.put("flops_per_token", (double) op.flops() / tokens);
                m.put("gflops", (double) op.flops() / op.nanos());
            }
            if (op.heapBytes() >= 0) {
                m.put("session_thread_heap_bytes_per_token", (double) op.heapBytes() / tokens);
            }
            list.add(m);
        });
        return list;
    }

    /** Adds "{@code what} must be at least {@code min}, got {@code value}" to {@code bad} where it is less. */
    private static void atLeast(List<String> bad, String what, int value, int min) {
        if (value < min) {
            bad.add(what + " must be at least " + min + ", got " + value);
        }
    }

    /**
     * Decode at depth, in one session so the two are compared within one run: the KV cache is filled with synthetic
     * K/V to {@link #context} positions, then {@link #depthPasses} passes (after a warm-up) of one token, then, with
     * {@code --burst K}, as many passes of K tokens; after every pass the cache is truncated back to the depth so
     * all passes see the same one. Each pass is timed on its own (median reported). A store that reads from disk
     * reports the bytes it read per pass and, for one-token passes, the ratio to its own direct-I/O sequential read of
     * as many bytes of the same file measured right before each pass.
     */
    private List<Map<String, Object>> depthTests(Engine e, LlamaModel model, SessionOptions base, String name) {
        LlamaConfig c = model.config();
        int passes = depthPasses;
        SessionOptions o = base.withContextLength(context + burst);
        List<Map<String, Object>> rows = new ArrayList<>();
        try (Session s = e.newSession(model, o)) {
            Progress fill = new Progress("filling " + context + " positions of synthetic KV");
            long f0 = System.nanoTime();
            s.fillSyntheticKv(context, 7, fill);
            fill.done();
            double fillSeconds = (System.nanoTime() - f0) / 1e9;
            for (int k : burst > 1 ? new int[] {1, burst} : new int[] {1}) {
                int[] ids = new SplittableRandom(5).ints(k, 3, c.vocab()).toArray();
                s.prefill(ids, k > 1); // warm-up pass
                s.truncate(context);
                double[] tps = new double[passes];
                // With one token per pass the disk sets the pace: right before each pass the bench reads as many
                // bytes of the same file sequentially with direct I/O, so each pass is compared with the disk as it
                // is at that moment (disks, virtual ones above all, drift over minutes).
                double[] baseline = new double[passes];
                double[] ratio = new double[passes];
                long read0 = s.cache().bytesRead();
                long perPass = 0;
                for (int i = 0; i < passes; i++) {
                    System.err.printf("\rbench depth %d burst %d: pass %d/%d ", context, k, i + 1, passes);
                    long before = s.cache().bytesRead();
                    if (k == 1 && perPass > 0) {
                        baseline[i] = s.cache().sequentialReadSpeed(perPass).orElse(0);
                    }
                    long t0 = System.nanoTime();
                    s.prefill(ids, k > 1);
                    long dt = System.nanoTime() - t0;
                    tps[i] = k * 1e9 / dt;
                    perPass = s.cache().bytesRead() - before;
                    if (baseline[i] > 0) {
                        ratio[i] = perPass * 1e9 / dt / baseline[i];
                    }
                    s.truncate(context);
                }
                long read = s.cache().bytesRead() - read0;
                System.err.print("\r" + " ".repeat(50) + "\r");
                double median = median(tps);
                double mean = Arrays.stream(tps).average().orElse(0);
                long kvBytes = read > 0 ? read / passes : (long) c.layers() * 2 * context * o.kvType().rowBytes(c.kvDim());
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("model", name);
                row.put("test", "depth" + context + "_burst" + k);
                row.put("kv_store", e.kvStore().id());
                row.put("kv_type", o.kvType().name().toLowerCase(Locale.ROOT).replace('_', '-'));
                row.put("kv_page_positions", s.cache().config().pageSize());
                row.put("synthetic_kv", true);
                row.put("fill_seconds", fillSeconds);
                row.put("passes", passes);
                row.put("burst", k);
                row.put("verified_tokens_per_s", median);
                row.put("passes_per_s", median / k);
                row.put("kv_bytes_per_pass", kvBytes);
                row.put("kv_bytes_read_from_storage", read > 0);
                row.put("kv_read_gb_s", kvBytes * (median / k) / 1e9);
                row.put("gflops", c.flops(context, k, 1) * (median / k) / 1e9);
                row.put("tokens_per_s_mean", mean);
                row.put("tokens_per_s_sd", Math.sqrt(Arrays.stream(tps).map(x -> (x - mean) * (x - mean)).sum()
                        / Math.max(1, passes - 1)));
                row.put("tokens_per_s_median", median);
                row.put("samples", tps);
                if (k > 1) {
                    row.put("speedup_vs_burst1", median / (double) rows.get(0).get("verified_tokens_per_s"));
                }
                double[] measured = Arrays.stream(baseline).filter(b -> b > 0).toArray();
                if (measured.length > 0) {
                    // The first pass has no baseline (its size is not known before it); the others each have one.
                    row.put("direct_io_read_gb_s", median(measured) / 1e9);
                    row.put("percent_of_direct_io", 100 * median(Arrays.stream(ratio).filter(x -> x > 0).toArray()));
                    row.put("direct_io_read_gb_s_samples", Arrays.stream(measured).map(b -> b / 1e9).toArray());
                }
                rows.add(row);
            }
        }
        return rows;
    }

    /**
     * Burst verification on real tokens: greedy generation from the prompt with and without bursts of
     * {@link #burst}, in one run: ids must match, and the row reports acceptance and accepted tokens per second.
     */
    private Map<String, Object> burstGeneration(Engine e, LlamaModel model, SessionOptions base, String name) {
        int n = Math.max(64, gen);
        String prompt = "Once upon a time";
        SessionOptions o = base.withContextLength(Math.min(model.config().contextLength(), 1024));
        Generation plain;
        dev.prefill4j.engine.BurstGeneration b;
        System.err.print("bench burst generation (greedy, then bursts of " + burst + ")...");
        try (Session s = e.newSession(model, o)) {
            plain = s.generate(prompt, n, new Sampler(SamplerConfig.greedy()), true, false, null);
        }
        try (Session s = e.newSession(model, o)) {
            b = s.generateWithBursts(prompt, n, burst, PromptLookupDrafts.defaults(), true, null);
        }
        System.err.print("\r" + " ".repeat(70) + "\r");
        if (!Arrays.equals(plain.generatedIds(), b.generation().generatedIds())) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "burst verification produced other tokens than "
                    + "greedy decoding; please report this");
        }
        Map<String, Object> row = new LinkedHashMap<>();
        double tps = b.generation().decodeTokensPerSecond();
        row.put("model", name);
        row.put("test", "gen" + n + "_burst" + burst);
        row.put("burst", burst);
        row.put("same_ids_as_greedy", true);
        row.put("passes", b.passes());
        row.put("acceptance_rate", b.acceptanceRate());
        row.put("tokens_per_pass", b.tokensPerPass());
        row.put("accepted_tokens_per_s", tps);
        row.put("greedy_tokens_per_s", plain.decodeTokensPerSecond());
        row.put("speedup_vs_greedy", tps / plain.decodeTokensPerSecond());
        row.put("tokens_per_s_mean", tps);
        row.put("tokens_per_s_sd", 0.0);
        row.put("tokens_per_s_median", tps);
        row.put("gflops", model.config().flops(plain.promptIds().length, n, n) * tps / n / 1e9);
        return row;
    }

    /**
     * {@return {@code e}, its FMA peak measured once, before a model is loaded} The measurement's loop is then compiled
     * while little is resident: measured first right before the first timed run, its two C2 compilations (arenas of
     * 6.6 and 8.0 MB, {@code -XX:CompileCommand=MemStat}) came on top of the resident model, at the moment the 1B
     * Q4_0 file's peak resident size was set (2026-12-06, Intel Xeon VM). Closes {@code e} if the measurement fails.
     */
    private static Engine calibrated(Engine e) {
        try {
            e.device().measurePeakGflops();
            return e;
        } catch (RuntimeException | Error x) {
            e.close();
            throw x;
        }
    }

    /**
     * Tokens of a test's warm-up: a pp test's own length; a tg test's too, but at least {@link #TG_WARM_UP_TOKENS}
     * where the session's context {@code ctx} holds that many.
     */
    static int warmUpTokens(boolean pp, int n, int ctx) {
        return pp ? n : Math.max(n, Math.min(TG_WARM_UP_TOKENS, ctx - 1));
    }

    /** One pp or tg test's timed runs, as measured; {@link #row} makes its result row from them. */
    private record Timed(String test, boolean pp, int n, int ctx, int warmUpTokens, int warmUpPasses, double[] tps,
                         double[] peaks, long[] heap, OpProfile ops, long timedNanos) {
    }

    /** {@return the result row of a pp or tg test, its verification still to be set} */
    private static Map<String, Object> row(Timed t, Engine e, LlamaModel model, SessionOptions base, String name) {
        LlamaConfig c = model.config();
        boolean pp = t.pp();
        int n = t.n();
        double[] tps = t.tps();
        int reps = tps.length;
        double[] peaks = t.peaks();
        OpProfile ops = t.ops();
        double mean = Arrays.stream(tps).average().orElse(0);
        double sd = Math.sqrt(Arrays.stream(tps).map(x -> (x - mean) * (x - mean)).sum() / Math.max(1, reps - 1));
        double median = median(tps);
        // FLOPs of the whole test divided by its median time.
        double flops = pp ? c.flops(0, n, 1) : c.flops(0, n, n);
        double gflops = flops / (n / median) / 1e9;
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("model", name);
        row.put("synthetic", model.synthetic());
        row.put("format", model.formatSummary());
        row.put("size_bytes", model.weightBytes());
        row.put("params", c.parameters());
        row.put("backend", e.device().description());
        row.put("kv_type", base.kvType().name().toLowerCase(Locale.ROOT).replace('_', '-'));
        row.put("activations", base.activations().name().toLowerCase(Locale.ROOT).replace('_', '-'));
        row.put("chunk", e.chunkSize(model, base.withContextLength(t.ctx())));
        row.put("context", t.ctx());
        row.put("beyond_trained_context", n > c.contextLength());
        row.put("warm_up_tokens", t.warmUpTokens());
        row.put("warm_up_passes", t.warmUpPasses());
        row.put("test", t.test());
        row.put("tokens_per_s_mean", mean);
        row.put("tokens_per_s_sd", sd);
        row.put("tokens_per_s_median", median);
        row.put("samples", tps);
        row.put("gflops", gflops);
        double[] ofPeak = new double[reps];
        for (int r = 0; r < reps; r++) {
            ofPeak[r] = 100 * flops * tps[r] / n / 1e9 / peaks[r];
        }
        row.put("fma_peak_gflops_at_runs", peaks);
        row.put("percent_of_fma_peak_at_runs", median(ofPeak));
        if (!pp) {
            long kvBytes = (long) c.layers() * 2 * n * base.kvType().rowBytes(c.kvDim());
            double perToken = model.bytesPerToken() + kvBytes / 2.0;
            row.put("bytes_per_token", perToken);
            row.put("read_gb_s", perToken * median / 1e9);
        }
        putHeapAllocation(row, t.heap(), n, pp ? (long) Float.BYTES * c.vocab() : (long) Float.BYTES * c.vocab() * n,
                c.layers());
        if (ops != null) {
            row.put("operations", operations(ops, (long) n * reps, t.timedNanos()));
            row.put("profiled_share", (double) ops.totalNanos() / t.timedNanos());
        }
        row.put("verification", null); // set once the timed runs are over
        return row;
    }

    /**
     * Passes of a test's warm-up: a tg test's one; a pp test's as many prompts of its length as make at least
     * {@link #PP_WARM_UP_TOKENS} tokens, each from an empty session.
     */
    static int warmUpPasses(boolean pp, int n) {
        return pp ? Math.max(1, Math.ceilDiv(PP_WARM_UP_TOKENS, n)) : 1;
    }

    private static double median(double[] v) {
        double[] sorted = v.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    /** {@return the size of the model's file, or its weights' bytes when it has no file (synthetic)} */
    private static long modelFileBytes(LlamaModel model) {
        if (!model.synthetic()) {
            try {
                return Files.size(Path.of(model.source()));
            } catch (IOException | java.nio.file.InvalidPathException ex) {
                // a llama2c checkpoint or a directory: fall back to the weights
            }
        }
        return model.weightBytes();
    }

    /**
     * Puts a test's heap allocation into its row: {@code heap_bytes_per_token} (the median run's allocation over its
     * tokens), {@code returned_bytes_per_token} (the logits the session hands back, which the caller owns) and
     * {@code heap_allocation_warning}, a sentence when the runs allocated more than
     * {@link #ALLOCATION_WARNING_BYTES_PER_LAYER} a token and layer beyond those logits, or {@code null}.
     *
     * @param heap     each timed run's allocated bytes, -1 where not counted
     * @param tokens   tokens a run
     * @param returned bytes of logits a run returns
     * @param layers   the model's layers
     */
    static void putHeapAllocation(Map<String, Object> row, long[] heap, int tokens, long returned, int layers) {
        row.put("heap_bytes_allocated_at_runs", heap);
        if (Arrays.stream(heap).anyMatch(b -> b < 0)) {
            row.put("heap_bytes_per_token", null);
            row.put("heap_allocation_warning", null);
            return;
        }
        double perToken = median(Arrays.stream(heap).asDoubleStream().toArray()) / tokens;
        double beyond = perToken - (double) returned / tokens;
        row.put("heap_bytes_per_token", perToken);
        row.put("returned_bytes_per_token", (double) returned / tokens);
        row.put("heap_allocation_warning", beyond <= (double) ALLOCATION_WARNING_BYTES_PER_LAYER * layers ? null
                : String.format(Locale.ROOT, "the timed runs allocated %s a token beyond the logits: a kernel "
                        + "is running in code that boxes its vectors (the JIT left Vector API calls out of line, or had "
                        + "not compiled them yet), so this speed is not the engine's; run bench again (a new process "
                        + "compiles anew), and for a short test give the JIT more warm-up with a longer one",
                bytes(beyond)));
    }

    /** {@return {@code n} bytes in KiB, MiB or GiB, one decimal} */
    static String bytes(double n) {
        return n < 1 << 20 ? String.format(Locale.ROOT, "%.1f KiB", n / 1024)
                : n < 1 << 30 ? String.format(Locale.ROOT, "%.1f MiB", n / (1 << 20))
                : String.format(Locale.ROOT, "%.1f GiB", n / (1 << 30));
    }

    /** {@return a counter of the calling thread's allocated heap bytes, or {@code null} where the JVM has none} */
    static java.util.function.LongSupplier currentThreadAllocatedBytes() {
        com.sun.management.ThreadMXBean threads = allocationCounters();
        return threads == null ? null : threads::getCurrentThreadAllocatedBytes;
    }

    /**
     * {@return the heap bytes every thread of this JVM has allocated so far, or -1 where it does not count them}
     * Includes threads that have ended, so the engine's worker threads are counted whatever their lifetime.
     */
    static long heapAllocatedBytes() {
        com.sun.management.ThreadMXBean threads = allocationCounters();
        return threads == null ? -1 : threads.getTotalThreadAllocatedBytes();
    }

    /** {@return the JVM's thread bean where it counts the heap bytes threads allocate, or {@code null}} */
    private static com.sun.management.ThreadMXBean allocationCounters() {
        return ManagementFactory.getThreadMXBean() instanceof com.sun.management.ThreadMXBean threads
                && threads.isThreadAllocatedMemorySupported() && threads.isThreadAllocatedMemoryEnabled()
                ? threads : null;
    }

    /** {@return the process's peak resident set (VmHWM) in bytes, or -1 where /proc is not available} */
    static long peakResidentBytes() {
        return residentBytes("VmHWM:");
    }

    /** {@return the size in bytes on the line of /proc/self/status that starts with {@code key}, or -1} */
    private static long residentBytes(String key) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(key)) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    private static String shorten(String s, int n) {
        return s.length() <= n ? s : "…" + s.substring(s.length() - n + 1);
    }
}
