package dev.prefill4j.engine.registry;

import dev.prefill4j.api.Api;

/**
 * What the registry knows about one discovered provider.
 *
 * @param spi          the SPI's simple name ({@code Quantizer}, {@code Backend}, ...)
 * @param id           the provider's id
 * @param module       the module that provides it, or {@code classpath:<location>} outside a named module
 * @param version      the module's version ({@code --module-version}), or {@code unknown}
 * @param apiVersion   the core-api version it was built against
 * @param description  one line from the provider
 * @param availability {@code available}, or {@code unavailable: reason}
 * @since 0.1
 */
@Api.Stable
public record PluginInfo(String spi, String id, String module, String version, String apiVersion,
                         String description, String availability) {
}
