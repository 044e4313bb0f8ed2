package dev.prefill4j.api.spi;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** How {@link Blocks#ONE_ROW_MAX_COUNT} is chosen: the property first, then the processor's vendor. */
class BlocksOneRowTest {
    @Test
    void vendorSetsTheDefault() {
        assertEquals(0, Blocks.oneRowMaxCount(null, "GenuineIntel"));
        assertEquals(4096, Blocks.oneRowMaxCount(null, "AuthenticAMD"));
        assertEquals(4096, Blocks.oneRowMaxCount(null, ""));
    }

    @Test
    void propertyOverridesTheVendor() {
        assertEquals(1024, Blocks.oneRowMaxCount("1024", "GenuineIntel"));
        assertEquals(0, Blocks.oneRowMaxCount(" 0 ", "AuthenticAMD"));
    }

    @Test
    void unusablePropertyFallsBackToTheVendorsDefault() {
        assertEquals(4096, Blocks.oneRowMaxCount("-1", "AuthenticAMD"));
        assertEquals(0, Blocks.oneRowMaxCount("many", "GenuineIntel"));
    }

    @Test
    void vendorIsReadFromProcCpuinfo() throws IOException {
        Path cpuinfo = Path.of("/proc/cpuinfo");
        String vendor = Blocks.cpuVendor();
        if (!Files.isReadable(cpuinfo)) {
            assertEquals("", vendor);
            return;
        }
        // The first vendor_id line, found here by a pattern rather than line by line.
        var m = Pattern.compile("^vendor_id\\s*:\\s*(\\S*)\\s*$", Pattern.MULTILINE).matcher(Files.readString(cpuinfo));
        assertEquals(m.find() ? m.group(1) : "", vendor);
        assertEquals(Blocks.oneRowMaxCount(System.getProperty(Blocks.ONE_ROW_MAX_COUNT_PROPERTY), vendor),
                Blocks.ONE_ROW_MAX_COUNT);
    }
}
