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
import java.util.ArrayDeque;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.concurrent.atomic.AtomicLong;
import java.util.zip.CRC32C;

/**
 * One session's KV cache on disk.
 *
 * <p><b>Layout.</b> Every (layer, page) has two fixed slots, K then V, one after the other, so a layer's pages are a
 * contiguous run of the file. A slot is a 64-byte header (magic, layer, page, K or V, positions, payload length,
 * CRC32C of the payload) and the page's rows, rounded up to the alignment (16 KiB, or the file system's block size
 * if larger). All data I/O is direct ({@code O_DIRECT}) through aligned buffers: the page cache holds none of it.
 *
 * <p><b>Writing.</b> The page being filled stays in RAM and is written once full (or, for a kept cache, when the
 * session closes). A page counts as on disk only after both of its slots were written; a failed write (a full disk)
 * marks the cache failed, and nothing it left half-written is ever read.
 *
 * <p><b>Reading.</b> When attention announces a layer ({@link #readAhead}), an I/O thread streams that layer's pages,
 * in order and up to 16 per request, into a ring of page slots; attention takes pages from the ring as they arrive
 * and hands each back with {@link #release}, which frees its slot for a page further ahead. The ring is the
 * back-pressure: the I/O thread waits for a free slot, never queues without bound. The ring keeps each page's K and
 * V slots side by side, as the file does, so a run of pages is one contiguous direct read: with K and V in two
 * separate rings the same data needed a scattering read, which ran at about half the speed (0.85 against 1.27 GB/s
 * on the development machine). On Linux, with native access granted to this module, the ring is advised to use
 * transparent huge pages (see {@link DirectIo#buffer}), which made its reads about twice as fast on the development
 * machine. {@link #sequentialReadSpeed} reads the file through the same ring memory in the same request size, so it
 * measures the disk and leaves the pipeline's overhead to the comparison. Pages read outside an announcement go
 * through a small LRU cache. Every page read is
 * checked against its header and CRC (by the thread that takes it); a mismatch is an error naming the file, layer,
 * positions and K or V.
 *
 * <p>{@link #page} and {@link #release} may be called by several attention threads at once; the other methods by the
 * session's thread.
 */
