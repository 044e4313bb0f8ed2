package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.io.OutputFiles;
import java.io.ByteArrayOutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.DoubleConsumer;

/**
 * Writes a GGUF v3 file the way llama.cpp's own writer does (FORMATS.md §7): metadata in insertion order,
 * tensor infos in insertion order, data offsets the running sum of sizes padded to {@code general.alignment},
 * zero padding. The file is written under a temporary name beside the target and moved into place only when
 * complete, so a failure never leaves a half-written model under the requested name.
 *
 * <p>Not thread-safe. Tensor data are produced by a {@link TensorData} callback straight into the mapped
 * output, so multi-gigabyte models are written without a heap copy.
 *
 * @since 0.1
 */
@Api.Stable
public final class GgufWriter {
    /** Fills a tensor's bytes. @since 0.1 */
    @Api.Stable
    @FunctionalInterface
    public interface TensorData {
        /**
         * Writes exactly {@code dst.byteSize()} bytes.
         *
         * @param dst the tensor's slice of the output file
         */
        void fill(MemorySegment dst);
    }

    private record Pending(String name, long[] ne, GgmlType type, TensorData data, long bytes) {
    }

    private final Map<String, GgufValue> metadata = new LinkedHashMap<>();
    private final List<Pending> tensors = new ArrayList<>();

    /** Creates an empty writer. */
    public GgufWriter() {
    }

    /**
     * Adds (or replaces) a metadata entry.
     *
     * @param key   the key
     * @param value the value
     * @return this writer
     */
    public GgufWriter put(String key, GgufValue value) {
        metadata.put(Objects.requireNonNull(key), Objects.requireNonNull(value));
        return this;
    }

    /**
     * Copies all metadata of {@code file}, in its order.
     *
     * @param file the source
     * @return this writer
     */
    public GgufWriter putAll(GgufContent file) {
        file.metadata().forEach(this::put);
        return this;
    }

    /**
     * Adds a tensor.
     *
     * @param name tensor name, unique, shorter than 64 bytes (llama.cpp's limit)
     * @param ne   dimensions, fastest first
     * @param type ggml type
     * @param data fills the bytes
     * @return this writer
     */
    public GgufWriter tensor(String name, long[] ne, GgmlType type, TensorData data) {
        if (name.getBytes(StandardCharsets.UTF_8).length >= 64) {
            throw new IllegalArgumentException("tensor name must be shorter than 64 bytes: " + name);
        }
        if (tensors.stream().anyMatch(t -> t.name.equals(name))) {
            throw new IllegalArgumentException("duplicate tensor " + name);
        }
        long n = 1;
        for (long d : ne) {
            n = Math.multiplyExact(n, d);
        }
        if (ne[0] % type.blockSize() != 0) {
            throw new IllegalArgumentException(name + ": row length " + ne[0] + " is not a multiple of "
                    + type.name() + "'s block size " + type.blockSize());
        }
        tensors.add(new Pending(name, ne.clone(), type, data, n / type.blockSize() * type.typeSize()));
        return this;
    }

    /**
     * Writes the file.
     *
     * @param target where to write; replaced atomically where the file system allows
     * @throws PrefillException ({@code P4J-IO}) if writing fails; the target is then untouched ({@code P4J-ARG}, before
     *                          anything is written, if the target is a directory or not a regular file;
     *                          {@link OutputFiles#replaceWhole})
     */
    public void write(Path target) {
        write(target, null);
    }

    /**
     * Writes the file, saying how much of it is on disk.
     *
     * @param target   where to write; replaced atomically where the file system allows
     * @param progress the fraction of the tensor bytes filled and flushed to disk, after each tensor; or {@code null}
     * @throws PrefillException as {@link #write(Path)}
     */
    public void write(Path target, DoubleConsumer progress) {
        int alignment = GgufFile.DEFAULT_ALIGNMENT;
        GgufValue a = metadata.get("general.alignment");
        if (a != null) {
            alignment = (int) a.asLong();
        }
        int align = alignment;
        byte[] header = header(alignment);
        long dataStart = GgufFile.align(header.length, alignment);
        long total = dataStart;
        for (Pending t : tensors) {
            total += GgufFile.align(t.bytes, alignment);
        }
        long size = total;
        OutputFiles.replaceWhole(target, "the GGUF file", tmp -> {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.READ, StandardOpenOption.WRITE,
                    StandardOpenOption.CREATE_NEW);
                 Arena arena = Arena.ofShared()) { // shared: tensor data may be produced by many threads
                MemorySegment out = ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
                MemorySegment.copy(MemorySegment.ofArray(header), 0, out, 0, header.length);
                long off = dataStart;
                for (Pending t : tensors) {
                    MemorySegment dst = out.asSlice(off, t.bytes);
                    t.data.fill(dst);
                    off += GgufFile.align(t.bytes, align);
                    if (progress != null) {
                        // Flushed as it goes, so that the fraction counts bytes on disk, not dirty pages that the
                        // final force would still have to write.
                        dst.force();
                        progress.accept((double) off / size);
                    }
                }
                out.force();
            }
        });
    }

    private byte[] header(int alignment) {
        Out out = new Out();
        out.u32(0x46554747);
        out.u32(3);
        out.u64(tensors.size());
        out.u64(metadata.size());
        metadata.forEach((k, v) -> {
            out.string(k);
            out.u32(v.type().id());
            out.value(v.type(), v.value());
        });
        long offset = 0;
        for (Pending t : tensors) {
            out.string(t.name);
            out.u32(t.ne.length);
            for (long d : t.ne) {
                out.u64(d);
            }
            out.u32(t.type.id());
            out.u64(offset);
            offset += GgufFile.align(t.bytes, alignment);
        }
        return out.toByteArray();
    }

    /** Little-endian serialisation of header fields. */
    private static final class Out extends ByteArrayOutputStream {
        private final ByteBuffer scratch = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);

        void u32(long v) {
            scratch.clear();
            scratch.putInt((int) v);
            write(scratch.array(), 0, 4);
        }

        void u64(long v) {
            scratch.clear();
            scratch.putLong(v);
            write(scratch.array(), 0, 8);
        }

        void string(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            u64(b.length);
            write(b, 0, b.length);
        }

        void value(ValueType type, Object v) {
            switch (type) {
                case UINT8, INT8 -> write((Integer) v);
                case UINT16, INT16 -> {
                    int x = (Integer) v;
                    write(x & 0xFF);
                    write((x >>> 8) & 0xFF);
                }
                case UINT32 -> u32((Long) v);
                case INT32 -> u32((Integer) v);
                case FLOAT32 -> u32(Float.floatToRawIntBits((Float) v));
                case BOOL -> write((Boolean) v ? 1 : 0);
                case STRING -> string((String) v);
                case UINT64, INT64 -> u64((Long) v);
                case FLOAT64 -> u64(Double.doubleToRawLongBits((Double) v));
                case ARRAY -> array((GgufArray) v);
            }
        }

        private void array(GgufArray arr) {
            ValueType et = arr.elementType();
            u32(et.id());
            int n = arr.size();
            u64(n);
            Object values = arr.values();
            for (int i = 0; i < n; i++) {
                Object element = switch (values) {
                    case int[] x -> x[i];
                    case long[] x -> x[i];
                    case float[] x -> x[i];
                    case double[] x -> x[i];
                    case boolean[] x -> x[i];
                    case Object[] x -> x[i];
                    default -> throw new IllegalStateException();
                };
                value(et, element);
            }
        }
    }
}
