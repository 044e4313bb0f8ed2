package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.engine.Engine;
import dev.prefill4j.engine.Sampler;
import dev.prefill4j.engine.SamplerConfig;
import dev.prefill4j.engine.Session;
import dev.prefill4j.engine.SessionOptions;
import dev.prefill4j.engine.model.LlamaModel;
import dev.prefill4j.engine.model.SyntheticLlama;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.gguf.GgufTensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The {@code prefill4j} command on the module path, as a user runs it. */
class CliTest {
    @TempDir
    Path dir;

    @Test
    void runMatchesTheManifestAndWritesReferenceShapedLogits() throws Exception {
        Path logits = dir.resolve("logits.f32");
        Cli.Result r = Cli.run("run", "-m", Models.require("stories260K-F32.gguf").toString(), "-p", Models.PROMPT,
                "-n", "32", "--temp", "0", "--kv-type", "f32", "--json", "--logits-out", logits.toString());
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
        double d = Models.maxAbsDiff(Models.referenceLogits("stories260K-F32"), Models.readF32(logits));
        assertTrue(d <= 1e-4, "max |logit - llama.cpp| = " + d);
    }

    /**
     * Special pieces in a prompt are read as their tokens (ids as llama.cpp's llama-tokenize gives them:
     * TokenizerTest), and a prompt that starts with the BOS piece, which the model adds too, is warned about, as llama.cpp warns.
     */
    @Test
    void specialPiecesInThePromptAreTokensAndADoubleBosIsWarnedAbout() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Cli.Result r = Cli.run("run", "-m", model, "-p", "<s>Once upon</s> a time<unk>", "-n", "1", "--temp", "0",
                "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(new int[] {1, 1, 403, 407, 2, 410, 261, 378, 0}, Cli.jsonIds(r.out(), "prompt_ids"));
        assertTrue(r.err().contains("warning: the prompt starts with the BOS token and the model adds its own"),
                r.toString());
        Cli.Result once = Cli.run("run", "-m", model, "-p", "Once upon</s> a time", "-n", "1", "--temp", "0");
        assertEquals(0, once.exit(), once.toString());
        assertFalse(once.err().contains("warning"), once.toString());
    }

    /**
     * --chunk 2 runs the prompt two tokens at a time (the JSON reports the session's chunk): the same ids, logits within
     * the same 1e-4 of llama.cpp.
     */
    @Test
    void aSmallChunkMatchesTheManifest() throws Exception {
        Path logits = dir.resolve("chunked.f32");
        Cli.Result r = Cli.run("run", "-m", Models.require("stories260K-F32.gguf").toString(), "-p", Models.PROMPT,
                "-n", "32", "--temp", "0", "--kv-type", "f32", "--chunk", "2", "--json", "--logits-out",
                logits.toString());
        assertEquals(0, r.exit(), r.toString());
        assertTrue(java.util.regex.Pattern.compile("\"chunk\": 2\\b").matcher(r.out()).find(),
                "the session ran with the option's chunk: " + r.out());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
        double d = Models.maxAbsDiff(Models.referenceLogits("stories260K-F32"), Models.readF32(logits));
        assertTrue(d <= 1e-4, "max |logit - llama.cpp| = " + d);
        Cli.Result bad = Cli.run("run", "-m", Models.require("stories260K-F32.gguf").toString(), "--chunk", "0");
        assertEquals(2, bad.exit(), bad.toString()); // a usage error
        assertTrue(bad.err().strip().equals("prefill4j: error: --chunk must be 1 or more tokens [P4J-ARG]"),
                bad.toString());
    }

    /**
     * {@code -f FILE} gives the same run as {@code -p} with the file's text less one trailing newline (as llama.cpp's
     * {@code -f}); bad prompt files and prompts given twice, or to a resumed run (where -p had been ignored), are
     * refused.
     */
    @Test
    void aPromptFromAFileRunsAsTheSameTextGivenWithP() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Path file = dir.resolve("prompt.txt");
        Files.writeString(file, Models.PROMPT + "\n", java.nio.charset.StandardCharsets.UTF_8);
        Cli.Result r = Cli.run("run", "-m", model, "-f", file.toString(), "-n", "32", "--temp", "0", "--kv-type", "f32",
                "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
        assertTrue(r.out().contains("\"prompt\": \"" + Models.PROMPT + "\","), r.out());
        Path latin1 = dir.resolve("latin1.txt");
        Files.write(latin1, new byte[] {'c', 'a', 'f', (byte) 0xE9});
        Cli.Result notUtf8 = Cli.run("run", "-m", model, "-f", latin1.toString());
        assertEquals(2, notUtf8.exit(), notUtf8.toString());
        assertTrue(notUtf8.err().contains(latin1 + ": the prompt is not UTF-8 text"), notUtf8.toString());
        assertOneLineError(Cli.run("run", "-m", model, "-f", dir.toString()), dir + " is a directory, not the prompt");
        Cli.Result twice = Cli.run("run", "-m", model, "-f", file.toString(), "-p", "x");
        assertEquals("prefill4j: error: give the prompt once: -p TEXT or -f FILE [P4J-ARG]", twice.err().strip());
        Cli.Result resumed = Cli.run("run", "-m", model, "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-resume",
                "none", "-p", "x");
        assertEquals(2, resumed.exit(), resumed.toString());
        assertTrue(resumed.err().contains("no kept KV cache at"), resumed.toString()); // -p adds text to a kept one
        Cli.Result over = Cli.run("run", "-m", model, "-f", file.toString(), "--logits-out", file.toString());
        assertEquals(2, over.exit(), over.toString());
        assertEquals(Models.PROMPT + "\n", Files.readString(file), "the prompt file is untouched");
    }

    @Test
    void llama2cFormThroughTheCli() throws Exception {
        Cli.Result r = Cli.run("run", "-m", Models.require("stories260K.bin").toString(), "--tokenizer",
                Models.require("tok512.bin").toString(), "-n", "32", "--temp", "0", "--kv-type", "f32", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertArrayEquals(Models.STORIES_F32_GREEDY, Cli.jsonIds(r.out(), "generated_ids"));
    }

    /** Without -m, run generates the synthetic model and says so. */
    @Test
    void theDefaultRunIsSyntheticAndLabelled() throws Exception {
        Cli.Result r = Cli.run("run", "-n", "4", "--temp", "0");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.err().contains("synthetic") && r.err().contains("meaningless"), r.err());
        assertTrue(r.err().contains("tok/s"), r.err());
    }

