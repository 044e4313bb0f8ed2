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
 * Provider of the SSD KV store. Options (from {@link KVConfig#options()}): {@code dir}, the directory for the cache
 * file (required); {@code cacheMiB}, RAM for pages read back (default 256).
 */
public final class SsdKVStore implements KVStore {
    /** Option: the directory that holds the cache file. */
    public static final String DIR = "dir";
    /** Option: MiB of RAM for pages read back from disk. */
    public static final String CACHE_MIB = "cacheMiB";

    @Override public String id() { return "ssd"; }
    @Override public String apiVersion() { return ApiVersion.CURRENT; }
    @Override public int priority() { return 10; }
    @Override public Set<KVElementType> elementTypes() { return EnumSet.allOf(KVElementType.class); }

    @Override
    public String description() {
        return "KV pages on disk: direct I/O, CRC32C per page, owner-only file removed on close";
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
        long cacheBytes = Long.parseLong(config.options().getOrDefault(CACHE_MIB, "256")) << 20;
        return new SsdKVCache(config, d, cacheBytes);
    }
}
