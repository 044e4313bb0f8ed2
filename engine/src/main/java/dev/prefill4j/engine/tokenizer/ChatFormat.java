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
    CHATML("chatml"),
    /** Llama 2's {@code [INST] ... [/INST]} without a system block: a system message is the turn's first line. */
    LLAMA_2("llama2"),
    /** Llama 2's with the system message in {@code <<SYS>>} ... {@code <</SYS>>}. */
    LLAMA_2_SYS("llama2-sys"),
    /** As {@link #LLAMA_2_SYS}, with BOS before each later turn (the same for one exchange). */
    LLAMA_2_SYS_BOS("llama2-sys-bos"),
    /** As {@link #LLAMA_2_SYS}, contents trimmed. */
    LLAMA_2_SYS_STRIP("llama2-sys-strip"),
    /** Mistral's v1 ({@code  [INST] ... [/INST]}, spaces on both sides). */
    MISTRAL_V1("mistral-v1"),
    /** Mistral's v3 ({@code [INST] ...[/INST]}). */
    MISTRAL_V3("mistral-v3"),
    /** Mistral's v3 for the Tekken vocabulary ({@code [INST]...[/INST]}). */
    MISTRAL_V3_TEKKEN("mistral-v3-tekken"),
    /** Mistral's v7 ({@code [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST]}). */
    MISTRAL_V7("mistral-v7"),
    /** Llama 3's ({@code <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>}, contents trimmed). */
    LLAMA_3("llama3");

    private final String id;

    ChatFormat(String id) {
        this.id = id;
    }

    /** {@return llama.cpp's name for the format, e.g. {@code llama3}, {@code mistral-v7}} */
    public String id() {
        return id;
    }

    /**
     * {@return the format a chat template is written for, if it is one of these}, by llama.cpp's tests in its order:
     * ChatML where the template holds {@code <|im_start|>} (not with Phi-4's {@code <|im_sep|>}); the Mistral and
     * Llama 2 family where it starts with "mistral" or holds {@code [INST]}, told apart by their marks; Llama 3 where it
     * holds {@code <|start_header_id|>} and {@code <|end_header_id|>} and none of the marks of the formats llama.cpp
     * tests before (Phi-3's, Zephyr's, Gemma's, Command-R's and the like, which this engine does not write)
     *
     * @param template the template text, or a format's {@link #id()}
     */
    public static Optional<ChatFormat> detect(String template) {
        for (ChatFormat f : values()) {
            if (f.id.equals(template)) {
                return Optional.of(f);
            }
        }
        if (template.contains("<|im_start|>")) {
            return template.contains("<|im_sep|>") ? Optional.empty() : Optional.of(CHATML);
        }
        if (template.startsWith("mistral") || template.contains("[INST]")) {
            if (template.contains("[SYSTEM_PROMPT]")) {
                return Optional.of(MISTRAL_V7);
            }
            if (template.contains("' [INST] ' + system_message") || template.contains("[AVAILABLE_TOOLS]")) {
                return Optional.of(template.contains(" [INST]") ? MISTRAL_V1
                        : template.contains("\"[INST]\"") ? MISTRAL_V3_TEKKEN : MISTRAL_V3);
            }
            return Optional.of(template.contains("content.strip()") ? LLAMA_2_SYS_STRIP
                    : template.contains("bos_token + '[INST]") ? LLAMA_2_SYS_BOS
                    : template.contains("<<SYS>>") ? LLAMA_2_SYS : LLAMA_2);
        }
        // The formats llama.cpp tests next, before Llama 3's: a template with one's marks is that format.
        String[][] before = {{"<|assistant|>", "<|end|>"}, {"<|assistant|>", "<|user|>"}, {"<|user|>", "<|endoftext|>"},
            {"bos_token + message['role']"}, {"<start_of_turn>"}, {"'\\n\\nAssistant: ' + eos_token"},
            {"GPT4 Correct "}, {"USER: ", "ASSISTANT: "}, {"### Instruction:", "<|EOT|>"},
            {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}};
        for (String[] marks : before) {
            if (Arrays.stream(marks).allMatch(template::contains)) {
                return Optional.empty();
            }
        }
        return template.contains("<|start_header_id|>") && template.contains("<|end_header_id|>")
                ? Optional.of(LLAMA_3) : Optional.empty();
    }

    /**
     * {@return one exchange written out: the system message if any, the user's message, and what opens the
     * assistant's answer}
     *
     * @param system the system message, or {@code null} for none
     * @param user   the user's message
     */
    public String prompt(String system, String user) {
        StringBuilder sb = new StringBuilder();
        switch (this) {
            case CHATML -> {
                if (system != null) {
                    sb.append("<|im_start|>system\n").append(system).append("<|im_end|>\n");
                }
                sb.append("<|im_start|>user\n").append(user).append("<|im_end|>\n<|im_start|>assistant\n");
            }
            case LLAMA_2, LLAMA_2_SYS, LLAMA_2_SYS_BOS, LLAMA_2_SYS_STRIP -> {
                boolean strip = this == LLAMA_2_SYS_STRIP;
                sb.append("[INST] ");
                if (system != null) {
                    String s = strip ? trim(system) : system;
                    sb.append(this == LLAMA_2 ? s + "\n" : "<<SYS>>\n" + s + "\n<</SYS>>\n\n");
                }
                sb.append(strip ? trim(user) : user).append(" [/INST]");
            }
            case MISTRAL_V1, MISTRAL_V3, MISTRAL_V3_TEKKEN -> {
                String leading = this == MISTRAL_V1 ? " " : "";
                sb.append(leading).append("[INST]").append(this == MISTRAL_V3_TEKKEN ? "" : " ");
                if (system != null) {
                    sb.append(system).append("\n\n");
                }
                sb.append(user).append(leading).append("[/INST]");
            }
            case MISTRAL_V7 -> {
                if (system != null) {
                    sb.append("[SYSTEM_PROMPT] ").append(system).append("[/SYSTEM_PROMPT]");
                }
                sb.append("[INST] ").append(user).append("[/INST]");
            }
            case LLAMA_3 -> {
                if (system != null) {
                    sb.append("<|start_header_id|>system<|end_header_id|>\n\n").append(trim(system))
                            .append("<|eot_id|>");
                }
                sb.append("<|start_header_id|>user<|end_header_id|>\n\n").append(trim(user)).append("<|eot_id|>")
                        .append("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
        }
        return sb.toString();
    }

    /**
     * {@return the user's next message after the assistant's answer, and what opens the next answer}: what llama.cpp
     * adds for a new message after an answer that ended with its end-of-turn token ({@code
     * common_chat_format_single}: the conversation with the message written out, less the conversation without it,
     * after the newline the template puts after the end of a turn, which the model does not generate)
     *
     * @param user the user's message
     */
    public String nextTurn(String user) {
        String turn = prompt(null, user);
        return switch (this) {
            case CHATML -> "\n" + turn;
            case LLAMA_2_SYS_BOS -> "<s>" + turn; // BOS inside the history, before each later turn
            default -> turn;
        };
    }

    /**
     * {@return what ends the assistant's turn}: the piece its answer ends with when the model ends it ({@code
     * <|eot_id|>}, {@code <|im_end|>}, {@code </s>}), to write before {@link #nextTurn} where the answer was cut short
     */
    public String endOfTurn() {
        return switch (this) {
            case LLAMA_3 -> "<|eot_id|>";
            case CHATML -> "<|im_end|>";
            default -> "</s>";
        };
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
