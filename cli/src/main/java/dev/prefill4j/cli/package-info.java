/** The {@code prefill4j} command (not exported: run it with {@code java -m dev.prefill4j.cli}). */
package dev.prefill4j.cli;
