/** Q4_K, Q6_K and Q8_K (not exported; found through {@link java.util.ServiceLoader}). */
package dev.prefill4j.quant.q4k;
