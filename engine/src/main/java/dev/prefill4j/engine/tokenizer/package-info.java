/**
 * Tokenizers read from model files. {@link dev.prefill4j.engine.tokenizer.Tokenizer} is both the SentencePiece-style
 * (score-ranked pair merging with byte fallback) tokenizer of GGUF's {@code llama} vocabularies and of llama2.c's
 * {@code tokenizer.bin}, and the byte-level BPE (rank-ordered merges over GPT-2's byte characters) of GGUF's {@code
 * gpt2} vocabularies: Llama 3's and GPT-2's.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine.tokenizer;

import dev.prefill4j.api.Api;
