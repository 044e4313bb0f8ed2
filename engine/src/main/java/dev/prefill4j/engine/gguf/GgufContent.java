package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * GGUF-shaped model content: typed metadata and named tensors. A mapped {@link GgufFile} is one; a synthetic
 * model generated in memory is another, so both load through one path. The accessors accept any integer type
 * for integer keys (FORMATS.md §7: writers differ in u32/u64) and fail with a {@code P4J-GGUF} message that names
 * the source.
 *
 * @since 0.1
 */
@Api.Stable
public interface GgufContent {
    /** {@return where the content comes from, for messages (a path, or "synthetic ...")} */
    String source();

    /** {@return all metadata in order; unmodifiable} */
    Map<String, GgufValue> metadata();

    /** {@return all tensors in order} */
    List<GgufTensor> tensors();

    /** {@return the tensor with this name, if present} @param name tensor name */
    default Optional<GgufTensor> tensor(String name) {
        return tensors().stream().filter(t -> t.name().equals(name)).findFirst();
    }

    /** {@return the value of {@code key}, if present} @param key metadata key */
    default Optional<GgufValue> get(String key) {
        return Optional.ofNullable(metadata().get(key));
    }


    /**
     * {@return the integer value of {@code key}, of any integer type}
     *
     * @param key metadata key
     * @throws PrefillException if missing or not an integer
     */
    default long requireLong(String key) {
        GgufValue v = require(key);
        if (!v.isInteger()) {
            throw fail("key '" + key + "' has type " + v.type() + ", expected an integer");
        }
        return v.asLong();
    }

    /** {@return the integer value of {@code key}, or {@code fallback}} @param key key @param fallback default */
    default long getLong(String key, long fallback) {
        return metadata().containsKey(key) ? requireLong(key) : fallback;
    }

    /** {@return the float value of {@code key} (f32 or f64), or {@code fallback}} @param key key @param fallback default */
    default double getDouble(String key, double fallback) {
        GgufValue v = metadata().get(key);
        if (v == null) {
            return fallback;
        }
        if (v.value() instanceof Float f) {
            return f;
        }
        if (v.value() instanceof Double d) {
            return d;
        }
        throw fail("key '" + key + "' has type " + v.type() + ", expected a float");
    }

    /** {@return the string value of {@code key}} @param key key @throws PrefillException if missing or not a string */
    default String requireString(String key) {
        GgufValue v = require(key);
        if (!(v.value() instanceof String s)) {
            throw fail("key '" + key + "' has type " + v.type() + ", expected a string");
        }
        return s;
    }

    /** {@return the array value of {@code key}} @param key key @throws PrefillException if missing or not an array */
    default GgufArray requireArray(String key) {
        GgufValue v = require(key);
        if (!(v.value() instanceof GgufArray arr)) {
            throw fail("key '" + key + "' has type " + v.type() + ", expected an array");
        }
        return arr;
    }

    /**
     * {@return the elements of the string array {@code key}; unmodifiable} The strings {@link #requireArray} holds,
     * or, where the metadata is {@link DeferredMetadata}, a list that makes each String when it is asked for: a
     * {@link GgufFile} decodes it from its mapping, a synthetic model computes it, so that a vocabulary (128,256
     * pieces for Llama 3) is not kept on the heap as Strings for as long as the model is loaded.
     *
     * @param key key
     * @throws PrefillException if missing or not an array of strings
     * @since 0.1
     */
    default List<String> requireStrings(String key) {
        if (metadata() instanceof DeferredMetadata deferred) {
            Optional<List<String>> elements = deferred.strings(key);
            if (elements.isPresent()) {
                return Collections.unmodifiableList(elements.get());
            }
        }
        if (!(requireArray(key).values() instanceof String[] strings)) {
            throw fail("key '" + key + "' must be an array of strings");
        }
        return Collections.unmodifiableList(Arrays.asList(strings));
    }

    /** {@return the value of {@code key}} @param key key @throws PrefillException if missing */
    default GgufValue require(String key) {
        GgufValue v = metadata().get(key);
        if (v == null) {
            throw fail("missing required key '" + key + "'");
        }
        return v;
    }

    /** {@return a {@code P4J-GGUF} exception naming this file} @param problem what is wrong */
    default PrefillException fail(String problem) {
        return new PrefillException(PrefillException.Code.MODEL_FORMAT, source() + ": " + problem);
    }

}
