package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.util.Objects;

/**
 * A GGUF array value. {@code values} is a Java array matching the element type: {@code int[]} for
 * {@code UINT8, INT8, UINT16, INT16, INT32}; {@code long[]} for {@code UINT32, UINT64, INT64}; {@code float[]},
 * {@code double[]}, {@code boolean[]}, {@code String[]}, and {@code GgufArray[]} for nested arrays.
 *
 * @param elementType type of every element
 * @param values      the elements, as described above; not copied
 * @since 0.1
 */
@Api.Stable
public record GgufArray(ValueType elementType, Object values) {
    /** Checks that {@code values} is the Java array type for {@code elementType}. */
    public GgufArray {
        Objects.requireNonNull(elementType, "elementType");
        Class<?> expected = switch (elementType) {
            case UINT8, INT8, UINT16, INT16, INT32 -> int[].class;
            case UINT32, UINT64, INT64 -> long[].class;
            case FLOAT32 -> float[].class;
            case FLOAT64 -> double[].class;
            case BOOL -> boolean[].class;
            case STRING -> String[].class;
            case ARRAY -> GgufArray[].class;
        };
        if (values == null || values.getClass() != expected) {
            throw new IllegalArgumentException(elementType + " array needs a " + expected.getSimpleName());
        }
    }

    /** {@return the element count} */
    public int size() {
        return java.lang.reflect.Array.getLength(values);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof GgufArray other && elementType == other.elementType
                && Objects.deepEquals(values, other.values);
    }

    @Override
    public int hashCode() {
        return elementType.hashCode() * 31 + size();
    }

    @Override
    public String toString() {
        return elementType + "[" + size() + "]";
    }
}
