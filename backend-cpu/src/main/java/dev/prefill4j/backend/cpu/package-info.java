/** CPU kernels (not exported; reached through {@link java.util.ServiceLoader}). */
package dev.prefill4j.backend.cpu;
