package dev.prefill4j.cli;

import dev.prefill4j.engine.BurstGeneration;
import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Generation;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.draft.PromptLookupDrafts;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.io.InputFiles;
import dev.prefill4j.engine.io.OutputFiles;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.tokenizer.ChatFormat;
import dev.prefill4j.engine.tokenizer.Tokenizer;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code prefill4j run}: prefill a prompt, then generate. */
@Command(name = "run", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Prefill a prompt and generate text. Streams the text to standard output, then prints "
                + "prefill and decode speed to standard error.",
                "Without -m it runs a synthetic model the engine generates itself (random weights: the text is "
                + "meaningless, and the output says so)."})
final class RunCommand implements Callable<Integer> {
    @Mixin
    EngineOptions engine;

    @Option(names = {"-p", "--prompt"}, paramLabel = "TEXT", defaultValue = "Once upon a time",
            description = "Prompt text (default: \"${DEFAULT-VALUE}\"). Special pieces in it, such as "
                    + "<|start_header_id|> or <s>, are read as their tokens, as llama-cli reads a prompt.")
    String prompt;

    @Option(names = {"-f", "--file"}, paramLabel = "FILE",
            description = "Read the prompt from FILE instead (UTF-8 text; one trailing newline is dropped, as "
                    + "llama.cpp's -f drops it); - reads standard input.")
    Path promptFile;

    @Spec
    CommandSpec spec;

    @Option(names = {"-n", "--n-predict"}, paramLabel = "N", defaultValue = "32",
            description = "Tokens to generate (default: ${DEFAULT-VALUE}).")
    int nPredict;

    @Option(names = "--temp", paramLabel = "T", defaultValue = "0.8",
            description = "Temperature; 0 is greedy, lowest id wins ties (default: ${DEFAULT-VALUE}).")
    float temperature;

    @Option(names = "--top-k", paramLabel = "K", defaultValue = "40", description = "Top-k, 0 = off (default: ${DEFAULT-VALUE}).")
    int topK;

    @Option(names = "--top-p", paramLabel = "P", defaultValue = "0.95", description = "Top-p, 1 = off (default: ${DEFAULT-VALUE}).")
    float topP;

    @Option(names = {"-s", "--seed"}, paramLabel = "S", description = "Sampling seed (default: random, reported in --json).")
    Long seed;

    @Option(names = {"-c", "--ctx-size"}, paramLabel = "N", defaultValue = "0",
            description = "Context length; 0 = the model's (default: ${DEFAULT-VALUE}).")
    int ctx;

    @Option(names = "--burst", paramLabel = "K", defaultValue = "1",
            description = "Verify the next token plus up to K-1 drafted tokens (prompt lookup) per forward pass; "
                    + "output is identical to greedy decoding. Needs --temp 0 (default: ${DEFAULT-VALUE}).")
    int burst;

    @Option(names = "--stop-at-eos",
            description = "Stop when the model produces its end-of-sequence token (or an end-of-turn token: "
                    + "Llama 3's <|eot_id|>). By default all -n tokens are generated, as the reference outputs this "
                    + "engine is checked against were.")
    boolean stopAtEos;

    @Option(names = "--chat",
            description = "Write the prompt as one user message in the model's chat format, recognised from its "
                    + "chat template (tokenizer.chat_template; Llama 3's, Llama 2's and Mistral's [INST] and ChatML are "
                    + "written), followed by what opens the assistant's answer; the answer ends at the end of the "
                    + "assistant's turn (as with --stop-at-eos). With --kv-resume the prompt is the conversation's next "
                    + "message.")
    boolean chat;

    @Option(names = "--system", paramLabel = "TEXT",
            description = "With --chat: a system message before the user's.")
    String system;

    @Option(names = "--json", description = "Print one JSON document instead of streaming text.")
    boolean json;

    @Option(names = "--logits-out", paramLabel = "FILE",
            description = "Write the logits of every prompt position as float32 little-endian [n_prompt][n_vocab].")
    Path logitsOut;

