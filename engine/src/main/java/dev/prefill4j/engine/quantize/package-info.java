/**
 * Model quantization: llama.cpp's per-tensor type choice for its file types, and the writer that applies it.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.quantize;

import dev.prefill4j.api.Api;
