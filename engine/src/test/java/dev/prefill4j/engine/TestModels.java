package dev.prefill4j.engine;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufValue;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/** Locates ../shared/models; tests that need a file are skipped, with the reason, where it is absent. */
public final class TestModels {
    private TestModels() {
    }

    /** {@return the path of a model file, skipping the test if it is not there} @param name file name */
    public static Path require(String name) {
        String dir = System.getProperty("prefill4j.models", "../../shared/models");
        Path p = Path.of(dir).resolve(name);
        assumeTrue(Files.isRegularFile(p), "model file " + p + " is absent (../shared/models not provided here)");
        return p;
    }

    /**
     * {@return content with this metadata and no tensors}
     *
     * @param source   its name in messages
     * @param metadata the metadata, as it is (not copied)
     */
    public static GgufContent metadataOnly(String source, Map<String, GgufValue> metadata) {
        return new GgufContent() {
            @Override
            public String source() {
                return source;
            }

            @Override
            public Map<String, GgufValue> metadata() {
                return metadata;
            }

            @Override
            public List<GgufTensor> tensors() {
                return List.of();
            }
        };
    }
}
