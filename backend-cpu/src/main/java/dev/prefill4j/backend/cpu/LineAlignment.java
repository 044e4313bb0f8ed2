package dev.prefill4j.backend.cpu;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Where a float array's elements fall against 64-byte cache lines, so that a kernel's 16-lane vector loads of a
 * buffer can start on a line boundary: a 64-byte load that straddles two lines costs two. The JVM places an array
 * wherever its collector likes, at any multiple of 8 bytes, and tells Java code nothing of it; so a buffer is
 * allocated {@link #SLACK} floats longer than needed, and its data starts {@link #floatsToLine} floats in.
 *
 * <p>The address comes from the C library's {@code memmove(a, a, 0)}, called with the array itself ({@link
 * Linker.Option#critical} with heap access: the collector holds still during the call; zero bytes are moved), which
 * returns its first argument. An array can move at a later collection, so the answer is a hint, good until then:
 * callers ask again each time they fill a buffer, and a stale answer costs speed, never correctness. Only where this
 * module was granted native access ({@code --enable-native-access=dev.prefill4j.backend.cpu}, as the launcher does);
 * otherwise every answer is 0 and nothing is printed.
 *
 * <p>Why: with the Q4_0 decode kernel reading its prepared activations at each of 16 float offsets into one array (one
 * thread, 256 rows of 2,048 weights in L2, in one process), the one offset that put them on a line boundary ran at
 * 16.2-16.9 GB/s, the fifteen others at 13.8-15.1; decode of the 1B Q4_0 file went from 28.9-29.6 to 33.3-34.7 tok/s
 * (tg64, three alternating pairs; docs/performance-notes.md, Kernels, 2026-12-05).
 */
final class LineAlignment {
    /**
     * Bytes of a cache line on x86-64 (Apple's M chips have 128: a 64-byte boundary still keeps a 64-byte load within
     * one line there).
     */
    static final int LINE_BYTES = 64;
    /** Floats a buffer needs beyond its data so that the data can start on a line boundary. */
    static final int SLACK = LINE_BYTES / Float.BYTES;
    /** {@code void *memmove(void *dst, const void *src, size_t n)}, or null where it is not used. */
    private static final MethodHandle MEMMOVE = memmove();

    private LineAlignment() {
    }

    @SuppressWarnings("restricted")
    private static MethodHandle memmove() {
        if (!LineAlignment.class.getModule().isNativeAccessEnabled()) {
            return null;
        }
        try {
            Linker linker = Linker.nativeLinker();
            return linker.defaultLookup().find("memmove").map(f -> linker.downcallHandle(f,
                    FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS,
                            ValueLayout.JAVA_LONG),
                    Linker.Option.critical(true))).orElse(null);
        } catch (UnsupportedOperationException | IllegalArgumentException e) {
            return null; // a platform without a native linker, or one that refuses heap segments
        }
    }

    /** {@return whether {@link #floatsToLine} knows addresses here (native access granted and a C library found)} */
    static boolean known() {
        return MEMMOVE != null;
    }

    /**
     * {@return the first index {@code i < SLACK} at which {@code a[i]} starts a cache line right now, or 0 where that
     * is not known}
     *
     * @param a a non-empty array
     */
    static int floatsToLine(float[] a) {
        if (MEMMOVE == null) {
            return 0;
        }
        MemorySegment heap = MemorySegment.ofArray(a);
        long address;
        try {
            address = ((MemorySegment) MEMMOVE.invokeExact(heap, heap, 0L)).address();
        } catch (Throwable t) {
            throw new IllegalStateException("memmove failed", t);
        }
        return (int) ((LINE_BYTES - (address & (LINE_BYTES - 1))) & (LINE_BYTES - 1)) / Float.BYTES;
    }
}
