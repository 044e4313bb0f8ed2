package dev.prefill4j.engine.tokenizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * The formats against the strings llama.cpp's own test states for them (tests/test-chat-template.cpp, build c392e50:
 * {@code fmt_sys} and {@code fmt_single}), and detection on templates written here with the marks of each family.
 * (By hand, outside the tests: every format and the 17 templates of llama.cpp's models/templates give the bytes
 * llama.cpp's {@code llama_chat_apply_template} gives, for one exchange and for a next turn, or, for the 7 it
 * writes and this engine does not, none.)
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
        // The [INST] family: fmt_single (a user message opening a turn) and fmt_sys (a system message opening one),
        // by name as llama.cpp's test gives them ("mistral" is its name for templates before Mistral's v1).
        String[][] cases = {
            {"llama2", "[INST] How are you [/INST]", "[INST] You are a helpful assistant\n"},
            {"mistral", "[INST] How are you [/INST]", "[INST] You are a helpful assistant\n"},
            {"llama2-sys", "[INST] How are you [/INST]", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"},
            {"mistral-v1", " [INST] How are you [/INST]", " [INST] You are a helpful assistant\n\n"},
            {"mistral-v3", "[INST] How are you[/INST]", "[INST] You are a helpful assistant\n\n"},
            {"mistral-v3-tekken", "[INST]How are you[/INST]", "[INST]You are a helpful assistant\n\n"},
            {"mistral-v7", "[INST] How are you[/INST]", "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT]"},
        };
        for (String[] c : cases) {
            ChatFormat f = ChatFormat.detect(c[0]).orElseThrow();
            assertEquals(c[1], f.prompt(null, "How are you"), c[0]);
            String both = f.prompt("You are a helpful assistant", "How are you");
            assertTrue(both.startsWith(c[2]) && both.endsWith(c[1].substring(c[1].indexOf("How"))), c[0] + ": " + both);
        }
    }

    /**
     * The next message after an answer that ended with its end-of-turn token is what llama.cpp's test states as
     * {@code fmt_single}: a user message after a conversation that ends with the assistant's.
     */
    @Test
    void writesTheNextTurnAsLlamaCppDoes() {
        String[][] cases = {
            {"chatml", "\n<|im_start|>user\nHow are you<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
            {"mistral-v1", " [INST] How are you [/INST]", "</s>"},
            {"mistral-v3", "[INST] How are you[/INST]", "</s>"},
            {"mistral-v3-tekken", "[INST]How are you[/INST]", "</s>"},
            {"mistral-v7", "[INST] How are you[/INST]", "</s>"},
            {"llama2", "[INST] How are you [/INST]", "</s>"},
            {"mistral", "[INST] How are you [/INST]", "</s>"},
            {"llama3", "<|start_header_id|>user<|end_header_id|>\n\nHow are you<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
        };
        for (String[] c : cases) {
            ChatFormat f = ChatFormat.detect(c[0]).orElseThrow();
            assertEquals(c[1], f.nextTurn("How are you"), c[0]);
            assertEquals(c[2], f.endOfTurn(), c[0]);
        }
        // Llama 2 with BOS inside the history opens each later turn with it.
        assertEquals("<s>[INST] How are you [/INST]", ChatFormat.LLAMA_2_SYS_BOS.nextTurn("How are you"));
    }

    @Test
    void recognisesTheTemplatesItWrites() {
        String llama3 = "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                + "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
        assertEquals(Optional.of(ChatFormat.LLAMA_3), ChatFormat.detect(llama3));
        assertEquals(Optional.of(ChatFormat.CHATML), ChatFormat.detect("{{'<|im_start|>' + message['role'] + '\\n'}}"));
        assertEquals(Optional.of(ChatFormat.LLAMA_3), ChatFormat.detect("llama3"));
        // The [INST] family told apart by its marks, as llama.cpp tells it.
        assertEquals(Optional.of(ChatFormat.LLAMA_2), ChatFormat.detect("{{ '[INST] ' + content + ' [/INST]' }}"));
        assertEquals(Optional.of(ChatFormat.LLAMA_2_SYS), ChatFormat.detect("[INST] <<SYS>>\\n"));
        assertEquals(Optional.of(ChatFormat.LLAMA_2_SYS_STRIP), ChatFormat.detect("[INST] <<SYS>> content.strip()"));
        assertEquals(Optional.of(ChatFormat.MISTRAL_V7), ChatFormat.detect("[SYSTEM_PROMPT][INST]"));
        assertEquals(Optional.of(ChatFormat.MISTRAL_V1), ChatFormat.detect("{{ ' [INST] ' + system_message }}"));
        assertEquals(Optional.of(ChatFormat.MISTRAL_V3_TEKKEN), ChatFormat.detect("[AVAILABLE_TOOLS]{{ \"[INST]\" }}"));
        // Other families, which llama.cpp recognises first: not written by this engine.
        assertEquals(Optional.empty(), ChatFormat.detect("<|im_start|><|im_sep|>"));
        assertEquals(Optional.empty(), ChatFormat.detect("<start_of_turn>user\n<|start_header_id|><|end_header_id|>"));
        assertEquals(Optional.empty(), ChatFormat.detect("{{ message['content'] }}"));
    }
}
