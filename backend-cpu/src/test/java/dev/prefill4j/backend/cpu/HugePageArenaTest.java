package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@link HugePageArena}: its segments hold what is written to them, start zeroed, die with the arena, and, where it
 * maps them itself, carry the kernel's huge page advice over exactly their whole 2 MiB pages. The advice is read back
 * from the kernel ({@code /proc/self/smaps}: {@code hg} among the mapping's {@code VmFlags}), not from this class.
 */
class HugePageArenaTest {
    /** Three huge pages and a part of one: the part must stay on 4 KiB pages. */
    private static final long SIZE = 3 * HugePageArena.HUGE + 123_456;

    @Test
    void segmentsHoldTheirDataAndDieWithTheArena() {
        MemorySegment big;
        MemorySegment small;
        try (HugePageArena arena = new HugePageArena()) {
            big = arena.allocate(SIZE, 64);
            small = arena.allocate(1000, 8);
            assertEquals(SIZE, big.byteSize());
            assertEquals(1000, small.byteSize());
            assertEquals(0, big.address() % 64);
            for (MemorySegment s : List.of(big, small)) {
                for (long o = 0; o < s.byteSize(); o += 4096) {
                    assertEquals(0, s.get(ValueLayout.JAVA_BYTE, o), "not zeroed at " + o);
                }
            }
            for (long o = 0; o + 8 <= SIZE; o += 8) {
                big.set(ValueLayout.JAVA_LONG_UNALIGNED, o, o * 0x9E37_79B9_7F4A_7C15L);
            }
            for (long o = 0; o + 8 <= SIZE; o += 8) {
                if (big.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != o * 0x9E37_79B9_7F4A_7C15L) {
                    throw new AssertionError("byte " + o + " lost what was written");
                }
            }
            assertTrue(big.scope().isAlive());
        }
        assertFalse(big.scope().isAlive());
        assertFalse(small.scope().isAlive());
        assertThrows(IllegalStateException.class, () -> big.get(ValueLayout.JAVA_BYTE, 0));
    }

    @Test
    void theWholeHugePagesAndOnlyThemCarryTheAdvice() throws IOException {
        assumeTrue(HugePageArena.available(), "NOT VERIFIED here: huge pages " + HugePageArena.status());
        try (HugePageArena arena = new HugePageArena()) {
            MemorySegment big = arena.allocate(SIZE, 64);
            big.fill((byte) 1);
            long start = big.address();
            long huge = SIZE & -HugePageArena.HUGE;
            assertEquals(0, start % HugePageArena.HUGE, "not on a 2 MiB boundary");
            String advised = vmFlags(start);
            assertTrue(advised.contains(" hg"), "the huge pages' range lacks the advice: VmFlags" + advised);
            assertFalse(vmFlags(start + huge).contains(" hg"), "the last part short of 2 MiB was advised too");
        }
    }

    /** {@return the {@code VmFlags} of the mapping of this process that holds {@code address}} */
    private static String vmFlags(long address) throws IOException {
        boolean inside = false;
        for (String line : Files.readAllLines(Path.of("/proc/self/smaps"))) {
            if (line.matches("^[0-9a-f]+-[0-9a-f]+ .*")) {
                String[] range = line.substring(0, line.indexOf(' ')).split("-");
                inside = Long.parseUnsignedLong(range[0], 16) <= address
                        && address < Long.parseUnsignedLong(range[1], 16);
            } else if (inside && line.startsWith("VmFlags:")) {
                return line.substring("VmFlags:".length());
            }
        }
        throw new AssertionError("no mapping holds address 0x" + Long.toHexString(address));
    }
}
