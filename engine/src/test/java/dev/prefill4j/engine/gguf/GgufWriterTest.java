package dev.prefill4j.engine.gguf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.TestModels;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class GgufWriterTest {
    @TempDir
    Path dir;

    @Test
    void everyValueTypeRoundTrips() {
        Map<String, GgufValue> md = new LinkedHashMap<>();
        md.put("u8", new GgufValue(ValueType.UINT8, 255));
        md.put("i8", new GgufValue(ValueType.INT8, -128));
        md.put("u16", new GgufValue(ValueType.UINT16, 65535));
        md.put("i16", new GgufValue(ValueType.INT16, -32768));
        md.put("u32", GgufValue.u32(4294967295L));
        md.put("i32", GgufValue.i32(Integer.MIN_VALUE));
        md.put("f32", GgufValue.f32(-1.5e-7f));
        md.put("bool", GgufValue.bool(true));
        md.put("string", GgufValue.string("héllo ▁ wörld"));
        md.put("u64", new GgufValue(ValueType.UINT64, -1L));
        md.put("i64", new GgufValue(ValueType.INT64, Long.MIN_VALUE));
        md.put("f64", new GgufValue(ValueType.FLOAT64, Math.PI));
        md.put("arr.u8", GgufValue.array(ValueType.UINT8, new int[] {0, 1, 255}));
        md.put("arr.i8", GgufValue.array(ValueType.INT8, new int[] {-1, 127}));
        md.put("arr.u16", GgufValue.array(ValueType.UINT16, new int[] {65535}));
        md.put("arr.i16", GgufValue.array(ValueType.INT16, new int[] {-2}));
        md.put("arr.u32", GgufValue.array(ValueType.UINT32, new long[] {4294967295L, 0}));
        md.put("arr.i32", GgufValue.array(ValueType.INT32, new int[] {-7, 7}));
        md.put("arr.f32", GgufValue.array(ValueType.FLOAT32, new float[] {1f, Float.NaN, -0f}));
        md.put("arr.bool", GgufValue.array(ValueType.BOOL, new boolean[] {true, false}));
        md.put("arr.string", GgufValue.array(ValueType.STRING, new String[] {"a", "", "▁b"}));
        md.put("arr.u64", GgufValue.array(ValueType.UINT64, new long[] {Long.MAX_VALUE}));
        md.put("arr.i64", GgufValue.array(ValueType.INT64, new long[] {-3}));
        md.put("arr.f64", GgufValue.array(ValueType.FLOAT64, new double[] {1e300, -0.0}));
        md.put("arr.empty", GgufValue.array(ValueType.FLOAT32, new float[0]));
        md.put("arr.nested", GgufValue.array(ValueType.ARRAY, new GgufArray[] {
            new GgufArray(ValueType.INT32, new int[] {1, 2}),
            new GgufArray(ValueType.STRING, new String[] {"x"}),
            new GgufArray(ValueType.ARRAY, new GgufArray[] {new GgufArray(ValueType.FLOAT64, new double[] {2.5})})}));
        GgufWriter w = new GgufWriter();
        md.forEach(w::put);
        GgmlType f32 = GgmlType.byId(0).orElseThrow();
        float[] data = {1, 2, 3, 4, 5, 6};
        w.tensor("t", new long[] {3, 2}, f32, dst -> MemorySegment.copy(data, 0, dst,
                java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 0, 6));
        Path file = dir.resolve("all.gguf");
        w.write(file);
        try (GgufFile f = GgufFile.open(file)) {
            assertEquals(md, f.metadata());
            // The top-level string array through the view that decodes from the mapping, twice (offsets cached).
            List<String> strings = f.requireStrings("arr.string");
            assertEquals(List.of("a", "", "▁b"), strings);
            assertEquals("▁b", strings.get(2));
            assertThrows(PrefillException.class, () -> f.requireStrings("arr.u8"));
            GgufTensor t = f.tensor("t").orElseThrow();
            assertArrayEquals(new long[] {3, 2}, t.ne());
            float[] back = t.data().toArray(java.lang.foreign.ValueLayout.JAVA_FLOAT.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN));
            assertArrayEquals(data, back);
            assertEquals(0, f.dataStart() % 32);
        }
    }

    /**
     * {@link GgufFile#unloadHeader} takes the header's pages out of the process's resident memory (Linux: {@code
     * RssFile} plus {@code RssShmem}, for a temporary directory on tmpfs, in {@code /proc/self/status}) and loses
     * nothing: a vocabulary of 2^19 pieces (about 12 MiB) read before and after gives the same pieces, and the tensor
     * after it the same values.
     */
    @Test
    void unloadingTheHeaderDropsItsPagesAndKeepsItsValues() throws Exception {
        Path status = Path.of("/proc/self/status");
        assumeTrue(Files.isReadable(status) && mappedKiB(status) >= 0,
                "needs Linux's /proc/self/status with RssFile and RssShmem");
        String[] pieces = new String[1 << 19];
        for (int i = 0; i < pieces.length; i++) {
            pieces[i] = "piece-" + Long.toString(i * 2654435761L % 1_000_000_007L, 36) + "-x".repeat(i % 5);
        }
        GgufWriter w = new GgufWriter();
        w.put("tokenizer.ggml.tokens", GgufValue.array(ValueType.STRING, pieces));
        float[] data = {1, 2, 3, 4};
        w.tensor("t", new long[] {4}, GgmlType.byId(0).orElseThrow(), dst -> MemorySegment.copy(data, 0, dst,
                java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 0, 4));
        Path file = dir.resolve("vocab.gguf");
        w.write(file);
        try (GgufFile f = GgufFile.open(file)) {
            long headerKiB = f.dataStart() / 1024;
            assertEquals(List.of(pieces), List.copyOf(f.requireStrings("tokenizer.ggml.tokens"))); // every page read
            long before = mappedKiB(status);
            f.unloadHeader();
            long after = mappedKiB(status);
            assertTrue(before - after >= headerKiB * 3 / 4,
                    "RssFile + RssShmem " + before + " -> " + after + " KiB; the header is " + headerKiB + " KiB");
            assertEquals(List.of(pieces), List.copyOf(f.requireStrings("tokenizer.ggml.tokens")));
            assertArrayEquals(data, f.tensor("t").orElseThrow().data()
                    .toArray(java.lang.foreign.ValueLayout.JAVA_FLOAT.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN)));
        }
    }

    /** {@return RssFile plus RssShmem of {@code /proc/self/status} in KiB, or -1 where either line is missing} */
    private static long mappedKiB(Path status) throws java.io.IOException {
        List<Long> kib = Files.readAllLines(status).stream()
                .filter(l -> l.startsWith("RssFile:") || l.startsWith("RssShmem:"))
                .map(l -> Long.parseLong(l.replaceAll("[^0-9]", ""))).toList();
        return kib.size() == 2 ? kib.get(0) + kib.get(1) : -1;
    }

    /**
     * The strongest check that the writer follows llama.cpp's conventions: reading a file llama.cpp wrote and
     * writing it again gives the same bytes (header, value types, tensor order, offsets, padding).
     */
    @ParameterizedTest
    @ValueSource(strings = {"tiny-256-F32.gguf", "stories260K-Q8_0.gguf", "tiny-256-Q4_K_M.gguf"})
    void rewritingALlamaCppFileIsByteIdentical(String name) throws Exception {
        Path src = TestModels.require(name);
        Path out = dir.resolve(name);
        try (GgufFile f = GgufFile.open(src)) {
            GgufWriter w = new GgufWriter().putAll(f);
            for (GgufTensor t : f.tensors()) {
                w.tensor(t.name(), t.ne(), t.type(), dst -> MemorySegment.copy(t.data(), 0, dst, 0, dst.byteSize()));
            }
            w.write(out);
        }
        assertEquals(-1L, Files.mismatch(src, out), "first differing byte");
    }
}
