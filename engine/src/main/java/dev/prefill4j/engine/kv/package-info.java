/** The built-in in-memory KV store ({@code memory}). Not exported: found through {@link java.util.ServiceLoader}. */
package dev.prefill4j.engine.kv;
