package dev.prefill4j.cli;

import java.util.function.DoubleConsumer;

/**
 * A progress line on standard error for work that may take more than a few seconds. It prints at most once a
 * second and only when standard error is a terminal or the work runs long, so logs of short runs stay clean.
 */
final class Progress implements DoubleConsumer {
    private final String what;
    private final long start = System.nanoTime();
    private long lastPrint;
    private boolean printed;

    Progress(String what) {
        this.what = what;
    }

    @Override
    public synchronized void accept(double fraction) {
        long now = System.nanoTime();
        if (now - start < 1_000_000_000L || now - lastPrint < 1_000_000_000L) {
            return;
        }
        lastPrint = now;
        printed = true;
        System.err.printf("\r%s: %5.1f%% (%.0f s)", what, 100 * Math.min(1, fraction), (now - start) / 1e9);
        System.err.flush();
    }

    synchronized void done() {
        if (printed) {
            System.err.printf("\r%s: done in %.1f s%n", what, (System.nanoTime() - start) / 1e9);
        }
    }
}
