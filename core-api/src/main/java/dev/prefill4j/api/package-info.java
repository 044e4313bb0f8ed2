/**
 * Versioning and stability markers shared by every prefill4j module.
 *
 * <p>Null policy for this package and {@link dev.prefill4j.api.spi}: no parameter or return value is
 * {@code null} unless its Javadoc says so.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.api;
