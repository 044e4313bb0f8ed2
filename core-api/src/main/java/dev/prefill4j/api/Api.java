package dev.prefill4j.api;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Stability markers for public types. Every public top-level type of prefill4j carries exactly one of them; a
 * rule in the {@code tests} module enforces it. Retention is {@code CLASS}: the markers document the contract
 * and are checked on byte code, but cost nothing at run time.
 *
 * @since 0.1
 */
@Api.Stable
public final class Api {
    private Api() {
    }

    /** Compatible within a major {@linkplain ApiVersion API version}. @since 0.1 */
    @Documented
    @Retention(RetentionPolicy.CLASS)
    @Target({ElementType.TYPE, ElementType.PACKAGE, ElementType.METHOD, ElementType.CONSTRUCTOR, ElementType.FIELD})
    public @interface Stable {
    }

    /** May change in any release; feedback welcome. @since 0.1 */
    @Documented
    @Retention(RetentionPolicy.CLASS)
    @Target({ElementType.TYPE, ElementType.PACKAGE, ElementType.METHOD, ElementType.CONSTRUCTOR, ElementType.FIELD})
    public @interface Experimental {
    }

    /** Public for technical reasons only (module-internal wiring); not for users. @since 0.1 */
    @Documented
    @Retention(RetentionPolicy.CLASS)
    @Target({ElementType.TYPE, ElementType.PACKAGE, ElementType.METHOD, ElementType.CONSTRUCTOR, ElementType.FIELD})
    public @interface Internal {
    }
}
