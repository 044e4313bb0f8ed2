/** The SSD KV store (not exported; found through {@link java.util.ServiceLoader}). */
package dev.prefill4j.kvstore.ssd;
