package dev.prefill4j.engine.io;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/**
 * Guards for files the engine's tools write, checked before the work that produces them: an output must be a file in
 * a directory that exists, and must not be one of the files being read, under the same name or another one (a relative
 * path, {@code ..}, a link). Writing there would replace or truncate the input, which no one asks for on purpose, and a
 * model file lost that way is not recoverable.
 *
 * @since 0.1
 */
@Api.Experimental
public final class OutputFiles {
    private OutputFiles() {
    }

    /**
     * Refuses {@code output} if it is the same file as any of {@code inputs} (nulls among them are skipped). Nothing is
     * compared while {@code output} does not exist yet.
     *
     * @param output the file about to be written
     * @param what   what would be written there, for the message (e.g. "the quantized model", "--logits-out")
     * @param inputs the files being read
     * @throws PrefillException ({@code P4J-ARG}) if {@code output} is one of the inputs; ({@code P4J-IO}) if the two
     *                          cannot be compared
     */
    public static void requireNotAnInput(Path output, String what, Path... inputs) {
        if (!Files.exists(output)) {
            return;
        }
        for (Path input : inputs) {
            try {
                if (input != null && Files.isSameFile(input, output)) {
                    throw new PrefillException(PrefillException.Code.ARGUMENT, output + " is the input file " + input
                            + ": writing " + what + " there would destroy it; give another path");
                }
            } catch (IOException e) {
                throw new PrefillException(PrefillException.Code.IO, output + ": cannot compare with the input "
                        + input + ": " + reason(e), e);
            }
        }
    }

    /**
     * Refuses {@code output} if it names a directory or lies in a directory that does not exist, so that a long run
     * does not end in a write that cannot happen.
     *
     * @param output the file about to be written
     * @param what   what would be written there, for the message
     * @throws PrefillException ({@code P4J-ARG}) if {@code output} is a directory; ({@code P4J-IO}) if its directory
     *                          does not exist
     */
    public static void requireWritableFile(Path output, String what) {
        if (Files.isDirectory(output)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, output + " is a directory: " + what
                    + " needs a file name in it");
        }
        Path dir = output.toAbsolutePath().getParent();
        if (dir == null || !Files.isDirectory(dir)) {
            throw new PrefillException(PrefillException.Code.IO, output + ": no such directory " + dir
                    + "; create it first");
        }
    }

    /**
     * {@return why a file operation failed, in words: the system's reason where it gives one (a
     * {@link FileSystemException}'s message is only the file's name)}
     *
     * @param e the failure
     */
    public static String reason(IOException e) {
        return switch (e) {
            case AccessDeniedException a -> "permission denied";
            case NoSuchFileException n -> "no such file or directory";
            case FileSystemException f when f.getReason() != null -> f.getReason();
            default -> String.valueOf(e.getMessage());
        };
    }
}
