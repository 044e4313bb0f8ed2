/**
 * The GGUF v3 container: a bounds-checked reader over a memory-mapped file and a writer that follows
 * llama.cpp's conventions (value types, alignment, zero padding), so files it writes load in llama.cpp.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.gguf;

import dev.prefill4j.api.Api;
