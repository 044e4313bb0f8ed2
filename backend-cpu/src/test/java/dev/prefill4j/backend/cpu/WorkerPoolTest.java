package dev.prefill4j.backend.cpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** The spinning worker pool runs every task once, rethrows failures, and never waits on itself. */
class WorkerPoolTest {
    /** Runs {@code calls} loops of varying size and checks each task ran exactly once per loop that had it. */
    private static void eachTaskOnce(WorkerPool pool, int calls) {
        int max = 97;
        AtomicIntegerArray runs = new AtomicIntegerArray(max);
        int[] expected = new int[max];
        for (int c = 0; c < calls; c++) {
            int tasks = 1 + c % max;
            pool.run(tasks, runs::incrementAndGet);
            for (int i = 0; i < tasks; i++) {
                expected[i]++;
            }
        }
        int[] actual = new int[max];
        for (int i = 0; i < max; i++) {
            actual[i] = runs.get(i);
        }
        assertArrayEquals(expected, actual);
    }

    @Test
    void everyTaskRunsExactlyOnce() {
        try (WorkerPool pool = new WorkerPool(3)) {
            eachTaskOnce(pool, 5_000);
        }
    }

    @Test
    void parkedWorkersAreWokenWhenThreadsOutnumberCores() {
        // More threads than processors: workers park at once instead of spinning.
        try (WorkerPool pool = new WorkerPool(Runtime.getRuntime().availableProcessors() + 2)) {
            eachTaskOnce(pool, 2_000);
        }
    }

    @Test
    void workersThatParkedAfterAPauseTakeTheNextLoop() throws InterruptedException {
        try (WorkerPool pool = new WorkerPool(2)) {
            eachTaskOnce(pool, 10);
            Thread.sleep(50); // past the spin time: the worker has parked
            eachTaskOnce(pool, 10);
        }
    }

    @Test
    void theFirstFailureIsRethrownAndThePoolGoesOn() {
        try (WorkerPool pool = new WorkerPool(2)) {
            IllegalArgumentException boom = new IllegalArgumentException("task 5");
            IllegalArgumentException thrown = assertThrows(IllegalArgumentException.class, () -> pool.run(64, i -> {
                if (i == 5) {
                    throw boom;
                }
            }));
            assertSame(boom, thrown);
            eachTaskOnce(pool, 200);
        }
    }

    @Test
    void aLoopStartedFromATaskRunsInline() {
        try (WorkerPool pool = new WorkerPool(2)) {
            AtomicIntegerArray inner = new AtomicIntegerArray(8 * 16);
            pool.run(8, outer -> pool.run(16, i -> inner.incrementAndGet(outer * 16 + i)));
            for (int i = 0; i < inner.length(); i++) {
                assertEquals(1, inner.get(i), "inner task " + i);
            }
        }
    }

    @Test
    void twoCallersSharingThePoolBothFinish() throws InterruptedException {
        try (WorkerPool pool = new WorkerPool(2)) {
            AtomicReference<Throwable> failure = new AtomicReference<>();
            Thread other = new Thread(() -> {
                try {
                    eachTaskOnce(pool, 3_000);
                } catch (Throwable t) {
                    failure.set(t);
                }
            });
            other.start();
            eachTaskOnce(pool, 3_000);
            other.join();
            assertNull(failure.get(), () -> "the other caller failed: " + failure.get());
        }
    }
}
