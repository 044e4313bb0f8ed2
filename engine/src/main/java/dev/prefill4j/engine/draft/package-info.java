/**
 * Draft sources for burst verification: they propose tokens that the model then verifies in one pass.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.draft;

import dev.prefill4j.api.Api;
