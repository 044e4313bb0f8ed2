/**
 * The service-provider interfaces of prefill4j.
 *
 * <p>Every SPI extends {@link dev.prefill4j.api.spi.Plugin}: a provider is a cheap factory with an
 * {@code id()} and metadata, constructed by {@link java.util.ServiceLoader} with no side effects; heavy work
 * (allocating buffers, starting threads, opening files) happens only in the work method that takes an
 * engine-owned context ({@code Backend.create}, {@code Attention.create}, {@code KVStore.open}).
 *
 * <p>Selection is done by the engine's registry: an explicit choice first (command-line flag or system
 * property), otherwise the available provider with the highest {@code priority()}; ties are broken by id so
 * the order is deterministic. Built-in priorities: CPU backend 100, CPU attention 100, memory KV store 100.
 *
 * <p>Null policy: no parameter or return value is {@code null} unless its Javadoc says so.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.api.spi;

import dev.prefill4j.api.Api;
