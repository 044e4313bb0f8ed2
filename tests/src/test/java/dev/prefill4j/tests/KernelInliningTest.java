package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.engine.registry.PluginRegistry;
import java.lang.reflect.Method;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import jdk.incubator.vector.Vector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorShuffle;
import org.junit.jupiter.api.Test;

/**
 * No kernel passes a vector to, or takes one from, a call that C2 leaves out of line.
 *
 * <p>C2 stops inlining ordinary methods once a compilation has created {@code NodeCountInliningCutoff} (18,000) IR
 * nodes, and the Vector API's operations, always inlined, create many. A helper that takes or returns a vector and
 * is refused there gets its vector boxed (an object and a payload array) at every call: the F16 four-row dot did so
 * twice a row, the Q8_0 dots once a row and the Q6_K decoder every 16 weights, and the 1B F16 file's decode made
 * 5,727 young collections in a tg64 run where it now makes 2,052. This runs every registered format's kernels and
 * the default backend's products over them ({@link KernelWorkout}; about 17 s here) in a child JVM with {@code
 * -XX:+PrintInlining} and fails on any call that C2 refused for that reason, or any other (the callee too big,
 * already compiled large), if the method called has a vector parameter or result. Calls with scalar arguments only
 * may stay out of line (they cost a call, not an allocation).
 *
 * <p>The same run also measures what each format's compiled decode product allocates a call ({@code allocated}
 * lines of {@link KernelWorkout}): a vector C2 boxed inside a kernel, with no call refused, shows up there.
 */
class KernelInliningTest {
    /**
     * {@code @ 370   dev.prefill4j.engine.formats.FusedDot::sum (102 bytes)   failed to inline: NodeCountInliningCutoff},
     * and C2's other reasons for leaving a call out of line (C1's, such as "callee is too large", are left alone: C2
     * compiles the hot code again).
     */
    private static final Pattern REFUSED = Pattern.compile("@ \\d+\\s+([\\w.$]+)::([\\w$<>]+) \\(\\d+ bytes\\)\\s+"
            + "failed to inline: (NodeCountInliningCutoff|too big|hot method too big|size > DesiredMethodLimit"
            + "|already compiled into a (big|medium) method)");

    /** The child JVM's run of {@link KernelWorkout} over every registered format, shared by both checks. */
    private static Cli.Result workout;

    private static synchronized Cli.Result workout() throws Exception {
        if (workout == null) {
            List<String> formats = PluginRegistry.builder().properties(java.util.Map.of()).build().quantizers().keySet()
                    .stream().sorted().toList();
            assertTrue(formats.containsAll(List.of("f16", "q8_0", "q4_0", "q4_k", "q6_k", "tq1_0", "tq2_0")),
                    formats.toString());
            workout = workout(formats);
        }
        return workout;
    }

