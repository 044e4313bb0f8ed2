package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * One tensor of a GGUF file.
 *
 * @param name   unique name, e.g. {@code blk.0.attn_q.weight}
 * @param ne     dimensions, fastest first ({@code ne[0]} is the row length)
 * @param type   the ggml type
 * @param offset byte offset relative to the start of the data section
 * @param data   the tensor's bytes, a slice of the mapping (read-only, not copied)
 * @since 0.1
 */
@Api.Stable
public record GgufTensor(String name, long[] ne, GgmlType type, long offset, MemorySegment data) {
    /** {@return the element count} */
    public long elementCount() {
        long n = 1;
        for (long d : ne) {
            n *= d;
        }
        return n;
    }

    /** {@return rows: the product of every dimension but the first} */
    public long rows() {
        return elementCount() / ne[0];
    }

    /** {@return e.g. {@code [256, 512]}} */
    public String shape() {
        return Arrays.toString(ne);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof GgufTensor t && t.name.equals(name) && Arrays.equals(t.ne, ne) && t.type.equals(type)
                && t.offset == offset;
    }

    @Override
    public int hashCode() {
        return name.hashCode();
    }
}
