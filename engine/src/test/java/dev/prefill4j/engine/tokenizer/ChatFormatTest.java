package dev.prefill4j.engine.tokenizer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * The formats against the strings llama.cpp's own test states for them (tests/test-chat-template.cpp, build c392e50:
 * {@code fmt_sys} and {@code fmt_single} for "llama3" and "chatml"), and detection on templates written here with
 * the marks of each family.
 */
class ChatFormatTest {
    @Test
    void writesAnExchangeAsLlamaCppDoes() {
        // fmt_sys("llama3") followed by fmt_single("llama3"): the system message, then the user's and the header.
        assertEquals("<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
                + "<|start_header_id|>user<|end_header_id|>\n\nHow are you<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\n",
                ChatFormat.LLAMA_3.prompt("You are a helpful assistant", "How are you"));
        // Llama 3's contents are trimmed of white space; ChatML's are not.
        assertEquals("<|start_header_id|>user<|end_header_id|>\n\nHow are you<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\n",
                ChatFormat.LLAMA_3.prompt(null, " \tHow are you\n"));
        // fmt_sys("chatml"), then fmt_single("chatml") without the newline that ends the message before it there.
        assertEquals("<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                + "<|im_start|>user\nHow are you<|im_end|>\n<|im_start|>assistant\n",
                ChatFormat.CHATML.prompt("You are a helpful assistant", "How are you"));
        assertEquals("<|im_start|>user\n How are you \n<|im_end|>\n<|im_start|>assistant\n",
                ChatFormat.CHATML.prompt(null, " How are you \n"));
    }

    @Test
    void recognisesTheTemplatesItWrites() {
        String llama3 = "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                + "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
        assertEquals(Optional.of(ChatFormat.LLAMA_3), ChatFormat.detect(llama3));
        assertEquals(Optional.of(ChatFormat.CHATML), ChatFormat.detect("{{'<|im_start|>' + message['role'] + '\\n'}}"));
        assertEquals(Optional.of(ChatFormat.LLAMA_3), ChatFormat.detect("llama3"));
        // Other families, which llama.cpp recognises first: not written by this engine.
        assertEquals(Optional.empty(), ChatFormat.detect("{{ '[INST] ' + content + ' [/INST]' }}"));
        assertEquals(Optional.empty(), ChatFormat.detect("<|im_start|><|im_sep|>"));
        assertEquals(Optional.empty(), ChatFormat.detect("<start_of_turn>user\n<|start_header_id|><|end_header_id|>"));
        assertEquals(Optional.empty(), ChatFormat.detect("{{ message['content'] }}"));
    }
}
