package dev.prefill4j.engine.gguf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.TestModels;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Hostile and broken GGUF files: each fails with one line naming the file and the problem, never OOM. */
class GgufBadInputTest {
    @TempDir
    Path dir;

    /** Little-endian header builder. */
    static final class Bytes {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Bytes u32(long v) {
            out.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt((int) v).array());
            return this;
        }

        Bytes u64(long v) {
            out.writeBytes(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array());
            return this;
        }

        Bytes str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            u64(b.length);
            out.writeBytes(b);
            return this;
        }

        Bytes header(long tensors, long kvs) {
            return u32(0x46554747).u32(3).u64(tensors).u64(kvs);
        }

        byte[] bytes() {
            return out.toByteArray();
        }
    }

    private PrefillException fails(byte[] content, String expected) throws Exception {
        Path f = dir.resolve("bad.gguf");
        Files.write(f, content);
        PrefillException e = assertThrows(PrefillException.class, () -> GgufFile.open(f).close());
        assertEquals(PrefillException.Code.MODEL_FORMAT, e.code(), e.getMessage());
        assertTrue(e.getMessage().contains(f.toString()), "names the file: " + e.getMessage());
        assertTrue(e.getMessage().contains(expected), "says '" + expected + "': " + e.getMessage());
        assertFalse(e.getMessage().contains("\n"), "one line: " + e.getMessage());
        return e;
    }

    @Test
    void emptyFile() throws Exception {
        fails(new byte[0], "truncated");
    }

    @Test
    void wrongMagic() throws Exception {
        fails("GGML....................".getBytes(StandardCharsets.US_ASCII), "not a GGUF file");
    }

    @Test
    void unsupportedVersion() throws Exception {
        fails(new Bytes().u32(0x46554747).u32(7).u64(0).u64(0).bytes(), "unsupported GGUF version 7");
        fails(new Bytes().u32(0x46554747).u32(1).u64(0).u64(0).bytes(), "unsupported GGUF version 1");
    }

    @Test
    void truncatedRealFile() throws Exception {
        byte[] real = Files.readAllBytes(TestModels.require("stories260K-F32.gguf"));
        fails(Arrays.copyOf(real, 100), "truncated");
        fails(Arrays.copyOf(real, real.length - 1000), "runs past the end of the file");
    }

    @Test
    void absurdCounts() throws Exception {
        fails(new Bytes().header(1L << 60, 0).bytes(), "claims 1152921504606846976 tensors");
        fails(new Bytes().header(0, 1L << 60).bytes(), "claims 1152921504606846976 metadata keys");
        fails(new Bytes().header(0, 1).str("k").u32(9).u32(6).u64(1L << 60).bytes(),
                "claims 1152921504606846976 array elements");
        fails(new Bytes().header(0, 1).str("k").u32(8).u64(1L << 60).bytes(), "claims 1152921504606846976 bytes");
        fails(new Bytes().header(0, 1).u64(-1L).u64(0).bytes(), "claims 18446744073709551615 bytes");
    }

    @Test
    void tensorPastTheEnd() throws Exception {
        byte[] b = new Bytes().header(1, 0).str("w").u32(1).u64(32).u32(0).u64(0).bytes();
        fails(b, "runs past the end of the file");
        byte[] farOffset = new Bytes().header(1, 0).str("w").u32(1).u64(1).u32(0).u64(1L << 40).bytes();
        fails(farOffset, "runs past the end of the file");
    }

    @Test
    void unknownTensorType() throws Exception {
        fails(new Bytes().header(1, 0).str("w").u32(1).u64(32).u32(99).u64(0).bytes(), "unknown tensor type 99");
    }

    @Test
    void badValuesAndStructure() throws Exception {
        fails(new Bytes().header(0, 1).str("k").u32(77).bytes(), "unknown value type 77");
        fails(new Bytes().header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(1).bytes(), "duplicate metadata key");
        fails(new Bytes().header(0, 1).str("general.alignment").u32(4).u32(24).bytes(), "not a power of two");
        fails(new Bytes().header(1, 0).str("w").u32(5).u64(0).u64(0).u64(0).bytes(), "5 dimensions");
        fails(new Bytes().header(1, 0).str("w").u32(1).u64(33).u32(8).u64(0).bytes(), "not a multiple of Q8_0's block size");
        fails(new Bytes().header(0, 1).str("k").u32(7).out.toByteArray(), "truncated");
    }

    /** Top-level string arrays stay in the mapping, but every element is checked when the file is opened. */
    @Test
    void badStringArraysFailAtOpen() throws Exception {
        Bytes invalid = new Bytes().header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("ok").u64(2);
        invalid.out.writeBytes(new byte[] {(byte) 0xC3, (byte) 0x28}); // a lead byte, then no continuation byte
        fails(invalid.bytes(), "element 1 of 'tokenizer.ggml.tokens' is not valid UTF-8");
        fails(new Bytes().header(0, 1).str("k").u32(9).u32(8).u64(2).str("ok").u64(1000).bytes(),
                "element 1 of 'k' claims 1000 bytes");
        fails(new Bytes().header(0, 1).str("k").u32(9).u32(8).u64(1L << 40).bytes(), "array elements but only");
        fails(new Bytes().header(0, 1).str("general.alignment").u32(9).u32(8).u64(1).str("x").bytes(),
                "general.alignment must be a u32, found ARRAY");
    }

    @Test
    void deeplyNestedArraysAreRefused() throws Exception {
        Bytes b = new Bytes().header(0, 1).str("k").u32(9);
        for (int i = 0; i < 20; i++) {
            b.u32(9).u64(1);
        }
        fails(b.bytes(), "nests arrays deeper than 8");
    }
}
