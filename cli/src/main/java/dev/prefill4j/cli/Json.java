package dev.prefill4j.cli;

import java.util.List;
import java.util.Map;

/** A minimal JSON writer for the CLI's {@code --json} outputs (maps, lists, strings, numbers, arrays). */
final class Json {
    private Json() {
    }

    static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, 0);
        return sb.append('\n').toString();
    }

    private static void write(StringBuilder sb, Object v, int indent) {
        switch (v) {
            case null -> sb.append("null");
            case String s -> string(sb, s);
            case Boolean b -> sb.append(b);
            case Float f -> number(sb, f.doubleValue());
            case Double d -> number(sb, d);
            case Number n -> sb.append(n);
            case int[] a -> {
                sb.append('[');
                for (int i = 0; i < a.length; i++) {
                    sb.append(i == 0 ? "" : ", ").append(a[i]);
                }
                sb.append(']');
            }
            case double[] a -> {
                sb.append('[');
                for (int i = 0; i < a.length; i++) {
                    sb.append(i == 0 ? "" : ", ");
                    number(sb, a[i]);
                }
                sb.append(']');
            }
            case long[] a -> {
                sb.append('[');
                for (int i = 0; i < a.length; i++) {
                    sb.append(i == 0 ? "" : ", ").append(a[i]);
                }
                sb.append(']');
            }
            case Map<?, ?> m -> {
                sb.append("{");
                int i = 0;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    sb.append(i++ == 0 ? "\n" : ",\n").append("  ".repeat(indent + 1));
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(": ");
                    write(sb, e.getValue(), indent + 1);
                }
                sb.append(m.isEmpty() ? "}" : "\n" + "  ".repeat(indent) + "}");
            }
            case List<?> l -> {
                sb.append("[");
                for (int i = 0; i < l.size(); i++) {
                    sb.append(i == 0 ? "\n" : ",\n").append("  ".repeat(indent + 1));
                    write(sb, l.get(i), indent + 1);
                }
                sb.append(l.isEmpty() ? "]" : "\n" + "  ".repeat(indent) + "]");
            }
            default -> string(sb, String.valueOf(v));
        }
    }

    private static void number(StringBuilder sb, double d) {
        if (Double.isFinite(d)) {
            sb.append(d);
        } else {
            sb.append("null");
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        Printable.escape(sb, s, true);
        sb.append('"');
    }
}
