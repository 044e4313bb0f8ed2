/**
 * Built-in weight formats, registered through the same {@link dev.prefill4j.api.spi.Quantizer} SPI as any
 * plugin. Not exported: the engine finds them through {@link java.util.ServiceLoader} like every other format.
 */
package dev.prefill4j.engine.formats;
