//! [`IoThread`]: one dedicated thread per async instance that runs its blocking writes and
//! syncs, so that the store's event loop keeps running the guest's other calls meanwhile.
//!
//! Why a dedicated thread and not `spawn_blocking`: each hop through tokio's blocking pool cost
//! about 60 µs here (two per group: 120 µs, about the price of the fdatasync itself).
//!
//! A dedicated thread still costs a wake-up each way: a channel round trip between two parked
//! threads measured 77 µs on this 2-core VM. So it is used only where it buys concurrency:
//! small writes run inline, and so does all I/O of a lone thread serving its own call (see
//! `sandbox_async`), since no other call can enter the instance until that call ends anyway.
//! Tried and rejected:
//! - running the sync inline whenever only one call is outstanding, in the dispatcher's
//!   sessions too: a sync in progress then blocks the whole instance (stats, visibility, new
//!   calls staging into the next group), which is the property the async imports exist to
//!   provide; `a_failed_sync_reaches_all_16_waiting_tasks` deadlocks on it;
//! - serving a lone tokio task's call on its own worker inside `block_in_place`, as a lone
//!   thread does: tasks at N=1 went from 0.41-0.53x to 0.80-0.93x native, but the instance is
//!   then closed for the whole sync, and the same test deadlocks (its sync waits for 16 tasks
//!   to stage, which a real disk never does, but it stands for a slow sync during which other
//!   tasks must still stage and read);
//! - spinning instead of parking (this thread between jobs, the serving thread while it waits):
//!   a lone writer's p50 came within 7% of native, but at 64 writers the spinning took the CPU
//!   the callers needed (0.65x native, from 1.1x) and p99 doubled.

use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// A handle to the thread; cloning shares it. The thread ends when the last handle is dropped.
#[derive(Clone, Debug)]
pub struct IoThread {
    jobs: mpsc::Sender<Job>,
}

/// The I/O thread is gone (it panicked): the instance cannot do I/O any more.
#[derive(Debug, thiserror::Error)]
#[error("the instance's I/O thread stopped")]
pub struct IoThreadStopped;

impl IoThread {
    pub fn spawn(name: &str) -> std::io::Result<IoThread> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    job();
                }
            })?;
        Ok(IoThread { jobs })
    }

    /// Runs `work` on the thread and resolves with its result.
    pub async fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, IoThreadStopped> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = done.send(work());
            }))
            .map_err(|_| IoThreadStopped)?;
        result.await.map_err(|_| IoThreadStopped)
    }
}
