package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;

/**
 * What every provider of every prefill4j SPI reports about itself.
 *
 * @since 0.1
 */
@Api.Stable
public interface Plugin {
    /**
     * {@return the provider's id, unique within its SPI}: lower case, digits, {@code _}, {@code -} and
     * {@code .}, for example {@code q8_0} or {@code cpu}. Two providers with the same id are a hard error.
     */
    String id();

    /**
     * {@return the core-api version this provider was built against}; implement it as
     * {@code return ApiVersion.CURRENT;} so the compiler records the build-time value.
     *
     * @see dev.prefill4j.api.ApiVersion
     */
    String apiVersion();

    /** {@return one line for humans, shown by {@code prefill4j plugins}} */
    default String description() {
        return id();
    }
}
