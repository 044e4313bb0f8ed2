package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
import java.util.Objects;

/**
 * Whether a provider can run on this machine, and if not, why (shown to users verbatim).
 *
 * @param available whether the provider can be used here
 * @param reason    why it cannot, or a short note on what it will use; never {@code null}
 * @since 0.1
 */
@Api.Stable
public record Availability(boolean available, String reason) {
    /** Validates the fields. */
    public Availability {
        Objects.requireNonNull(reason, "reason");
    }

    /** {@return an available result with a note such as the instruction set in use} @param note shown to users */
    public static Availability available(String note) {
        return new Availability(true, note);
    }

    /** {@return an unavailable result} @param reason what is missing and how to get it */
    public static Availability unavailable(String reason) {
        return new Availability(false, reason);
    }
}