final class SsdKVCache implements KVCache {
    static final int HEADER = 64;
    static final int MAGIC = 0x50344B56; // "P4KV"
    private static final java.lang.foreign.ValueLayout.OfLong I64 =
            java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN);
    /** Most pages per read request of the I/O thread. */
    private static final int MAX_BATCH = 16;

    private final KVConfig config;
    private final Path file;
    private final KeptFiles kept;
    private final FileChannel channel;
    private final Arena arena = Arena.ofShared();
    private final long rowBytes;
    private final long payload;
    private final long slot;
    private final int alignment;
    private final int[] lengths;
    private final int[] current;
    private final MemorySegment[] writeK;
    private final MemorySegment[] writeV;
    private final boolean[][] onDisk;
    private final Map<Long, MemorySegment> readCache;
    /** Buffers evicted from the read cache, reused by later reads: memory stays bounded by the cache size. */
    private final ArrayDeque<MemorySegment> free = new ArrayDeque<>();
    private final ReadAhead readAhead;
    private final AtomicLong bytesRead = new AtomicLong();
    private final byte[] resumedState;
    private byte[] stateToSave;
    private long slotsOnDisk;
    private boolean failed;
    private boolean closed;

    /**
     * Opens a cache: a new anonymous one (its name removed as soon as it is open), a new kept one, or a kept one reopened.
     *
     * @param config     geometry
     * @param dir        directory of the files
     * @param keepName   name of a kept cache, or {@code null}
     * @param resume     reopen the kept cache {@code keepName} instead of creating it
     * @param cacheBytes RAM for pages read outside a read-ahead
     * @param ringBytes  RAM of the read-ahead ring for K slots, and as much again for V slots
     */
    SsdKVCache(KVConfig config, Path dir, String keepName, boolean resume, long cacheBytes, long ringBytes) {
        this.config = config;
        this.rowBytes = config.elementType().rowBytes(config.kvDim());
        this.payload = rowBytes * config.pageSize();
        try {
            this.alignment = (int) Math.max(16384, Files.getFileStore(dir).getBlockSize());
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, dir + ": cannot read the file system's block size: "
                    + e.getMessage(), e);
        }
        this.slot = (HEADER + payload + alignment - 1) / alignment * alignment;
        int layers = config.layers();
        this.lengths = new int[layers];
        this.current = new int[layers];
        this.onDisk = new boolean[layers][config.pagesPerLayer()];
        if (keepName == null) {
            this.kept = null;
            this.file = dir.resolve("prefill4j-kv-" + ProcessHandle.current().pid() + "-" + System.nanoTime() + ".kv");
            this.channel = DirectIo.create(file, dir);
            this.resumedState = null;
            unlinkWhileOpen(file);
        } else {
            this.kept = new KeptFiles(dir, keepName, config, slot);
            this.file = kept.data();
            if (resume) {
                this.channel = kept.reopen();
                KeptFiles.Meta meta = kept.meta();
                this.resumedState = meta.state();
                System.arraycopy(meta.lengths(), 0, lengths, 0, layers);
            } else {
                this.channel = kept.create();
                this.resumedState = null;
            }
        }
        this.writeK = new MemorySegment[layers];
        this.writeV = new MemorySegment[layers];
        for (int l = 0; l < layers; l++) {
            writeK[l] = arena.allocate(slot, alignment);
            writeV[l] = arena.allocate(slot, alignment);
        }
        int maxCached = (int) Math.max(2, Math.min(Integer.MAX_VALUE, cacheBytes / (2 * slot)));
        this.readCache = new LinkedHashMap<>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, MemorySegment> eldest) {
                if (size() > maxCached) {
                    // Safe to reuse: the cache holds more pages than attention threads use at once, and the least
                    // recently used page is not one a thread is reading.
                    free.push(eldest.getValue());
                    return true;
                }
                return false;
            }
        };
        if (resumedState != null) {
            restorePages();
        }
        this.stateToSave = resumedState; // a session that saves nothing new leaves the kept state as it was
        int ringSlots = (int) Math.max(1, Math.min(1 << 20, ringBytes / slot));
        this.readAhead = new ReadAhead(ringSlots);
    }

    /** After a reopen: full pages are on disk; a partly filled last page is loaded back as the page being filled. */
    private void restorePages() {
        for (int l = 0; l < lengths.length; l++) {
            int full = lengths[l] / config.pageSize();
            for (int p = 0; p < full; p++) {
                onDisk[l][p] = true;
            }
            slotsOnDisk += 2L * full;
            current[l] = full;
            int rest = lengths[l] % config.pageSize();
            if (rest > 0) {
                MemorySegment data = readSync(l, full, rest);
                MemorySegment.copy(data, 0, writeK[l], 0, slot);
                MemorySegment.copy(data, slot, writeV[l], 0, slot);
                free.push(data);
            }
        }
    }

    @Override
    public KVConfig config() {
        return config;
    }

    private long offset(int layer, int page) {
        return ((long) layer * config.pagesPerLayer() + page) * 2 * slot;
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("KV cache is closed");
        }
        if (failed) {
            throw new PrefillException(PrefillException.Code.IO, file + ": the KV cache failed earlier (see the first "
                    + "error); close the session");
        }
    }

    @Override
    public void append(int layer, int position, int count, float[] k, float[] v) {
        checkUsable();
        if (position != lengths[layer]) {
            throw new IllegalArgumentException("layer " + layer + " holds " + lengths[layer] + " positions; cannot append at "
                    + position);
        }
        if ((long) position + count > config.capacity()) {
            throw new IllegalArgumentException("positions " + position + ".." + (position + count - 1)
                    + " exceed the KV capacity of " + config.capacity());
        }
        // Appends only touch the page in RAM; a page they complete is new on disk, after any page being streamed.
        int kvDim = config.kvDim();
        for (int i = 0; i < count; i++) {
            int p = position + i;
            int page = p / config.pageSize();
            if (page != current[layer]) {
                current[layer] = page;
                if (onDisk[layer][page]) {
                    readAhead.cancel();
                }
                forget(layer, page); // a copy on disk from before a truncation is stale now
            }
            long row = p % config.pageSize();
            config.elementType().encode(k, i * kvDim, kvDim, writeK[layer], HEADER + rowBytes * row);
            config.elementType().encode(v, i * kvDim, kvDim, writeV[layer], HEADER + rowBytes * row);
            lengths[layer] = p + 1;
            if (row == config.pageSize() - 1) {
                flush(layer, page, config.pageSize());
            }
        }
    }

    /** Writes the layer's page being filled (both slots, headers with CRCs) with direct I/O. */
    private void flush(int layer, int page, int positions) {
        seal(writeK[layer], layer, page, 0, positions);
        seal(writeV[layer], layer, page, 1, positions);
        long at = offset(layer, page);
        try {
            DirectIo.writeFully(channel, writeK[layer].asByteBuffer(), at);
            DirectIo.writeFully(channel, writeV[layer].asByteBuffer(), at + slot);
        } catch (IOException e) {
            failed = true;
            throw new PrefillException(PrefillException.Code.IO, file + ": writing KV page " + page + " of layer " + layer
                    + " failed: " + e.getMessage() + "; free space on " + file.getParent() + " or choose another "
                    + "--kv-dir", e);
        }
        if (!onDisk[layer][page]) {
            slotsOnDisk += 2;
        }
        onDisk[layer][page] = true;
        dropCached(layer, page);
    }

    /** Fills a slot's header: magic, layer, page, kind, positions, payload length, CRC32C of the payload. */
    private void seal(MemorySegment buf, int layer, int page, int kind, int positions) {
        CRC32C crc = new CRC32C();
        crc.update(buf.asSlice(HEADER, payload).asByteBuffer());
        buf.set(Blocks.I32, 0, MAGIC);
        buf.set(Blocks.I32, 4, layer);
        buf.set(Blocks.I32, 8, page);
        buf.set(Blocks.I32, 12, kind);
        buf.set(Blocks.I32, 16, positions);
        buf.set(I64, 24, payload);
        buf.set(Blocks.I32, 32, (int) crc.getValue());
    }

    /**
     * Checks a slot read back: header fields and CRC32C. {@code positions < 0} accepts any count of a full page.
     *
     * @return {@code null} if it verifies, else what is wrong
     */
    private PrefillException verify(MemorySegment buf, int layer, int page, int kind, int positions) {
        int first = page * config.pageSize();
        String where = file + ": KV page " + page + " of layer " + layer + " (positions " + first + ".."
                + (first + config.pageSize() - 1) + ", " + (kind == 0 ? "K" : "V") + ")";
        int stored = buf.get(Blocks.I32, 16);
        if (buf.get(Blocks.I32, 0) != MAGIC || buf.get(Blocks.I32, 4) != layer || buf.get(Blocks.I32, 8) != page
                || buf.get(Blocks.I32, 12) != kind || buf.get(I64, 24) != payload
                || (positions >= 0 ? stored != positions : stored != config.pageSize())) {
            return new PrefillException(PrefillException.Code.IO, where + " has a bad header: the file is corrupt or "
                    + "was not written completely");
        }
        CRC32C crc = new CRC32C();
        crc.update(buf.asSlice(HEADER, payload).asByteBuffer());
        if ((int) crc.getValue() != buf.get(Blocks.I32, 32)) {
            return new PrefillException(PrefillException.Code.IO, where + " fails its CRC32C check: the data on disk "
                    + "is corrupt");
        }
        return null;
    }

    private static long key(int layer, int page) {
        return ((long) layer << 32) | page;
    }

    /** Reads both slots of a page into one buffer (K at 0, V at {@code slot}) and checks them. */
    private MemorySegment readSync(int layer, int page, int positions) {
        MemorySegment buf;
        synchronized (readCache) {
            buf = free.isEmpty() ? arena.allocate(2 * slot, alignment) : free.pop();
        }
        try {
            DirectIo.readFully(channel, buf.asByteBuffer(), offset(layer, page));
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": reading KV page " + page + " of layer " + layer
                    + " failed: " + e.getMessage(), e);
        }
        bytesRead.addAndGet(2 * slot);
        PrefillException bad = verify(buf.asSlice(0, slot), layer, page, 0, positions);
        if (bad == null) {
            bad = verify(buf.asSlice(slot, slot), layer, page, 1, positions);
        }
        if (bad != null) {
            throw bad;
        }
        return buf;
    }

    @Override
    public int length(int layer) {
        return lengths[layer];
    }

    private KVPage view(int index, int n, MemorySegment k, MemorySegment v) {
        return new KVPage(index * config.pageSize(), n, k.asSlice(HEADER, payload), v.asSlice(HEADER, payload),
                config.elementType(), config.kvDim());
    }

    @Override
    public KVPage page(int layer, int index) {
        int n = Math.min(config.pageSize(), lengths[layer] - index * config.pageSize());
        if (n <= 0) {
            throw new IndexOutOfBoundsException("page " + index + " of layer " + layer + " holds no positions");
        }
        if (index == current[layer] && !onDisk[layer][index]) {
            return view(index, n, writeK[layer], writeV[layer]);
        }
        KVPage streamed = readAhead.take(layer, index, n);
        if (streamed != null) {
            return streamed;
        }
        long key = key(layer, index);
        MemorySegment buf;
        synchronized (readCache) {
            buf = readCache.get(key);
            if (buf == null) {
                buf = readSync(layer, index, -1);
                readCache.put(key, buf);
            }
        }
        return view(index, n, buf, buf.asSlice(slot, slot));
    }

    @Override
    public void readAhead(int layer, int fromPage, int toPage) {
        if (fromPage >= toPage) {
            readAhead.finish(layer);
        } else {
            readAhead.start(layer, fromPage, toPage);
        }
    }

    @Override
    public void release(KVPage page) {
        readAhead.release(page);
    }

    @Override
    public long bytesRead() {
        return bytesRead.get();
    }

    @Override
    public OptionalDouble sequentialReadSpeed(long maxBytes) {
        readAhead.cancel(); // measure the disk alone, with no read-ahead in flight; its ring is free meanwhile
        return OptionalDouble.of(DirectIo.sequentialReadSpeed(channel, file, Math.min(maxBytes, slotsOnDisk * slot),
                readAhead.ring, Math.min(MAX_BATCH, readAhead.slots) * 2 * slot, alignment));
    }

    @Override
    public boolean persistent() {
        return kept != null;
    }

    @Override
    public void saveState(byte[] state) {
        if (kept == null) {
            KVCache.super.saveState(state);
        }
        stateToSave = state.clone();
    }

    @Override
    public Optional<byte[]> savedState() {
        return Optional.ofNullable(resumedState).map(byte[]::clone);
    }

    @Override
    public void truncate(int length) {
        for (int l = 0; l < lengths.length; l++) {
            if (length >= lengths[l]) {
                continue;
            }
            lengths[l] = length;
            int page = length / config.pageSize();
            if (onDisk[l][page] || (page + 1 < config.pagesPerLayer() && onDisk[l][page + 1])) {
                readAhead.cancel(); // pages on disk are about to change
            }
            if (page != current[l] || onDisk[l][page]) {
                // The cut falls in a page already written: bring it back as the page being filled.
                if (onDisk[l][page]) {
                    MemorySegment data = readSync(l, page, -1);
                    MemorySegment.copy(data, 0, writeK[l], 0, slot);
                    MemorySegment.copy(data, slot, writeV[l], 0, slot);
                    synchronized (readCache) {
                        free.push(data);
                    }
                    forget(l, page);
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
        if (onDisk[layer][page]) {
            onDisk[layer][page] = false;
            slotsOnDisk -= 2;
        }
        dropCached(layer, page);
    }

    private void dropCached(int layer, int page) {
        synchronized (readCache) {
            MemorySegment gone = readCache.remove(key(layer, page));
            if (gone != null) {
                free.push(gone);
            }
        }
    }

    @Override
    public long bytesHeld() {
        return slotsOnDisk * slot;
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        readAhead.shutdown();
        try {
            if (kept != null && !failed) {
                // Partly filled pages go to disk too, so that a reopened session has every position.
                for (int l = 0; l < lengths.length; l++) {
                    int rest = lengths[l] % config.pageSize();
                    if (rest > 0 && !onDisk[l][current[l]]) {
                        flush(l, current[l], rest);
                    }
                }
                channel.force(true);
                kept.closeCleanly(lengths, stateToSave == null ? new byte[0] : stateToSave);
            }
            channel.close();
            if (kept == null) {
                Files.deleteIfExists(file);
            } else {
                kept.unlock();
            }
        } catch (IOException e) {
            throw new PrefillException(PrefillException.Code.IO, file + ": closing the KV cache failed: " + e.getMessage(),
                    e);
        } finally {
            arena.close();
        }
    }

    /**
     * The read-ahead: an I/O thread and a ring of {@code slots} page slots, each a K slot then a V slot. Page
     * {@code p} of the announced range goes to ring slot {@code (p - from) % slots}, so the ring fills strictly in
     * page order and a page waits for the one {@code slots} pages before it to be released.
     */
    private final class ReadAhead implements Runnable {
        private final int slots;
        private final MemorySegment ring;
        /** Page held by each slot, or -1. */
        private final int[] pageOf;
        private final boolean[] ready;
        private final PrefillException[] errors;
        private final Thread thread;
        private int layer = -1;
        /** Whether attention announced the stream (then it takes every page once); else it is read speculatively. */
        private boolean announced;
        private int from;
        private int end;
        private int next;
        private boolean reading;
        private boolean stop;

        ReadAhead(int slots) {
            this.slots = slots;
            this.ring = DirectIo.buffer(arena, 2L * slots * slot, alignment);
            this.pageOf = new int[slots];
            this.ready = new boolean[slots];
            this.errors = new PrefillException[slots];
            java.util.Arrays.fill(pageOf, -1);
            this.thread = Thread.ofPlatform().daemon().name("prefill4j-kv-io").start(this);
        }

        /**
         * Announces pages {@code [fromPage, toPage)} of a layer; only pages already on disk are streamed. A stream of
         * the same layer from the same page, started ahead of time by {@link #finish}, is kept with what it has read.
         */
        synchronized void start(int l, int fromPage, int toPage) {
            int e = fromPage;
            while (e < toPage && onDisk[l][e]) {
                e++;
            }
            if (layer == l && !announced && from == fromPage && e >= end) {
                end = e; // pages completed since the stream started are appended to it
                announced = true;
                notifyAll();
                return;
            }
            cancel();
            layer = l;
            from = fromPage;
            end = e;
            next = fromPage;
            announced = true;
            notifyAll();
        }

        /**
         * Attention is done with layer {@code l}: start streaming the layer it reads next (decoding goes through the
         * layers in order, then wraps to the first for the next token), so the disk works while the rest of the layer
         * is computed. A different announcement later discards it.
         */
        synchronized void finish(int l) {
            cancel();
            if (l >= 0 && l < lengths.length) {
                int nl = (l + 1) % lengths.length;
                start(nl, 0, (lengths[nl] + config.pageSize() - 1) / config.pageSize());
                announced = false; // speculative until attention announces it
            }
        }

        /** Ends the announcement: waits for a read in flight, then frees every slot. */
        synchronized void cancel() {
            layer = -1;
            announced = false;
            while (reading) {
                waitQuietly();
            }
            java.util.Arrays.fill(pageOf, -1);
            java.util.Arrays.fill(ready, false);
            java.util.Arrays.fill(errors, null);
            notifyAll();
        }

        /** {@return page {@code index} from the ring when it is part of the announcement, waiting for it; else null} */
        KVPage take(int l, int index, int n) {
            int s;
            synchronized (this) {
                if (l != layer || !announced || index < from || index >= end) {
                    return null;
                }
                s = (index - from) % slots;
                while (layer == l && announced && !(pageOf[s] == index && ready[s])) {
                    waitQuietly();
                }
                if (layer != l || !announced) {
                    return null; // cancelled meanwhile: read it directly
                }
                if (errors[s] != null) {
                    throw errors[s];
                }
            }
            // Checked outside the lock, by the taking thread: each announced page is taken once.
            MemorySegment k = ring.asSlice(2 * s * slot, slot);
            MemorySegment v = ring.asSlice((2 * s + 1) * slot, slot);
            PrefillException bad = verify(k, l, index, 0, -1);
            if (bad == null) {
                bad = verify(v, l, index, 1, -1);
            }
            if (bad != null) {
                throw bad;
            }
            return view(index, n, k, v);
        }

        synchronized void release(KVPage page) {
            long off = page.keys().address() - HEADER - ring.address();
            if (off >= 0 && off < ring.byteSize()) {
                int s = (int) (off / (2 * slot));
                pageOf[s] = -1;
                ready[s] = false;
                errors[s] = null;
                notifyAll();
            }
        }

        synchronized void shutdown() {
            stop = true;
            notifyAll();
            while (reading) {
                waitQuietly();
            }
        }

        private void waitQuietly() {
            try {
                wait();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new PrefillException(PrefillException.Code.IO, "interrupted while waiting for KV pages", e);
            }
        }

        @Override
        public void run() {
            while (true) {
                int l;
                int p0;
                int s0;
                int m;
                synchronized (this) {
                    while (!stop && (layer < 0 || next >= end || pageOf[(next - from) % slots] != -1)) {
                        try {
                            wait();
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    if (stop) {
                        return;
                    }
                    l = layer;
                    p0 = next;
                    s0 = (next - from) % slots;
                    m = 0;
                    while (m < MAX_BATCH && p0 + m < end && s0 + m < slots && pageOf[s0 + m] == -1) {
                        pageOf[s0 + m] = p0 + m;
                        m++;
                    }
                    next += m;
                    reading = true;
                }
                // Only the read happens here; the CRC is checked by the attention thread that takes the page, so
                // the next request goes out at once and checking runs in parallel.
                PrefillException failure = null;
                try {
                    DirectIo.readFully(channel, ring.asSlice(2 * s0 * slot, 2 * m * slot).asByteBuffer(), offset(l, p0));
                    bytesRead.addAndGet(2 * m * slot);
                } catch (IOException | RuntimeException e) {
                    failure = new PrefillException(PrefillException.Code.IO, file + ": reading KV pages " + p0 + ".."
                            + (p0 + m - 1) + " of layer " + l + " failed: " + e.getMessage(), e);
                }
                synchronized (this) {
                    reading = false;
                    if (layer == l) {
                        for (int i = 0; i < m; i++) {
                            ready[s0 + i] = true;
                            errors[s0 + i] = failure;
                        }
                    }
                    notifyAll();
                }
            }
        }
    }

    /**
     * Removes a session's own cache file from its directory as soon as it is open: the open channel keeps the data, and
     * the kernel frees the space when the process ends, however it ends. Removed only at {@link #close()}, a file of up
     * to tens of gigabytes (a 1M-token context) stayed behind after Ctrl-C, SIGTERM, SIGKILL or the OOM killer. Where
     * the file system does not allow removing an open file, it is removed at close or at the JVM's exit instead.
     */
    private static void unlinkWhileOpen(Path file) {
        try {
            Files.delete(file);
        } catch (IOException e) {
            file.toFile().deleteOnExit();
        }
    }
}
