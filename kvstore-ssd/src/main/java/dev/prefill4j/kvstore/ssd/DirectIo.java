package dev.prefill4j.kvstore.ssd;

import dev.prefill4j.api.PrefillException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;

/** Direct ({@code O_DIRECT}) file I/O through aligned buffers: opening, full reads and writes, a speed probe. */
final class DirectIo {
    /** Transparent huge page size on x86-64 and most aarch64 Linux kernels. */
    private static final long HUGE_PAGE = 2L << 20;
    /** {@code MADV_HUGEPAGE} from Linux's {@code <asm-generic/mman-common.h>} (the same value on every architecture). */
    private static final int MADV_HUGEPAGE = 14;
    /**
     * {@code MADV_DONTNEED} (the same header): the range's pages are let go, and private anonymous memory, which the
     * C library's {@code malloc} under {@code Arena.ofShared()} hands out, reads as zeros when next touched.
     */
    private static final int MADV_DONTNEED = 4;
    /** {@code int madvise(void *addr, size_t length, int advice)}, or null where it is not used. */
    private static final MethodHandle MADVISE = madvise();

    private DirectIo() {
    }

    /**
     * {@code madvise} from the C library, when huge pages can be asked for: on Linux, and only when this module was
     * granted native access ({@code --enable-native-access=dev.prefill4j.kvstore.ssd}); otherwise null, and buffers
     * are plain (no warning is printed either way).
     */
    @SuppressWarnings("restricted")
    private static MethodHandle madvise() {
        if (!"Linux".equals(System.getProperty("os.name")) || !DirectIo.class.getModule().isNativeAccessEnabled()) {
            return null;
        }
        Linker linker = Linker.nativeLinker();
        return linker.defaultLookup().find("madvise").map(f -> linker.downcallHandle(f, FunctionDescriptor.of(
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT))).orElse(null);
    }

    /**
     * A buffer for direct reads of {@code bytes}, aligned to {@code alignment}, zeroed. Where {@code madvise} may be
     * called (see {@link #madvise()}), it is aligned to 2 MiB and advised to use transparent huge pages: each huge
     * page is physically contiguous, so a direct read becomes a few large device requests instead of one segment per
     * 4 KiB page. On the development machine's virtual disk that made the same 8 MiB reads of the KV file 2.1x faster
     * (read-ahead ring of 256 MiB, four alternations: 147-148% against 68-69% of a plain sequential read into a fresh
     * buffer). The advice is a hint; where the kernel ignores it (huge pages disabled) the buffer works the same.
     *
     * <p>The arena zeroes what it allocates, which brings every page in as a 4 KiB page before any advice, and a page
     * already there stays small: with the advice given after the zeroing alone, a 256 MiB ring had no huge page in a
     * whole {@code bench --context 262144 --kv ssd} run on a machine whose transparent huge pages are {@code madvise}
     * ({@code AnonHugePages} 0 kB; 2026-12-07, Intel Xeon VM; a kernel set to {@code always} gives them at the first
     * touch anyway). So the advice comes first and the zeroed pages are then let go ({@code MADV_DONTNEED}): the
     * buffer still reads as zeros, and its first writes bring it in as huge pages (262,144 kB of them in the same
     * run). The range is whole pages of this allocation alone (2 MiB-aligned inside the arena's larger block), so
     * nothing else loses memory.
     */
    static MemorySegment buffer(Arena arena, long bytes, int alignment) {
        if (MADVISE == null) {
            return arena.allocate(bytes, alignment);
        }
        long size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        MemorySegment m = arena.allocate(size, Math.max(alignment, HUGE_PAGE));
        try {
            if ((int) MADVISE.invokeExact(m, size, MADV_HUGEPAGE) == 0) {
                int ignored = (int) MADVISE.invokeExact(m, size, MADV_DONTNEED);
            }
        } catch (Throwable t) {
            throw new IllegalStateException("madvise failed", t);
        }
        return m.asSlice(0, bytes);
    }

    /**
     * {@return {@code com.sun.nio.file.ExtendedOpenOption.DIRECT}}, the JDK's only way to {@code O_DIRECT}. Looked up
     * reflectively (its package is exported by {@code jdk.unsupported}, which this module requires) so that javac's
     * proprietary-API warning, which cannot be suppressed, does not break the {@code -Werror} build.
     */
    static OpenOption direct() {
        try {
            return (OpenOption) Class.forName("com.sun.nio.file.ExtendedOpenOption").getField("DIRECT").get(null);
        } catch (ReflectiveOperationException | ClassCastException e) {
            throw new UnsupportedOperationException("this JDK offers no direct I/O open option", e);
        }
    }

    /** Creates {@code file} readable and writable by its owner only and opens it for direct I/O. */
    static FileChannel create(Path file, Path dir) {
        try {
            Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": cannot create the KV file: " + e.getMessage(), e);
        }
        try {
            return open(file, dir);
        } catch (PrefillException e) {
            try {
                Files.deleteIfExists(file);
            } catch (IOException ignored) {
                // The open failure is what the user needs to see.
            }
            throw e;
        }
    }

    /** Opens an existing file for direct reads and writes. */
    static FileChannel open(Path file, Path dir) {
        try {
            return FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE, direct());
        } catch (IOException | UnsupportedOperationException e) {
            throw new PrefillException(PrefillException.Code.IO, dir + ": the file system does not support direct "
                    + "I/O (" + e.getMessage() + "); choose a --kv-dir on a disk", e);
        }
    }

    static void writeFully(FileChannel ch, ByteBuffer bb, long at) throws IOException {
        while (bb.hasRemaining()) {
            at += ch.write(bb, at);
        }
    }

    static void readFully(FileChannel ch, ByteBuffer bb, long at) throws IOException {
        while (bb.hasRemaining()) {
            int n = ch.read(bb, at);
            if (n < 0) {
                throw new IOException("unexpected end of file at byte " + at);
            }
            at += n;
        }
    }

    /**
     * Reads the first {@code bytes} of the channel's file sequentially in requests of {@code chunk} bytes into
     * {@code buffer}, going round it (the read-ahead ring's own memory and request size, without its threads, checks
     * and copies), and returns bytes per second.
     */
    static double sequentialReadSpeed(FileChannel ch, Path file, long bytes, MemorySegment buffer, long chunk,
                                      int alignment) {
        try {
            long todo = Math.min(bytes, ch.size()) / alignment * alignment;
            long at = 0;
            long t0 = System.nanoTime();
            for (long b = 0; at < todo; at += chunk, b = (b + chunk) % (buffer.byteSize() / chunk * chunk)) {
                readFully(ch, buffer.asSlice(b, Math.min(chunk, todo - at)).asByteBuffer(), at);
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            return todo / Math.max(seconds, 1e-9);
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": direct-I/O read test failed: " + e.getMessage(), e);
        }
    }
}
