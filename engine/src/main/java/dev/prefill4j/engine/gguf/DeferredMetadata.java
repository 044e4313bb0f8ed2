package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.util.AbstractMap;
import java.util.AbstractSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Supplier;

/**
 * Unmodifiable GGUF metadata whose top-level string arrays are not held as Strings: each is kept as a source of its
 * elements, and {@link GgufContent#requireStrings} reads them from there as a list, while a {@link #get} of such a key
 * makes a new {@code String[]} value. A Llama 3 vocabulary (128,256 pieces) held as Strings takes 6.6 MiB of heap for
 * as long as its model is loaded; a {@link GgufFile} leaves it in the mapping and a synthetic model computes each piece
 * from its index.
 *
 * @since 0.1
 */
@Api.Internal
public final class DeferredMetadata extends AbstractMap<String, GgufValue> {
    /** Values in order: a {@link GgufValue}, or a {@link Supplier} of a string array's elements. */
    private final Map<String, Object> raw;

    /**
     * @param values the metadata in order: each value a {@link GgufValue}, or a {@code Supplier<List<String>>} of the
     *               elements of a string array (called on each look-up; the lists it returns are read, not kept)
     * @throws IllegalArgumentException if a value is neither
     */
    public DeferredMetadata(Map<String, ?> values) {
        Map<String, Object> copy = new LinkedHashMap<>();
        values.forEach((key, value) -> {
            if (!(value instanceof GgufValue) && !(value instanceof Supplier<?>)) {
                throw new IllegalArgumentException("metadata '" + key + "' is neither a GgufValue nor a supplier of "
                        + "string-array elements: " + (value == null ? "null" : value.getClass().getName()));
            }
            copy.put(key, value);
        });
        this.raw = copy;
    }

    /**
     * {@return the elements of the deferred string array {@code key}, or empty where the key holds none (a value
     * kept as a {@link GgufValue}, or no value)}
     *
     * @param key metadata key
     */
    public Optional<List<String>> strings(String key) {
        return raw.get(key) instanceof Supplier<?> s ? Optional.of(elements(s)) : Optional.empty();
    }

    @SuppressWarnings("unchecked")
    private static List<String> elements(Supplier<?> source) {
        return (List<String>) source.get();
    }

    private static GgufValue resolve(Object v) {
        return v instanceof Supplier<?> s ? GgufValue.array(ValueType.STRING, elements(s).toArray(new String[0]))
                : (GgufValue) v;
    }

    @Override
    public GgufValue get(Object key) {
        Object v = raw.get(key);
        return v == null ? null : resolve(v);
    }

    @Override
    public boolean containsKey(Object key) {
        return raw.containsKey(key);
    }

    @Override
    public int size() {
        return raw.size();
    }

    @Override
    public Set<Entry<String, GgufValue>> entrySet() {
        return new AbstractSet<>() {
            @Override
            public Iterator<Entry<String, GgufValue>> iterator() {
                Iterator<Entry<String, Object>> it = raw.entrySet().iterator();
                return new Iterator<>() {
                    @Override
                    public boolean hasNext() {
                        return it.hasNext();
                    }

                    @Override
                    public Entry<String, GgufValue> next() {
                        Entry<String, Object> e = it.next();
                        return Map.entry(e.getKey(), resolve(e.getValue()));
                    }
                };
            }

            @Override
            public int size() {
                return raw.size();
            }
        };
    }
}
