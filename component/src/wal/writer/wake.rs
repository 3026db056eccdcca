//! How the thread driver's waiters sleep and wake: each parked waiter has a [`WakeSlot`] of
//! its own, where the leader leaves its verdict; a parked thread or a task's waker is woken
//! with it. Plain data and atomics: no lock of the writer's is taken here.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use crate::wal::LogSeq;

/// A durable waiter asleep until the leader settles its wait or hands it leadership.
///
/// Why not one condvar for all: waking every waiter of a group at once makes each of them take
/// the writer's lock only to learn its outcome and deregister. At 64 writers on two cores that
/// convoy, one lock handoff after another, cost several times the group's sync. The leader
/// knows each waiter's outcome already, so it deregisters the settled ones under the lock it
/// holds and wakes each with its verdict; they leave without touching the lock.
#[derive(Debug)]
pub(super) struct ParkedWaiter {
    pub(super) target: LogSeq,
    pub(super) slot: Arc<WakeSlot>,
}

/// Where the leader leaves one waiter's verdict. The waiter resets it, with `core` held, before
/// it parks; the leader that takes it off `parked` is then the only one to write it.
#[derive(Debug)]
pub(super) struct WakeSlot {
    pub(super) sleeper: Sleeper,
    pub(super) verdict: AtomicU8,
}

/// Who waits on a [`WakeSlot`]: a parked thread (the thread driver) or a task (the task
/// driver, [`tasks`]), woken through its waker.
#[derive(Debug)]
pub(super) enum Sleeper {
    Thread(Thread),
    /// The waker of the task's latest poll; the leader takes it to wake. Native only: the
    /// component drives its own waits (`guest::wal_async`).
    #[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
    Task(Mutex<Option<std::task::Waker>>),
}

/// What a parked waiter is woken with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Verdict {
    /// Its records are durable; the leader deregistered it.
    Durable = 1,
    /// The writer failed before its records were durable; the leader deregistered it.
    Failed = 2,
    /// Leadership is free and its records are still pending: it re-checks under the lock. It
    /// is still registered.
    Recheck = 3,
}

/// A [`WakeSlot`] with no verdict yet.
pub(super) const ASLEEP: u8 = 0;

impl WakeSlot {
    pub(super) fn for_current_thread() -> Arc<Self> {
        Arc::new(WakeSlot {
            sleeper: Sleeper::Thread(thread::current()),
            verdict: AtomicU8::new(ASLEEP),
        })
    }

    /// A slot for a task of the task driver, woken through the waker its wait stores.
    #[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
    pub(super) fn for_task() -> Arc<Self> {
        Arc::new(WakeSlot {
            sleeper: Sleeper::Task(Mutex::new(None)),
            verdict: AtomicU8::new(ASLEEP),
        })
    }

    /// The verdict, once the leader has set one.
    pub(super) fn verdict(&self) -> Option<Verdict> {
        match self.verdict.load(Ordering::Acquire) {
            v if v == Verdict::Durable as u8 => Some(Verdict::Durable),
            v if v == Verdict::Failed as u8 => Some(Verdict::Failed),
            v if v == Verdict::Recheck as u8 => Some(Verdict::Recheck),
            _ => None,
        }
    }

    /// Sleeps until a verdict is set. `park` may return spuriously or for an earlier `unpark`,
    /// hence the loop.
    #[expect(
        clippy::disallowed_methods,
        reason = "the thread driver parks its waiters"
    )]
    pub(super) fn wait(&self) -> Verdict {
        loop {
            match self.verdict() {
                Some(verdict) => return verdict,
                None => thread::park(),
            }
        }
    }

    pub(super) fn wake(&self, verdict: Verdict) {
        self.verdict.store(verdict as u8, Ordering::Release);
        match &self.sleeper {
            Sleeper::Thread(thread) => thread.unpark(),
            #[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
            Sleeper::Task(waker) => {
                if let Some(waker) = lock(waker).take() {
                    waker.wake();
                }
            }
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in one caller's thread must not wedge every other caller; the core's invariants
    // hold between statements that can panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