    /**
     * synth writes a file that inspect reads and run runs. The file holds exactly the metadata and tensor bytes of
     * the same synthetic model generated in memory, and running it gives the same ids; logits agree to 1e-5 (not
     * bit for bit: the two JVMs may differ in the order of vector lane reductions and in Math.exp intrinsics).
     */
    @Test
    void synthRoundTripsThroughInspectAndRun() throws Exception {
        Path file = dir.resolve("tiny.gguf");
        Cli.Result s = Cli.run("synth", "--shape", "tiny", "--type", "f16", "--seed", "9", "-o", file.toString());
        assertEquals(0, s.exit(), s.toString());
        Cli.Result i = Cli.run("inspect", file.toString(), "--json");
        assertEquals(0, i.exit(), i.toString());
        assertTrue(i.out().contains("\"llama.embedding_length\": \"256\""), i.out());
        assertTrue(i.out().contains("\"decoder\": \"f16 (dev.prefill4j.engine)\""), i.out());
        Path logits = dir.resolve("l.f32");
        Cli.Result r = Cli.run("run", "-m", file.toString(), "-p", "hello world", "-n", "8", "--temp", "0",
                "--kv-type", "f32", "--json", "--logits-out", logits.toString());
        assertEquals(0, r.exit(), r.toString());
        try (Engine e = Engine.builder().threads(2).build();
             LlamaModel m = e.synthetic(SyntheticLlama.Shape.TINY, "f16", 9, null);
             Session session = e.newSession(m, SessionOptions.defaults().withKvType(KVElementType.F32))) {
            var g = session.generate("hello world", 8, new Sampler(SamplerConfig.greedy()), true, true, null);
            assertArrayEquals(g.promptIds(), Cli.jsonIds(r.out(), "prompt_ids"));
            assertArrayEquals(g.generatedIds(), Cli.jsonIds(r.out(), "generated_ids"));
            assertTrue(Models.maxAbsDiff(g.promptLogits(), Models.readF32(logits)) <= 1e-5);
            try (GgufFile f = GgufFile.open(file)) {
                assertEquals(m.content().metadata(), f.metadata());
                assertEquals(m.content().tensors().size(), f.tensors().size());
                for (GgufTensor t : m.content().tensors()) {
                    GgufTensor u = f.tensor(t.name()).orElseThrow();
                    assertArrayEquals(t.ne(), u.ne(), t.name());
                    assertEquals(-1L, t.data().mismatch(u.data()), t.name());
                }
            }
        }
    }

    /** The Llama-3.2-1B geometry written as F16 (2.5 GB): inspect and a short run. Slow: -Pe2e. */
    @Test
    @Tag("slow")
    void synthLlama1bRoundTrips() throws Exception {
        Path file = dir.resolve("llama-1b-f16.gguf");
        Cli.Result s = Cli.run("synth", "--shape", "llama-1b", "--type", "f16", "-o", file.toString());
        assertEquals(0, s.exit(), s.toString());
        Cli.Result i = Cli.run("inspect", file.toString());
        assertTrue(i.out().contains("llama.vocab_size = 128256"), i.out());
        Cli.Result r = Cli.run("run", "-m", file.toString(), "-n", "2", "--temp", "0", "-c", "64", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertEquals(2, Cli.jsonIds(r.out(), "generated_ids").length);
    }

    static void assertOneLineError(Cli.Result r, String... fragments) {
        assertEquals(1, r.exit(), r.toString());
        String err = r.err().strip();
        assertFalse(err.contains("\n"), "one line: " + r);
        assertFalse(err.contains("\tat "), "no stack trace: " + r);
        assertTrue(err.startsWith("prefill4j: error: "), r.toString());
        for (String f : fragments) {
            assertTrue(err.contains(f), "says '" + f + "': " + r);
        }
    }

    /**
     * SIGTERM (as Ctrl-C, through the JVM's shutdown hooks) while a model is being written leaves neither the output
     * nor the hidden partial file beside it, and says on a line of its own that the command stopped. The partial file,
     * as large as the model (2.4 GB here), had stayed.
     */
    @Test
    void aStoppedWriteLeavesNoPartialFile() throws Exception {
        Path out = dir.resolve("out");
        Files.createDirectory(out);
        Path err = dir.resolve("stderr.txt");
        Process p = new ProcessBuilder(Cli.command("synth", "--shape", "llama-1b", "--type", "f16", "-o",
                out.resolve("m.gguf").toString())).redirectErrorStream(true).redirectOutput(err.toFile()).start();
        try {
            long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(120);
            boolean writing = false;
            while (!writing && p.isAlive() && System.nanoTime() < deadline) {
                try (var s = Files.list(out)) {
                    writing = s.anyMatch(f -> f.getFileName().toString().endsWith(".partial"));
                }
                Thread.sleep(10);
            }
            assertTrue(writing && p.isAlive(), "the command never wrote a partial file: " + Files.readString(err));
            p.destroy(); // SIGTERM
            assertTrue(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS));
        } finally {
            p.destroyForcibly();
        }
        assertEquals(143, p.exitValue(), Files.readString(err));
        try (var s = Files.list(out)) {
            assertEquals(List.of(), s.toList(), "nothing left in the output directory");
        }
        assertTrue(Files.readString(err).contains("\nprefill4j: stopped before it finished\n"), Files.readString(err));
    }

    /**
     * Standard output's failures end the run: a reader that closes the pipe stops generation (exit 141, as SIGPIPE
     * ends a native tool, with no message), and a full disk is an error. System.out had swallowed both: every token
     * was generated into the closed pipe, and a run to /dev/full exited 0.
     */
    @Test
    void aClosedOrFullStandardOutputEndsTheRun() throws Exception {
        String model = Models.require("tiny-256-F32.gguf").toString();
        Path err = dir.resolve("stderr.txt");
        Process p = new ProcessBuilder(Cli.command("run", "-m", model, "-n", "2000", "--temp", "0"))
                .redirectError(err.toFile()).start();
        try (var out = p.getInputStream()) {
            assertEquals(5, out.readNBytes(5).length);
        } // closed: the pipe's reader is gone
        assertTrue(p.waitFor(120, java.util.concurrent.TimeUnit.SECONDS));
        String stderr = Files.readString(err).replace("WARNING: Using incubator modules: jdk.incubator.vector\n", "");
        assertEquals(141, p.exitValue(), stderr);
        assertEquals("", stderr, "no message and no stats line");
        Path full = Path.of("/dev/full");
        if (Files.exists(full)) {
            for (String mode : new String[] {"--temp", "--json"}) {
                List<String> cmd = new java.util.ArrayList<>(Cli.command("run", "-m", model, "-n", "4", "--temp", "0"));
                if (mode.equals("--json")) {
                    cmd.add("--json");
                }
                Process f = new ProcessBuilder(cmd).redirectOutput(full.toFile()).redirectError(err.toFile()).start();
                assertTrue(f.waitFor(120, java.util.concurrent.TimeUnit.SECONDS));
                String e = Files.readString(err);
                assertEquals(1, f.exitValue(), e);
                assertTrue(e.contains("prefill4j: error: cannot write to standard output: No space left on device"), e);
            }
            // Every command's report: inspect's and plugins' had gone to a full disk with exit 0.
            for (List<String> args : List.of(List.of("inspect", model), List.of("plugins", "--json"))) {
                Process f = new ProcessBuilder(Cli.command(args.toArray(String[]::new))).redirectOutput(full.toFile())
                        .redirectError(err.toFile()).start();
                assertTrue(f.waitFor(120, java.util.concurrent.TimeUnit.SECONDS));
                String e = Files.readString(err);
                assertEquals(1, f.exitValue(), args + ": " + e);
                assertTrue(e.contains("prefill4j: error: cannot write to standard output: No space left on device "
                        + "[P4J-IO]"), e);
            }
        }
    }

