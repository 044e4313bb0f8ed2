package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.util.Objects;

/**
 * A typed GGUF metadata value; see {@link ValueType} for the Java representation of each type.
 *
 * @param type  the on-disk type
 * @param value the value
 * @since 0.1
 */
@Api.Stable
public record GgufValue(ValueType type, Object value) {
    /** Checks that the value's Java type matches {@code type}. */
    public GgufValue {
        Objects.requireNonNull(type, "type");
        Objects.requireNonNull(value, "value");
        Class<?> expected = switch (type) {
            case UINT8, INT8, UINT16, INT16, INT32 -> Integer.class;
            case UINT32, UINT64, INT64 -> Long.class;
            case FLOAT32 -> Float.class;
            case FLOAT64 -> Double.class;
            case BOOL -> Boolean.class;
            case STRING -> String.class;
            case ARRAY -> GgufArray.class;
        };
        if (value.getClass() != expected) {
            throw new IllegalArgumentException(type + " value needs a " + expected.getSimpleName());
        }
    }

    /** {@return a {@code UINT32} value} @param v value, 0 to 2^32-1 */
    public static GgufValue u32(long v) {
        return new GgufValue(ValueType.UINT32, v);
    }

    /** {@return an {@code INT32} value} @param v value */
    public static GgufValue i32(int v) {
        return new GgufValue(ValueType.INT32, v);
    }

    /** {@return a {@code FLOAT32} value} @param v value */
    public static GgufValue f32(float v) {
        return new GgufValue(ValueType.FLOAT32, v);
    }

    /** {@return a {@code BOOL} value} @param v value */
    public static GgufValue bool(boolean v) {
        return new GgufValue(ValueType.BOOL, v);
    }

    /** {@return a {@code STRING} value} @param v value */
    public static GgufValue string(String v) {
        return new GgufValue(ValueType.STRING, v);
    }

    /** {@return an {@code ARRAY} value} @param elementType element type @param values Java array, see {@link GgufArray} */
    public static GgufValue array(ValueType elementType, Object values) {
        return new GgufValue(ValueType.ARRAY, new GgufArray(elementType, values));
    }

    /** {@return whether this is an integer type} */
    public boolean isInteger() {
        return value instanceof Integer || value instanceof Long;
    }

    /** {@return this integer value widened to long} @throws IllegalStateException if not an integer */
    public long asLong() {
        if (value instanceof Integer i) {
            return i;
        }
        if (value instanceof Long l) {
            return l;
        }
        throw new IllegalStateException(type + " is not an integer");
    }

    @Override
    public String toString() {
        return type == ValueType.STRING ? '"' + (String) value + '"' : String.valueOf(value);
    }
}
