package dev.prefill4j.engine.io;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.PrefillException;
import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Guards for files the engine's tools write, checked before the work that produces them: an output must be a file in
 * a directory that exists, and must not be one of the files being read, under the same name or another one (a relative
 * path, {@code ..}, a link). Writing there would replace or truncate the input, which no one asks for on purpose, and a
 * model file lost that way is not recoverable. Files are then written whole beside the target and put in its place
 * once complete ({@link #replaceWhole}).
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
     * Refuses {@code output} if it names a directory or another file that is not a regular one, or lies in a directory
     * that does not exist, so that a long run does not end in a write that cannot happen.
     *
     * @param output the file about to be written
     * @param what   what would be written there, for the message
     * @throws PrefillException ({@code P4J-ARG}) if {@code output} is a directory or not a regular file; ({@code
     *                          P4J-IO}) if its directory does not exist
     */
    public static void requireWritableFile(Path output, String what) {
        if (Files.isDirectory(output)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, output + " is a directory: " + what
                    + " needs a file name in it");
        }
        if (Files.exists(output) && !Files.isRegularFile(output)) {
            throw new PrefillException(PrefillException.Code.ARGUMENT, output + " is not a regular file (a device, "
                    + "pipe or socket): " + what + " is written to a file");
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

    /** Writes a whole file at a path that does not exist yet. */
    @FunctionalInterface
    public interface FileWriting {
        /**
         * Creates {@code file} and writes all of it.
         *
         * @param file the path to create
         * @throws IOException if writing fails
         */
        void writeTo(Path file) throws IOException;
    }

    /**
     * Writes {@code target} through a temporary file beside it ({@code .NAME.PID.NANOS.partial}, which is never mistaken
     * for the finished file) that replaces the target only once complete, atomically where the file system allows: a
     * failure part way, or the JVM's exit (an interrupt or SIGTERM, which run shutdown hooks), leaves the target as it
     * was and removes the partial file.
     *
     * @param target  the file to write or replace
     * @param what    what is written, for the message
     * @param writing creates the temporary file and writes it whole
     * @throws PrefillException ({@code P4J-IO}) if writing or the replacement fails; ({@code P4J-ARG}) if the target is
     *                          a directory or not a regular file (checked first: {@link #requireWritableFile})
     */
    public static void replaceWhole(Path target, String what, FileWriting writing) {
        requireWritableFile(target, what);
        Path tmp = null;
        try {
            // A link is followed: the file it names is replaced, and the link stays.
            Path file = Files.exists(target) ? target.toRealPath() : target.toAbsolutePath();
            // Not Files.createTempFile: its owner-only mode would stick to the finished file; this follows the umask.
            tmp = file.getParent().resolve("." + file.getFileName() + "." + ProcessHandle.current().pid() + "."
                    + System.nanoTime() + ".partial");
            // Ctrl-C or SIGTERM part way runs the JVM's shutdown hooks but no finally block of this thread: without
            // this, a hidden partial file as large as the output (2.4 GB for a 1B F16 model) stays behind.
            tmp.toFile().deleteOnExit();
            writing.writeTo(tmp);
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            deleteQuietly(tmp);
            throw new PrefillException(PrefillException.Code.IO, target + ": cannot write " + what + ": " + reason(e), e);
        } catch (RuntimeException | Error e) {
            deleteQuietly(tmp);
            throw e;
        }
    }

    private static void deleteQuietly(Path p) {
        if (p == null) {
            return;
        }
        try {
            Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // best effort: the partial file's name marks it as one
        }
    }
}
