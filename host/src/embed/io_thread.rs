//! [`IoThread`]: where an async instance's blocking writes and syncs run, so that the store
//! keeps running the guest's other calls meanwhile.
//!
//! An async import does not start its work: it *posts* it and awaits the result. When the
//! store's poll ends, whoever polled it (its driver, see `crate::sandbox::store_driver`) takes what was posted
//! and runs it itself ([`PostedIo::run_here`]), after parking the store so that a call arriving
//! meanwhile takes it and is served during the I/O: a lone caller, a thread whose call awaits a
//! sync, or the dispatcher thread. The dedicated thread ([`IoThread::send_posted`]) runs it only
//! for a task on a current-thread runtime (which must not block its only worker), behind work
//! already sent there, and when the dispatcher was woken just as it was about to block.
//!
//! Why a dedicated thread and not `spawn_blocking`: each hop through tokio's blocking pool cost
//! about 60 µs here (two per group: 120 µs, about the price of the fdatasync itself). A
//! dedicated thread still costs a wake-up each way (a channel round trip between two parked
//! threads measured 77 µs on this 2-core VM), which is why small writes run inline and a lone
//! caller runs its own I/O.
//!
//! Tried and rejected:
//! - running the sync inline *inside* the store's poll whenever one call is outstanding: the
//!   instance is then closed for the whole sync (no stats, no visibility, no staging into the
//!   next group), which is the property the async imports exist to provide;
//!   `a_failed_sync_reaches_all_16_waiting_tasks` deadlocks on it (its sync waits for 16 tasks
//!   to stage: a real disk never does that, but it stands for a slow sync);
//! - spinning instead of parking (this thread between jobs, the serving thread while it waits):
//!   a lone writer's p50 came within 7% of native, but at 64 writers the spinning took the CPU
//!   the callers needed (0.65x native, from 1.1x) and p99 doubled.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};

type Job = Box<dyn FnOnce() + Send>;

/// A handle to the thread and the instance's posted work; cloning shares both. The thread ends
/// when the last handle is dropped.
#[derive(Clone, Debug)]
pub struct IoThread {
    jobs: mpsc::Sender<Job>,
    lane: Arc<Lane>,
}

#[derive(Default)]
struct Lane {
    /// Work posted by async imports during the store's current poll, not yet started.
    posted: Mutex<Vec<Job>>,
    /// Jobs sent to the thread and not finished. Posted work may run elsewhere only while this
    /// is zero: one file's writes and syncs must run in the order the guest issued them.
    on_thread: AtomicUsize,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("on_thread", &self.on_thread.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The I/O thread is gone (it panicked), or a job run elsewhere panicked: the instance cannot
/// do I/O any more.
#[derive(Debug, thiserror::Error)]
#[error("the instance's I/O thread stopped")]
pub struct IoThreadStopped;

/// Work taken from an [`IoThread`] to run on the driver's own thread.
#[must_use = "posted work must run, or its import never finishes"]
pub struct PostedIo(Vec<Job>);

impl PostedIo {
    /// Runs the work here, in the order it was posted. A job that panics only drops its
    /// answer: the import it belongs to fails with [`IoThreadStopped`], as on the thread.
    pub fn run_here(self) {
        for job in self.0 {
            let _ = catch_unwind(AssertUnwindSafe(job));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl IoThread {
    pub fn spawn(name: &str) -> std::io::Result<IoThread> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let lane = Arc::new(Lane::default());
        let lane_in = lane.clone();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    job();
                    lane_in.on_thread.fetch_sub(1, Ordering::SeqCst);
                }
            })?;
        Ok(IoThread { jobs, lane })
    }

    /// Posts `work` and resolves with its result once a driver has run it (here or on the
    /// thread). Only a store's poll may call this: its driver looks for posted work when the
    /// poll ends.
    pub async fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, IoThreadStopped> {
        let (done, result) = tokio::sync::oneshot::channel();
        lock(&self.lane.posted).push(Box::new(move || {
            let _ = done.send(work());
        }));
        result.await.map_err(|_| IoThreadStopped)
    }

    /// The work posted during the poll that just ended, for the driver to run on its own
    /// thread; `None` if there is none. If the thread still has work of this instance in
    /// progress, the posted work is sent there instead, behind it (one file's writes and syncs
    /// run in the order the guest issued them), and this is `None` too.
    pub fn take_posted_in_order(&self) -> Option<PostedIo> {
        let posted = PostedIo(std::mem::take(&mut *lock(&self.lane.posted)));
        if posted.0.is_empty() {
            return None;
        }
        if self.lane.on_thread.load(Ordering::SeqCst) > 0 {
            self.send(posted);
            return None;
        }
        Some(posted)
    }

    /// Work was posted and nobody has taken it yet.
    pub fn has_posted(&self) -> bool {
        !lock(&self.lane.posted).is_empty()
    }

    /// Sends the work posted during the poll that just ended to the thread. If the thread is
    /// gone, the work is dropped and its imports fail with [`IoThreadStopped`].
    pub fn send_posted(&self) {
        let posted = std::mem::take(&mut *lock(&self.lane.posted));
        self.send(PostedIo(posted));
    }

    /// Sends work taken with [`Self::take_posted_in_order`] to the thread after all, in its
    /// order.
    pub fn send(&self, posted: PostedIo) {
        for job in posted.0 {
            self.lane.on_thread.fetch_add(1, Ordering::SeqCst);
            if self.jobs.send(job).is_err() {
                self.lane.on_thread.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}
