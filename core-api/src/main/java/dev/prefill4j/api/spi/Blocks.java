package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.io.BufferedReader;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.IntPredicate;
import java.util.stream.IntStream;

/**
 * Helpers for format plugins that read and write GGUF-style blocks: little-endian unaligned layouts and the
 * exact rounding functions the ecosystem's reference quantizers use (FORMATS.md §0), so a plugin can be
 * byte-compatible with llama.cpp without re-deriving them.
 *
 * @since 0.1
 */
@Api.Stable
public final class Blocks {
    /** Little-endian, unaligned float32. */
    public static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** Little-endian, unaligned 16-bit (fp16 bits, int16). */
    public static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** Little-endian, unaligned 32-bit. */
    public static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** One byte. */
    public static final ValueLayout.OfByte I8 = ValueLayout.JAVA_BYTE;

    /** The system property that sets {@link #ONE_ROW_MAX_COUNT}: a number of elements, 0 or more. */
    public static final String ONE_ROW_MAX_COUNT_PROPERTY = "dev.prefill4j.oneRowMaxCount";

    /**
     * The processor's vendor as {@code /proc/cpuinfo}'s {@code vendor_id} names it ({@code GenuineIntel}, {@code
     * AuthenticAMD}), or "" where there is none (other systems): what a device's defaults tuned on one vendor's
     * machines test, as {@link #ONE_ROW_MAX_COUNT} does.
     *
     * @since 1.12
     */
    public static final String CPU_VENDOR = cpuVendor();

    /**
     * The longest rows, in elements, that a format's {@link Quantizer#dotPreparedRows} should read one at a time
     * (one stream of weights a thread); longer rows it reads several at a time, each its own stream, where it has
     * such a kernel. Which is faster is the machine's: one stream leaves a short row's activations in L1, several
     * keep more of memory's latency hidden. On the Zen 5 VM the built-in formats' one-row kernels were faster up to
     * 4,096 elements (the notes of {@code FusedDot}, {@code Q4_0Quantizer} and {@code KQuants}); on an Intel Xeon
     * VM with AVX-512 (two cores, family 6 model 167 as its hypervisor reports it, 2026-12-05) the grouped kernels
     * were faster for every row length, decode of the 1B files ({@code bench -p 16 -n 32 --profile}, two alternating
     * pairs each) 1.27-1.28x for F16, 1.12x for Q4_0 and, with its Q4_K rows paired as well as its Q6_K ones,
     * 1.15-1.17x for Q4_K_M; a plain read of memory there ran at 19.5 GB/s with one stream a thread and at 25-28 with
     * two to eight (two threads). So 4,096, or 0 where the processor's vendor is Intel ({@code /proc/cpuinfo}); the
     * system property {@value #ONE_ROW_MAX_COUNT_PROPERTY} overrides it. A format's kernels may read it too, as the
     * machine's preference between one stream of weights a thread and several (Q4_0's copy interleaves its pairs of row
     * groups where it is not 0; Q8_0's four-row kernel walks a whole row in one loop there, 16 blocks at a time where
     * it is 0). A format that follows it must use this one value in every method whose choice depends on it, so that
     * {@code dotPreparedRows} gives each row the bits {@code dotPrepared} gives it (the test kit checks that). Where
     * rows group at every length, {@code dotPrepared} still serves a run's odd row, each row of a decode step of two or
     * three activation rows and a single {@code dot}: a format that groups rows needs a fast one-row form of its
     * grouping kernel too (Q4_K's pair kernel has one; Q4_K kept a limit of its own until it did, as its pair kernel
     * over a row twice had cost bursts of three a quarter of their speed).
     *
     * @since 1.6
     */
    public static final int ONE_ROW_MAX_COUNT = oneRowMaxCount(System.getProperty(ONE_ROW_MAX_COUNT_PROPERTY),
            CPU_VENDOR);

