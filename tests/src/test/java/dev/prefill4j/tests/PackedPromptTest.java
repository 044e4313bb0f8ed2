package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.spi.BackendContext;
import dev.prefill4j.api.spi.ComputeDevice;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Ternary, Q4_0, Q4_K, Q6_K and Q8_0 matrices mapped read-only from files: the CPU device's products with float32
 * activations, prompts' included, and its rows decoded for the embedding lookup ({@code ComputeDevice.decodeRow}),
 * read the packed copy it makes at a matrix's first product ({@code Quantizer.packedCopyDecodes}, {@code
 * PackedMatrix.decodeColumns}), so the file's pages can go. To see that nothing reads the file after that, the test
 * writes another matrix into each file once the copies exist; the exact product, which reads the file, sees the new
 * one, and every float product must still give what the first matrix gives: a prompt's panels (6 rows or more; the
 * fused gate and up, and the FFN in blocks of hidden columns) the bits of the same matrices in memory, which the device
 * decodes from their own bytes; 2 to 5 rows the bits of one-row products (the decode steps' packed kernel, row by
 * row), within float rounding (1e-5 of sum |w x|) of FP64 over the first matrix's decoded weights. Q6_K packs only
 * rows longer than 4,096 elements (a Llama FFN's down projection): its matrix has {@value #K_Q6_K} columns, and the FFN
 * part, whose gate and up rows are short, is left out for it.
 */
class PackedPromptTest {
    /** Outputs, three 64-row panels; K, two slices of a panel (2,048 and 512 columns). */
    private static final int N = 192;
    private static final int K = 2560;
    /** K for Q6_K: past the 4,096 elements up to which it reads the file; 2,048, 2,048 and 512 columns of panels. */
    private static final int K_Q6_K = 4608;
    /** The FFN: hidden columns, two blocks of the down matrix's slice, and the model width. */
    private static final int FFN = 4096;
    private static final int DIM = 256;

    @TempDir
    Path dir;

    @ParameterizedTest
    @ValueSource(strings = {"tq2_0", "tq1_0", "q4_0", "q4_k", "q6_k", "q8_0"})
    void promptsReadThePackedCopyNotTheFile(String id) throws IOException {
        PluginRegistry registry = PluginRegistry.load();
        Quantizer q = registry.quantizer(id).orElseThrow();
        SplittableRandom random = new SplittableRandom(17);
        boolean ffnToo = !id.equals("q6_k");
        int k = ffnToo ? K : K_Q6_K;
        try (Arena arena = Arena.ofShared();
             ComputeDevice device = registry.selectBackend("cpu").create(new BackendContext(2))) {
            Mapped w = mapped(arena, q, "w", gaussian(random, N * k), N, k);
            Mapped gate = ffnToo ? mapped(arena, q, "gate", gaussian(random, FFN * DIM), FFN, DIM) : null;
            Mapped up = ffnToo ? mapped(arena, q, "up", gaussian(random, FFN * DIM), FFN, DIM) : null;
            Mapped down = ffnToo ? mapped(arena, q, "down", gaussian(random, DIM * FFN), DIM, FFN) : null;
            try (Arena probe = Arena.ofShared()) {
                assumeTrue(q.packForDecode(w.file(), probe).isPresent(), "NOT VERIFIED in this run: " + id
                        + " packs nothing here (no 512-bit vectors; for the K-quants also Blocks.ONE_ROW_MAX_COUNT 0,"
                        + " which this test's other run, with -Ddev.prefill4j.oneRowMaxCount=4096, covers), so its"
                        + " products read the file");
            }
            float[] x = gaussian(random, 13 * k);
            float[] h = gaussian(random, 13 * DIM);
            // The first products make the copies.
            device.matmul(w.file(), x, 13, new float[13 * N]);
            if (ffnToo) {
                device.matmulSwiGLU(gate.file(), up.file(), h, 13, new float[13 * FFN]);
                device.matmul(down.file(), gaussian(random, 13 * FFN), 13, new float[13 * DIM]);
            }
            float[] replaced = gaussian(random, N * k);
            w.overwrite(q, replaced);
            for (Mapped m : ffnToo ? new Mapped[] {gate, up, down} : new Mapped[0]) {
                m.overwrite(q, gaussian(random, m.rows() * m.cols()));
            }

            // The file now holds another matrix, which the exact product reads.
            float[] exact = new float[N];
            device.matmulExact(w.file(), x, 1, exact);
            float[] exactNew = new float[N];
            device.matmulExact(memory(q, replaced, N, k), x, 1, exactNew);
            assertArrayEquals(exactNew, exact, "the exact product reads the file, which now holds another matrix");

            // The embedding lookup's rows (ComputeDevice.decodeRow) come from the copy too: the first matrix's decoded
            // weights to the bit, rows of the first, a middle and the last group.
            for (int r : new int[] {0, 5, 17, 100, N - 1}) {
                float[] row = new float[k];
                device.decodeRow(w.file(), r, row, 0);
                assertArrayEquals(Arrays.copyOfRange(w.decoded(), r * k, (r + 1) * k), row, id + ": row " + r
                        + " decoded, against the first matrix's");
            }

            float[] oneRow = new float[13 * N];
            for (int r = 0; r < 13; r++) {
                float[] y = new float[N];
                device.matmul(w.file(), Arrays.copyOfRange(x, r * k, (r + 1) * k), 1, y);
                System.arraycopy(y, 0, oneRow, r * N, N);
            }
            float[] inMemory = new float[13 * N];
            device.matmul(w.memory(), x, 13, inMemory);
            for (int rows : new int[] {13, 6, 5, 4, 3, 2}) {
                float[] y = new float[rows * N];
                Arrays.fill(y, Float.NaN);
                device.matmul(w.file(), x, rows, y);
                float[] want = Arrays.copyOf(rows >= 6 ? inMemory : oneRow, rows * N);
                assertArrayEquals(want, y, id + ": " + rows + " rows, against " + (rows >= 6
                        ? "the matrix in memory" : "one row at a time"));
                for (int r = 0; r < rows; r++) {
                    for (int o = 0; o < N; o++) {
                        double ref = 0;
                        double magnitude = 0;
                        for (int i = 0; i < k; i++) {
                            double p = (double) w.decoded()[o * k + i] * x[r * k + i];
                            ref += p;
                            magnitude += Math.abs(p);
                        }
                        assertTrue(Math.abs(y[r * N + o] - ref) <= 1e-5 * magnitude, id + ": " + rows + " rows, row "
                                + r + " output " + o + " = " + y[r * N + o] + ", FP64 " + ref);
                    }
                }
            }

            if (!ffnToo) {
                return;
            }
            float[] swiGLU = new float[13 * FFN];
            device.matmulSwiGLU(gate.file(), up.file(), h, 13, swiGLU);
            float[] swiGLUMemory = new float[13 * FFN];
            device.matmulSwiGLU(gate.memory(), up.memory(), h, 13, swiGLUMemory);
            assertArrayEquals(swiGLUMemory, swiGLU, id + ": gate and up, 13 rows, against the matrices in memory");
            float[] two = new float[2 * FFN];
            device.matmulSwiGLU(gate.file(), up.file(), h, 2, two);
            for (int r = 0; r < 2; r++) {
                float[] one = new float[FFN];
                device.matmulSwiGLU(gate.file(), up.file(), Arrays.copyOfRange(h, r * DIM, (r + 1) * DIM), 1, one);
                assertArrayEquals(one, Arrays.copyOfRange(two, r * FFN, (r + 1) * FFN), id + ": gate and up, row " + r
                        + " of 2 against one row");
            }

            int block = device.feedForwardBlock(gate.file(), up.file(), down.file());
            assertEquals(FFN / 2, block, "the FFN in two blocks of hidden columns");
            float[] ffn = new float[13 * DIM];
            device.feedForward(gate.file(), up.file(), down.file(), h, 13, new float[13 * block], ffn);
            float[] ffnMemory = new float[13 * DIM];
            device.feedForward(gate.memory(), up.memory(), down.memory(), h, 13, new float[13 * block], ffnMemory);
            assertArrayEquals(ffnMemory, ffn, id + ": the FFN in blocks, against the matrices in memory");
        }
    }

    /** A matrix as a read-only mapping of its file, the same bytes in memory, and its decoded weights. */
    private record Mapped(WeightMatrix file, WeightMatrix memory, float[] decoded, Path path) {
        int rows() {
            return file.rows();
        }

        int cols() {
            return file.cols();
        }

        /** Writes {@code w}, encoded, over the file's bytes (the mapping sees them). */
        void overwrite(Quantizer q, float[] w) throws IOException {
            MemorySegment bytes = encode(q, w, rows(), cols());
            try (FileChannel ch = FileChannel.open(path, StandardOpenOption.WRITE)) {
                ch.write(bytes.asByteBuffer(), 0);
                ch.force(false);
            }
        }
    }

    private Mapped mapped(Arena arena, Quantizer q, String name, float[] w, int rows, int cols) throws IOException {
        WeightMatrix memory = memory(q, w, rows, cols);
        Path path = dir.resolve(name + ".bin");
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE,
                StandardOpenOption.READ)) {
            ch.write(memory.data().asByteBuffer(), 0);
            MemorySegment map = ch.map(FileChannel.MapMode.READ_ONLY, 0, memory.data().byteSize(), arena);
            float[] decoded = new float[rows * cols];
            for (int r = 0; r < rows; r++) {
                q.decode(memory.data(), r * q.byteSize(cols), decoded, r * cols, cols);
            }
            return new Mapped(new WeightMatrix(name, q, map, rows, cols), memory, decoded, path);
        }
    }

    private static WeightMatrix memory(Quantizer q, float[] w, int rows, int cols) {
        return new WeightMatrix("memory", q, encode(q, w, rows, cols), rows, cols);
    }

    private static MemorySegment encode(Quantizer q, float[] w, int rows, int cols) {
        MemorySegment seg = Arena.ofAuto().allocate(q.byteSize((long) rows * cols));
        for (int r = 0; r < rows; r++) {
            q.encode(w, r * cols, cols, seg, r * q.byteSize(cols));
        }
        return seg;
    }

    private static float[] gaussian(SplittableRandom random, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) {
            v[i] = (float) random.nextGaussian();
        }
        return v;
    }
}