    @Override
    public Integer call() throws IOException {
        engine.checkCombinations();
        if (nPredict < 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "-n must be at least 0, got " + nPredict);
        }
        if (burst < 1) { // 0 or less had run as 1
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--burst must be at least 1, got " + burst);
        }
        boolean promptGiven = spec.commandLine().getParseResult().hasMatchedOption("-p");
        if (promptGiven && promptFile != null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "give the prompt once: -p TEXT or -f FILE");
        }
        // A resumed run continues the kept text: with -p/-f it first adds that text (a chat's next message).
        boolean addsText = engine.resuming() && (promptGiven || promptFile != null);
        if (system != null && !chat) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--system is a chat's system message: use it "
                    + "with --chat");
        }
        if (chat && engine.resuming() && !addsText) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--chat with --kv-resume continues the "
                    + "conversation with a next message: give it with -p or -f");
        }
        if (system != null && engine.resuming()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--system opens a conversation; a resumed one "
                    + "(--kv-resume) has its own: drop --system");
        }
        if (addsText && burst > 1) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "--burst continues a kept text as it is; to "
                    + "add -p/-f text to it, run without --burst");
        }
        boolean fromStdin = promptFile != null && promptFile.toString().equals("-");
        if (logitsOut != null) { // before the model is mapped (the logits would truncate the file it is read from)
            OutputFiles.requireWritableFile(logitsOut, "--logits-out"); // and before the run, not after it
            OutputFiles.requireNotAnInput(logitsOut, "--logits-out", engine.model, engine.tokenizer,
                    fromStdin ? null : promptFile);
        }
        if (promptFile != null) {
            prompt = readPrompt(fromStdin ? null : promptFile);
        }
        long samplingSeed = seed != null ? seed : System.nanoTime();
        Sampler sampler = new Sampler(new SamplerConfig(temperature, topK, topP, samplingSeed));
        SessionOptions options = engine.sessionOptions(ctx);
        // Ctrl-C or SIGTERM while tokens flow: the next token ends the generation and the session closes as after a
        // finished run, so that a kept cache (--kv-keep/--kv-resume) is saved where the text stopped rather than left
        // unclosed and refused. The JVM's shutdown waits for that here; during a prompt's prefill it does not wait.
        AtomicBoolean tokensFlow = new AtomicBoolean();
        AtomicBoolean stopRequested = new AtomicBoolean();
        CountDownLatch sessionClosed = new CountDownLatch(1);
        Thread onSignal = new Thread(() -> {
            stopRequested.set(true);
            if (tokensFlow.get()) {
                try {
                    sessionClosed.await(STOP_WAIT_SECONDS, TimeUnit.SECONDS);
                } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                }
            }
        }, "prefill4j-run-stop");
        Runtime.getRuntime().addShutdownHook(onSignal);
        try (Engine e = engine.openEngine(); LlamaModel model = engine.loadModel(e);
             Session session = e.newSession(model, options)) {
            if (model.synthetic() && !json) {
                System.err.println("[synthetic model " + model.source() + ": random weights, the text is meaningless]");
            }
            ChatFormat chatFormat = null;
            if (chat) {
                chatFormat = chatFormat(model);
                // A next message after an answer cut short (-n) closes the assistant's turn first.
                prompt = !engine.resuming() ? chatFormat.prompt(system, prompt)
                        : (model.tokenizer().endsGeneration(session.pendingToken()) ? "" : chatFormat.endOfTurn())
                                + chatFormat.nextTurn(prompt);
            }
            if (!engine.resuming() && startsWithTwoBos(model.tokenizer(), prompt)) {
                // As llama.cpp warns: a chat template copied with its <|begin_of_text|> before the model's own BOS.
                System.err.println("warning: the prompt starts with the BOS token and the model adds its own, so it "
                        + "starts with two; leave the BOS piece out of the prompt");
            }
            // Straight to the file descriptor: System.out, a PrintStream, swallows write errors, so a run whose reader
            // had gone (| head) generated every token into a closed pipe, and one on a full disk exited 0.
            System.out.flush();
            StdoutBytes stdout = new StdoutBytes(new FileOutputStream(FileDescriptor.out));
            StdoutBytes stream = json ? null : stdout;
            java.util.function.IntConsumer sink = id -> {
                tokensFlow.set(true);
                if (stream != null) {
                    stream.write(model.tokenizer().bytes(id));
                }
                if (stopRequested.get()) { // after the write: the pending token, which a resumed run feeds, was shown
                    throw new Stopped(130);
                }
            };
            boolean ignoreEos = !(stopAtEos || chat); // a chat's answer ends with the assistant's turn
            BurstGeneration bursts = null;
            Generation g;
            engine.checkKeeping(e, session);
            if (engine.resuming() && logitsOut != null) {
                throw new PrefillException(PrefillException.Code.ARGUMENT, "--logits-out writes prompt logits; a "
                        + "resumed run has no prompt");
            }
            if (burst > 1) {
                if (temperature != 0 || logitsOut != null) {
                    throw new PrefillException(PrefillException.Code.ARGUMENT,
                            "--burst verifies greedy choices: use it with --temp 0 and without --logits-out");
                }
                bursts = engine.resuming()
                        ? session.resumeWithBursts(nPredict, burst, PromptLookupDrafts.defaults(), ignoreEos, sink)
                        : session.generateWithBursts(prompt, nPredict, burst, PromptLookupDrafts.defaults(), ignoreEos,
                                sink);
                g = bursts.generation();
            } else if (addsText) {
                g = session.continueWith(prompt, nPredict, seed != null ? sampler : null, ignoreEos, sink);
            } else if (engine.resuming()) {
                // The kept session's sampler continues its random sequence unless a seed is given.
                g = session.resume(nPredict, seed != null ? sampler : null, ignoreEos, sink);
            } else {
                g = session.generate(prompt, nPredict, sampler, ignoreEos, logitsOut != null, sink);
            }
            if (logitsOut != null) {
                writeLogits(logitsOut, g.promptLogits());
            }
            if (json) {
                Map<String, Object> doc = new LinkedHashMap<>();
                doc.put("model", model.source());
                doc.put("synthetic", model.synthetic());
                doc.put("format", model.formatSummary());
                doc.put("backend", e.device().description());
                doc.put("kv_type", options.kvType().name().toLowerCase(Locale.ROOT).replace('_', '-'));
                doc.put("activations", options.activations().name().toLowerCase(Locale.ROOT).replace('_', '-'));
                doc.put("chunk", e.chunkSize(model, options));
                doc.put("seed", samplingSeed);
                doc.put("temperature", temperature);
                doc.put("prompt", engine.resuming() && !addsText ? null : prompt);
                doc.put("chat_format", chatFormat == null ? null : chatFormat.id());
                doc.put("resumed", engine.resuming());
                doc.put("position", session.position());
                doc.put("prompt_ids", g.promptIds());
                doc.put("generated_ids", g.generatedIds());
                doc.put("text", g.text());
                if (bursts != null) {
                    Map<String, Object> b = new LinkedHashMap<>();
                    b.put("burst", burst);
                    b.put("passes", bursts.passes());
                    b.put("drafts_proposed", bursts.draftsProposed());
                    b.put("drafts_accepted", bursts.draftsAccepted());
                    b.put("acceptance_rate", bursts.acceptanceRate());
                    b.put("tokens_per_pass", bursts.tokensPerPass());
                    doc.put("bursts", b);
                }
                Map<String, Object> t = new LinkedHashMap<>();
                t.put("prefill_ms", g.prefillNanos() / 1e6);
                t.put("prefill_tokens_per_s", g.prefillTokensPerSecond());
                t.put("decode_steps", g.decodedTokens());
                t.put("decode_ms", g.decodeNanos() / 1e6);
                t.put("decode_tokens_per_s", g.decodeTokensPerSecond());
                doc.put("timings", t);
                stdout.write(Json.write(doc).getBytes(StandardCharsets.US_ASCII)); // ASCII by construction (README)
            } else {
                stdout.write(System.lineSeparator().getBytes(StandardCharsets.US_ASCII));
                // The rate is decode steps a second: the first token after a prompt comes from the prefill's logits
                // and takes no step, so "2 tokens in 27 ms (37 tok/s)" had read as half the speed it was.
                int steps = g.decodedTokens();
                String decode = g.generatedIds().length == 0 ? "none"
                        : steps == 0 ? "no step (the token came from the prefill's logits)"
                        : String.format(Locale.ROOT, "%d step%s in %.1f ms (%.1f tok/s)", steps, steps == 1 ? "" : "s",
                                g.decodeNanos() / 1e6, g.decodeTokensPerSecond());
                System.err.printf(Locale.ROOT, "prefill: %d tokens in %.1f ms (%.1f tok/s) | %d generated, decode: %s | "
                        + "%s%n", g.promptIds().length, g.prefillNanos() / 1e6, g.prefillTokensPerSecond(),
                        g.generatedIds().length, decode, e.device().description());
                if (bursts != null) {
                    System.err.printf(Locale.ROOT, "bursts of %d: %d passes, %d/%d drafts accepted (%.0f%%), %.2f tokens per pass%n",
                            burst, bursts.passes(), bursts.draftsAccepted(), bursts.draftsProposed(),
                            100 * bursts.acceptanceRate(), bursts.tokensPerPass());
                }
            }
        } catch (Stopped stopped) {
            // After the session closed (a kept cache saved where the text stopped): no message, as `yes | head`
            // prints none (a signal's is Main's), and 128 + the signal for a script that checks (set -o pipefail).
            return stopped.exitCode;
        } finally {
            sessionClosed.countDown();
            try {
                Runtime.getRuntime().removeShutdownHook(onSignal);
            } catch (IllegalStateException shuttingDown) {
                // the hook is running: it returns now that the session is closed
            }
        }
        return 0;
    }

    /**
     * {@return the prompt in {@code file} (standard input where {@code null}) as strict UTF-8, less one trailing line
     * feed} llama.cpp's {@code -f} drops that one newline too (common/arg.cpp), so a file saved by an editor gives the
     * same tokens in both.
     */
    static String readPrompt(Path file) throws IOException {
        String where = file == null ? "standard input" : file.toString();
        byte[] bytes;
        if (file == null) {
            bytes = System.in.readAllBytes();
        } else {
            // Read, not mapped: a pipe serves as well as a file (-f <(command), -f /dev/stdin).
            if (Files.isDirectory(file)) {
                throw new PrefillException(PrefillException.Code.IO, file + " is a directory, not the prompt file: "
                        + "give the file's path");
            }
            try {
                bytes = Files.readAllBytes(file);
            } catch (IOException e) {
                throw InputFiles.cannotRead(file, e);
            }
        }
        String text;
        try {
            text = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(bytes)).toString();
        } catch (CharacterCodingException e) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, where + ": the prompt is not UTF-8 text; "
                    + "convert it (e.g. iconv -t UTF-8)");
        }
        return text.endsWith("\n") ? text.substring(0, text.length() - 1) : text;
    }

    static void writeLogits(Path file, float[] logits) {
        ByteBuffer buf = ByteBuffer.allocate(logits.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        buf.asFloatBuffer().put(logits);
        OutputFiles.replaceWhole(file, "the logits", tmp -> {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                while (buf.hasRemaining()) {
                    ch.write(buf);
                }
            }
        });
    }

    /** {@return the chat format of the model's template} @throws PrefillException if it has none this engine writes */
    private static ChatFormat chatFormat(LlamaModel model) {
        GgufContent content = model.content();
        if (!content.metadata().containsKey("tokenizer.chat_template")) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, model.source() + " has no chat template "
                    + "(tokenizer.chat_template): drop --chat and write the prompt out with the model's special "
                    + "pieces");
        }
        return ChatFormat.detect(content.requireString("tokenizer.chat_template")).orElseThrow(() ->
                new PrefillException(PrefillException.Code.ARGUMENT, "the chat template of " + model.source()
                        + " is not one this engine writes (Llama 3's, Llama 2's and Mistral's [INST], ChatML): drop "
                        + "--chat and write the prompt out with the model's special pieces"));
    }

    /** {@return whether {@code prompt}, encoded as a run encodes it, starts with BOS twice} */
    private static boolean startsWithTwoBos(Tokenizer tokenizer, String prompt) {
        if (tokenizer.bos() < 0 || !prompt.contains(tokenizer.piece(tokenizer.bos()))) {
            return false; // no second encoding of a prompt without the piece
        }
        int[] ids = tokenizer.encode(prompt);
        return ids.length >= 2 && ids[0] == tokenizer.bos() && ids[1] == tokenizer.bos();
    }

    /** How long a signal waits for the generation to stop and the session to close (a kept cache's last pages). */
    private static final int STOP_WAIT_SECONDS = 30;

    /**
     * Generation stops before its end: standard output's reader closed it (exit 141, as SIGPIPE ends a native tool),
     * or a signal asked for it (the JVM's exit status is then the signal's).
     */
    private static final class Stopped extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int exitCode;

        Stopped(int exitCode) {
            super("generation stopped", null, false, false);
            this.exitCode = exitCode;
        }
    }

    /**
     * Standard output as bytes, each write passed on at once: the tokens' bytes as they come (a character split over
     * byte tokens is assembled by the reader of the stream) and the JSON document. Unlike System.out it reports a
     * failed write: a closed pipe as {@link Stopped}, anything else (a full disk) as an error.
     */
    private static final class StdoutBytes {
        private final OutputStream out;

        StdoutBytes(OutputStream out) {
            this.out = out;
        }

        void write(byte[] b) {
            try {
                out.write(b);
                out.flush();
            } catch (IOException e) {
                if (Main.StdoutWatch.isBrokenPipe(e)) {
                    throw new Stopped(141);
                }
                throw new PrefillException(PrefillException.Code.IO, "cannot write to standard output: "
                        + OutputFiles.reason(e), e);
            }
        }
    }
}
