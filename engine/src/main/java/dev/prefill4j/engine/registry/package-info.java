/**
 * Plugin discovery: one registry over {@link java.util.ServiceLoader} for every SPI.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.registry;

import dev.prefill4j.api.Api;
