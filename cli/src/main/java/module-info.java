/**
 * The {@code prefill4j} command line: {@code run}, {@code inspect}, {@code plugins}, {@code synth} and
 * {@code bench}. Flags follow llama.cpp's spelling where one exists. Backends, formats and KV stores are not
 * named here: they are found at run time, so a jlink image holds just the plugin modules a user picked.
 *
 * @since 0.1
 */
module dev.prefill4j.cli {
    requires dev.prefill4j.engine;
    requires info.picocli;
    // --verbose turns the registry's System.Logger output (backed by java.util.logging) up to DEBUG.
    requires java.logging;
    // bench counts the heap bytes its timed runs allocate (com.sun.management.ThreadMXBean): a kernel left boxing
    // its vectors by the JIT allocates megabytes a token, and its speed is reported as not the engine's.
    requires jdk.management;

    // picocli reads the command classes reflectively.
    opens dev.prefill4j.cli to info.picocli;
}
