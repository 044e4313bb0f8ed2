package dev.prefill4j.backend.cpu;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.locks.LockSupport;
import java.util.function.IntConsumer;

/**
 * The CPU device's threads: the calling thread plus {@code threads - 1} daemon workers that wait for the next
 * {@link #run} by spinning for a while, and only then park.
 *
 * <p>Why spin: a decode step of a 1B model is about 120 parallel loops of 20-400 microseconds each. Handing each to
 * an {@link java.util.concurrent.ExecutorService} woke a parked worker every time, and a round trip of one loop of
 * tiny tasks measured 45-50 microseconds on this kind of machine (2 vCPUs, KVM), spinning 1.3-2.6: decode of the
 * tiny-256 model became 2.6x faster, of the 1B Q4_0 file 1.02-1.13x (alternating runs against the executor). Workers spin
 * only when each has a core of its own ({@code threads <= availableProcessors}); otherwise they park at once, since
 * spinning would take the core from the thread doing the work.
 *
 * <p>One loop runs at a time. A call made while another is running (from a task, or from a second thread sharing
 * the device) runs its tasks on the calling thread, so nothing waits on itself.
 *
 * <p>Each thread first runs a contiguous share of the tasks in order, then helps with what is left of the others',
 * so a thread that starts late only takes fewer tasks. Contiguous shares matter for decode: with tasks of 64 weight
 * rows dealt out in turn from one counter, each thread's reads skipped every other 72 KiB of the matrix, and a decode
 * step of the 1B Q4_0 file took 49-57 ms of matrix products; with one contiguous half per thread, 38-40 ms (the
 * output matrix alone 16 -> 11.5 ms). The first exception a task throws is rethrown by {@link #run} after every
 * thread has stopped.
 */
final class WorkerPool implements AutoCloseable {
    /** How long an idle worker spins before it parks: longer than the gaps between a decode step's loops. */
    private static final long SPIN_NANOS = 2_000_000;

    private final Worker[] workers;
    private final boolean spin;
    /** Held by the thread whose loop is running; a second caller runs its loop inline. */
    private final AtomicInteger busy = new AtomicInteger();
    /** The loop being run, published by the write to {@link #posted}. */
    private Loop loop;
    /** Counts loops posted; workers compare it with the last one they ran. */
    private volatile long posted;
    private volatile boolean closed;

    WorkerPool(int threads) {
        this.spin = threads <= Runtime.getRuntime().availableProcessors();
        this.workers = new Worker[threads - 1];
        for (int i = 0; i < workers.length; i++) {
            workers[i] = new Worker(i + 1);
            workers[i].start();
        }
    }

    /**
     * The tasks of one call, split into one contiguous share per thread. A thread runs its own share in order, then
     * helps with the others' (taking from each share's counter, so no task runs twice); {@link #running} counts the
     * workers that have not yet finished with it.
     */
    private static final class Loop {
        /** Counters are this many ints apart, a cache line, so the threads' counters do not share one. */
        private static final int PAD = 16;
        final int tasks;
        final int shares;
        final IntConsumer task;
        final AtomicIntegerArray next;
        final AtomicInteger running;
        volatile Throwable failure;

        Loop(int tasks, IntConsumer task, int threads) {
            this.tasks = tasks;
            this.shares = Math.min(tasks, threads);
            this.task = task;
            this.next = new AtomicIntegerArray(shares * PAD);
            for (int s = 0; s < shares; s++) {
                next.set(s * PAD, start(s));
            }
            this.running = new AtomicInteger(threads - 1);
        }

        private int start(int share) {
            return (int) ((long) tasks * share / shares);
        }

        /** Runs the tasks of share {@code self} (modulo the shares), then whatever is left of the others. */
        void drain(int self) {
            try {
                for (int k = 0; k < shares; k++) {
                    int s = (self + k) % shares;
                    int end = start(s + 1);
                    for (int i = next.getAndIncrement(s * PAD); i < end; i = next.getAndIncrement(s * PAD)) {
                        task.accept(i);
                    }
                }
            } catch (Throwable t) {
                if (failure == null) {
                    failure = t;
                }
                for (int s = 0; s < shares; s++) {
                    next.set(s * PAD, tasks); // the others stop taking tasks
                }
            }
        }
    }

    /**
     * Runs {@code task.accept(i)} for every {@code i < tasks}, on the workers and the calling thread, and returns when
     * all have finished.
     *
     * @param tasks number of tasks
     * @param task  the work, called concurrently
     */
    void run(int tasks, IntConsumer task) {
        if (workers.length == 0 || tasks <= 1 || !busy.compareAndSet(0, 1)) {
            for (int i = 0; i < tasks; i++) {
                task.accept(i);
            }
            return;
        }
        try {
            Loop l = new Loop(tasks, task, workers.length + 1);
            loop = l;
            posted = posted + 1; // the volatile write publishes the loop
            for (Worker w : workers) {
                if (w.parked) {
                    LockSupport.unpark(w);
                }
            }
            l.drain(0);
            for (int spins = 0; l.running.get() > 0; spins++) {
                if (spins < 100_000) {
                    Thread.onSpinWait();
                } else {
                    Thread.yield(); // a worker lost its core; let it have this one
                }
            }
            Throwable t = l.failure;
            if (t instanceof RuntimeException re) {
                throw re;
            }
            if (t instanceof Error e) {
                throw e;
            }
            if (t != null) {
                throw new IllegalStateException(t);
            }
        } finally {
            busy.set(0);
        }
    }

    @Override
    public void close() {
        closed = true;
        for (Worker w : workers) {
            LockSupport.unpark(w);
        }
    }

    private final class Worker extends Thread {
        /** This worker's share of each loop (the calling thread takes share 0). */
        private final int id;
        volatile boolean parked;

        Worker(int id) {
            super("prefill4j-cpu-" + id);
            this.id = id;
            setDaemon(true);
        }

        @Override
        public void run() {
            long seen = 0;
            while (true) {
                long p = await(seen);
                if (p < 0) {
                    return;
                }
                seen = p;
                Loop l = loop;
                l.drain(id);
                l.running.decrementAndGet();
            }
        }

        /** {@return the next loop's number once one newer than {@code seen} is posted, or -1 when closed} */
        private long await(long seen) {
            if (spin) {
                long until = System.nanoTime() + SPIN_NANOS;
                for (int i = 0; ; i++) {
                    long p = posted;
                    if (p != seen) {
                        return p;
                    }
                    if (closed) {
                        return -1;
                    }
                    if ((i & 255) == 0 && System.nanoTime() > until) {
                        break;
                    }
                    Thread.onSpinWait();
                }
            }
            while (true) {
                parked = true;
                long p = posted; // checked after announcing the park, so a post in between is not missed
                if (p != seen || closed) {
                    parked = false;
                    return closed ? -1 : p;
                }
                LockSupport.park(this);
                parked = false;
            }
        }
    }
}
