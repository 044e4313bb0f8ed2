package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.engine.gguf.GgufFile;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.gguf.GgufWriter;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.Consumer;
import java.util.function.Predicate;

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

    /**
     * Writes a copy of a test model with changes: its tensors and the metadata {@code keep} accepts, then what
     * {@code extra} adds (tensors, keys, replacing kept ones).
     *
     * @return {@code target}
     */
    static Path rewrite(String model, Path target, Predicate<String> keep, Consumer<GgufWriter> extra) {
        try (GgufFile f = GgufFile.open(require(model))) {
            GgufWriter w = new GgufWriter();
            f.metadata().forEach((k, v) -> {
                if (keep.test(k)) {
                    w.put(k, v);
                }
            });
            for (GgufTensor t : f.tensors()) {
                w.tensor(t.name(), t.ne(), t.type(), dst -> dst.copyFrom(t.data()));
            }
            extra.accept(w);
            w.write(target);
            return target;
        }
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