    /** {@return a child JVM's run of {@link KernelWorkout} over {@code formats}, with C2's inlining printed} */
    private static Cli.Result workout(List<String> formats) throws Exception {
        String classPath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java")
                .toString(), "--add-modules", "jdk.incubator.vector", "-XX:+UnlockDiagnosticVMOptions",
                "-XX:+PrintInlining", "-cp", classPath, KernelWorkout.class.getName(), "3000"));
        cmd.addAll(formats);
        Cli.Result r = Cli.exec(cmd);
        assertEquals(0, r.exit(), () -> r.err() + r.out().lines().filter(l -> l.contains("Exception")).toList());
        return r;
    }

    /**
     * The compiled decode products keep their vectors in registers. A kernel whose vectors C2 could not keep there
     * boxes them (an object and a payload array, about 100 bytes for 16 floats) every block or row; Q4_K's packed dot
     * did so in a third of the processes while it converted with {@code convert(I2F, 0)} (see its Javadoc). Each
     * format and row length may allocate at most {@value #ALLOWED_BYTES_PER_CALL} bytes a call (64 rows and one) once
     * compiled, under one boxed vector a row: a stray small object a row (TQ2_0's row slice, 40 bytes, which C2 removed
     * in some processes and not in others until the kernel stopped making it) stays below that. The workout measured
     * 0 for every format, and run with {@code -XX:TieredStopAtLevel=1} (C1, which boxes every vector) 9.7-43 MB a call
     * for Q4_K and Q6_K.
     *
     * <p>It takes the quietest of windows of calls measured until one allocates nothing, for up to {@link
     * KernelWorkout#MEASURED_NANOS} (and {@link KernelWorkout#WAIT_BUDGET_NANOS} for the whole workout): a window in
     * which C1's code still runs allocates, and fixed counts of windows ended too early. With one window F32 at 8,192 elements once allocated 55,296 bytes a call (one run of nine);
     * with three, Q4_K at 8,192 28.6 MB (one of eleven); with eight, Q4_K at 2,048 108,864 bytes in three of nine full
     * CI runs (in one of them in a second process too). That was C1's code, not a boxing C2 compilation: with {@code
     * -XX:+StressIncrementalInlining -XX:+StressIGVN} (C2's own stress modes, which slow its queue) a harness outside
     * the repository measured the same 108,864 bytes in one to three processes of ten, all of it from {@code
     * dotPrepared}, whose C2 compilation had not arrived, and in every such process the windows that followed
     * allocated nothing after one to five more (3-21 ms; Intel Xeon VM, 2026-12-06).
     *
     * <p>A format that allocates in every window of a process is checked again in a second process, alone, and fails
     * only if it allocates there too. On the Zen 5 VM (2026-12-06) one CI run's workout had Q4_0's packed product
     * allocate 189,280 bytes a call in all of 5,156 windows, and of five workouts beside a busy loop on the other core
     * one had TQ1_0 at 2,048 elements allocate 16,640 bytes a call in all of 3,356, while seven more workouts (and the
     * test run on its own three times) allocated nothing for any format: a C2 compilation that boxes in some processes
     * and not in others, not a kernel that always does. Why C2 compiles them so there was not found (NOT VERIFIED); a
     * kernel that boxed in a user's process would run at a fraction of its speed for that process's life.
     */
    @Test
    void compiledDecodeProductsBoxNoVectors() throws Exception {
        Cli.Result r = workout();
        long seen = ALLOCATED.matcher(r.out()).results().count();
        assertTrue(seen >= 14, "expected an allocation line per format and row length, saw " + seen);
        List<String> first = allocating(r);
        if (first.isEmpty()) {
            return;
        }
        // Checked again in a fresh process, the allocating formats alone (see above): a kernel whose shape makes C2
        // box allocates there too.
        List<String> formats = first.stream().map(a -> a.substring(0, a.indexOf(' '))).distinct().toList();
        List<String> again = allocating(workout(formats));
        assertTrue(again.isEmpty(), "decode products that allocate once compiled (boxed vectors?), in two processes: "
                + first + "; then " + again);
    }

    /** {@return each format and row length whose decode product allocated over the allowance in {@code r}} */
    private static List<String> allocating(Cli.Result r) {
        Matcher m = ALLOCATED.matcher(r.out());
        List<String> allocating = new ArrayList<>();
        while (m.find()) {
            if (Long.parseLong(m.group(3)) > ALLOWED_BYTES_PER_CALL) {
                allocating.add(m.group(1) + " at " + m.group(2) + " elements: " + m.group(3) + " bytes a call in the "
                        + "quietest of " + m.group(4) + " windows");
            }
        }
        return allocating;
    }

    /** {@code allocated <format> <elements> <bytes> windows <count>}, printed by {@link KernelWorkout}. */
    private static final Pattern ALLOCATED = Pattern.compile("allocated (\\S+) (\\d+) (\\d+) windows (\\d+)");
    /** Bytes a call (64 rows and one) may allocate: about 64 a row, below one boxed 16-float vector a row. */
    private static final long ALLOWED_BYTES_PER_CALL = 64 * 64;

    @Test
    void noVectorCallIsLeftOutOfLine() throws Exception {
        Cli.Result r = workout();
        assertTrue(r.out().contains("inline (hot)"), "no inlining printed: " + r.err()); // C2 did compile something
        List<String> boxed = new ArrayList<>();
        Matcher m = REFUSED.matcher(r.out());
        while (m.find()) {
            if (m.group(1).matches("(java|jdk|sun)\\..*")) {
                continue; // the JDK's own calls (the Vector API's fallbacks, say): not kernels of ours or of a plugin
            }
            Class<?> owner;
            try {
                owner = Class.forName(m.group(1), false, getClass().getClassLoader());
            } catch (ClassNotFoundException e) {
                continue; // not on this class path: not a kernel of ours
            }
            for (Method method : owner.getDeclaredMethods()) {
                if (method.getName().equals(m.group(2)) && (vectorType(method.getReturnType())
                        || Arrays.stream(method.getParameterTypes()).anyMatch(KernelInliningTest::vectorType))) {
                    boxed.add(m.group().replaceAll("\\s+", " "));
                }
            }
        }
        assertTrue(boxed.isEmpty(), "vector calls left out of line (boxed at every call): " + boxed.stream().distinct().toList());
    }

    /** {@return whether a value of type {@code c} is boxed when passed out of line} (vectors, masks, shuffles) */
    private static boolean vectorType(Class<?> c) {
        return Vector.class.isAssignableFrom(c) || VectorMask.class.isAssignableFrom(c)
                || VectorShuffle.class.isAssignableFrom(c);
    }
}
