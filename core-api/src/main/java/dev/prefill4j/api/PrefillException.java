package dev.prefill4j.api;

/**
 * The one exception type prefill4j throws for bad input, missing plugins and failed runs. Its message is one
 * line a user can act on: what is wrong, where, and what to do; it ends with a stable code (e.g.
 * {@code [P4J-GGUF]}) that the README's "Errors" section explains.
 *
 * @since 0.1
 */
@Api.Stable
public class PrefillException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Stable error codes; each has an entry in the README's "Errors" section. @since 0.1 */
    @Api.Stable
    public enum Code {
        /** A model file is malformed, truncated or hostile. */
        MODEL_FORMAT("P4J-GGUF"),
        /** A model needs a weight format no module provides. */
        MISSING_FORMAT("P4J-MISSING-FORMAT"),
        /** Plugin discovery failed: duplicate id, incompatible API version, nothing available. */
        PLUGIN("P4J-PLUGIN"),
        /** A prompt or generation does not fit the context. */
        CONTEXT("P4J-CONTEXT"),
        /** NaN or Inf appeared in an activation. */
        NON_FINITE("P4J-NONFINITE"),
        /** An argument or option is invalid. */
        ARGUMENT("P4J-ARG"),
        /** Reading or writing a file failed. */
        IO("P4J-IO");

        private final String tag;

        Code(String tag) {
            this.tag = tag;
        }

        /** {@return the stable tag, e.g. {@code P4J-GGUF}} */
        public String tag() {
            return tag;
        }
    }

    private final Code code;

    /**
     * Creates an exception.
     *
     * @param code    the stable code
     * @param message one line: what is wrong and how to fix it
     */
    public PrefillException(Code code, String message) {
        super(message + " [" + code.tag() + "]");
        this.code = code;
    }

    /**
     * Creates an exception with a cause.
     *
     * @param code    the stable code
     * @param message one line: what is wrong and how to fix it
     * @param cause   the underlying failure
     */
    public PrefillException(Code code, String message, Throwable cause) {
        super(message + " [" + code.tag() + "]", cause);
        this.code = code;
    }

    /** {@return the stable code} */
    public Code code() {
        return code;
    }
}
