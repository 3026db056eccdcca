//! [`IoLane`]: where an async instance's blocking writes and syncs run when its driver does not
//! run them itself, so that the store keeps running the guest's other calls meanwhile. A lane
//! is a serial queue on the process's shared worker threads ([`crate::workers`]): one
//! instance's jobs run one after another, in the order the guest issued them, and no thread
//! belongs to one instance.
//!
//! An async import does not start its work: it *posts* it and awaits the result. When the
//! store's poll ends, whoever polled it (its driver, see `crate::sandbox::store_driver`) takes
//! what was posted and runs it itself ([`PostedIo::run_here`]), after parking the store so that
//! a call arriving meanwhile takes it and is served during the I/O: a lone caller, a thread
//! whose call awaits a sync, or the instance's dispatcher turn. The lane
//! ([`IoLane::send_posted`]) runs it only for a task on a current-thread runtime (which must
//! not block its only worker), behind work already sent there, and when the dispatcher was
//! woken just as it was about to block.
//!
//! Why not `spawn_blocking`: each hop through tokio's blocking pool cost about 60 µs here (two
//! per group: 120 µs, about the price of the fdatasync itself). A worker thread still costs a
//! wake-up each way (a channel round trip between two parked threads measured 77 µs on this
//! 2-core VM), which is why small writes run inline and a lone caller runs its own I/O.
//!
//! Tried and rejected:
//! - running the sync inline *inside* the store's poll whenever one call is outstanding: the
//!   instance is then closed for the whole sync (no stats, no visibility, no staging into the
//!   next group), which is the property the async imports exist to provide;
//!   `a_failed_sync_reaches_all_16_waiting_tasks` deadlocks on it (its sync waits for 16 tasks
//!   to stage: a real disk never does that, but it stands for a slow sync);
//! - spinning instead of parking (the I/O thread between jobs, the serving thread while it
//!   waits): a lone writer's p50 came within 7% of native, but at 64 writers the spinning took
//!   the CPU the callers needed (0.65x native, from 1.1x) and p99 doubled;
//! - a thread of its own per instance (until issue 45): two threads per log (with the
//!   dispatcher's) capped a process near 8,000 sandboxed logs.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::workers::{TURN_STEPS_MAX, Turn, Workers};

type Job = Box<dyn FnOnce() + Send>;

/// A handle to one instance's lane and the work its imports posted; cloning shares both.
#[derive(Clone, Debug)]
pub struct IoLane {
    lane: Arc<Lane>,
}

struct Lane {
    /// Work posted by async imports during the store's current poll, not yet started.
    posted: Mutex<Vec<Job>>,
    /// Work sent to the lane, not yet started, and whether a turn of the lane is queued or
    /// running on the workers (at most one is: that keeps the order).
    queue: Mutex<LaneQueue>,
    /// Jobs sent to the lane and not finished. Posted work may run elsewhere only while this
    /// is zero: one file's writes and syncs must run in the order the guest issued them.
    on_lane: AtomicUsize,
    workers: Workers,
}

#[derive(Default)]
struct LaneQueue {
    jobs: VecDeque<Job>,
    scheduled: bool,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("on_lane", &self.on_lane.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A job sent to the lane panicked, or one run elsewhere did: its import fails, as the I/O
/// could not be done.
#[derive(Debug, thiserror::Error)]
#[error("the instance's I/O job stopped before it answered (it panicked)")]
pub struct IoLaneStopped;

/// Work taken from an [`IoLane`] to run on the driver's own thread.
#[must_use = "posted work must run, or its import never finishes"]
pub struct PostedIo(Vec<Job>);

impl PostedIo {
    /// Runs the work here, in the order it was posted. A job that panics only drops its
    /// answer: the import it belongs to fails with [`IoLaneStopped`], as on the lane.
    pub fn run_here(self) {
        for job in self.0 {
            let _ = catch_unwind(AssertUnwindSafe(job));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Turn for Lane {
    /// Runs the lane's jobs in order until none is left, or until [`TURN_STEPS_MAX`] have run
    /// (the lane then queues behind the others' turns).
    fn run_turn(self: Arc<Self>) {
        for _ in 0..TURN_STEPS_MAX {
            let job = {
                let mut queue = lock(&self.queue);
                match queue.jobs.pop_front() {
                    Some(job) => job,
                    None => {
                        queue.scheduled = false;
                        return;
                    }
                }
            };
            let _ = catch_unwind(AssertUnwindSafe(job));
            self.on_lane.fetch_sub(1, Ordering::SeqCst);
        }
        let workers = self.workers.clone();
        workers.submit(self);
    }
}

impl IoLane {
    /// A lane on `workers`, which must have been started ([`Workers::ensure_started`]).
    pub(crate) fn new(workers: Workers) -> IoLane {
        IoLane {
            lane: Arc::new(Lane {
                posted: Mutex::default(),
                queue: Mutex::default(),
                on_lane: AtomicUsize::new(0),
                workers,
            }),
        }
    }

    /// Posts `work` and resolves with its result once a driver has run it (here or on the
    /// lane). Only a store's poll may call this: its driver looks for posted work when the
    /// poll ends.
    pub async fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, IoLaneStopped> {
        let (done, result) = tokio::sync::oneshot::channel();
        lock(&self.lane.posted).push(Box::new(move || {
            let _ = done.send(work());
        }));
        result.await.map_err(|_| IoLaneStopped)
    }

    /// The work posted during the poll that just ended, for the driver to run on its own
    /// thread; `None` if there is none. If the lane still has work of this instance in
    /// progress, the posted work is sent there instead, behind it (one file's writes and syncs
    /// run in the order the guest issued them), and this is `None` too.
    pub fn take_posted_in_order(&self) -> Option<PostedIo> {
        let posted = PostedIo(std::mem::take(&mut *lock(&self.lane.posted)));
        if posted.0.is_empty() {
            return None;
        }
        if self.lane.on_lane.load(Ordering::SeqCst) > 0 {
            self.send(posted);
            return None;
        }
        Some(posted)
    }

    /// Work was posted and nobody has taken it yet.
    pub fn has_posted(&self) -> bool {
        !lock(&self.lane.posted).is_empty()
    }

    /// Sends the work posted during the poll that just ended to the lane.
    pub fn send_posted(&self) {
        let posted = std::mem::take(&mut *lock(&self.lane.posted));
        self.send(PostedIo(posted));
    }

    /// Sends work taken with [`Self::take_posted_in_order`] to the lane after all, in its
    /// order.
    pub fn send(&self, posted: PostedIo) {
        if posted.0.is_empty() {
            return;
        }
        let submit = {
            let mut queue = lock(&self.lane.queue);
            self.lane
                .on_lane
                .fetch_add(posted.0.len(), Ordering::SeqCst);
            queue.jobs.extend(posted.0);
            !std::mem::replace(&mut queue.scheduled, true)
        };
        if submit {
            self.lane.workers.submit(self.lane.clone());
        }
    }
}
