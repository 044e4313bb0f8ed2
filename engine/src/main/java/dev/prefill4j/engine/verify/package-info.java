/**
 * Verification of a configuration against a scalar FP64 reference forward pass.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.verify;

import dev.prefill4j.api.Api;
