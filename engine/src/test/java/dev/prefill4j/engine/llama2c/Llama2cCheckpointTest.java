package dev.prefill4j.engine.llama2c;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.TestModels;
import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.gguf.GgufTensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class Llama2cCheckpointTest {
    /** The GGUF conversion of the same checkpoint holds the same F32 weights under the same names. */
    @Test
    void weightsEqualTheGgufConversion() {
        try (Llama2cCheckpoint ck = Llama2cCheckpoint.open(TestModels.require("stories260K.bin"),
                TestModels.require("tok512.bin"));
             GgufFile g = GgufFile.open(TestModels.require("stories260K-F32.gguf"))) {
            assertEquals(5L, ck.requireLong("llama.block_count"));
            for (GgufTensor t : ck.tensors()) {
                GgufTensor u = g.tensor(t.name()).orElseThrow(() -> new AssertionError(t.name()));
                assertEquals(Arrays.toString(u.ne()), Arrays.toString(t.ne()), t.name());
                assertEquals(-1L, t.data().mismatch(u.data()), t.name());
            }
        }
    }

    @Test
    void truncatedCheckpointIsRefused(@TempDir Path dir) throws Exception {
        byte[] b = Files.readAllBytes(TestModels.require("stories260K.bin"));
        Path f = dir.resolve("cut.bin");
        Files.write(f, Arrays.copyOf(b, b.length - 4));
        PrefillException e = assertThrows(PrefillException.class,
                () -> Llama2cCheckpoint.open(f, TestModels.require("tok512.bin")).close());
        assertTrue(e.getMessage().contains("does not match the header"), e.getMessage());
    }
}
