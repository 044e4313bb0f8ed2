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
            workout = runWorkout();
        }
        return workout;
    }

    /** Runs {@link KernelWorkout} over every registered format in a new child JVM. */
    private static Cli.Result runWorkout() throws Exception {
        List<String> formats = PluginRegistry.builder().properties(java.util.Map.of()).build().quantizers().keySet()
                .stream().sorted().toList();
        assertTrue(formats.containsAll(List.of("f16", "q8_0", "q4_0", "q4_k", "q6_k", "tq1_0", "tq2_0")),
                formats.toString());
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
     * for Q4_K and Q6_K. It takes the quietest of up to eight windows of calls: with one window, F32 at 8,192 elements
     * once allocated 55,296 bytes a call (in one of nine runs), and with three, Q4_K at 8,192 28.6 MB in one of eleven
     * (C1's code in every window: its pair kernel's C2 compilation not yet in place). Where a format and row length
     * allocate, the workout runs again in a new process and the test fails only if the same one allocates there too:
     * on the Intel Xeon VM of 2026-12-06 Q4_K at 2,048 elements allocated 108,864 bytes a call (C2's code keeping
     * boxed vectors, no call of ours refused) in one of two full CI runs of unchanged code and in none of thirteen
     * workouts run alone; a kernel that boxes in every process still fails here.
     */
    @Test
    void compiledDecodeProductsBoxNoVectors() throws Exception {
        List<String> allocating = allocating(workout());
        if (!allocating.isEmpty()) {
            // A second process: see the Javadoc. Only what allocates in both counts.
            List<String> again = allocating(runWorkout());
            List<String> first = allocating;
            allocating = again.stream().filter(a -> first.stream().anyMatch(b -> key(a).equals(key(b)))).toList();
            assertTrue(allocating.isEmpty(), "decode products that allocate once compiled (boxed vectors?), in two "
                    + "processes: " + first + " and " + again);
        }
    }

    /**
     * {@return the decode products of {@code r} that allocate over {@link #ALLOWED_BYTES_PER_CALL} a call, as "format
     * at n elements: ..."}
     */
    private static List<String> allocating(Cli.Result r) {
        Matcher m = ALLOCATED.matcher(r.out());
        List<String> allocating = new ArrayList<>();
        int seen = 0;
        while (m.find()) {
            seen++;
            if (Long.parseLong(m.group(3)) > ALLOWED_BYTES_PER_CALL) {
                allocating.add(m.group(1) + " at " + m.group(2) + " elements: " + m.group(3) + " bytes a call");
            }
        }
        assertTrue(seen >= 14, "expected an allocation line per format and row length, saw " + seen);
        return allocating;
    }

    /** {@return "format at n elements" of an {@link #allocating} entry} */
    private static String key(String entry) {
        return entry.substring(0, entry.indexOf(':'));
    }

    /** {@code allocated <format> <elements> <bytes>}, printed by {@link KernelWorkout}. */
    private static final Pattern ALLOCATED = Pattern.compile("allocated (\\S+) (\\d+) (\\d+)");
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
