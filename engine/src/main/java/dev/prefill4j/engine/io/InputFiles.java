package dev.prefill4j.engine.io;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Guards for the files the engine reads (models, tokenizers), checked before they are opened, so that the message names
 * the file at fault and says what is wrong with it: a directory given where a file belongs, a path that does not
 * exist, a device or pipe, which cannot be mapped.
 *
 * @since 0.1
 */
@Api.Experimental
public final class InputFiles {
    private InputFiles() {
    }

    /**
     * Refuses {@code input} unless it is a regular file this process may read.
     *
     * @param input the file about to be read
     * @param what  what it should hold, for the message (e.g. "the model", "the llama2.c tokenizer")
     * @throws PrefillException ({@code P4J-IO}) naming {@code input} and what is wrong with it
     */
    public static void requireReadableFile(Path input, String what) {
        if (Files.isDirectory(input)) {
            throw new PrefillException(PrefillException.Code.IO, input + " is a directory, not " + what
                    + ": give the file's path");
        }
        if (!Files.exists(input)) {
            throw new PrefillException(PrefillException.Code.IO, input + ": no such file (" + what + ")");
        }
        if (!Files.isRegularFile(input)) {
            throw new PrefillException(PrefillException.Code.IO, input + " is not a regular file (a device, pipe or "
                    + "socket), which cannot be mapped: give the path of " + what + " on disk");
        }
        if (!Files.isReadable(input)) {
            throw new PrefillException(PrefillException.Code.IO, input + ": permission denied (" + what + ")");
        }
    }

    /**
     * {@return the error for a read of {@code input} that failed, with the system's reason}
     *
     * @param input the file being read
     * @param e     the failure
     */
    public static PrefillException cannotRead(Path input, IOException e) {
        return new PrefillException(PrefillException.Code.IO, input + ": cannot read: " + OutputFiles.reason(e), e);
    }
}
