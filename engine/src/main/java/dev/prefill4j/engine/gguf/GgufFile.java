package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.io.InputFiles;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.RandomAccess;
import java.util.Set;
import java.util.function.Supplier;

/**
 * A GGUF file (v2 or v3), memory-mapped read-only. Tensor data are slices of the mapping, never copied.
 *
 * <p>The reader trusts nothing: every count, length and offset is checked against the bytes that remain before
 * anything is allocated, so a truncated or hostile file fails with a one-line {@link PrefillException}
 * ({@code P4J-GGUF}) naming the file and the problem, never an {@link OutOfMemoryError}. Layout: FORMATS.md §7.
 *
 * <p>Closing the file unmaps it; tensor segments must not be used afterwards. Top-level string arrays (a
 * vocabulary) are checked when the file is opened but kept in the mapping, each element decoded when it is asked
 * for ({@link #requireStrings}, or a {@code String[]} made by each {@link #metadata()} look-up): a Llama 3
 * vocabulary held as Strings took 6.6 MiB of heap for as long as its model was loaded. Read those while the file
 * is open. Thread-safe for reading.
 *
 * @since 0.1
 */
@Api.Stable
public final class GgufFile implements CloseableContent {
    /** The first four bytes of every GGUF file, "GGUF", read as a little-endian u32 (FORMATS.md). */
    public static final int MAGIC = 0x46554747;
    /** Default {@code general.alignment} (FORMATS.md §7). */
    public static final int DEFAULT_ALIGNMENT = 32;
    private static final int MAX_NESTING = 8;
    private static final int MAX_DIMS = 4;

    private final Path path;
    private final Arena arena;
    private final int version;
    private final int alignment;
    private final long dataStart;
    /** The mapping's bytes before the data section: the header, metadata and tensor infos. */
    private final MemorySegment header;
    /** Top-level string arrays deferred to their {@link StringArray}s in the mapping. */
    private final DeferredMetadata metadata;
    private final List<GgufTensor> tensors;
    private final Map<String, GgufTensor> byName;

    private GgufFile(Path path, Arena arena, int version, int alignment, long dataStart, MemorySegment header,
                     Map<String, Object> raw, List<GgufTensor> tensors) {
        this.path = path;
        this.arena = arena;
        this.version = version;
        this.alignment = alignment;
        this.dataStart = dataStart;
        this.header = header;
        this.metadata = new DeferredMetadata(raw);
        this.tensors = List.copyOf(tensors);
        Map<String, GgufTensor> names = new LinkedHashMap<>();
        tensors.forEach(t -> names.put(t.name(), t));
        this.byName = Collections.unmodifiableMap(names);
    }

