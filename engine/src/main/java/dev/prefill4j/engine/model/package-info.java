/**
 * Llama-family models: configuration read from GGUF-shaped metadata, weights bound to their formats, and the
 * deterministic synthetic models the engine generates itself.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.model;

import dev.prefill4j.api.Api;
