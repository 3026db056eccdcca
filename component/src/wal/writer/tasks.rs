//! The task driver: [`WalWriter`]'s calls for async callers (tokio tasks), over the same core,
//! the same parked-waiter list and the same leader as the thread driver, so threads and tasks
//! share groups.
//!
//! A waiting task costs a waker, not a thread. Only leading blocks (a group's write and sync,
//! the gathering rounds): a task that becomes leader runs [`WalWriter::lead`] where it may block
//! (see `lead_from_task`), so a group of 64 durable commits costs one such turn, where running
//! each call on the blocking pool cost 64 hops (and 64 parked threads): at 64 tasks, 59k
//! commits/s before, 288-299k after, 3.7-5.2x okaywal.
//!
//! Cancellation never loses a record or strands a waiter: a dropped call's records are staged
//! before its first await, so they go out with the next group, and its [`DurableWait`] undoes
//! exactly what it had done when it is dropped (see its `Drop`).

use std::future::poll_fn;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use super::wake::Sleeper;
use super::{
    ASLEEP, LogSeq, ParkedWaiter, Verdict, WakeSlot, WalWriteError, WalWriter, led_commit_outcome,
    lock,
};
use crate::wal::group_commit::{Leadership, WaitState};

impl WalWriter {
    /// [`WalWriter::commit_many_durable`] for a task: the same promise on `Ok` (every record
    /// of the batch synced as the policy says), the same errors. Waits without blocking its
    /// thread; when it leads, the group's write and sync block only the leader
    /// (`lead_from_task`).
    ///
    /// Dropping the future after its first poll leaves the batch staged, with seqs consumed:
    /// it becomes durable with the next group.
    ///
    /// # Panics
    /// Outside a tokio runtime, when it has to lead.
    pub async fn commit_many_durable_async(
        self: &Arc<Self>,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalWriteError> {
        self.retry_stalled_async().await?;
        let (wait, range) = {
            let mut core = lock(&self.core);
            let range =
                core.stage_with(records, |claim| self.storage.claim_site().reserve(claim))?;
            if range.is_empty() {
                return Ok(range);
            }
            core.register_durable_wait(range.end);
            (DurableWait::registered(self, range.end), range)
        };
        wait.until_durable().await?;
        Ok(range)
    }

    /// [`WalWriter::flush`] for a task: waits until every record visible now is durable.
    ///
    /// # Panics
    /// Outside a tokio runtime, when it has to lead.
    pub async fn flush_async(self: &Arc<Self>) -> Result<(), WalWriteError> {
        let wait = {
            let mut core = lock(&self.core);
            if let Some(cause) = core.failure() {
                return Err(WalWriteError::Poisoned {
                    cause: cause.clone(),
                });
            }
            core.retry_stalled();
            let target = core.visible_end();
            core.register_durable_wait(target);
            DurableWait::registered(self, target)
        };
        wait.until_durable().await
    }

    /// The thread driver's `retry_stalled` for a task: a stalled writer's records are retried
    /// before new work.
    async fn retry_stalled_async(self: &Arc<Self>) -> Result<(), WalWriteError> {
        let wait = {
            let mut core = lock(&self.core);
            if !core.retry_stalled() {
                return Ok(());
            }
            let target = core.visible_end();
            core.register_durable_wait(target);
            DurableWait::registered(self, target)
        };
        wait.until_durable()
            .await
            .map_err(WalWriteError::before_staging)
    }

    /// [`WalWriter::commit_many`] for a task: visible on return; if no one leads, this call
    /// leads (`lead_from_task`) before it returns, as the thread driver's does.
    ///
    /// # Panics
    /// Outside a tokio runtime, when it has to lead.
    pub async fn commit_many_async(
        self: &Arc<Self>,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalWriteError> {
        self.retry_stalled_async().await?;
        let (range, leadership) = {
            let mut core = lock(&self.core);
            let range =
                core.stage_with(records, |claim| self.storage.claim_site().reserve(claim))?;
            if range.is_empty() {
                return Ok(range);
            }
            let departing = self.departing_count(&core);
            match core.claim_leadership(departing) {
                Some(leadership) => (range, leadership),
                None => return Ok(range),
            }
        };
        lead_from_task(self, leadership).await;
        led_commit_outcome(&lock(&self.core), range)
    }
}

/// Runs a leader's turn ([`WalWriter::lead`]) for a task: in place on a multi-thread runtime
/// (`block_in_place`, which hands this worker's other tasks to another thread first: at one
/// writer, 9.5k commits/s against 6.9k by a hop to the blocking pool), else on the blocking
/// pool, awaited. Not cancelled when the caller's future is dropped: the pool finishes the
/// turn.
#[expect(
    clippy::disallowed_methods,
    reason = "the task driver runs a leader's turn on the blocking pool"
)]
async fn lead_from_task(writer: &Arc<WalWriter>, leadership: Leadership) {
    if tokio::runtime::Handle::try_current()
        .is_ok_and(|rt| rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    {
        tokio::task::block_in_place(|| writer.lead_turn(leadership));
        return;
    }
    let writer = Arc::clone(writer);
    let turn = tokio::task::spawn_blocking(move || writer.lead_turn(leadership));
    if let Err(failed) = turn.await
        && failed.is_panic()
    {
        std::panic::resume_unwind(failed.into_panic());
    }
}

/// Where a task's durable wait stands, for [`DurableWait`]'s drop to undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Registered as a durable waiter, neither parked nor leading.
    Registered,
    /// Registered and on `parked`, asleep on the slot.
    Parked,
    /// Settled: deregistered, and counted out of `departing` if a leader woke it.
    Done,
}

