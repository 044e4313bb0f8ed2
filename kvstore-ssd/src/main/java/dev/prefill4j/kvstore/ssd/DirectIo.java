package dev.prefill4j.kvstore.ssd;

import dev.prefill4j.api.PrefillException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;

/** Direct ({@code O_DIRECT}) file I/O through aligned buffers: opening, full reads and writes, a speed probe. */
final class DirectIo {
    private DirectIo() {
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
     * Reads the first {@code bytes} of {@code file} sequentially with direct I/O in 8 MiB requests (the same path as
     * the cache's reads, without its checks and copies) and returns bytes per second.
     */
    static double sequentialReadSpeed(Path file, long bytes, int alignment) {
        int chunk = 8 << 20;
        try (Arena arena = Arena.ofConfined();
             FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, direct())) {
            MemorySegment buf = arena.allocate(chunk, alignment);
            long todo = Math.min(bytes, ch.size()) / alignment * alignment;
            long t0 = System.nanoTime();
            for (long at = 0; at < todo; at += chunk) {
                ByteBuffer bb = buf.asSlice(0, Math.min(chunk, todo - at)).asByteBuffer();
                readFully(ch, bb, at);
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            return todo / Math.max(seconds, 1e-9);
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": direct-I/O read test failed: " + e.getMessage(), e);
        }
    }
}
