package dev.prefill4j.cli;

/**
 * Text from a model file made safe to print on a terminal: a hostile file's control characters (ESC starts the
 * sequences that move the cursor, clear the screen or retitle the window) and line breaks are shown as escapes.
 */
final class Printable {
    private Printable() {
    }

    /**
     * {@return {@code s} with control characters as escapes (a line feed as backslash-n, ESC as backslash-u001b, ...)
     * and backslashes doubled}
     *
     * @param s the text
     */
    static String of(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        escape(sb, s, false);
        return sb.toString();
    }

    /**
     * Appends {@code s} with backslash escapes: control characters always; for a JSON string also double quotes, and
     * every character outside printable ASCII as backslash-u and four hex digits, so that the document is the same in
     * every locale (System.out encodes text in the locale's charset, and a C or POSIX locale's is ASCII, which had
     * written "max |?logit|" for a Greek capital delta).
     *
     * @param sb   where to append
     * @param s    the text
     * @param json whether {@code s} goes into a JSON string
     */
    static void escape(StringBuilder sb, String s, boolean json) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append(json ? "\\\"" : "\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    // C0 controls, and DEL and the C1 controls, or for JSON all of non-ASCII
                    if (c < 0x20 || (json ? c > 0x7E : c >= 0x7f && c <= 0x9f)) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
    }
}