/// One task's durable wait for `target`, registered with the core from its creation until it
/// settles. Dropped unsettled, it deregisters, takes its slot off `parked`, and passes on what
/// a leader left it: a departure, or a hand-off of leadership.
struct DurableWait {
    writer: Arc<WalWriter>,
    target: LogSeq,
    slot: Arc<WakeSlot>,
    phase: Phase,
}

impl DurableWait {
    /// The caller registered `target` with the core, under the lock.
    fn registered(writer: &Arc<WalWriter>, target: LogSeq) -> DurableWait {
        DurableWait {
            writer: Arc::clone(writer),
            target,
            slot: WakeSlot::for_task(),
            phase: Phase::Registered,
        }
    }

    /// The thread driver's `wait_durable`, with a task's sleep in place of a thread's.
    async fn until_durable(mut self) -> Result<(), WalWriteError> {
        loop {
            // The guard lives in this block only: a future that holds one across an await
            // would not be `Send`.
            let next = {
                let mut core = lock(&self.writer.core);
                match core.durable_wait_state(self.target) {
                    WaitState::Durable => {
                        core.deregister_durable_wait(self.target);
                        self.phase = Phase::Done;
                        return Ok(());
                    }
                    WaitState::Failed(cause) => {
                        core.deregister_durable_wait(self.target);
                        self.phase = Phase::Done;
                        return Err(WalWriteError::Failed { cause });
                    }
                    WaitState::Stalled(cause) => {
                        core.deregister_durable_wait(self.target);
                        self.phase = Phase::Done;
                        return Err(WalWriteError::Stalled { cause });
                    }
                    WaitState::Pending => {}
                }
                let departing = self.writer.departing_count(&core);
                match core.claim_leadership(departing) {
                    Some(leadership) => Some(leadership),
                    None => {
                        self.slot.verdict.store(ASLEEP, Ordering::Relaxed);
                        lock(&self.writer.parked).push(ParkedWaiter {
                            target: self.target,
                            slot: Arc::clone(&self.slot),
                        });
                        self.phase = Phase::Parked;
                        None
                    }
                }
            };
            if let Some(leadership) = next {
                lead_from_task(&self.writer, leadership).await;
                continue;
            }
            match self.verdict().await {
                Verdict::Durable => {
                    self.phase = Phase::Done;
                    self.writer.departed();
                    return Ok(());
                }
                Verdict::Failed => {
                    self.phase = Phase::Done;
                    self.writer.departed();
                    return Err(self.writer.failure_behind_verdict());
                }
                // Still registered, off `parked`: re-check, and claim if no one leads.
                Verdict::Recheck => self.phase = Phase::Registered,
            }
        }
    }

    /// Sleeps until a leader sets the slot's verdict. The waker is stored before the verdict is
    /// read again, so a verdict set in between is seen here rather than lost.
    async fn verdict(&self) -> Verdict {
        poll_fn(|cx| {
            if let Some(verdict) = self.slot.verdict() {
                return Poll::Ready(verdict);
            }
            let Sleeper::Task(waker) = &self.slot.sleeper else {
                unreachable!("a task's slot")
            };
            *lock(waker) = Some(cx.waker().clone());
            match self.slot.verdict() {
                Some(verdict) => Poll::Ready(verdict),
                None => Poll::Pending,
            }
        })
        .await
    }
}

impl Drop for DurableWait {
    #[expect(
        clippy::disallowed_methods,
        reason = "the task driver waits out a leader's verdict that is already being set"
    )]
    fn drop(&mut self) {
        let writer = &self.writer;
        match self.phase {
            Phase::Done => return,
            Phase::Registered => {
                lock(&writer.core).deregister_durable_wait(self.target);
                return;
            }
            Phase::Parked => {}
        }
        let mut core = lock(&writer.core);
        let mut parked = lock(&writer.parked);
        if let Some(at) = parked.iter().position(|w| Arc::ptr_eq(&w.slot, &self.slot)) {
            // No leader has seen it: as if it had never parked.
            parked.remove(at);
            drop(parked);
            core.deregister_durable_wait(self.target);
            return;
        }
        drop(parked);
        drop(core);
        // A leader took the slot off `parked` under the lock and sets its verdict right after
        // releasing it, with nothing that blocks in between: a short wait.
        let verdict = loop {
            match self.slot.verdict() {
                Some(verdict) => break verdict,
                None => std::thread::yield_now(),
            }
        };
        match verdict {
            // The leader deregistered it and counted it as departing: it departs.
            Verdict::Durable | Verdict::Failed => writer.departed(),
            // Leadership was handed to this waiter; hand it on, or lead if no one else waits.
            Verdict::Recheck => {
                let mut core = lock(&writer.core);
                core.deregister_durable_wait(self.target);
                let departing = writer.departing_count(&core);
                let Some(leadership) = core.claim_leadership(departing) else {
                    return;
                };
                drop(core);
                let leader = Arc::clone(writer);
                let lead = move || leader.lead_turn(leadership);
                // Detached on the blocking pool when a runtime is there; else (the runtime is
                // shutting down around this future) here, on the dropping thread.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn_blocking(lead)),
                    Err(_) => lead(),
                }
            }
        }
    }
}
