/** Q4_0 and Q5_0 (not exported; found through {@link java.util.ServiceLoader}). */
package dev.prefill4j.quant.q4_0;
