/** TQ1_0 and TQ2_0 (not exported; found through {@link java.util.ServiceLoader}). */
package dev.prefill4j.quant.bitnet;
