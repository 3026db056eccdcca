//! [`Workers`]: the bounded set of threads that every sandboxed instance in the process shares,
//! for the work no caller is there to do (an instance's dispatcher turns, its posted I/O). Generic:
//! it runs [`Turn`]s and knows nothing of instances, stores or facets; it imports nothing of this
//! crate.
//!
//! Why shared: a thread per instance (as before) capped a process at a few thousand logs (8,000
//! sandboxed logs failed with `EAGAIN` spawning threads on a 2-core, 24 GiB machine) and cost
//! two threads for each idle log. Here the number of threads is set by the embedder
//! ([`Workers::new`]'s `threads_max`), does not grow with the number of instances, and threads
//! are made only when work finds every existing one busy.
//!
//! What a turn may do: run, block on I/O, and return. It must not wait for another turn (a
//! turn waiting behind it could then never run, with every thread waiting): each instance's
//! work is a *serial lane* whose turn runs the lane's queued work and returns, and a lane that
//! has more to do submits itself again, behind the others, after [`TURN_STEPS_MAX`] steps.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Something to run on a worker thread. A turn that panics is caught: the thread goes on with
/// the next turn.
pub(crate) trait Turn: Send + Sync + 'static {
    fn run_turn(self: Arc<Self>);
}

/// How many steps (a job, a pass of a dispatcher) one turn takes before it submits itself
/// again behind the other lanes' turns: a busy instance then cannot keep a thread from every
/// other instance's work. 64 keeps the requeue (one lock, no wake-up) rare against the work.
pub(crate) const TURN_STEPS_MAX: usize = 64;

/// A handle to the process's pool of worker threads; cloning shares it. Threads live as long as
/// the process (they park when there is nothing to do).
#[derive(Clone)]
pub(crate) struct Workers {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Mutex<Queue>,
    ready: Condvar,
    threads_max: usize,
}

#[derive(Default)]
struct Queue {
    turns: VecDeque<Arc<dyn Turn>>,
    /// Threads started and running.
    threads: usize,
    /// Threads parked in [`Inner::ready`], waiting for a turn.
    idle: usize,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = lock(&self.inner.queue);
        f.debug_struct("Workers")
            .field("threads", &queue.threads)
            .field("threads_max", &self.inner.threads_max)
            .field("turns_queued", &queue.turns.len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Workers {
    /// A pool of at most `threads_max` threads (at least one), none started yet.
    pub(crate) fn new(threads_max: usize) -> Workers {
        Workers {
            inner: Arc::new(Inner {
                queue: Mutex::default(),
                ready: Condvar::new(),
                threads_max: threads_max.max(1),
            }),
        }
    }

    /// Makes sure one thread runs, so that a later [`Self::submit`] never depends on starting
    /// one: the caller about to rely on the pool (a new instance) gets the error instead.
    pub(crate) fn ensure_started(&self) -> std::io::Result<()> {
        let mut queue = lock(&self.inner.queue);
        if queue.threads == 0 {
            self.spawn(&mut queue)?;
        }
        Ok(())
    }

    /// Queues `turn` to run on a worker thread: an idle one, else a new one while fewer than
    /// `threads_max` run, else the first that finishes its turn. A thread that cannot be
    /// started (the process is out of threads) leaves the turn to the threads already running:
    /// [`Self::ensure_started`] made sure there is one.
    pub(crate) fn submit(&self, turn: Arc<dyn Turn>) {
        let mut queue = lock(&self.inner.queue);
        queue.turns.push_back(turn);
        if queue.idle > 0 {
            drop(queue);
            self.inner.ready.notify_one();
        } else if queue.threads < self.inner.threads_max
            && let Err(error) = self.spawn(&mut queue)
        {
            tracing::warn!(%error, threads = queue.threads, "could not start a worker thread");
        }
    }

    /// Threads running now, and the most there may be.
    pub(crate) fn threads(&self) -> (usize, usize) {
        (lock(&self.inner.queue).threads, self.inner.threads_max)
    }

    fn spawn(&self, queue: &mut Queue) -> std::io::Result<()> {
        let inner = self.inner.clone();
        std::thread::Builder::new()
            .name("stele-worker".into())
            .spawn(move || work(&inner))?;
        queue.threads += 1;
        Ok(())
    }
}

/// A worker thread: runs turns in the order they were submitted, parking when there are none.
fn work(inner: &Inner) {
    let mut queue = lock(&inner.queue);
    loop {
        match queue.turns.pop_front() {
            Some(turn) => {
                drop(queue);
                // A turn that panics loses only what it was running (its callers get their
                // own error when their answers are dropped); the thread serves the others.
                let _ = catch_unwind(AssertUnwindSafe(|| turn.run_turn()));
                queue = lock(&inner.queue);
            }
            None => {
                queue.idle += 1;
                queue = inner
                    .ready
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                queue.idle -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    struct Blocker {
        started: mpsc::Sender<()>,
        release: Mutex<mpsc::Receiver<()>>,
        ran: AtomicUsize,
    }

    impl Turn for Blocker {
        fn run_turn(self: Arc<Self>) {
            self.ran.fetch_add(1, Ordering::SeqCst);
            let _ = self.started.send(());
            let _ = lock(&self.release).recv();
        }
    }

    struct Panics;

    impl Turn for Panics {
        fn run_turn(self: Arc<Self>) {
            panic!("a turn that panics");
        }
    }

    #[test]
    fn no_more_threads_than_the_bound_and_queued_turns_run_when_one_frees() {
        let workers = Workers::new(2);
        workers.ensure_started().unwrap();
        let (started, started_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let blocker = Arc::new(Blocker {
            started,
            release: Mutex::new(release_rx),
            ran: AtomicUsize::new(0),
        });
        for _ in 0..5 {
            workers.submit(blocker.clone());
        }
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            started_rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "a third turn ran while both threads were busy"
        );
        assert_eq!(workers.threads(), (2, 2));
        for _ in 0..5 {
            release.send(()).unwrap();
        }
        for _ in 0..3 {
            started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        assert_eq!(blocker.ran.load(Ordering::SeqCst), 5);
        assert_eq!(workers.threads(), (2, 2));
    }

    #[test]
    fn a_turn_that_panics_does_not_stop_its_thread() {
        let workers = Workers::new(1);
        workers.ensure_started().unwrap();
        workers.submit(Arc::new(Panics));
        let (started, started_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        release.send(()).unwrap();
        workers.submit(Arc::new(Blocker {
            started,
            release: Mutex::new(release_rx),
            ran: AtomicUsize::new(0),
        }));
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(workers.threads(), (1, 1));
    }
}