    /**
     * inspect's text view shows a file's strings with control characters escaped and long values shortened: a hostile
     * file's terminal escape sequence (ESC [ 2 J clears the screen) had reached the terminal, and a multi-line value
     * broke the key = value list. --json keeps the whole value.
     */
    @Test
    void inspectEscapesAndShortensTheFilesText() throws Exception {
        Path hostile = storiesWith("hostile.gguf", java.util.Map.of("general.name", "\u001b[2Jcleared\nsecond line",
                "tokenizer.chat_template", "x".repeat(400)));
        Cli.Result text = Cli.run("inspect", hostile.toString());
        assertEquals(0, text.exit(), text.toString());
        assertFalse(text.out().contains("\u001b"), "no raw ESC in the output");
        assertTrue(text.out().contains("  general.name = \"\\u001b[2Jcleared\\nsecond line\"\n"), text.out());
        assertTrue(text.out().contains("  tokenizer.chat_template = \"" + "x".repeat(199) + "... (402 characters; "
                + "--json shows all)\n"), text.out());
        Cli.Result json = Cli.run("inspect", hostile.toString(), "--json");
        assertTrue(json.out().contains("x".repeat(400)), "the whole value in --json");
        assertFalse(json.out().contains("\u001b"), "no raw ESC in --json either");
        // An error that quotes the file's text is one printable line too.
        Path arch = storiesWith("arch.gguf", java.util.Map.of("general.architecture", "\u001b[2Jx\ny"));
        Cli.Result error = Cli.run("run", "-m", arch.toString(), "-n", "1");
        assertOneLineError(error, "architecture '\\u001b[2Jx\\ny' is not supported yet");
        // inspect shows the file and says, as one printable line, why it does not run.
        Cli.Result verdict = Cli.run("inspect", arch.toString());
        assertEquals(0, verdict.exit(), verdict.toString());
        assertTrue(verdict.out().contains("\nruns: no: " + arch + ": architecture '\\u001b[2Jx\\ny' is not supported "
                + "yet "), verdict.out());
        assertTrue(Cli.run("inspect", arch.toString(), "--json").out().contains("\"ok\": false"));
        assertFalse(error.err().contains("\u001b"), error.toString());
    }

    /** {@return stories260K-F32 written again to {@code name} in the test's directory, with these string values set} */
    private Path storiesWith(String name, java.util.Map<String, String> strings) {
        return Models.rewrite("stories260K-F32.gguf", dir.resolve(name), key -> true,
                w -> strings.forEach((k, v) -> w.put(k, dev.prefill4j.engine.gguf.GgufValue.string(v))));
    }

    /**
     * --chat writes the prompt in the format the model's chat template is recognised as (ChatFormatTest checks the
     * formats against llama.cpp's), with --system before it; and says what to do where there is none it writes.
     */
    @Test
    void chatWritesThePromptInTheModelsFormat() throws Exception {
        Path llama3 = storiesWith("llama3.gguf", java.util.Map.of("tokenizer.chat_template",
                "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{% endfor %}"));
        Cli.Result r = Cli.run("run", "-m", llama3.toString(), "-p", " Hi \n", "--chat", "--system", "Be brief.",
                "-n", "2", "--temp", "0", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("\"prompt\": \"<|start_header_id|>system<|end_header_id|>\\n\\nBe brief.<|eot_id|>"
                + "<|start_header_id|>user<|end_header_id|>\\n\\nHi<|eot_id|><|start_header_id|>assistant"
                + "<|end_header_id|>\\n\\n\","), r.out());
        assertTrue(r.out().contains("\"chat_format\": \"llama3\""), r.out());
        // A conversation across runs: kept, then resumed with the next message (KeptKVCacheTest checks the ids). The
        // first answer was cut by -n (this vocabulary has no <|eot_id|> token), so the turn is closed first. On
        // tiny-256, whose context holds the Llama 3 marks spelled out in its pieces.
        Path tiny3 = Models.rewrite("tiny-256-F32.gguf", dir.resolve("tiny3.gguf"), key -> true,
                w -> w.put("tokenizer.chat_template", dev.prefill4j.engine.gguf.GgufValue.string(
                        "<|start_header_id|>{{ role }}<|end_header_id|>")));
        String[] kv = {"--kv", "ssd", "--kv-dir", dir.toString()};
        Cli.Result first = Cli.run(concat(new String[] {"run", "-m", tiny3.toString(), "-p", "Hi", "--chat", "-n", "3",
            "--temp", "0", "--json", "--kv-keep", "talk"}, kv));
        assertEquals(0, first.exit(), first.toString());
        Cli.Result next = Cli.run(concat(new String[] {"run", "-m", tiny3.toString(), "-p", "And then?", "--chat",
            "-n", "3", "--temp", "0", "--json", "--kv-resume", "talk"}, kv));
        assertEquals(0, next.exit(), next.toString());
        assertTrue(next.out().contains("\"prompt\": \"<|eot_id|><|start_header_id|>user<|end_header_id|>\\n\\nAnd "
                + "then?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n\","), next.out());
        assertTrue(next.out().contains("\"resumed\": true"), next.out());
        String plain = Models.require("stories260K-F32.gguf").toString();
        Path gemma = storiesWith("gemma.gguf", java.util.Map.of("tokenizer.chat_template", "<start_of_turn>user"));
        assertUsageErrors(new String[][] {
            {plain + " has no chat template (tokenizer.chat_template): drop --chat and write the prompt out with the "
                + "model's special pieces", "run", "-m", plain, "--chat"},
            {"the chat template of " + gemma + " is not one this engine writes (Llama 3's, Llama 2's and Mistral's "
                + "[INST], ChatML): drop --chat and write the prompt out with the model's special pieces", "run", "-m", gemma.toString(), "--chat"},
            {"--system is a chat's system message: use it with --chat", "run", "-m", plain, "--system", "x"},
            {"--chat with --kv-resume continues the conversation with a next message: give it with -p or -f", "run",
                "-m", plain, "--chat", "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-resume", "talk"},
            {"--system opens a conversation; a resumed one (--kv-resume) has its own: drop --system", "run", "-m",
                plain, "--chat", "--system", "x", "-p", "y", "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-resume",
                "talk"},
            {"--burst continues a kept text as it is; to add -p/-f text to it, run without --burst", "run", "-m",
                plain, "-p", "y", "--burst", "4", "--temp", "0", "--kv", "ssd", "--kv-dir", dir.toString(),
                "--kv-resume", "talk"},
        });
    }

