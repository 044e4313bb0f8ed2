package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;

/**
 * GGUF metadata value types with their on-disk ids (GGUF spec, FORMATS.md §7).
 *
 * <p>Java representation of a scalar: {@code UINT8, INT8, UINT16, INT16, INT32} as {@link Integer} (unsigned
 * types zero-extended), {@code UINT32, UINT64, INT64} as {@link Long} ({@code UINT64} as the raw bit pattern),
 * {@code FLOAT32} as {@link Float}, {@code FLOAT64} as {@link Double}, {@code BOOL} as {@link Boolean},
 * {@code STRING} as {@link String}, {@code ARRAY} as {@link GgufArray}.
 *
 * @since 0.1
 */
@Api.Stable
public enum ValueType {
    /** id 0 */ UINT8(0, 1),
    /** id 1 */ INT8(1, 1),
    /** id 2 */ UINT16(2, 2),
    /** id 3 */ INT16(3, 2),
    /** id 4 */ UINT32(4, 4),
    /** id 5 */ INT32(5, 4),
    /** id 6 */ FLOAT32(6, 4),
    /** id 7 */ BOOL(7, 1),
    /** id 8; u64 length + UTF-8 bytes */ STRING(8, 8),
    /** id 9; element type u32 + count u64 + elements */ ARRAY(9, 12),
    /** id 10 */ UINT64(10, 8),
    /** id 11 */ INT64(11, 8),
    /** id 12 */ FLOAT64(12, 8);

    private final int id;
    private final int minBytes;

    ValueType(int id, int minBytes) {
        this.id = id;
        this.minBytes = minBytes;
    }

    /** {@return the on-disk id} */
    public int id() {
        return id;
    }

    /** {@return the fewest bytes one value of this type occupies on disk} */
    public int minBytes() {
        return minBytes;
    }

    /** {@return the type with on-disk id {@code id}, or {@code null} if there is none} @param id on-disk id */
    public static ValueType byId(long id) {
        for (ValueType t : values()) {
            if (t.id == id) {
                return t;
            }
        }
        return null;
    }
}
