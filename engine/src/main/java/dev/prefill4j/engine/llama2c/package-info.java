/**
 * llama2.c checkpoints ({@code .bin}, "version 0" / legacy export) and {@code tokenizer.bin}, presented as
 * GGUF-shaped content so they load through the same path as GGUF files.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.llama2c;

import dev.prefill4j.api.Api;
