package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.prefill4j.api.spi.WeightMatrix;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A file-mapped matrix read from the copy {@link CpuDevice#resident} makes: the copy is not the mapping, and every
 * product (a decode step's row, a prompt's panels, the exact products of the FP64 reference) has the bits the same
 * product has on the same bytes in ordinary memory, which the device reads in place.
 */
class ResidentCopyTest {
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** 2.5 MiB of float32 weights (whole huge pages and a part of one), at an offset that is not a page's. */
    private static final int N = 640;
    private static final int K = 1024;
    private static final long OFFSET = 4096 + 96;

    @Test
    void productsOnTheCopyHaveTheMappingsBits(@TempDir Path dir) throws IOException {
        assumeTrue(HugePageArena.available(), "NOT VERIFIED here: no copies on huge pages (huge pages "
                + HugePageArena.status() + ")");
        SplittableRandom rnd = new SplittableRandom(7);
        float[] w = CpuKernelsTest.random(rnd, N * K);
        float[] x = CpuKernelsTest.random(rnd, 12 * K);
        Path file = dir.resolve("w.bin");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment bytes = arena.allocate(OFFSET + 4L * N * K);
            MemorySegment.copy(w, 0, bytes, F32, OFFSET, w.length);
            Files.write(file, bytes.toArray(ValueLayout.JAVA_BYTE));
        }
        try (Arena arena = Arena.ofShared(); FileChannel ch = FileChannel.open(file, StandardOpenOption.READ);
             CpuDevice d = new CpuDevice(2, true)) {
            MemorySegment mapped = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size(), arena)
                    .asSlice(OFFSET, 4L * N * K);
            MemorySegment plain = arena.allocate(4L * N * K, 64);
            plain.copyFrom(mapped);
            WeightMatrix fromFile = new WeightMatrix("w", new CpuKernelsTest.TestF32(), mapped, N, K);
            WeightMatrix inMemory = new WeightMatrix("w", new CpuKernelsTest.TestF32(), plain, N, K);
            WeightMatrix copy = d.resident(fromFile);
            assertFalse(copy.data().isMapped(), "the device still reads the mapping");
            assertTrue(copy.data().isReadOnly(), "the copy is writable");
            assertSame(copy, d.resident(fromFile), "a second copy was made");
            assertSame(inMemory, d.resident(inMemory), "a matrix in ordinary memory was copied");
            for (int rows : new int[] {1, 12}) {
                float[] a = new float[rows * N];
                float[] b = new float[rows * N];
                d.matmul(fromFile, x, rows, a);
                d.matmul(inMemory, x, rows, b);
                assertArrayEquals(b, a, rows + " row(s): the copy's product against the same bytes in memory");
                d.matmulExact(fromFile, x, rows, a);
                d.matmulExact(inMemory, x, rows, b);
                assertArrayEquals(b, a, rows + " row(s), exact products");
            }
        }
    }
}
