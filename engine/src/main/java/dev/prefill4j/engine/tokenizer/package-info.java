/**
 * Tokenizers read from model files. {@link dev.prefill4j.engine.tokenizer.Tokenizer} is the SentencePiece-style
 * (score-ranked pair merging with byte fallback) tokenizer of GGUF's {@code llama} vocabularies and of llama2.c's
 * {@code tokenizer.bin}.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.tokenizer;

import dev.prefill4j.api.Api;