    /** {@return the one-row limit for a property value (or null) and a processor vendor} (package-private: tests) */
    static int oneRowMaxCount(String property, String vendor) {
        if (property != null) {
            try {
                int v = Integer.parseInt(property.strip());
                if (v >= 0) {
                    return v;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            System.getLogger(Blocks.class.getName()).log(System.Logger.Level.WARNING, ONE_ROW_MAX_COUNT_PROPERTY
                    + " must be a number of elements, 0 or more; ignoring \"" + property + "\"");
        }
        return "GenuineIntel".equals(vendor) ? 0 : 4096;
    }

    /** {@return the {@code vendor_id} of {@code /proc/cpuinfo}, or "" where there is none (other systems)} */
    static String cpuVendor() {
        try (BufferedReader r = Files.newBufferedReader(Path.of("/proc/cpuinfo"))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.startsWith("vendor_id")) {
                    return line.substring(line.indexOf(':') + 1).strip();
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux, or not readable: the default
        }
        return "";
    }

    private static final ThreadLocal<byte[]> STAGE = ThreadLocal.withInitial(() -> new byte[0]);
    /** Bytes a {@link #stage}d array has at least after the data copied into it. */
    private static final int STAGE_SLACK = 8;
    private static final VarHandle SHORT_LE =
            MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle FLOAT_LE =
            MethodHandles.byteArrayViewVarHandle(float[].class, ByteOrder.LITTLE_ENDIAN);

    private Blocks() {
    }

    private static final ThreadLocal<float[]> PREPARED = ThreadLocal.withInitial(() -> new float[0]);

    /**
     * {@link Quantizer#dot} for a format that needs prepared activations: prepares {@code x} into a per-thread
     * buffer (grown as needed, reused across calls), then calls {@link Quantizer#dotPrepared}. A format whose own
     * {@code dot} is this gets the same product either way; a backend that multiplies one row with many weight rows
     * prepares once and calls {@code dotPrepared} itself.
     *
     * @param q       the format
     * @param src     the encoded data
     * @param offset  byte offset of the first block
     * @param x       the activations
     * @param xOffset index of the first activation
     * @param count   elements, a multiple of the block size
     * @return the dot product
     * @since 1.1
     */
    public static float dotByPreparing(Quantizer q, MemorySegment src, long offset, float[] x, int xOffset,
                                       int count) {
        int n = q.preparedActivations(count);
        float[] prepared = PREPARED.get();
        if (prepared.length < n) {
            prepared = new float[n];
            PREPARED.set(prepared);
        }
        q.prepareActivations(x, xOffset, count, prepared, 0);
        return q.dotPrepared(src, offset, x, xOffset, prepared, 0, count);
    }

    /**
     * Copies {@code bytes} bytes from {@code offset} of {@code src} into a per-thread array (grown as needed, reused
     * across calls) and returns it. Decoders work on the array with plain loops, which C2 vectorizes; per-element
     * {@link MemorySegment} reads of unaligned little-endian data mostly are not. The array has at least 8 bytes
     * after the copied ones, so a vector load of 8 bytes whose last 4 a kernel ignores (4-lane
     * kernels widening bytes: the narrowest byte vector has 8 lanes) stays inside it.
     *
     * @param src    the encoded data
     * @param offset byte offset
     * @param bytes  bytes to copy
     * @return the calling thread's staging array; valid until its next call
     */
    public static byte[] stage(MemorySegment src, long offset, int bytes) {
        byte[] b = STAGE.get();
        if (b.length < bytes + STAGE_SLACK) {
            b = new byte[bytes + STAGE_SLACK];
            STAGE.set(b);
        }
        MemorySegment.copy(src, I8, offset, b, 0, bytes);
        return b;
    }

    /**
     * {@return the little-endian fp16 at {@code i} of a staged array, as a float} One 16-bit load (a byte-array view),
     * not two byte loads and a shift: kernels read a scale per block.
     *
     * @param b array
     * @param i index
     */
    public static float fp16(byte[] b, int i) {
        return Float.float16ToFloat((short) SHORT_LE.get(b, i));
    }

    /** {@return the little-endian int16 at {@code i} of an array} @param b array @param i index */
    public static short i16(byte[] b, int i) {
        return (short) SHORT_LE.get(b, i);
    }

    /**
     * {@return the little-endian f32 at {@code i} of a staged array} (the scale of a staged Q8_K block, for example)
     *
     * @param b array
     * @param i index
     */
    public static float f32(byte[] b, int i) {
        return (float) FLOAT_LE.get(b, i);
    }

    /**
     * {@return the array behind a heap segment made by {@code MemorySegment.ofArray(byte[])}, or {@code null} for any
     * other segment} The engine hands encoded activations over in such a segment, so that a format's {@link
     * Quantizer#dotEncoded} can read them with array indexing (whose bounds checks C2 hoists out of the loop, where it
     * checked every segment access) and segment accessors keep seeing one kind of segment (weights in native memory;
     * call sites that saw both heap and native segments ran at a third of their speed in a harness).
     *
     * @param s segment
     */
    public static byte[] heapBytes(MemorySegment s) {
        return s.heapBase().orElse(null) instanceof byte[] a ? a : null;
    }

    /** {@return the fp16 at {@code offset} as a float} @param s segment @param offset byte offset */
    public static float fp16(MemorySegment s, long offset) {
        return Float.float16ToFloat(s.get(I16, offset));
    }

    /** Stores {@code v} as fp16 (round to nearest even) at {@code offset}. @param s segment @param offset byte offset @param v value */
    public static void fp16(MemorySegment s, long offset, float v) {
        s.set(I16, offset, Float.floatToFloat16(v));
    }

    /** {@return the unsigned byte at {@code offset}} @param s segment @param offset byte offset */
    public static int u8(MemorySegment s, long offset) {
        return s.get(I8, offset) & 0xFF;
    }

    /**
     * ggml's {@code nearest_int}: round half to even (ggml-quants.c adds 1.5 * 2^23 and reads the mantissa).
     *
     * @param f a value with {@code |f| <= 4194303}
     * @return the nearest integer, ties to even
     */
    public static int nearestInt(float f) {
        return (int) Math.rint(f);
    }

    /**
     * C {@code roundf}/{@code lroundf}: round half away from zero ({@link Math#round} rounds half up instead).
     *
     * @param v the value
     * @return the rounded value
     */
    public static int roundHalfAway(float v) {
        return (int) Math.copySign(Math.floor(Math.abs((double) v) + 0.5), v);
    }

    /**
     * Checks a row length against a block size.
     *
     * @param count     elements
     * @param blockSize elements per block
     * @param id        the format id, for the message
     * @throws IllegalArgumentException if {@code count} is not a multiple of {@code blockSize}
     */
    public static void checkCount(int count, int blockSize, String id) {
        if (count < 0 || count % blockSize != 0) {
            throw new IllegalArgumentException(id + ": " + count + " elements is not a multiple of " + blockSize);
        }
    }

    /**
     * Runs {@code packGroup} for row groups {@code 0 .. groups - 1} in parallel (the common fork-join pool), as a
     * format's {@link Quantizer#packForDecode} packs a copy group by group.
     *
     * @param groups    how many groups
     * @param packGroup packs one group; false where the group cannot be packed
     * @return whether every group was packed
     * @since 1.9
     */
    public static boolean packGroups(int groups, IntPredicate packGroup) {
        return IntStream.range(0, groups).parallel().mapToObj(packGroup::test).reduce(true, Boolean::logicalAnd);
    }

    /**
     * Checks the rows a {@link PackedMatrix} product or {@link PackedMatrix#decodeColumns} is asked for.
     *
     * @param firstRow the first row
     * @param rows     how many rows
     * @param group    the copy's {@link PackedMatrix#rowGroup()}
     * @throws IllegalArgumentException unless {@code firstRow} and {@code rows} are whole groups
     * @since 1.9
     */
    public static void checkRowGroups(int firstRow, int rows, int group) {
        if (firstRow % group != 0 || rows % group != 0) {
            throw new IllegalArgumentException("rows " + firstRow + ".." + (firstRow + rows) + " are not whole groups of "
                    + group);
        }
    }

    /**
     * Checks the arguments of {@link PackedMatrix#decodeColumns} for {@code p}: whole row groups, whole blocks of
     * columns within the row, and no more rows than the column stride holds.
     *
     * @param p         the copy
     * @param firstRow  the first row
     * @param rows      how many rows
     * @param fromCol   the first column
     * @param cols      how many columns
     * @param dstStride floats from one column to the next
     * @throws IllegalArgumentException if any of them is out of line
     * @since 1.9
     */
    public static void checkColumns(PackedMatrix p, int firstRow, int rows, int fromCol, int cols, int dstStride) {
        checkRowGroups(firstRow, rows, p.rowGroup());
        int block = p.source().format().blockSize();
        int width = p.source().cols();
        if (fromCol % block != 0 || cols % block != 0 || fromCol < 0 || fromCol + cols > width || rows > dstStride) {
            throw new IllegalArgumentException("columns " + fromCol + ".." + (fromCol + cols) + " of " + width
                    + " are not whole blocks of " + block + " within the row, or " + rows + " rows exceed a stride of "
                    + dstStride);
        }
    }

    /**
     * Whether a packed copy that puts groups of rows side by side should interleave each pair of groups' blocks, so
     * that a kernel taking two groups a step reads one stream of weights: where the machine reads one stream a thread
     * faster than several, as {@link #ONE_ROW_MAX_COUNT} says of it (not 0).
     *
     * @since 1.11
     */
    public static final boolean PAIRED_GROUPS = ONE_ROW_MAX_COUNT > 0;

    /**
     * {@return where block {@code b} of row group {@code g} starts in a packed copy of {@code groups} groups of {@code
     * blocks} blocks, {@code groupBlockBytes} bytes each}: group after group, each group's blocks in order; where {@code
     * paired}, each pair of groups' blocks alternate (block {@code b} of group {@code 2p}, then of group {@code 2p + 1},
     * then block {@code b + 1} of each), and a last group without a pair has its blocks in order
     *
     * @param g               the group
     * @param b               the block within the group's rows
     * @param blocks          blocks a row
     * @param groups          groups in the copy
     * @param paired          whether pairs of groups interleave their blocks ({@link #PAIRED_GROUPS})
     * @param groupBlockBytes bytes of one block of one group
     * @since 1.11
     */
    public static long groupBlockOffset(int g, int b, int blocks, int groups, boolean paired, long groupBlockBytes) {
        long group = paired ? (long) (g & ~1) * blocks + (g & 1) : (long) g * blocks;
        return group * groupBlockBytes + b * groupBlockStride(g, groups, paired, groupBlockBytes);
    }

    /**
     * {@return the bytes from one block of group {@code g} to its next in the layout of {@link #groupBlockOffset}}: two
     * blocks within a pair where {@code paired}, one otherwise and for a last group without a pair
     *
     * @param g               the group
     * @param groups          groups in the copy
     * @param paired          whether pairs of groups interleave their blocks
     * @param groupBlockBytes bytes of one block of one group
     * @since 1.11
     */
    public static long groupBlockStride(int g, int groups, boolean paired, long groupBlockBytes) {
        return paired && (g | 1) < groups ? 2 * groupBlockBytes : groupBlockBytes;
    }
}
