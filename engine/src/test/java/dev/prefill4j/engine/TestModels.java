package dev.prefill4j.engine;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;

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
}
