package dev.prefill4j.backend.cpu;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * An arena whose large segments lie on the kernel's 2 MiB transparent huge pages: the memory of the formats' packed
 * decode copies, which decode steps stream once a token. Each large allocation is its own anonymous {@code mmap},
 * aligned to 2 MiB, with {@code madvise(MADV_HUGEPAGE)} over its whole 2 MiB pages before anything touches them, so
 * that the pages the copy's writer faults in are huge ones; the last part short of 2 MiB stays on 4 KiB pages, so
 * that resident memory grows by no more than the copy. Closing the arena unmaps them. Small allocations, and every
 * allocation where this is not available, come from a shared arena as before.
 *
 * <p>Available on Linux with transparent huge pages not {@code never} (the kernel's {@code
 * /sys/kernel/mm/transparent_hugepage/enabled}), where this module was granted native access ({@code
 * --enable-native-access=dev.prefill4j.backend.cpu}, as the launcher does), unless system property {@value
 * #PROPERTY} is {@code false}. A segment allocated by {@code Arena.ofShared()} is zeroed as it is allocated, which
 * faults in its 4 KiB pages before any advice could apply: so the advice needs the mapping made here.
 *
 * <p>Why: a decode step reads each weight once from DRAM, and on a VM the processor resolves each 4 KiB page through
 * two levels of page tables. A copy of the Q4_0 copies' decode kernel in a harness outside the repository (two
 * threads, 745 MiB of copy with scales of 0.01-0.03, Intel Xeon VM, 2026-12-07) read 18.4-18.5 GB/s on huge pages
 * against 15.3-15.6 on 4 KiB pages, and a plain loop of 64-byte loads 30.7-31.4 against 27.7-27.9. In the model,
 * {@code bench -m 1b-q4_0.gguf -p 512 -n 32 -r 2}, six alternating pairs against {@code -D}{@value #PROPERTY}{@code
 * =false}: tg32 19.26, 19.50, 19.35, 18.36, 18.32, 17.13 against 18.22, 18.00, 18.28, 17.73, 16.82, 17.17 tok/s
 * (docs/performance-notes.md).
 */
final class HugePageArena implements Arena {
    /**
     * System property: {@code false} makes huge pages unavailable; {@code true} lays the packed decode copies on them
     * where they are available, which by default happens on Intel processors only ({@code CpuDevice}).
     */
    static final String PROPERTY = "dev.prefill4j.cpu.hugePages";
    /** Bytes of a transparent huge page on x86-64 and on arm64 with 4 KiB base pages. */
    static final long HUGE = 2L << 20;
    /**
     * Linux's {@code PROT_READ | PROT_WRITE}, {@code MAP_PRIVATE | MAP_ANONYMOUS} and {@code MADV_HUGEPAGE}: the
     * values of the kernel's {@code <asm-generic/mman-common.h>} and {@code <linux/mman.h>}, the same on x86-64 and
     * arm64.
     */
    private static final int PROT_RW = 0x3;
    private static final int MAP_PRIVATE_ANONYMOUS = 0x22;
    private static final int MADV_HUGEPAGE = 14;
    /** {@code void *mmap(void *, size_t, int, int, int, off_t)}, or null where huge pages are not used. */
    private static final MethodHandle MMAP;
    /** {@code int munmap(void *, size_t)}. */
    private static final MethodHandle MUNMAP;
    /** {@code int madvise(void *, size_t, int)}. */
    private static final MethodHandle MADVISE;
    /** Why huge pages are used or not, for the device's description. */
    private static final String STATUS;

    static {
        MethodHandle[] handles = new MethodHandle[3];
        STATUS = link(handles);
        MMAP = handles[0];
        MUNMAP = handles[1];
        MADVISE = handles[2];
    }

    private final Arena small = Arena.ofShared();

    /** {@return whether large allocations lie on huge pages here} */
    static boolean available() {
        return MMAP != null;
    }

    /** {@return a phrase for the device's description: whether huge pages are available here, or why not} */
    static String status() {
        return STATUS;
    }

