package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.KVPage;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * {@link KvRows} lays out exactly the values {@link KVPage#key} decodes element by element (the scalar definition in
 * {@link KVElementType#decode}), row-major and chunked, for every element type, for slices that start on a Q8_0 block
 * (its vector path) and slices that do not (its scalar path). Tolerance: none; the products are the same.
 */
class KvRowsTest {
    private static final int KV_DIM = 128;
    private static final int POSITIONS = 13;

    @ParameterizedTest
    @EnumSource(KVElementType.class)
    void decodedRowsEqualTheElementDecoder(KVElementType type) {
        try (Arena arena = Arena.ofConfined()) {
            long rowBytes = type.rowBytes(KV_DIM);
            MemorySegment keys = arena.allocate(rowBytes * POSITIONS, 64);
            Random random = new Random(7);
            float[] row = new float[KV_DIM];
            for (int p = 0; p < POSITIONS; p++) {
                for (int d = 0; d < KV_DIM; d++) {
                    row[d] = (float) random.nextGaussian() * (1 + p % 3);
                }
                type.encode(row, 0, KV_DIM, keys, rowBytes * p);
            }
            KVPage page = new KVPage(0, POSITIONS, keys, keys, type, KV_DIM);
            // {first row, rows, from, count}: whole heads at block starts, and slices off the Q8_0 block grid.
            int[][] slices = {{0, POSITIONS, 0, 64}, {3, 7, 64, 64}, {2, 5, 32, 96}, {1, 4, 8, 40}, {0, 3, 5, 19}};
            for (int[] s : slices) {
                int first = s[0];
                int rows = s[1];
                int from = s[2];
                int count = s[3];
                float[] expected = new float[rows * count];
                for (int j = 0; j < rows; j++) {
                    page.key(first + j, from, count, expected, j * count);
                }
                float[] tmp = new float[rows * count];
                short[] halves = new short[rows * count];
                float[] rowMajor = new float[rows * count];
                KvRows.decode(keys, page, first, rows, from, count, rowMajor, halves);
                int span = rows + 2; // the attention kernel's tiles may be wider than the rows decoded into them
                int chunks = (count + KvRows.CHUNK - 1) / KvRows.CHUNK;
                float[] blocked = new float[chunks * span * KvRows.CHUNK];
                KvRows.decodeBlocked(keys, page, first, rows, from, count, blocked, span, tmp, halves);
                for (int j = 0; j < rows; j++) {
                    for (int d = 0; d < count; d++) {
                        String at = type + " slice " + Arrays.toString(s) + " row " + j + " element " + d;
                        float want = expected[j * count + d];
                        assertEquals(Float.floatToRawIntBits(want), Float.floatToRawIntBits(rowMajor[j * count + d]),
                                at + " row-major: " + want + " vs " + rowMajor[j * count + d]);
                        int b = (d / KvRows.CHUNK) * span * KvRows.CHUNK + j * KvRows.CHUNK + d % KvRows.CHUNK;
                        assertEquals(Float.floatToRawIntBits(want), Float.floatToRawIntBits(blocked[b]),
                                at + " chunked: " + want + " vs " + blocked[b]);
                    }
                }
            }
        }
    }
}
