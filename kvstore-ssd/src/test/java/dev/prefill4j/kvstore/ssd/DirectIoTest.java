package dev.prefill4j.kvstore.ssd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * {@link DirectIo#buffer}: where it advises huge pages, no page of the buffer may be present when it is handed out,
 * since the kernel gives a huge page only at a page's first fault after the advice (a page brought in before stays
 * small). The advice and the resident size are read back from the kernel ({@code /proc/self/smaps}), not from the
 * class. Whatever the machine, the buffer reads as zeros and holds what is written to it.
 */
class DirectIoTest {
    private static final long HUGE = 2L << 20;

    @Test
    void aBufferReadsAsZerosAndHoldsWhatIsWritten() {
        try (Arena arena = Arena.ofShared()) {
            long bytes = 3 * HUGE + 12_345;
            MemorySegment b = DirectIo.buffer(arena, bytes, 4096);
            assertEquals(bytes, b.byteSize());
            assertEquals(0, b.address() % 4096);
            for (long o = 0; o < bytes; o += 512) {
                assertEquals(0, b.get(ValueLayout.JAVA_BYTE, o), "not zeroed at " + o);
            }
            byte[] data = new byte[Math.toIntExact(bytes)];
            new SplittableRandom(bytes).nextBytes(data);
            MemorySegment.copy(data, 0, b, ValueLayout.JAVA_BYTE, 0, data.length);
            assertEquals(-1, b.mismatch(MemorySegment.ofArray(data)), "the first byte that lost what was written");
        }
    }

    @Test
    void anAdvisedBufferHasNoPageInBeforeItsFirstWrite() throws IOException {
        Path thp = Path.of("/sys/kernel/mm/transparent_hugepage/enabled");
        assumeTrue("Linux".equals(System.getProperty("os.name")) && Files.isReadable(thp)
                        && !Files.readString(thp).contains("[never]"),
                "NOT VERIFIED here: no transparent huge pages to advise");
        assumeTrue(DirectIo.class.getModule().isNativeAccessEnabled(),
                "NOT VERIFIED here: dev.prefill4j.kvstore.ssd has no native access, so buffers are not advised");
        try (Arena arena = Arena.ofShared()) {
            MemorySegment b = DirectIo.buffer(arena, 3 * HUGE + 12_345, 4096);
            assertEquals(0, b.address() % HUGE, "not on a 2 MiB boundary");
            String[] mapping = mapping(b.address());
            // The advice splits the arena's block: the buffer's 4 huge pages are a mapping of their own.
            assertEquals(b.address(), Long.parseUnsignedLong(mapping[0], 16), "the advised range starts elsewhere");
            assertEquals(b.address() + 4 * HUGE, Long.parseUnsignedLong(mapping[1], 16), "the advised range ends elsewhere");
            assertTrue(mapping[3].contains(" hg"), "not advised: VmFlags" + mapping[3]);
            assertEquals("0", mapping[2], "kB of the buffer already resident, so on 4 KiB pages before any write");
        }
    }

    /** {@return start, end (hex), {@code Rss} in kB and {@code VmFlags} of this process's mapping holding the address} */
    private static String[] mapping(long address) throws IOException {
        String[] found = null;
        for (String line : Files.readAllLines(Path.of("/proc/self/smaps"))) {
            if (line.matches("^[0-9a-f]+-[0-9a-f]+ .*")) {
                if (found != null) {
                    break;
                }
                String[] range = line.substring(0, line.indexOf(' ')).split("-");
                if (Long.parseUnsignedLong(range[0], 16) <= address && address < Long.parseUnsignedLong(range[1], 16)) {
                    found = new String[] {range[0], range[1], null, null};
                }
            } else if (found != null && line.startsWith("Rss:")) {
                found[2] = line.substring("Rss:".length()).replace("kB", "").trim();
            } else if (found != null && line.startsWith("VmFlags:")) {
                found[3] = line.substring("VmFlags:".length());
            }
        }
        if (found == null) {
            throw new AssertionError("no mapping holds address 0x" + Long.toHexString(address));
        }
        return found;
    }
}
