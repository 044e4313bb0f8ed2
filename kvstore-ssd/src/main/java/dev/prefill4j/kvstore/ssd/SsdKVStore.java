package dev.prefill4j.kvstore.ssd;

import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.api.spi.KVCache;
import dev.prefill4j.api.spi.KVConfig;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVStore;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.Set;

/**
 * Provider of the SSD KV store. Options (from {@link KVConfig#options()}):
 * <ul>
 *   <li>{@value #DIR}: the directory for the cache files (required; it must support direct I/O);</li>
 *   <li>{@value #RING_MIB}: MiB of the read-ahead ring for K slots, and as much again for V slots (default 128);</li>
 *   <li>{@value #CACHE_MIB}: MiB of RAM for pages read outside a read-ahead (default 32);</li>
 *   <li>{@value #KEEP}: keep the cache after the session under this name ({@code NAME.p4kv} and
 *       {@code NAME.p4kv.meta} in the directory) instead of removing it;</li>
 *   <li>{@value #RESUME}: {@code true} to reopen the kept cache {@value #KEEP} names rather than create it.</li>
 * </ul>
 */
public final class SsdKVStore implements KVStore {
    /** Option: the directory that holds the cache files. */
    public static final String DIR = "dir";
    /** Option: MiB of the read-ahead ring for K slots (as much again for V slots). */
    public static final String RING_MIB = "ringMiB";
    /** Option: MiB of RAM for pages read outside a read-ahead. */
    public static final String CACHE_MIB = "cacheMiB";
    /** Option: name under which the cache is kept after its session. */
    public static final String KEEP = "keep";
    /** Option: {@code true} to reopen the kept cache named by {@link #KEEP}. */
    public static final String RESUME = "resume";
    /** Bytes a page's slot aims at: large direct reads, little padding. */
    private static final int SLOT_TARGET = 256 << 10;

    @Override public String id() { return "ssd"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public int priority() { return 10; }
    @Override public Set<KVElementType> elementTypes() { return EnumSet.allOf(KVElementType.class); }

    @Override
    public String description() {
        return "KV pages on disk: direct I/O, read-ahead ring, CRC32C per page, owner-only files, --kv-keep/--kv-resume";
    }

    /** As many positions as fill a 256 KiB slot after its 64-byte header, a multiple of 16 (at least 16). */
    @Override
    public int preferredPageSize(KVElementType type, int kvDim) {
        long row = type.rowBytes(kvDim);
        return (int) Math.max(16, (SLOT_TARGET - SsdKVCache.HEADER) / row / 16 * 16);
    }

    @Override
    public KVCache open(KVConfig config) {
        String dir = config.options().get(DIR);
        if (dir == null || dir.isBlank()) {
            throw new PrefillException(PrefillException.Code.ARGUMENT,
                    "the ssd KV store needs a directory: pass --kv-dir DIR (a directory on a disk, not tmpfs)");
        }
        Path d = Path.of(dir);
        if (!Files.isDirectory(d)) {
            throw new PrefillException(PrefillException.Code.IO, d + ": not a directory (--kv-dir)");
        }
        if (config.kvDim() % config.elementType().blockSize() != 0) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, config.elementType() + " KV rows need a multiple of "
                    + config.elementType().blockSize() + " elements; this model has " + config.kvDim() + " (use f16)");
        }
        long cache = mib(config, CACHE_MIB, 32);
        long ring = mib(config, RING_MIB, 128);
        boolean resume = Boolean.parseBoolean(config.options().getOrDefault(RESUME, "false"));
        String keep = config.options().get(KEEP);
        if (resume && keep == null) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "resuming a KV cache needs its name (--kv-resume NAME)");
        }
        return new SsdKVCache(config, d, keep, resume, cache, ring);
    }

    private static long mib(KVConfig config, String key, long fallback) {
        String v = config.options().get(key);
        try {
            long n = v == null ? fallback : Long.parseLong(v.trim());
            if (n < 1 || n > (1 << 20)) {
                throw new NumberFormatException();
            }
            return n << 20;
        } catch (NumberFormatException e) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, "KV store option " + key + "=" + v
                    + ": use a whole number of MiB from 1 to 1048576");
        }
    }
}
