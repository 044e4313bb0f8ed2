package dev.prefill4j.kvstore.ssd;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVElementType;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;
import java.util.regex.Pattern;
import java.util.zip.CRC32C;

/**
 * The files of a kept cache ({@code --kv-keep NAME}): {@code NAME.p4kv} holds the pages, {@code NAME.p4kv.meta} the
 * geometry, the positions per layer, the session's state and whether the cache was closed cleanly.
 *
 * <p>Crash detection: while a session uses the cache, the meta file says {@code OPEN} with the process id, and the
 * data file is locked. Only a clean close (pages flushed and forced to disk first) rewrites it as {@code CLOSED},
 * atomically (temporary file, force, rename). A cache whose meta still says {@code OPEN} was left by a process that
 * stopped while using it (killed, crashed, or failed on I/O): its pages may be incomplete, so it is refused. A locked
 * data file belongs to a running session and is refused too.
 *
 * <p>Meta layout, little-endian: magic {@code P4KM}, version 1, state (1 open, 2 closed), reserved, pid (int64),
 * layers, kvDim, capacity, element type ordinal, page size, reserved, slot bytes (int64), positions per layer
 * (int32 each), state length (int32) and bytes, CRC32C of everything before it (int32).
 */
final class KeptFiles {
    private static final int MAGIC = 0x4D4B3450; // "P4KM"
    private static final int VERSION = 1;
    private static final int OPEN = 1;
    private static final int CLOSED = 2;
    /** Bytes before the positions per layer. */
    private static final int HEAD = 56;
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._-]{1,100}");

    /** What a meta file holds. */
    record Meta(int status, long pid, int layers, int kvDim, int capacity, int elementType, int pageSize, long slot,
                int[] lengths, byte[] state) {
    }

    private final Path dir;
    private final Path data;
    private final Path meta;
    private final KVConfig config;
    private final long slot;
    private FileLock lock;
    private Meta previous;

    KeptFiles(Path dir, String name, KVConfig config, long slot) {
        if (!NAME.matcher(name).matches()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "KV cache name '" + name + "': use 1 to 100 "
                    + "letters, digits, '.', '_' or '-'");
        }
        this.dir = dir;
        this.data = dir.resolve(name + ".p4kv");
        this.meta = dir.resolve(name + ".p4kv.meta");
        this.config = config;
        this.slot = slot;
    }

    Path data() {
        return data;
    }

    /** {@return what the reopened cache's meta file said} */
    Meta meta() {
        return previous;
    }

    /** Creates both files for a new kept cache, locks the data file and marks the cache open. */
    FileChannel create() {
        if (Files.exists(data) || Files.exists(meta)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "a kept KV cache already exists at " + data
                    + "; continue it with --kv-resume, or delete " + data + "* to start over");
        }
        FileChannel ch = DirectIo.create(data, dir);
        lock(ch);
        write(OPEN, new int[config.layers()], new byte[0]);
        return ch;
    }

    /** Opens a kept cache: refuses one in use, one not closed cleanly and one made for another geometry. */
    FileChannel reopen() {
        if (!Files.exists(data) || !Files.exists(meta)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "no kept KV cache at " + data + " (and "
                    + meta.getFileName() + "); create one with --kv-keep");
        }
        FileChannel ch = DirectIo.open(data, dir);
        try {
            lock(ch);
            Meta m = read();
            if (m.status() != CLOSED) {
                throw new PrefillException(PrefillException.Code.IO, data + " was not closed cleanly: process " + m.pid()
                        + " stopped while using it (killed, crashed or failed on I/O), so its pages may be incomplete"
                        + " and it is not trusted; delete " + data + "* and start over");
            }
            String mismatch = mismatch(m);
            if (mismatch != null) {
                throw new PrefillException(PrefillException.Code.ARGUMENT, data + " was made for " + mismatch
                        + "; resume it with the same model, --kv-type, context length (-c) and page size");
            }
            previous = m;
            write(OPEN, m.lengths(), m.state());
            return ch;
        } catch (RuntimeException e) {
            unlock();
            try {
                ch.close();
            } catch (IOException ignored) {
                // The refusal is what the user needs to see.
            }
            throw e;
        }
    }

    private String mismatch(Meta m) {
        long want = slot;
        if (m.layers() != config.layers() || m.kvDim() != config.kvDim()) {
            return m.layers() + " layers of " + m.kvDim() + " KV elements, not " + config.layers() + " of "
                    + config.kvDim() + " (another model)";
        }
        if (m.elementType() != config.elementType().ordinal()) {
            return "KV type " + KVElementType.values()[m.elementType()] + ", not "
                    + config.elementType();
        }
        if (m.capacity() != config.capacity()) {
            return "a context of " + m.capacity() + " positions, not " + config.capacity();
        }
        if (m.pageSize() != config.pageSize() || m.slot() != want) {
            return "pages of " + m.pageSize() + " positions in " + m.slot() + "-byte slots, not " + config.pageSize()
                    + " in " + want;
        }
        return null;
    }

    private void lock(FileChannel ch) {
        try {
            lock = ch.tryLock();
        } catch (IOException | OverlappingFileLockException e) {
            lock = null;
        }
        if (lock == null) {
            throw new PrefillException(PrefillException.Code.IO, data + " is in use by another session; close it first");
        }
    }

    void unlock() {
        try {
            if (lock != null && lock.isValid()) {
                lock.release();
            }
        } catch (IOException ignored) {
            // Closing the channel releases it anyway.
        }
    }

    /** Marks the cache cleanly closed, with its positions and the session's state. Pages must be forced first. */
    void closeCleanly(int[] lengths, byte[] state) {
        write(CLOSED, lengths, state);
    }

    private void write(int status, int[] lengths, byte[] state) {
        ByteBuffer b = ByteBuffer.allocate(HEAD + 4 * lengths.length + 4 + state.length + 4).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putInt(VERSION).putInt(status).putInt(0).putLong(ProcessHandle.current().pid());
        b.putInt(config.layers()).putInt(config.kvDim()).putInt(config.capacity()).putInt(config.elementType().ordinal())
                .putInt(config.pageSize()).putInt(0).putLong(slot);
        for (int n : lengths) {
            b.putInt(n);
        }
        b.putInt(state.length).put(state);
        CRC32C crc = new CRC32C();
        crc.update(b.array(), 0, b.position());
        b.putInt((int) crc.getValue());
        Path tmp = dir.resolve(meta.getFileName() + ".tmp");
        try {
            Files.deleteIfExists(tmp);
            Files.createFile(tmp, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
                b.flip();
                while (b.hasRemaining()) {
                    ch.write(b);
                }
                ch.force(true);
            }
            Files.move(tmp, meta, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, meta + ": cannot write the KV cache's meta file: "
                    + e.getMessage(), e);
        }
    }

    private Meta read() {
        byte[] all;
        try {
            all = Files.readAllBytes(meta);
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, meta + ": cannot read: " + e.getMessage(), e);
        }
        String bad = meta + " is damaged or not a prefill4j KV meta file; delete " + data + "* and start over";
        if (all.length < HEAD + 8) {
            throw new PrefillException(PrefillException.Code.IO, bad);
        }
        ByteBuffer b = ByteBuffer.wrap(all).order(ByteOrder.LITTLE_ENDIAN);
        CRC32C crc = new CRC32C();
        crc.update(all, 0, all.length - 4);
        if (b.getInt(0) != MAGIC || b.getInt(4) != VERSION || b.getInt(all.length - 4) != (int) crc.getValue()) {
            throw new PrefillException(PrefillException.Code.IO, bad);
        }
        b.position(8);
        int status = b.getInt();
        b.getInt();
        long pid = b.getLong();
        int layers = b.getInt();
        int kvDim = b.getInt();
        int capacity = b.getInt();
        int type = b.getInt();
        int pageSize = b.getInt();
        b.getInt();
        long slotBytes = b.getLong();
        if (layers < 1 || layers > 4096 || (long) HEAD + 4L * layers + 8 > all.length || type < 0
                || type >= KVElementType.values().length) {
            throw new PrefillException(PrefillException.Code.IO, bad);
        }
        int[] lengths = new int[layers];
        for (int i = 0; i < layers; i++) {
            lengths[i] = b.getInt();
            if (lengths[i] < 0 || lengths[i] > capacity) {
                throw new PrefillException(PrefillException.Code.IO, bad);
            }
        }
        int n = b.getInt();
        if (n < 0 || n != all.length - 4 - b.position()) {
            throw new PrefillException(PrefillException.Code.IO, bad);
        }
        byte[] state = Arrays.copyOfRange(all, b.position(), b.position() + n);
        return new Meta(status, pid, layers, kvDim, capacity, type, pageSize, slotBytes, lengths, state);
    }
}
