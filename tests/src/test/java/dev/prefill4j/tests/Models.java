package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;

/** The test models of ../shared/models and their reference outputs (MANIFEST.md); absent files skip the test. */
final class Models {
    private Models() {
    }

    static Path dir() {
        return Path.of(System.getProperty("prefill4j.models", "../../shared/models"));
    }

    static Path require(String name) {
        Path p = dir().resolve(name);
        assumeTrue(Files.isRegularFile(p), "model file " + p + " is absent (../shared/models not provided here)");
        return p;
    }

    /** {@return the reference prompt logits {@code [n_prompt][n_vocab]} made by llama.cpp} */
    static float[] referenceLogits(String model) throws IOException {
        return readF32(require("reference/" + model + ".prompt_logits.f32"));
    }

    static float[] readF32(Path p) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(p)).order(ByteOrder.LITTLE_ENDIAN);
        float[] f = new float[b.remaining() / 4];
        b.asFloatBuffer().get(f);
        return f;
    }

    static int[] ids(String s) {
        return java.util.Arrays.stream(s.trim().split("\\s+")).mapToInt(Integer::parseInt).toArray();
    }

    /** MANIFEST.md: prompt "Once upon a time", greedy ids with EOS ignored. */
    static final String PROMPT = "Once upon a time";
    static final int[] STORIES_F32_GREEDY = ids("473 473 473 473 473 473 473 483 339 260 403 305 299 302 310 1 407 465 "
            + "465 465 465 465 465 465 465 465 465 465 465 465 465 465");
    static final int[] TINY_F32_GREEDY = ids("133 133 133 133 133 133 133 133 133 133 133 133 133 133 133 133 133 133 "
            + "133 133 133 133 133 187 277 187 277 187 277 187 277 187");

    static double maxAbsDiff(float[] a, float[] b) {
        if (a.length != b.length) {
            throw new AssertionError("lengths differ: " + a.length + " vs " + b.length);
        }
        double m = 0;
        for (int i = 0; i < a.length; i++) {
            m = Math.max(m, Math.abs((double) a[i] - b[i]));
        }
        return m;
    }
}