    /**
     * Maps and parses a GGUF file.
     *
     * @param path the file
     * @return the open file; close it to unmap
     * @throws PrefillException ({@code P4J-GGUF}) if the file is malformed, ({@code P4J-IO}) if it is not a readable
     *                          regular file or cannot be read
     */
    public static GgufFile open(Path path) {
        InputFiles.requireReadableFile(path, "the model");
        Arena arena = Arena.ofShared();
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            long size = ch.size();
            MemorySegment seg = size == 0 ? MemorySegment.ofArray(new byte[0])
                    : ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            GgufFile f = parse(path, seg, arena);
            return f;
        } catch (IOException e) {
            arena.close();
            throw InputFiles.cannotRead(path, e);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    private static GgufFile parse(Path path, MemorySegment seg, Arena arena) {
        Cursor in = new Cursor(path, seg);
        if (seg.byteSize() < 4) {
            throw in.fail("truncated: " + seg.byteSize() + " bytes is too short for a GGUF header");
        }
        int magic = in.i32();
        if (magic != MAGIC) {
            throw in.fail(String.format("not a GGUF file: magic is 0x%08x, expected 0x%08x (\"GGUF\")", magic, MAGIC));
        }
        long version = in.u32();
        if (version == 0x03000000L || version == 0x02000000L) {
            throw in.fail("big-endian GGUF files are not supported; convert the file on a little-endian machine");
        }
        if (version != 2 && version != 3) {
            throw in.fail("unsupported GGUF version " + version + " (this reader supports 2 and 3)");
        }
        long tensorCount = in.u64();
        long kvCount = in.u64();
        // Every KV takes at least 8 (key length) + 4 (type) + 1 bytes; every tensor info at least 8+4+8+4+8.
        if (Long.compareUnsigned(kvCount, in.remaining() / 13) > 0) {
            throw in.fail("truncated or corrupt: header claims " + Long.toUnsignedString(kvCount) + " metadata keys but only "
                    + in.remaining() + " bytes follow");
        }
        if (Long.compareUnsigned(tensorCount, in.remaining() / 32) > 0) {
            throw in.fail("truncated or corrupt: header claims " + Long.toUnsignedString(tensorCount) + " tensors but only "
                    + in.remaining() + " bytes follow");
        }
        Map<String, Object> metadata = new LinkedHashMap<>();
        for (long i = 0; i < kvCount; i++) {
            String key = in.string("metadata key #" + i);
            if (metadata.containsKey(key)) {
                throw in.fail("duplicate metadata key '" + key + "'");
            }
            metadata.put(key, in.topValue(key));
        }
        int alignment = DEFAULT_ALIGNMENT;
        Object value = metadata.get("general.alignment");
        if (value != null) {
            if (!(value instanceof GgufValue a) || a.type() != ValueType.UINT32) {
                throw in.fail("general.alignment must be a u32, found " + (value instanceof GgufValue v
                        ? v.type() : ValueType.ARRAY));
            }
            long al = a.asLong();
            if (al == 0 || (al & (al - 1)) != 0 || al > (1 << 20)) {
                throw in.fail("general.alignment " + al + " is not a power of two up to 1 MiB");
            }
            alignment = (int) al;
        }
        record Info(String name, long[] ne, GgmlType type, long offset, long bytes) {
        }
        List<Info> infos = new ArrayList<>();
        Set<String> names = new HashSet<>();
        for (long i = 0; i < tensorCount; i++) {
            String name = in.string("tensor name #" + i);
            if (!names.add(name)) {
                throw in.fail("duplicate tensor name '" + name + "'");
            }
            long nDims = in.u32();
            if (nDims < 1 || nDims > MAX_DIMS) {
                throw in.fail("tensor '" + name + "' has " + nDims + " dimensions (1 to " + MAX_DIMS + " allowed)");
            }
            long[] ne = new long[(int) nDims];
            long elements = 1;
            for (int d = 0; d < nDims; d++) {
                ne[d] = in.u64();
                if (ne[d] <= 0 || ne[d] > (1L << 40)) {
                    throw in.fail("tensor '" + name + "' has dimension " + d + " = " + Long.toUnsignedString(ne[d]));
                }
                elements = Math.multiplyHigh(elements, ne[d]) != 0 || elements * ne[d] > (1L << 48)
                        ? -1 : elements * ne[d];
                if (elements < 0) {
                    throw in.fail("tensor '" + name + "' has an absurd element count");
                }
            }
            long typeId = in.u32();
            GgmlType type = GgmlType.byId(typeId).orElseThrow(() -> in.fail(
                    "tensor '" + name + "' has unknown tensor type " + typeId
                            + "; this build knows " + knownTypes()));
            if (ne[0] % type.blockSize() != 0) {
                throw in.fail("tensor '" + name + "' row length " + ne[0] + " is not a multiple of "
                        + type.name() + "'s block size " + type.blockSize());
            }
            long offset = in.u64();
            long bytes = elements / type.blockSize() * type.typeSize();
            infos.add(new Info(name, ne, type, offset, bytes));
        }
        long dataStart = align(in.position(), alignment);
        long fileSize = seg.byteSize();
        List<GgufTensor> tensors = new ArrayList<>(infos.size());
        for (Info t : infos) {
            if (t.offset < 0 || t.offset % alignment != 0) {
                throw in.fail("tensor '" + t.name + "' offset " + Long.toUnsignedString(t.offset)
                        + " is not a multiple of the alignment " + alignment);
            }
            if (t.offset > fileSize - dataStart || t.bytes > fileSize - dataStart - t.offset) {
                throw in.fail("tensor '" + t.name + "' (" + t.bytes + " bytes at data offset "
                        + Long.toUnsignedString(t.offset) + ") runs past the end of the file (" + fileSize
                        + " bytes, data starts at " + dataStart + "): the file is truncated or corrupt");
            }
            tensors.add(new GgufTensor(t.name, t.ne, t.type, t.offset,
                    seg.asSlice(dataStart + t.offset, t.bytes).asReadOnly()));
        }
        return new GgufFile(path, arena, (int) version, alignment, dataStart,
                seg.asSlice(0, Math.min(dataStart, fileSize)), metadata, tensors);
    }

    private static String knownTypes() {
        StringBuilder sb = new StringBuilder();
        for (int id = 0; id < 64; id++) {
            GgmlType.byId(id).ifPresent(t -> sb.append(sb.isEmpty() ? "" : ", ").append(t.name()));
        }
        return sb.toString();
    }

    static long align(long x, long alignment) {
        return (x + alignment - 1) / alignment * alignment;
    }

    /** {@return the file this was read from} */
    public Path path() {
        return path;
    }

    /** {@return the GGUF version (2 or 3)} */
    public int version() {
        return version;
    }

    /** {@return the data alignment} */
    public int alignment() {
        return alignment;
    }

    /** {@return the byte offset of the data section} */
    public long dataStart() {
        return dataStart;
    }

    /**
     * {@inheritDoc} Each look-up of a top-level string array decodes it from the mapping into a new {@code String[]}:
     * while the file is open.
     */
    @Override
    public Map<String, GgufValue> metadata() {
        return metadata;
    }

    @Override
    public List<GgufTensor> tensors() {
        return tensors;
    }

    @Override
    public Optional<GgufTensor> tensor(String name) {
        return Optional.ofNullable(byName.get(name));
    }

    @Override
    public String source() {
        return path.toString();
    }

    /**
     * Drops the pages of the file's header (metadata and tensor infos) from this process's resident memory, as
     * {@link MemorySegment#unload()} does: nothing is lost, the system reads them back from the file if they are read
     * again. Parsing and building a tokenizer touch every page of a vocabulary; once the model is bound the engine
     * calls this, so that a Llama 3 vocabulary's pages (2.6 MiB for 128,256 pieces with scores and types) do not
     * count towards the peak resident size for as long as the model is loaded. A file read through no mapping (an
     * empty one) has nothing to drop.
     */
    public void unloadHeader() {
        if (header.isMapped()) {
            header.unload();
        }
    }

    @Override
    public void close() {
        arena.close();
    }

    /** A bounds-checked little-endian reader over the mapping. */
    private static final class Cursor {
        private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        private static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        private static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

        private final Path path;
        private final MemorySegment seg;
        private long pos;

        Cursor(Path path, MemorySegment seg) {
            this.path = path;
            this.seg = seg;
        }

        long position() {
            return pos;
        }

        long remaining() {
            return seg.byteSize() - pos;
        }

        PrefillException fail(String problem) {
            return new PrefillException(PrefillException.Code.MODEL_FORMAT, path + ": " + problem);
        }

        private void need(long n, String what) {
            if (n > remaining()) {
                throw fail("truncated: " + what + " needs " + n + " bytes at offset " + pos + " but the file ends at "
                        + seg.byteSize());
            }
        }

        int i32() {
            need(4, "a 32-bit field");
            int v = seg.get(I32, pos);
            pos += 4;
            return v;
        }

        long u32() {
            return Integer.toUnsignedLong(i32());
        }

        long u64() {
            need(8, "a 64-bit field");
            long v = seg.get(I64, pos);
            pos += 8;
            return v;
        }

        String string(String what) {
            long len = u64();
            if (len < 0 || len > remaining()) {
                throw fail("truncated or corrupt: " + what + " claims " + Long.toUnsignedString(len)
                        + " bytes but only " + remaining() + " remain");
            }
            byte[] bytes = seg.asSlice(pos, len).toArray(ValueLayout.JAVA_BYTE);
            pos += len;
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(java.nio.ByteBuffer.wrap(bytes)).toString();
            } catch (CharacterCodingException e) {
                throw fail(what + " is not valid UTF-8");
            }
        }

        /** A top-level value: a {@link GgufValue}, or the elements of a {@link StringArray} checked here, not decoded. */
        Object topValue(String key) {
            long at = pos;
            if (ValueType.byId(u32()) == ValueType.ARRAY && remaining() >= 12
                    && ValueType.byId(Integer.toUnsignedLong(seg.get(I32, pos))) == ValueType.STRING) {
                pos += 4;
                long count = u64();
                if (count < 0 || count > Integer.MAX_VALUE - 8 || count > remaining() / ValueType.STRING.minBytes()) {
                    throw fail("key '" + key + "' claims " + Long.toUnsignedString(count)
                            + " array elements but only " + remaining() + " bytes remain");
                }
                long start = pos;
                for (int i = 0; i < count; i++) {
                    string("element " + i + " of '" + key + "'"); // checked (length, UTF-8), then dropped
                }
                return (Supplier<List<String>>) new StringArray(seg, start, (int) count)::list;
            }
            pos = at;
            return value(key, 0);
        }

        GgufValue value(String key, int depth) {
            long typeId = u32();
            ValueType type = ValueType.byId(typeId);
            if (type == null) {
                throw fail("key '" + key + "' has unknown value type " + typeId);
            }
            return new GgufValue(type, scalarOrArray(type, key, depth));
        }

        private Object scalarOrArray(ValueType type, String key, int depth) {
            return switch (type) {
                case UINT8 -> { need(1, key); yield Byte.toUnsignedInt(seg.get(ValueLayout.JAVA_BYTE, pos++)); }
                case INT8 -> { need(1, key); yield (int) seg.get(ValueLayout.JAVA_BYTE, pos++); }
                case UINT16 -> { need(2, key); int v = Short.toUnsignedInt(seg.get(I16, pos)); pos += 2; yield v; }
                case INT16 -> { need(2, key); int v = seg.get(I16, pos); pos += 2; yield v; }
                case UINT32 -> u32();
                case INT32 -> i32();
                case FLOAT32 -> { need(4, key); float v = seg.get(F32, pos); pos += 4; yield v; }
                case BOOL -> {
                    need(1, key);
                    byte b = seg.get(ValueLayout.JAVA_BYTE, pos++);
                    if (b != 0 && b != 1) {
                        throw fail("key '" + key + "' has bool byte " + b + " (0 or 1 allowed)");
                    }
                    yield b == 1;
                }
                case STRING -> string("value of '" + key + "'");
                case UINT64, INT64 -> u64();
                case FLOAT64 -> { need(8, key); double v = seg.get(F64, pos); pos += 8; yield v; }
                case ARRAY -> array(key, depth);
            };
        }

        private GgufArray array(String key, int depth) {
            if (depth >= MAX_NESTING) {
                throw fail("key '" + key + "' nests arrays deeper than " + MAX_NESTING);
            }
            long typeId = u32();
            ValueType et = ValueType.byId(typeId);
            if (et == null) {
                throw fail("key '" + key + "' is an array of unknown type " + typeId);
            }
            long count = u64();
            if (count < 0 || count > Integer.MAX_VALUE - 8 || count > remaining() / et.minBytes()) {
                throw fail("key '" + key + "' claims " + Long.toUnsignedString(count) + " array elements but only "
                        + remaining() + " bytes remain");
            }
            int n = (int) count;
            return switch (et) {
                case UINT8, INT8, UINT16, INT16, INT32 -> {
                    int[] a = new int[n];
                    for (int i = 0; i < n; i++) {
                        a[i] = (Integer) scalarOrArray(et, key, depth);
                    }
                    yield new GgufArray(et, a);
                }
                case UINT32, UINT64, INT64 -> {
                    long[] a = new long[n];
                    for (int i = 0; i < n; i++) {
                        a[i] = (Long) scalarOrArray(et, key, depth);
                    }
                    yield new GgufArray(et, a);
                }
                case FLOAT32 -> {
                    float[] a = new float[n];
                    MemorySegment.copy(seg, F32, pos, a, 0, n);
                    pos += 4L * n;
                    yield new GgufArray(et, a);
                }
                case FLOAT64 -> {
                    double[] a = new double[n];
                    MemorySegment.copy(seg, F64, pos, a, 0, n);
                    pos += 8L * n;
                    yield new GgufArray(et, a);
                }
                case BOOL -> {
                    boolean[] a = new boolean[n];
                    for (int i = 0; i < n; i++) {
                        a[i] = (Boolean) scalarOrArray(et, key, depth);
                    }
                    yield new GgufArray(et, a);
                }
                case STRING -> {
                    String[] a = new String[n];
                    for (int i = 0; i < n; i++) {
                        a[i] = string("element " + i + " of '" + key + "'");
                    }
                    yield new GgufArray(et, a);
                }
                case ARRAY -> {
                    GgufArray[] a = new GgufArray[n];
                    for (int i = 0; i < n; i++) {
                        a[i] = array(key, depth + 1);
                    }
                    yield new GgufArray(et, a);
                }
            };
        }
    }

    /**
     * A string array left in the mapping: {@code count} GGUF strings (u64 length, UTF-8 bytes) from {@code start},
     * all checked when the file was opened.
     */
    private record StringArray(MemorySegment seg, long start, int count) {
        /** {@return the elements as a list that decodes each when asked for (offsets found on first use)} */
        List<String> list() {
            return new Elements();
        }

        private String decode(long at) {
            long len = seg.get(Cursor.I64, at);
            return new String(seg.asSlice(at + 8, len).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
        }

        private final class Elements extends AbstractList<String> implements RandomAccess {
            private long[] offsets;

            @Override
            public String get(int index) {
                Objects.checkIndex(index, count);
                if (offsets == null) {
                    long[] o = new long[count];
                    long at = start;
                    for (int i = 0; i < count; i++) {
                        o[i] = at;
                        at += 8 + seg.get(Cursor.I64, at);
                    }
                    offsets = o;
                }
                return decode(offsets[index]);
            }

            @Override
            public int size() {
                return count;
            }
        }
    }
}
