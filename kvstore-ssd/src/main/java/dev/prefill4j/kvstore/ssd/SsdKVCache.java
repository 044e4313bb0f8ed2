package dev.prefill4j.kvstore.ssd;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.Blocks;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVPage;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * One session's KV cache on disk. Each (layer, page) has a fixed slot in one file; a slot is a 64-byte header
 * (magic, layer, page, positions, payload length, CRC32C of the payload) followed by the page's K rows then V rows,
 * rounded up to the alignment (16 KiB or the file system's block size if larger). The page being filled stays in RAM
 * and is written, with direct I/O, once it is full; pages read back are checked against their CRC and kept in a
 * bounded in-RAM cache. Truncation (rejected draft tokens) reloads the page it cuts into.
 *
 * <p>{@link #page} may be called by several attention threads at once; the other methods by the session's thread.
 */
final class SsdKVCache implements KVCache {
    private static final int HEADER = 64;
    private static final int MAGIC = 0x50344B56; // "P4KV"

    private final KVConfig config;
    private final Path file;
    private final FileChannel channel;
    private final Arena arena = Arena.ofShared();
    private final long rowBytes;
    private final long payload;
    private final long slot;
    private final int alignment;
    private final int[] lengths;
    private final int[] current;
    private final MemorySegment[] writeBuffers;
    private final boolean[][] onDisk;
    private final Map<Long, MemorySegment> readCache;
    /** Buffers evicted from the read cache, reused by later reads: memory stays bounded by the cache size. */
    private final java.util.ArrayDeque<MemorySegment> free = new java.util.ArrayDeque<>();
    private long bytesWritten;
    private boolean closed;

    SsdKVCache(KVConfig config, Path dir, long cacheBytes) {
        this.config = config;
        this.rowBytes = config.elementType().rowBytes(config.kvDim());
        this.payload = 2 * rowBytes * config.pageSize();
        try {
            this.alignment = (int) Math.max(16384, Files.getFileStore(dir).getBlockSize());
            this.slot = (HEADER + payload + alignment - 1) / alignment * alignment;
            this.file = dir.resolve("prefill4j-kv-" + ProcessHandle.current().pid() + "-" + System.nanoTime() + ".kv");
            Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            FileChannel ch;
            try {
                ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE, directOption());
            } catch (IOException | UnsupportedOperationException e) {
                Files.deleteIfExists(file);
                throw new PrefillException(PrefillException.Code.IO, dir + ": the file system does not support direct "
                        + "I/O (" + e.getMessage() + "); choose a --kv-dir on a disk, not tmpfs", e);
            }
            this.channel = ch;
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, dir + ": cannot create the KV file: " + e.getMessage(), e);
        }
        int layers = config.layers();
        this.lengths = new int[layers];
        this.current = new int[layers];
        this.writeBuffers = new MemorySegment[layers];
        this.onDisk = new boolean[layers][config.pagesPerLayer()];
        for (int l = 0; l < layers; l++) {
            writeBuffers[l] = arena.allocate(slot, alignment);
        }
        int maxCached = (int) Math.max(2, Math.min(Integer.MAX_VALUE, cacheBytes / slot));
        this.readCache = new LinkedHashMap<>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, MemorySegment> eldest) {
                if (size() > maxCached) {
                    // Safe to reuse: the cache holds far more pages than attention threads use at once, and the
                    // least recently used page is not one a thread is reading.
                    free.push(eldest.getValue());
                    return true;
                }
                return false;
            }
        };
    }

    /**
     * {@return {@code com.sun.nio.file.ExtendedOpenOption.DIRECT}}, the JDK's only way to {@code O_DIRECT}. Looked up
     * reflectively (its package is exported by {@code jdk.unsupported}, which this module requires) so that javac's
     * proprietary-API warning, which cannot be suppressed, does not break the {@code -Werror} build.
     */
    private static java.nio.file.OpenOption directOption() {
        try {
            return (java.nio.file.OpenOption) Class.forName("com.sun.nio.file.ExtendedOpenOption").getField("DIRECT")
                    .get(null);
        } catch (ReflectiveOperationException | ClassCastException e) {
            throw new UnsupportedOperationException("this JDK offers no direct I/O open option", e);
        }
    }

    /** The file of this cache (tests inspect it). */
    Path file() {
        return file;
    }

    @Override
    public KVConfig config() {
        return config;
    }

    private long slotOffset(int layer, int page) {
        return ((long) layer * config.pagesPerLayer() + page) * slot;
    }

    @Override
    public void append(int layer, int position, int count, float[] k, float[] v) {
        if (closed) {
            throw new IllegalStateException("KV cache is closed");
        }
        if (position != lengths[layer]) {
            throw new IllegalArgumentException("layer " + layer + " holds " + lengths[layer] + " positions; cannot append at "
                    + position);
        }
        if ((long) position + count > config.capacity()) {
            throw new IllegalArgumentException("positions " + position + ".." + (position + count - 1)
                    + " exceed the KV capacity of " + config.capacity());
        }
        int kvDim = config.kvDim();
        for (int i = 0; i < count; i++) {
            int p = position + i;
            int page = p / config.pageSize();
            if (page != current[layer]) {
                current[layer] = page;
                forget(layer, page); // a copy on disk from before a truncation is stale now
            }
            long row = p % config.pageSize();
            MemorySegment buf = writeBuffers[layer];
            config.elementType().encode(k, i * kvDim, kvDim, buf, HEADER + rowBytes * row);
            config.elementType().encode(v, i * kvDim, kvDim, buf, HEADER + rowBytes * config.pageSize() + rowBytes * row);
            lengths[layer] = p + 1;
            if (row == config.pageSize() - 1) {
                flush(layer, page, config.pageSize());
            }
        }
    }

    /** Writes the layer's current page (header with CRC, then payload) to its slot with direct I/O. */
    private void flush(int layer, int page, int positions) {
        MemorySegment buf = writeBuffers[layer];
        CRC32C crc = new CRC32C();
        crc.update(buf.asSlice(HEADER, payload).asByteBuffer());
        buf.set(Blocks.I32, 0, MAGIC);
        buf.set(Blocks.I32, 4, layer);
        buf.set(Blocks.I32, 8, page);
        buf.set(Blocks.I32, 12, positions);
        buf.set(Blocks.I32, 16, (int) payload);
        buf.set(Blocks.I32, 20, (int) crc.getValue());
        try {
            ByteBuffer bb = buf.asByteBuffer();
            long at = slotOffset(layer, page);
            while (bb.hasRemaining()) {
                at += channel.write(bb, at);
            }
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": writing KV page " + page + " of layer " + layer
                    + " failed: " + e.getMessage() + " (disk full?)", e);
        }
        bytesWritten += slot;
        onDisk[layer][page] = true;
        synchronized (readCache) {
            MemorySegment gone = readCache.remove(key(layer, page));
            if (gone != null) {
                free.push(gone);
            }
        }
    }

    private static long key(int layer, int page) {
        return ((long) layer << 32) | page;
    }

    /** Reads a slot with direct I/O and checks it; never returns data that did not verify. */
    private MemorySegment read(int layer, int page) {
        MemorySegment buf = free.isEmpty() ? arena.allocate(slot, alignment) : free.pop();
        try {
            ByteBuffer bb = buf.asByteBuffer();
            long at = slotOffset(layer, page);
            while (bb.hasRemaining()) {
                int n = channel.read(bb, at);
                if (n < 0) {
                    throw new IOException("unexpected end of file");
                }
                at += n;
            }
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": reading KV page " + page + " of layer " + layer
                    + " failed: " + e.getMessage(), e);
        }
        int first = page * config.pageSize();
        String where = file + ": KV page " + page + " of layer " + layer + " (positions " + first + ".."
                + (first + config.pageSize() - 1) + ")";
        if (buf.get(Blocks.I32, 0) != MAGIC || buf.get(Blocks.I32, 4) != layer || buf.get(Blocks.I32, 8) != page
                || buf.get(Blocks.I32, 16) != (int) payload) {
            throw new PrefillException(PrefillException.Code.IO, where + " has a bad header: the file is corrupt");
        }
        CRC32C crc = new CRC32C();
        crc.update(buf.asSlice(HEADER, payload).asByteBuffer());
        if ((int) crc.getValue() != buf.get(Blocks.I32, 20)) {
            throw new PrefillException(PrefillException.Code.IO, where + " fails its CRC32C check: the data on disk is "
                    + "corrupt");
        }
        return buf;
    }

    @Override
    public int length(int layer) {
        return lengths[layer];
    }

    @Override
    public KVPage page(int layer, int index) {
        int first = index * config.pageSize();
        int n = Math.min(config.pageSize(), lengths[layer] - first);
        if (n <= 0) {
            throw new IndexOutOfBoundsException("page " + index + " of layer " + layer + " holds no positions");
        }
        MemorySegment buf;
        if (index == current[layer] && !onDisk[layer][index]) {
            buf = writeBuffers[layer];
        } else {
            long key = key(layer, index);
            synchronized (readCache) {
                buf = readCache.get(key);
                if (buf == null) {
                    buf = read(layer, index);
                    readCache.put(key, buf);
                }
            }
        }
        return new KVPage(first, n, buf.asSlice(HEADER, rowBytes * config.pageSize()),
                buf.asSlice(HEADER + rowBytes * config.pageSize(), rowBytes * config.pageSize()),
                config.elementType(), config.kvDim());
    }

    @Override
    public void truncate(int length) {
        for (int l = 0; l < lengths.length; l++) {
            if (length >= lengths[l]) {
                continue;
            }
            lengths[l] = length;
            int page = length / config.pageSize();
            if (page != current[l] || onDisk[l][page]) {
                // The cut falls in a page already written: bring it back as the page being filled.
                if (onDisk[l][page]) {
                    MemorySegment data;
                    synchronized (readCache) {
                        data = read(l, page);
                        MemorySegment.copy(data, 0, writeBuffers[l], 0, slot);
                        free.push(data);
                    }
                    onDisk[l][page] = false;
                }
                current[l] = page;
            }
            for (int p = page + 1; p < config.pagesPerLayer(); p++) {
                forget(l, p);
            }
        }
    }

    /** Marks a page as having no valid copy on disk and drops it from the read cache. */
    private void forget(int layer, int page) {
        onDisk[layer][page] = false;
        synchronized (readCache) {
            MemorySegment gone = readCache.remove(key(layer, page));
            if (gone != null) {
                free.push(gone);
            }
        }
    }

    @Override
    public long bytesHeld() {
        return bytesWritten;
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            channel.close();
            Files.deleteIfExists(file);
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": cannot remove the KV file: " + e.getMessage(), e);
        } finally {
            arena.close();
        }
    }
}
