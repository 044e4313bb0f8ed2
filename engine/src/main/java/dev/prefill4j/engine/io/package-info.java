/**
 * Guards for the files the engine reads ({@link dev.prefill4j.engine.io.InputFiles}) and the files its tools write
 * ({@link dev.prefill4j.engine.io.OutputFiles}): checked before the work, so that a message names the file at fault,
 * and a long run does not end in a write that cannot happen or that would destroy an input.
 *
 * @since 0.1
 */
@Api.Experimental
package dev.prefill4j.engine.io;

import dev.prefill4j.api.Api;
