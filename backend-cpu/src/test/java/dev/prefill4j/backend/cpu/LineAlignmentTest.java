package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@link LineAlignment}'s index puts an array element on a cache-line boundary. Checked by a second C library call
 * that finds the element's address independently: {@code memchr} over the array for a byte only that element holds.
 */
class LineAlignmentTest {
    /** The byte that marks the element (its float's low byte, little-endian first). */
    private static final int MARK = 0xAB;

    @Test
    @SuppressWarnings("restricted")
    void theIndexStartsACacheLine() throws Throwable {
        assumeTrue(LineAlignment.known(), "NOT VERIFIED here: no native access or no C library memmove (the build grants"
                + " --enable-native-access=dev.prefill4j.backend.cpu to this module's tests)");
        Linker linker = Linker.nativeLinker();
        MethodHandle memchr = linker.downcallHandle(linker.defaultLookup().find("memchr").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT,
                        ValueLayout.JAVA_LONG), Linker.Option.critical(true));
        // Arrays of many lengths, kept alive together, so that their addresses fall on every multiple of 8 bytes
        // within a line.
        List<float[]> arrays = new ArrayList<>();
        for (int i = 0; i < 400; i++) {
            arrays.add(new float[LineAlignment.SLACK + 1 + i % 37]);
        }
        boolean[] seen = new boolean[LineAlignment.SLACK];
        for (float[] a : arrays) {
            int at = LineAlignment.floatsToLine(a);
            assertTrue(at >= 0 && at < LineAlignment.SLACK, "index " + at);
            seen[at] = true;
            a[at] = Float.intBitsToFloat(MARK); // bytes AB 00 00 00; every other element is 0
            MemorySegment heap = MemorySegment.ofArray(a);
            long found = ((MemorySegment) memchr.invokeExact(heap, MARK, heap.byteSize())).address();
            a[at] = 0f;
            // The array cannot have moved between the two calls unless a collection ran in between; retry once then.
            if (found % LineAlignment.LINE_BYTES != 0 && LineAlignment.floatsToLine(a) != at) {
                continue;
            }
            assertEquals(0, found % LineAlignment.LINE_BYTES, "a[" + at + "] at address " + found);
        }
        int kinds = 0;
        for (boolean s : seen) {
            kinds += s ? 1 : 0;
        }
        assertTrue(kinds >= 2, "400 arrays all at one offset from a line: the check saw too little");
    }
}