    /** A model or tokenizer path that is wrong names the file at fault and what is wrong with it. */
    @Test
    void wrongModelPathsNameTheFileAtFault() throws Exception {
        String gguf = Models.require("tiny-256-F32.gguf").toString();
        String bin = Models.require("stories260K.bin").toString();
        String tok = Models.require("tok512.bin").toString();
        // A directory had been reported as "no such file" by run and "cannot read: No such device" by inspect.
        assertOneLineError(Cli.run("run", "-m", dir.toString(), "-n", "1"), dir + " is a directory, not the model");
        assertOneLineError(Cli.run("inspect", dir.toString()), dir + " is a directory, not the model");
        assertOneLineError(Cli.run("inspect", "/dev/null"), "/dev/null is not a regular file");
        // A missing or wrong tokenizer had been blamed on the checkpoint ("stories260K.bin: cannot read: /absent").
        String absent = dir.resolve("absent-tokenizer.bin").toString();
        assertOneLineError(Cli.run("run", "-m", bin, "--tokenizer", absent, "-n", "1"),
                absent + ": no such file (the llama2.c tokenizer)");
        assertOneLineError(Cli.run("inspect", bin, "--tokenizer", dir.toString()),
                dir + " is a directory, not the llama2.c tokenizer");
        assertOneLineError(Cli.run("run", "-m", bin, "--tokenizer", gguf, "-n", "1"),
                gguf + ": a GGUF file, not a llama2.c tokenizer.bin");
        // A checkpoint without its tokenizer: inspect says what to add, as run does.
        assertOneLineError(Cli.run("inspect", bin), bin + ": not a GGUF file", "--tokenizer");
        // A tokenizer with a GGUF model had been ignored by run, and made inspect call the file an implausible
        // llama2.c header.
        for (String[] args : new String[][] {{"run", "-n", "1"}, {"inspect"}}) {
            Cli.Result r = Cli.run(args[0], "-m", gguf, "--tokenizer", tok);
            assertEquals(2, r.exit(), r.toString());
            assertTrue(r.err().contains(gguf + " is a GGUF file, which holds its own vocabulary"), r.toString());
            assertTrue(r.out().isEmpty(), r.toString());
        }
    }

    @Test
    void badModelFilesGiveOneLineErrors() throws Exception {
        byte[] real = Files.readAllBytes(Models.require("stories260K-F32.gguf"));
        Path truncated = dir.resolve("truncated.gguf");
        Files.write(truncated, Arrays.copyOf(real, real.length / 2));
        assertOneLineError(Cli.run("run", "-m", truncated.toString()), truncated.toString(), "runs past the end");
        Path magic = dir.resolve("magic.gguf");
        Files.write(magic, "NOPE and more bytes".getBytes());
        assertOneLineError(Cli.run("run", "-m", magic.toString()), magic.toString(), "not a GGUF file");
        Path version = dir.resolve("version.gguf");
        byte[] v = real.clone();
        v[4] = 9;
        Files.write(version, v);
        assertOneLineError(Cli.run("inspect", version.toString()), version.toString(), "unsupported GGUF version 9");
        assertOneLineError(Cli.run("run", "-m", dir.resolve("absent.gguf").toString()), "no such file");
        // Header fields patched in a real file: tensor count (offset 8) to 2^60, and the first tensor's type to 99.
        Path absurd = dir.resolve("absurd.gguf");
        byte[] a = real.clone();
        java.nio.ByteBuffer.wrap(a).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(8, 1L << 60);
        Files.write(absurd, a);
        assertOneLineError(Cli.run("inspect", absurd.toString()), absurd.toString(), "claims 1152921504606846976 tensors");
        Path unknown = dir.resolve("unknown-type.gguf");
        byte[] u = real.clone();
        try (var f = dev.prefill4j.engine.gguf.GgufFile.open(Models.require("stories260K-F32.gguf"))) {
            // The type field of tensor 0 sits 4 + 8 bytes before the first tensor's offset field: find it by its name.
            String name = f.tensors().get(0).name();
            int at = new String(real, java.nio.charset.StandardCharsets.ISO_8859_1).indexOf(name) + name.length();
            int dims = f.tensors().get(0).ne().length;
            java.nio.ByteBuffer.wrap(u).order(java.nio.ByteOrder.LITTLE_ENDIAN).putInt(at + 4 + 8 * dims, 99);
        }
        Files.write(unknown, u);
        assertOneLineError(Cli.run("run", "-m", unknown.toString()), unknown.toString(), "unknown tensor type 99");
    }

    @Test
    void aMissingRequiredKeyIsNamed() throws Exception {
        // Rename llama.block_count in place (same length), so the file stays valid GGUF but lacks the key.
        byte[] b = Files.readAllBytes(Models.require("stories260K-F32.gguf"));
        String s = new String(b, java.nio.charset.StandardCharsets.ISO_8859_1).replace("llama.block_count", "llama.block_xxxxx");
        Path f = dir.resolve("nokey.gguf");
        Files.write(f, s.getBytes(java.nio.charset.StandardCharsets.ISO_8859_1));
        assertOneLineError(Cli.run("run", "-m", f.toString()), f.toString(), "missing required key 'llama.block_count'");
    }

    @Test
    void aPromptOverTheContextIsRefused() throws Exception {
        assertOneLineError(Cli.run("run", "-m", Models.require("stories260K-F32.gguf").toString(), "-c", "6",
                "-p", "Once upon a time there was", "-n", "4"), "exceed the context of 6");
    }

