/**
 * The out-of-core KV store ({@code --kv ssd --kv-dir DIR}): KV pages in a file of their own in a directory the user
 * names, written and read with direct I/O ({@code O_DIRECT}) through aligned buffers, so the page cache holds none
 * of it; every page carries a CRC32C that is checked on every read. An I/O thread reads the layer attention is about
 * to need into a bounded ring ahead of it. Caches can be kept after their session ({@code --kv-keep}) and reopened
 * ({@code --kv-resume}); one left by a process that did not close it is refused.
 *
 * @provides dev.prefill4j.api.spi.KVStore ssd (priority 10: used when chosen)
 * @since 0.1
 */
module dev.prefill4j.kvstore.ssd {
    requires dev.prefill4j.api;
    // com.sun.nio.file.ExtendedOpenOption.DIRECT (O_DIRECT) lives here; looked up reflectively, see DirectIo.
    requires jdk.unsupported;

    provides dev.prefill4j.api.spi.KVStore with dev.prefill4j.kvstore.ssd.SsdKVStore;
}
