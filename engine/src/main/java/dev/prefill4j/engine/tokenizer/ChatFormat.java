package dev.prefill4j.engine.tokenizer;

import dev.prefill4j.api.Api;
import java.util.Arrays;
import java.util.Optional;

/**
 * How an instruct model wants a conversation written out: its chat template's format, recognised from the template
 * text a model file carries ({@code tokenizer.chat_template}, a Jinja template this engine does not evaluate) by
 * the marks llama.cpp looks for ({@code llm_chat_detect_template}, src/llama-chat.cpp), and written as llama.cpp
 * writes it ({@code llm_chat_apply_template}). The text holds the format's special pieces, which {@link
 * Tokenizer#encode(String)} reads as their tokens; BOS is the tokenizer's to add.
 *
 * @since 0.1
 */
@Api.Experimental
public enum ChatFormat {
    /** ChatML ({@code <|im_start|>role\ncontent<|im_end|>\n}), which many fine-tunes of Llama use. */
    CHATML,
    /** Llama 3's ({@code <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>}, contents trimmed). */
    LLAMA_3;

    /**
     * {@return the format a chat template is written for, if it is one of these}: ChatML where the template holds
     * {@code <|im_start|>} (and not Phi-4's {@code <|im_sep|>}); Llama 3 where it holds {@code <|start_header_id|>}
     * and {@code <|end_header_id|>} and none of the marks llama.cpp checks before those (Mistral's and Llama 2's
     * {@code [INST]}, Phi-3's, Zephyr's, Gemma's, Command-R's and the like, which this engine does not write)
     *
     * @param template the template text, or its name ({@code chatml}, {@code llama3})
     */
    public static Optional<ChatFormat> detect(String template) {
        if (template.equals("chatml")
                || template.contains("<|im_start|>") && !template.contains("<|im_sep|>")) {
            return Optional.of(CHATML);
        }
        if (template.equals("llama3")) {
            return Optional.of(LLAMA_3);
        }
        // llama.cpp's checks before Llama 3's, in its order: a template that passes one is another format.
        if (template.startsWith("mistral") || template.contains("[INST]")) {
            return Optional.empty();
        }
        String[][] before = {{"<|im_start|>"}, {"<|assistant|>", "<|end|>"}, {"<|assistant|>", "<|user|>"},
            {"<|user|>", "<|endoftext|>"}, {"bos_token + message['role']"}, {"<start_of_turn>"},
            {"'\\n\\nAssistant: ' + eos_token"}, {"GPT4 Correct "}, {"USER: ", "ASSISTANT: "},
            {"### Instruction:", "<|EOT|>"}, {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}};
        for (String[] marks : before) {
            if (Arrays.stream(marks).allMatch(template::contains)) {
                return Optional.empty();
            }
        }
        return template.contains("<|start_header_id|>") && template.contains("<|end_header_id|>")
                ? Optional.of(LLAMA_3) : Optional.empty();
    }

    /** {@return llama.cpp's name for the format: {@code chatml}, {@code llama3}} */
    public String id() {
        return this == CHATML ? "chatml" : "llama3";
    }

    /**
     * {@return one exchange written out: the system message if any, the user's message, and the assistant's header,
     * where the model's answer starts}
     *
     * @param system the system message, or {@code null} for none
     * @param user   the user's message
     */
    public String prompt(String system, String user) {
        StringBuilder sb = new StringBuilder();
        if (system != null) {
            message(sb, "system", system);
        }
        message(sb, "user", user);
        sb.append(switch (this) {
            case CHATML -> "<|im_start|>assistant\n";
            case LLAMA_3 -> "<|start_header_id|>assistant<|end_header_id|>\n\n";
        });
        return sb.toString();
    }

    private void message(StringBuilder sb, String role, String content) {
        switch (this) {
            case CHATML -> sb.append("<|im_start|>").append(role).append('\n').append(content).append("<|im_end|>\n");
            case LLAMA_3 -> sb.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n")
                    .append(trim(content)).append("<|eot_id|>");
        }
    }

    /** Without the leading and trailing white space C's {@code isspace} sees, as llama.cpp's {@code trim}. */
    private static String trim(String s) {
        int from = 0;
        int to = s.length();
        while (from < to && " \t\n\u000B\f\r".indexOf(s.charAt(from)) >= 0) {
            from++;
        }
        while (to > from && " \t\n\u000B\f\r".indexOf(s.charAt(to - 1)) >= 0) {
            to--;
        }
        return s.substring(from, to);
    }
}
