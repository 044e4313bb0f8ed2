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
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) { // C0, DEL and C1 controls
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        return sb.toString();
    }
}