    @SuppressWarnings("restricted")
    private static String link(MethodHandle[] handles) {
        if ("false".equals(System.getProperty(PROPERTY))) {
            return "not available (-D" + PROPERTY + "=false)";
        }
        if (!"Linux".equals(System.getProperty("os.name"))) {
            return "not used (Linux only)";
        }
        String mode;
        try {
            mode = Files.readString(Path.of("/sys/kernel/mm/transparent_hugepage/enabled")).trim();
        } catch (IOException | SecurityException e) {
            return "not used (transparent huge pages not found: " + e.getMessage() + ")";
        }
        if (mode.contains("[never]")) {
            return "not used (the kernel's transparent huge pages are [never])";
        }
        if (!HugePageArena.class.getModule().isNativeAccessEnabled()) {
            return "not used (grant --enable-native-access=dev.prefill4j.backend.cpu)";
        }
        try {
            Linker linker = Linker.nativeLinker();
            var lookup = linker.defaultLookup();
            var mmap = lookup.find("mmap");
            var munmap = lookup.find("munmap");
            var madvise = lookup.find("madvise");
            if (mmap.isEmpty() || munmap.isEmpty() || madvise.isEmpty()) {
                return "not used (mmap, munmap or madvise not found in the C library)";
            }
            handles[0] = linker.downcallHandle(mmap.get(), FunctionDescriptor.of(ValueLayout.ADDRESS,
                    ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG));
            handles[1] = linker.downcallHandle(munmap.get(), FunctionDescriptor.of(ValueLayout.JAVA_INT,
                    ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
            handles[2] = linker.downcallHandle(madvise.get(), FunctionDescriptor.of(ValueLayout.JAVA_INT,
                    ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
        } catch (UnsupportedOperationException | IllegalArgumentException e) {
            handles[0] = null;
            return "not used (no native linker here: " + e.getMessage() + ")";
        }
        return "available (transparent huge pages " + mode + ")";
    }

    /**
     * {@inheritDoc} Segments of at least {@link #HUGE} bytes (alignments up to it) lie on huge pages where {@link
     * #available}; their contents are zero, as the kernel hands out anonymous pages.
     */
    @Override
    @SuppressWarnings("restricted")
    public MemorySegment allocate(long byteSize, long byteAlignment) {
        if (MMAP == null || byteSize < HUGE || byteAlignment > HUGE) {
            return small.allocate(byteSize, byteAlignment);
        }
        long length = byteSize + HUGE; // room to start on a 2 MiB boundary; the pages not touched take no memory
        MemorySegment raw;
        try {
            raw = (MemorySegment) MMAP.invokeExact(MemorySegment.NULL, length, PROT_RW, MAP_PRIVATE_ANONYMOUS, -1, 0L);
        } catch (Throwable t) {
            throw new IllegalStateException("mmap failed", t);
        }
        if (raw.address() == -1L) { // MAP_FAILED: no address space left; let the shared arena say so or succeed
            return small.allocate(byteSize, byteAlignment);
        }
        long base = raw.address();
        long start = (base + HUGE - 1) & -HUGE;
        MemorySegment segment = MemorySegment.ofAddress(start).reinterpret(byteSize, small, s -> unmap(base, length));
        try {
            // Advice is a hint: were it refused, the copy lies on 4 KiB pages and is as correct.
            int ignored = (int) MADVISE.invokeExact(segment, byteSize & -HUGE, MADV_HUGEPAGE);
        } catch (Throwable t) {
            throw new IllegalStateException("madvise failed", t);
        }
        return segment;
    }

    private static void unmap(long address, long length) {
        try {
            int ignored = (int) MUNMAP.invokeExact(MemorySegment.ofAddress(address), length);
        } catch (Throwable t) {
            throw new IllegalStateException("munmap failed", t);
        }
    }

    @Override
    public MemorySegment.Scope scope() {
        return small.scope();
    }

    /** Frees every segment of this arena: the shared arena's, and the huge pages' mappings. */
    @Override
    public void close() {
        small.close();
    }
}
