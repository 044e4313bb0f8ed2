package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * The ggml tensor types a GGUF file may name: their id, block geometry, and which prefill4j module decodes
 * them. Sizes are from ggml's type traits (FORMATS.md §7: "Type sizes"). The table lets the reader check tensor
 * sizes and name the missing module for any known type even when no module for it is installed.
 *
 * @param id        the {@code ggml_type} id
 * @param name      ggml's name, e.g. {@code Q4_K}
 * @param blockSize elements per block
 * @param typeSize  bytes per block
 * @param module    the prefill4j module that provides it, or {@code null} when none does yet
 * @since 0.1
 */
@Api.Stable
public record GgmlType(int id, String name, int blockSize, int typeSize, String module) {
    private static final String ENGINE = "dev.prefill4j.engine";
    private static final Map<Integer, GgmlType> BY_ID = new TreeMap<>();

    static {
        add(0, "F32", 1, 4, ENGINE);
        add(1, "F16", 1, 2, ENGINE);
        add(2, "Q4_0", 32, 18, "dev.prefill4j.quant.q4_0");
        add(3, "Q4_1", 32, 20, null);
        add(6, "Q5_0", 32, 22, "dev.prefill4j.quant.q4_0");
        add(7, "Q5_1", 32, 24, "dev.prefill4j.quant.q4_0");
        add(8, "Q8_0", 32, 34, ENGINE);
        add(9, "Q8_1", 32, 36, null);
        add(10, "Q2_K", 256, 84, null);
        add(11, "Q3_K", 256, 110, null);
        add(12, "Q4_K", 256, 144, "dev.prefill4j.quant.q4k");
        add(13, "Q5_K", 256, 176, "dev.prefill4j.quant.q4k");
        add(14, "Q6_K", 256, 210, "dev.prefill4j.quant.q4k");
        add(15, "Q8_K", 256, 292, "dev.prefill4j.quant.q4k");
        add(24, "I8", 1, 1, null);
        add(25, "I16", 1, 2, null);
        add(26, "I32", 1, 4, null);
        add(27, "I64", 1, 8, null);
        add(28, "F64", 1, 8, null);
        add(30, "BF16", 1, 2, ENGINE);
        add(34, "TQ1_0", 256, 54, "dev.prefill4j.quant.bitnet");
        add(35, "TQ2_0", 256, 66, "dev.prefill4j.quant.bitnet");
    }

    private static void add(int id, String name, int blockSize, int typeSize, String module) {
        BY_ID.put(id, new GgmlType(id, name, blockSize, typeSize, module));
    }

    /** {@return the type with this id, if ggml defines it} @param id a {@code ggml_type} id */
    public static Optional<GgmlType> byId(long id) {
        return id < 0 || id > Integer.MAX_VALUE ? Optional.empty() : Optional.ofNullable(BY_ID.get((int) id));
    }

    /** {@return the type with this name (case-insensitive), if ggml defines it} @param name e.g. {@code q8_0} */
    public static Optional<GgmlType> byName(String name) {
        return BY_ID.values().stream().filter(t -> t.name.equalsIgnoreCase(name)).findFirst();
    }

    /** {@return "12 (Q4_K)"} */
    public String label() {
        return id + " (" + name + ")";
    }
}
