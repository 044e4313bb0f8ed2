package dev.prefill4j.cli;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.io.OutputFiles;
import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.ConsoleHandler;
import java.util.logging.Level;
import java.util.logging.Logger;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code prefill4j}: the command-line entry point.
 *
 * <p>Exit codes: 0 success, 1 a run failed (bad model file, missing plugin, prompt over the context, NaN),
 * 2 bad command-line usage. Errors print one line; {@code --verbose} adds the stack trace and the registry's
 * log.
 */
@Command(name = "prefill4j", mixinStandardHelpOptions = true, versionProvider = Main.Version.class,
        description = {"A Java LLM inference engine built for fast prefill.", ""},
        subcommands = {RunCommand.class, InspectCommand.class, PluginsCommand.class, SynthCommand.class, QuantizeCommand.class,
                BenchCommand.class, CommandLine.HelpCommand.class},
        footer = {"", "Run 'prefill4j COMMAND --help' for a command's options.",
                "Example: prefill4j run -m model.gguf -p \"Once upon a time\" -n 32 --temp 0"})
public final class Main {
    /** Options every command takes. */
    static final class Common {
        @Option(names = "--verbose", description = "Print stack traces and the plugin registry's log.")
        boolean verbose;
    }

    /** Reports the engine module's version. */
    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            String v = Main.class.getModule().getDescriptor() == null ? "dev"
                    : Main.class.getModule().getDescriptor().rawVersion().orElse("dev");
            return new String[] {"prefill4j " + v + " (Java " + Runtime.version() + ")"};
        }
    }

    private Main() {
    }

    /**
     * Runs the command line and exits with its code.
     *
     * @param args the arguments
     */
    public static void main(String[] args) {
        System.exit(execute(args));
    }

    /**
     * Runs the command line.
     *
     * @param args the arguments
     * @return the exit code
     */
    static int execute(String... args) {
        boolean verbose = java.util.Arrays.asList(args).contains("--verbose");
        if (verbose) {
            Logger root = Logger.getLogger("");
            root.setLevel(Level.FINE);
            ConsoleHandler h = new ConsoleHandler();
            h.setLevel(Level.FINE);
            root.addHandler(h);
        }
        // Progress lines end without a newline; an error that comes while one is open starts a line of its own.
        LineEndTracker errLine = new LineEndTracker(System.err);
        System.setErr(new PrintStream(errLine, true, System.err.charset()));
        // System.out swallows write errors: a report or JSON document written to a full disk had exited 0.
        StdoutWatch stdout = new StdoutWatch(new FileOutputStream(FileDescriptor.out));
        System.setOut(new PrintStream(new BufferedOutputStream(stdout, 8192), true, System.out.charset()));
        CommandLine cl = new CommandLine(new Main());
        // Every command's -V prints the version (a subcommand's own provider would be empty).
        cl.getSubcommands().values().forEach(sub -> sub.getCommandSpec().versionProvider(new Version()));
        cl.setExecutionExceptionHandler((ex, line, parse) -> {
            PrintWriter err = line.getErr();
            err.flush();
            if (errLine.midLine()) {
                err.println();
            }
            // Messages quote the file's own text (keys, names, values): printable, so one line and no escape sequence.
            if (ex instanceof PrefillException pe) {
                err.println("prefill4j: error: " + Printable.of(pe.getMessage()));
            } else {
                err.println("prefill4j: internal error: " + Printable.of(ex.toString())
                        + " (please report it; --verbose shows where)");
            }
            if (verbose) {
                ex.printStackTrace(err);
            }
            err.flush();
            return ex instanceof PrefillException pe && pe.code() == PrefillException.Code.ARGUMENT ? 2 : 1;
        });
        // Ctrl-C or SIGTERM: the JVM runs its shutdown hooks (which remove partial output files) and exits 130 or
        // 143; say so on a line of its own rather than leave a progress line open.
        AtomicBoolean finished = new AtomicBoolean();
        Thread stopped = new Thread(() -> {
            if (!finished.get()) {
                System.err.print((errLine.midLine() ? "\n" : "") + "prefill4j: stopped before it finished\n");
                System.err.flush();
            }
        }, "prefill4j-stopped");
        Runtime.getRuntime().addShutdownHook(stopped);
        int exit;
        try {
            exit = cl.execute(args);
            System.out.flush();
        } finally {
            finished.set(true);
        }
        IOException failed = stdout.firstFailure();
        if (exit == 0 && failed != null) {
            if (StdoutWatch.isBrokenPipe(failed)) {
                return 141; // the reader closed it (| head): silent, as SIGPIPE ends a native tool
            }
            System.err.println("prefill4j: error: " + new PrefillException(PrefillException.Code.IO,
                    "cannot write to standard output: " + OutputFiles.reason(failed)).getMessage());
            return 1;
        }
        return exit;
    }

    /** Passes bytes on to standard output and keeps the first write error, which PrintStream would swallow. */
    static final class StdoutWatch extends FilterOutputStream {
        private volatile IOException first;

        StdoutWatch(OutputStream out) {
            super(out);
        }

        @Override
        public void write(int b) throws IOException {
            try {
                out.write(b);
            } catch (IOException e) {
                throw keep(e);
            }
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            try {
                out.write(b, off, len);
            } catch (IOException e) {
                throw keep(e);
            }
        }

        private IOException keep(IOException e) {
            if (first == null) {
                first = e;
            }
            return e;
        }

        IOException firstFailure() {
            return first;
        }

        /** EPIPE: the JVM ignores SIGPIPE and reports a write to a closed pipe with this message. */
        static boolean isBrokenPipe(IOException e) {
            return "Broken pipe".equals(e.getMessage());
        }
    }

    /**
     * Passes bytes on to standard error and remembers whether the last one left a line open: anything but a line feed
     * or a carriage return (a progress line cleared with {@code \r} leaves the cursor at the start of a line).
     */
    private static final class LineEndTracker extends FilterOutputStream {
        private volatile int last = '\n';

        LineEndTracker(OutputStream out) {
            super(out);
        }

        @Override
        public void write(int b) throws IOException {
            out.write(b);
            last = b;
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
            if (len > 0) {
                last = b[off + len - 1];
            }
        }

        boolean midLine() {
            return last != '\n' && last != '\r';
        }
    }
}