    /**
     * Out-of-range numbers are usage errors named with their value, found before any work: {@code -c -5} had been an
     * internal error, {@code --burst 0} and bench's {@code --context -5} had run as if not given, and bench's
     * {@code --depth-passes 0} had been refused only after every pp and tg test had run.
     */
    @Test
    void outOfRangeNumbersAreUsageErrorsBeforeAnyWork() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        String[][] cases = {
            {"-c must be 0 (the model's context) or more, got -5", "run", "-m", model, "-c", "-5"},
            {"--burst must be at least 1, got 0", "run", "-m", model, "--burst", "0", "--temp", "0"},
            {"-n must be at least 0, got -1", "run", "-m", model, "-n", "-1"},
            {"--context must be at least 0, got -5", "bench", "-m", model, "--context", "-5"},
            {"--burst must be at least 1, got -3", "bench", "-m", model, "--burst", "-3"},
            {"--depth-passes must be at least 1, got 0", "bench", "-m", model, "--context", "64", "--depth-passes",
                "0"},
            {"-r must be at least 1, got 0; every -p must be at least 1, got 0", "bench", "-m", model, "-r", "0", "-p",
                "0"},
        };
        assertUsageErrors(cases);
    }

    private static String[] concat(String[] a, String[] b) {
        String[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    /** Each case, {message, command, args...}, exits 2 with exactly that one-line P4J-ARG message. */
    private static void assertUsageErrors(String[][] cases) throws Exception {
        for (String[] c : cases) {
            Cli.Result r = Cli.run(Arrays.copyOfRange(c, 1, c.length));
            assertEquals(2, r.exit(), r.toString());
            assertEquals("prefill4j: error: " + c[0] + " [P4J-ARG]", r.err().strip(), r.toString());
        }
    }

    /**
     * Options that others make meaningless are refused before any work; they had been ignored: {@code -m F --type
     * f16} ran F's own format, and {@code --kv-dir D} without {@code --kv ssd} kept the cache in memory.
     */
    @Test
    void optionsThatOthersMakeMeaninglessAreRefused() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        String[][] cases = {
            {"--type describes a synthetic model; with -m the file is the model: drop --type", "run", "-m", model,
                "--type", "f16"},
            {"--synthetic describes a synthetic model; with -m the file is the model: drop --synthetic", "bench", "-m",
                model, "--synthetic", "tiny"},
            {"--kv-dir is an option of the ssd KV store, and the cache is in memory: add --kv ssd", "run", "-m", model,
                "--kv-dir", dir.toString()},
            {"--kv-ring is an option of the ssd KV store, and the cache is in memory: add --kv ssd", "bench", "-m", model,
                "--kv", "memory", "--kv-ring", "64"},
        };
        assertUsageErrors(cases);
    }

    /**
     * The decode rate counts decode steps, and the stats line says so: the first token after a prompt comes from the
     * prefill's logits. "3 tokens in T ms (R tok/s)" had been printed with R = 2 / T.
     */
    @Test
    void theDecodeRateCountsDecodeSteps() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Cli.Result three = Cli.run("run", "-m", model, "-n", "3", "--temp", "0");
        assertEquals(0, three.exit(), three.toString());
        java.util.regex.Matcher m = java.util.regex.Pattern
                .compile("\\| 3 generated, decode: 2 steps in ([0-9.]+) ms \\(([0-9.]+) tok/s\\) \\|")
                .matcher(three.err());
        assertTrue(m.find(), three.toString());
        double ms = Double.parseDouble(m.group(1));
        double rate = Double.parseDouble(m.group(2));
        // Both are printed rounded to 0.1: the rate within 0.05 plus what 0.05 ms moves 2 steps / ms (counting the 3
        // tokens would be 1.5 times it).
        double expected = 2000 / ms;
        assertEquals(expected, rate, 0.05 + expected * 0.05 / ms + 1e-9, three.toString());
        Cli.Result one = Cli.run("run", "-m", model, "-n", "1", "--temp", "0");
        assertTrue(one.err().contains("| 1 generated, decode: no step (the token came from the prefill's logits) |"),
                one.toString());
        Cli.Result json = Cli.run("run", "-m", model, "-n", "3", "--temp", "0", "--json");
        assertTrue(json.out().contains("\"decode_steps\": 2,"), json.out());
    }

    @Test
    void verboseAddsTheStackTraceAndUsageErrorsExitWith2() throws Exception {
        Cli.Result r = Cli.run("run", "-m", dir.resolve("absent.gguf").toString(), "--verbose");
        assertEquals(1, r.exit());
        assertTrue(r.err().contains("\tat "), r.toString());
        Cli.Result usage = Cli.run("run", "--no-such-flag");
        assertEquals(2, usage.exit(), usage.toString());
        Cli.Result help = Cli.run("run", "--help");
        assertEquals(0, help.exit());
        assertTrue(help.out().contains("--logits-out"), help.out());
    }

    /**
     * Every command's help is formatted: picocli reads descriptions as format strings, and a bare {@code %} (as in
     * "15% of") makes it print a warning to stderr and the raw text with {@code %n} left in.
     */
    @Test
    void everyCommandsHelpFormatsWithoutWarnings() throws Exception {
        Cli.Result top = Cli.run("--help");
        assertEquals(0, top.exit(), top.toString());
        assertFalse(top.err().contains("WARN"), top.err());
        // The commands as the top-level help lists them ("  NAME  description"), so a new command is checked too.
        List<String> commands = top.out().lines().dropWhile(l -> !l.equals("Commands:")).skip(1)
                .takeWhile(l -> !l.isBlank()).filter(l -> l.matches("  [a-z]+ .*")).map(l -> l.trim().split(" ")[0])
                .filter(c -> !c.equals("help")).toList();
        assertTrue(commands.containsAll(List.of("run", "inspect", "plugins", "synth", "quantize", "bench")),
                commands + "\n" + top.out());
        for (String command : commands) {
            Cli.Result help = Cli.run(command, "--help");
            assertEquals(0, help.exit(), help.toString());
            assertFalse(help.err().contains("WARN"), command + ": " + help.err());
            assertFalse(help.out().contains("%n"), command + ": " + help.out());
            assertTrue(help.out().startsWith("Usage: prefill4j " + command), command + ": " + help.out());
        }
    }

    /** bench's synthetic model defaults to the 1B geometry in Q4_0, unlike run's: its help says so at the options. */
    @Test
    void benchHelpStatesItsSyntheticDefaults() throws Exception {
        Cli.Result help = Cli.run("bench", "--help");
        assertEquals(0, help.exit(), help.toString());
        String flat = help.out().replaceAll("\\s+", " "); // picocli wraps descriptions
        assertTrue(flat.contains("(default: tiny; bench: llama-1b)"), help.out());
        assertTrue(flat.contains("(default: f32; bench: q4_0)"), help.out());
    }

    /** On the module path every provider reports its module and version. */
    @Test
    void pluginsListsModulesOnTheModulePath() throws Exception {
        Cli.Result r = Cli.run("plugins", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("\"module\": \"dev.prefill4j.backend.cpu\""), r.out());
        assertTrue(r.out().contains("\"id\": \"q8_0\""), r.out());
        assertTrue(r.out().contains("\"version\": \"0.1.0-SNAPSHOT\""), r.out());
    }

    /**
     * The table's columns line up whatever the ids' lengths: in every row the module starts where the header's
     * "module" does, and the version where "version" does (ids such as {@code q8_0-activations} are longer than
     * most).
     */
    @Test
    void pluginsTableKeepsItsColumns() throws Exception {
        Cli.Result r = Cli.run("plugins");
        assertEquals(0, r.exit(), r.toString());
        List<String> lines = r.out().lines().filter(l -> !l.startsWith("skipped: ")).toList();
        String header = lines.getFirst();
        assertTrue(header.startsWith("spi "), r.out());
        assertTrue(lines.stream().anyMatch(l -> l.contains(" q8_0-activations ")), r.out());
        for (String line : lines.subList(1, lines.size())) {
            assertEquals(header.indexOf("module"), line.indexOf("dev.prefill4j."), line);
            assertEquals(header.indexOf("version"), line.indexOf("0.1.0-SNAPSHOT"), line);
        }
    }

    /**
     * inspect takes the model as run and bench do ({@code -m}) as well as bare: the same output; neither, or both, is a
     * one-line usage error.
     */
    @Test
    void inspectTakesTheModelWithDashM() throws Exception {
        String model = Models.require("stories260K-Q8_0.gguf").toString();
        Cli.Result bare = Cli.run("inspect", model);
        Cli.Result dashM = Cli.run("inspect", "-m", model);
        assertEquals(0, bare.exit(), bare.toString());
        assertTrue(bare.out().contains("decoded by") && bare.out().contains("q8_0 (dev.prefill4j.engine)"), bare.out());
        // The geometry MANIFEST.md gives (llama.cpp's converter wrote context 128), and that the engine runs it.
        assertTrue(bare.out().contains("\nruns: yes: llama, 5 layers, width 64, 8 heads of 8 (4 for K and V), FFN 172, "
                + "trained context 128; SentencePiece-style, 512 pieces; RoPE base 10000.0\n"), bare.out());
        assertEquals(bare.out(), dashM.out());
        Cli.Result none = Cli.run("inspect");
        assertEquals(2, none.exit(), none.toString());
        assertEquals("prefill4j: error: no model given; use 'prefill4j inspect MODEL' or 'prefill4j inspect -m MODEL'"
                + " [P4J-ARG]", none.err().strip(), none.toString());
        Cli.Result both = Cli.run("inspect", model, "-m", model);
        assertEquals(2, both.exit(), both.toString());
        assertTrue(both.err().contains("given twice"), both.toString());
    }

    /**
     * A test longer than the model's trained context (stories260K: 128 positions) runs past it, as llama-bench lets it,
     * and says so on standard error and in the JSON; one within it does not.
     */
    @Test
    void benchRunsPastTheTrainedContextAndSaysSo() throws Exception {
        Cli.Result r = Cli.run("bench", "-m", Models.require("stories260K-F32.gguf").toString(), "-p", "100,200", "-n",
                "0", "-r", "1", "--verify-tokens", "0", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.err().contains("bench pp200: runs past the model's trained context of 128 positions"), r.err());
        assertFalse(r.err().contains("bench pp100: runs past"), r.err());
        String flat = r.out().replaceAll("\\s+", " ");
        assertTrue(flat.contains("\"context\": 201, \"beyond_trained_context\": true,"), r.out());
        assertTrue(flat.contains("\"context\": 128, \"beyond_trained_context\": false,"), r.out());
    }

    /**
     * --logits-out naming the model (or the tokenizer) is refused before the model is read, and the file is left as it
     * was: a run that went through truncated a 1.2 MB model to its 10 KB of logits.
     */
    @Test
    void logitsOutOntoTheModelIsRefusedAndLosesNothing() throws Exception {
        Path model = dir.resolve("model.gguf");
        Files.copy(Models.require("stories260K-F32.gguf"), model);
        byte[] before = Files.readAllBytes(model);
        Cli.Result r = Cli.run("run", "-m", model.toString(), "-n", "2", "--temp", "0", "--logits-out",
                dir.resolve(".").resolve("model.gguf").toString());
        assertEquals(2, r.exit(), r.toString());
        assertTrue(r.err().strip().startsWith("prefill4j: error: ") && r.err().contains(" is the input file " + model
                + ": writing --logits-out there would destroy it; give another path [P4J-ARG]"), r.toString());
        assertArrayEquals(before, Files.readAllBytes(model));
    }

    /**
     * An output path that cannot be written (a directory, or a file in a directory that does not exist) is refused before
     * any work, in words: run had generated its text and then stopped on an internal error, and quantize had written its
     * whole model beside the directory before failing.
     */
    @Test
    void outputsThatCannotBeWrittenAreRefusedFirst() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Path missing = dir.resolve("missing").resolve("out");
        Cli.Result run = Cli.run("run", "-m", model, "-n", "2", "--temp", "0", "--logits-out", missing.toString());
        assertOneLineError(run, missing + ": no such directory " + missing.getParent() + "; create it first [P4J-IO]");
        assertEquals("", run.out(), "nothing generated");
        Cli.Result runDir = Cli.run("run", "-m", model, "-n", "2", "--logits-out", dir.toString());
        assertEquals(2, runDir.exit(), runDir.toString());
        assertTrue(runDir.err().contains(dir + " is a directory: --logits-out needs a file name in it"), runDir.toString());
        Cli.Result quantize = Cli.run("quantize", model, dir.toString(), "--type", "q8_0");
        assertEquals(2, quantize.exit(), quantize.toString());
        assertTrue(quantize.err().contains(dir + " is a directory: the quantized model needs a file name in it"),
                quantize.toString());
        assertOneLineError(Cli.run("synth", "--shape", "tiny", "-o", missing.toString()), "no such directory");
        try (var files = Files.list(dir)) {
            assertEquals(0, files.count(), "nothing written");
        }
        try (var files = Files.list(dir.getParent())) {
            String partial = "." + dir.getFileName() + "."; // GgufWriter's partial file for the target dir
            assertTrue(files.noneMatch(f -> f.getFileName().toString().startsWith(partial)), "no partial file beside");
        }
    }

    /**
     * --logits-out replaces a file whole, through a temporary file beside it: a link keeps pointing at the (new) file, no
     * partial file stays behind, and a device is refused (a temporary file renamed over /dev/stdout would have replaced
     * the device's link).
     */
    @Test
    void logitsReplaceTheFileALinkNames() throws Exception {
        String model = Models.require("stories260K-F32.gguf").toString();
        Path file = dir.resolve("logits.f32");
        Files.write(file, new byte[100_000]);
        Path link = Files.createSymbolicLink(dir.resolve("link.f32"), file);
        Cli.Result r = Cli.run("run", "-m", model, "-n", "1", "--temp", "0", "--logits-out", link.toString());
        assertEquals(0, r.exit(), r.toString());
        assertTrue(Files.isSymbolicLink(link), "the link stays");
        assertEquals(5L * 4 * 512, Files.size(file), "5 prompt positions x 512 logits, the old bytes gone");
        try (var files = Files.list(dir)) {
            assertEquals(2, files.count(), "no partial file left");
        }
        Cli.Result device = Cli.run("run", "-m", model, "-n", "1", "--logits-out", "/dev/null");
        assertEquals(2, device.exit(), device.toString());
        assertTrue(device.err().contains("/dev/null is not a regular file"), device.toString());
    }

    /**
     * An error that stops bench in the middle of a progress line starts a line of its own (it had been appended to
     * "bench pp8: warm-up 1/32 "), and one with no progress line open stays the only line.
     */
    @Test
    void anErrorAfterAProgressLineStartsItsOwnLine() throws Exception {
        Path broken = dir.resolve("nan.gguf");
        byte[] bytes = Files.readAllBytes(Models.require("stories260K-F32.gguf"));
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(bytes).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (int i = bytes.length - 65536; i + 4 <= bytes.length; i += 4) { // the last tensors' weights
            b.putFloat(i, Float.NaN);
        }
        Files.write(broken, bytes);
        Cli.Result bench = Cli.run("bench", "-m", broken.toString(), "-p", "8", "-n", "0", "-r", "1");
        assertEquals(1, bench.exit(), bench.toString());
        List<String> lines = bench.err().strip().lines().toList();
        assertTrue(lines.getLast().startsWith("prefill4j: error: NaN in ")
                && lines.getLast().endsWith("[P4J-NONFINITE]"), bench.toString());
        assertTrue(lines.get(lines.size() - 2).startsWith("bench pp8: warm-up"), bench.toString());
        assertOneLineError(Cli.run("run", "-m", broken.toString(), "-n", "1"), "[P4J-NONFINITE]");
    }

    /** Every command's --version prints what the top level's does (the commands' own had printed nothing). */
    @Test
    void everyCommandPrintsTheVersion() throws Exception {
        Cli.Result top = Cli.run("--version");
        assertEquals(0, top.exit(), top.toString());
        assertTrue(top.out().startsWith("prefill4j ") && top.out().contains("(Java 25"), top.toString());
        for (String command : List.of("run", "inspect", "plugins", "synth", "quantize", "bench")) {
            Cli.Result r = Cli.run(command, "--version");
            assertEquals(0, r.exit(), r.toString());
            assertEquals(top.out(), r.out(), command);
        }
    }

    /** More threads than cores run, with a note that says what it costs; as many as the cores, no note. */
    @Test
    void moreThreadsThanCoresAreNoted() throws Exception {
        int cores = Runtime.getRuntime().availableProcessors();
        String model = Models.require("stories260K-F32.gguf").toString();
        Cli.Result over = Cli.run("run", "-m", model, "-n", "2", "--temp", "0", "-t", String.valueOf(cores + 1));
        assertEquals(0, over.exit(), over.toString());
        assertTrue(over.err().contains("prefill4j: note: -t " + (cores + 1) + " is more than the " + cores + " cores"),
                over.toString());
        Cli.Result fits = Cli.run("run", "-m", model, "-n", "2", "--temp", "0", "-t", String.valueOf(cores));
        assertEquals(0, fits.exit(), fits.toString());
        assertFalse(fits.err().contains("note: -t"), fits.toString());
    }

    /** Decode at depth over synthetic KV in the ssd store, with bursts; the file is gone afterwards. */
    @Test
    void benchAtDepthWithSyntheticKv() throws Exception {
        Cli.Result r = Cli.run("bench", "--synthetic", "tiny", "--type", "f32", "-p", "4", "-n", "4", "-r", "1",
                "--verify-tokens", "0", "--kv", "ssd", "--kv-dir", dir.toString(), "--kv-type", "q8_0",
                "--context", "3000", "--burst", "8", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("\"test\": \"depth3000_burst8\"") && r.out().contains("\"synthetic_kv\": true")
                && r.out().contains("\"kv_store\": \"ssd\""), r.out());
        // The aim's peak is read before the depth and burst tests; the overall peak can only be higher.
        double ppTg = number(r.out(), "peak_resident_bytes_pp_tg");
        assertTrue(ppTg > 0 && ppTg <= number(r.out(), "peak_resident_bytes"), r.out());
        try (var files = Files.list(dir)) {
            assertEquals(0, files.count(), "the ssd store removed its file");
        }
    }

    /**
     * {@code bench --json} in the C locale, where Java writes text as ASCII: the document is ASCII with the label's
     * {@code Δ} escaped ({@code \u0394}), so a JSON reader gets the label as written.
     */
    @Test
    void benchReportsThroughputAsJson() throws Exception {
        Cli.Result r = Cli.run(java.util.Map.of("LC_ALL", "C"),
                "bench", "--synthetic", "tiny", "--type", "f32", "-p", "16", "-n", "4", "-r", "1", "--json");
        assertEquals(0, r.exit(), r.toString());
        assertTrue(r.out().contains("\"test\": \"pp16\"") && r.out().contains("\"test\": \"tg4\""), r.out());
        assertTrue(r.out().contains("\"verification\": \"VERIFIED against the FP64 reference: max |\\u0394logit| "),
                r.out());
        assertTrue(r.out().chars().allMatch(ch -> ch < 0x80), r.out());
        assertTrue(r.out().contains("\"fp32_fma_peak_gflops\"") && r.out().contains("\"percent_of_fma_peak\"") && r.out().contains("\"peak_resident_bytes\""), r.out());
        // The JVM's own resident size when bench started: part of every peak, below it; the aim's peak (model load and
        // the pp/tg runs) is read before the reference check, so the overall peak can only be higher.
        double start = number(r.out(), "start_resident_bytes");
        double ppTg = number(r.out(), "peak_resident_bytes_pp_tg");
        assertTrue(start > 0 && start < ppTg && ppTg <= number(r.out(), "peak_resident_bytes"), r.out());
        // The machine's peak is the highest FMA measurement of the run: the calibration after the runs and the one
        // before each timed run (one run each of pp16 and tg4 here: three measurements).
        double peak = number(r.out(), "fp32_fma_peak_gflops");
        assertEquals(3, (int) number(r.out(), "fp32_fma_peak_measurements"), r.out());
        assertTrue(peak >= number(r.out(), "fp32_fma_peak_final_calibration_gflops"), r.out());
        var runs = java.util.regex.Pattern.compile("\"fma_peak_gflops_at_runs\": \\[([0-9.eE+-]+)\\]").matcher(r.out());
        int found = 0;
        while (runs.find()) {
            found++;
            assertTrue(peak >= Double.parseDouble(runs.group(1)), r.out());
        }
        assertEquals(2, found, r.out());
        // A pp test warms up with its own prompt, prefilled until at least 256 tokens have gone (16 passes of 16); a tg
        // test with at least 64 decode steps (the JIT's warm-up).
        var warmUps = java.util.regex.Pattern.compile("\"warm_up_tokens\": ([0-9]+)").matcher(r.out());
        List<Integer> tokens = new java.util.ArrayList<>();
        while (warmUps.find()) {
            tokens.add(Integer.parseInt(warmUps.group(1)));
        }
        assertEquals(List.of(256, 64), tokens, r.out());
        assertTrue(r.out().contains("\"warm_up_passes\": 16"), r.out());
        // A decode step allocates at least the logits it returns: a new float[vocab], 2 KiB on this geometry.
        String tg = r.out().substring(r.out().indexOf("\"test\": \"tg4\""));
        assertEquals(512 * 4, number(tg, "returned_bytes_per_token"), tg);
        assertTrue(number(tg, "heap_bytes_per_token") >= number(tg, "returned_bytes_per_token"), tg);
    }

    /**
     * bench counts the heap bytes its timed runs allocate. With the prompt's micro-kernel kept out of the JIT (so
     * interpreted, where every Vector API vector is an object, as in a compilation that left the calls out of line),
     * the prompt's run allocates far beyond the logits it returns (more than bench's limit of 64 KiB a layer and
     * token), and bench says that its speed is not the engine's. With {@code --profile} the steps that run that
     * kernel (the prompt's four products) are the ones that allocate: more than 256 KiB a token each on the session's
     * thread, and together more than 90% of what its steps allocate. (A decode step's lower bound, its logits, is
     * checked in {@link #benchReportsThroughputAsJson}.)
     */
    @Test
    void benchWarnsWhenTheTimedRunsAllocate() throws Exception {
        Cli.Result r = Cli.run(java.util.Map.of("JAVA_TOOL_OPTIONS", BOXED_KERNEL), "bench", "--synthetic",
                "tiny", "--type", "f32", "-p", "16", "-n", "0", "-r", "1", "--verify-tokens", "0", "--profile",
                "--json");
        assertEquals(0, r.exit(), r.toString());
        String pp = r.out().substring(r.out().indexOf("\"test\": \"pp16\""));
        assertEquals(512 * 4 / 16.0, number(pp, "returned_bytes_per_token"), pp); // one float[vocab] a prompt
        assertTrue(number(pp, "heap_bytes_per_token") - number(pp, "returned_bytes_per_token") > 4 * 64 * 1024, pp);
        assertTrue(pp.contains("\"heap_allocation_warning\": \"the timed runs allocated "), pp);
        var ops = java.util.regex.Pattern.compile("\"operation\": \"([^\"]+)\"[^}]*?\"session_thread_heap_bytes_per_token\": "
                + "([0-9.eE+-]+)").matcher(pp);
        java.util.Map<String, Double> heap = new java.util.HashMap<>();
        while (ops.find()) {
            heap.put(ops.group(1), Double.parseDouble(ops.group(2)));
        }
        List<String> products = List.of("attn_q+attn_k+attn_v", "attn_output.weight", "ffn_gate+up", "ffn_down.weight");
        double all = heap.values().stream().mapToDouble(Double::doubleValue).sum();
        double ofProducts = 0;
        for (String p : products) {
            assertTrue(heap.containsKey(p) && heap.get(p) > 256 * 1024, p + ": " + heap);
            ofProducts += heap.get(p);
        }
        assertTrue(ofProducts > 0.9 * all, heap.toString());
    }

    /**
     * {@code bench --profile} on the synthetic tiny geometry in F32 (4 layers, dim 256, 4 KV heads of 32, FFN 768,
     * vocabulary 512, an output matrix of its own): each weight matrix counted under its tensor name once per layer and
     * token (a prompt's query, key and value products together, as {@code attn_q+attn_k+attn_v}), with exactly its
     * bytes and two FLOPs per weight and token; the other steps as often as the forward pass runs them; the
     * operations' shares adding up to the share reported and covering most of the timed runs.
     */
    @Test
    void benchProfilesEachOperation() throws Exception {
        Cli.Result r = Cli.run("bench", "--synthetic", "tiny", "--type", "f32", "-p", "8", "-n", "4", "-r", "2",
                "--verify-tokens", "0", "--profile", "--json");
        assertEquals(0, r.exit(), r.toString());
        String pp = r.out().substring(r.out().indexOf("\"test\": \"pp8\""), r.out().indexOf("\"test\": \"tg4\""));
        String tg = r.out().substring(r.out().indexOf("\"test\": \"tg4\""));
        int layers = 4;
        long f32 = 4;
        // Decode: per token each layer's matrices once, the output matrix once.
        assertOperation(tg, "attn_q.weight", layers, layers * 256L * 256 * f32);
        assertOperation(tg, "attn_k.weight", layers, layers * 128L * 256 * f32);
        assertOperation(tg, "attn_v.weight", layers, layers * 128L * 256 * f32);
        assertOperation(tg, "attn_output.weight", layers, layers * 256L * 256 * f32);
        assertOperation(tg, "ffn_gate+up", layers, layers * 2 * 768L * 256 * f32);
        assertOperation(tg, "ffn_down.weight", layers, layers * 256L * 768 * f32);
        assertOperation(tg, "output.weight", 1, 512L * 256 * f32);
        assertOperation(tg, "attention", layers, -1);
        assertOperation(tg, "rms_norm", 2 * layers + 1, -1);
        assertOperation(tg, "residual_add", 2 * layers, -1);
        // Prefill of 8 tokens: each matrix once per layer for all 8 (1/8 a token), logits for the last position only.
        assertOperation(pp, "attn_q+attn_k+attn_v", layers / 8.0, layers * (256L + 128 + 128) * 256 * f32 / 8.0);
        assertOperation(pp, "attn_output.weight", layers / 8.0, layers * 256L * 256 * f32 / 8.0);
        assertOperation(pp, "output.weight", 1 / 8.0, 512L * 256 * f32 / 8.0);
        // Two FLOPs per weight and token whether the token is prefilled or decoded; logits for one token of eight.
        for (String test : List.of(pp, tg)) {
            assertEquals(2.0 * layers * 2 * 768 * 256, number(operation(test, "ffn_gate+up"), "flops_per_token"), 1e-6);
            assertEquals(2.0 * layers * 256 * 768, number(operation(test, "ffn_down.weight"), "flops_per_token"), 1e-6);
        }
        assertEquals(2.0 * 512 * 256, number(operation(tg, "output.weight"), "flops_per_token"), 1e-6);
        assertEquals(2.0 * 512 * 256 / 8, number(operation(pp, "output.weight"), "flops_per_token"), 1e-6);
        assertFalse(operation(tg, "attention").contains("flops_per_token"));
        for (String test : List.of(pp, tg)) {
            var shares = java.util.regex.Pattern.compile("\"share\": ([0-9.eE+-]+)").matcher(test);
            double sum = 0;
            while (shares.find()) {
                sum += Double.parseDouble(shares.group(1));
            }
            double profiled = number(test, "profiled_share");
            assertEquals(profiled, sum, 1e-9, test);
            assertTrue(profiled > 0.5 && profiled <= 1, "profiled share " + profiled + " of " + test);
        }
    }

    /**
     * Asserts that operation {@code name} of a bench test's JSON ran {@code callsPerToken} times a token and read
     * {@code bytesPerToken} bytes of weights a token (-1: reads none, so no such field).
     */
    private static void assertOperation(String test, String name, double callsPerToken, double bytesPerToken) {
        String op = operation(test, name);
        assertEquals(callsPerToken, number(op, "calls_per_token"), 1e-9, op);
        if (bytesPerToken < 0) {
            assertFalse(op.contains("weight_bytes_per_token"), op);
        } else {
            assertEquals(bytesPerToken, number(op, "weight_bytes_per_token"), 1e-6, op);
        }
    }

    /** {@return the JSON object of operation {@code name} in a bench test's JSON, up to its closing brace} */
    private static String operation(String test, String name) {
        int at = test.indexOf("\"operation\": \"" + name + "\"");
        assertTrue(at >= 0, name + " in " + test);
        return test.substring(at, test.indexOf('}', at));
    }

    /** JVM options that keep the prompt's micro-kernel interpreted, its vectors boxed ({@code quiet}: nothing printed). */
    static final String BOXED_KERNEL = "-XX:CompileCommand=quiet "
            + "-XX:CompileCommand=exclude,dev.prefill4j.backend.cpu.VectorOps::kernel6x4";

    /** {@return the number after {@code "key": } in a JSON text} */
    private static double number(String json, String key) {
        var m = java.util.regex.Pattern.compile("\"" + key + "\": ([0-9.eE+-]+)").matcher(json);
        assertTrue(m.find(), key + " in " + json);
        return Double.parseDouble(m.group(1));
    }
}
