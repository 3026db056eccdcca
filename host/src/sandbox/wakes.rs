//! The wakes of the store driver: the dispatcher thread's ([`DispatcherWake`]) and the waker a
//! caller polls its run with ([`PollAgain`]), which turns a wake that comes during the poll
//! into one more pass instead of a trip through the executor.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::Waker;

use super::poison::lock;

#[derive(Default)]
pub(super) struct Wake {
    pub(super) pending: bool,
    pub(super) closing: bool,
}

/// The dispatcher thread's wake-up, and the waker it polls runs with.
#[derive(Default)]
pub(super) struct DispatcherWake {
    state: Mutex<Wake>,
    woken: Condvar,
}

impl DispatcherWake {
    pub(super) fn notify(&self, set: impl FnOnce(&mut Wake)) {
        set(&mut lock(&self.state));
        self.woken.notify_one();
    }

    /// Takes the wake that came since the last one was taken, if any.
    pub(super) fn take_pending(&self) -> bool {
        std::mem::take(&mut lock(&self.state).pending)
    }

    /// Sleeps until woken; `true` once the handle was dropped. After that (`closing_seen`), it
    /// sleeps until woken by a run.
    pub(super) fn wait(&self, closing_seen: bool) -> bool {
        let mut wake = lock(&self.state);
        while !wake.pending && (closing_seen || !wake.closing) {
            wake = self
                .woken
                .wait(wake)
                .unwrap_or_else(PoisonError::into_inner);
        }
        wake.pending = false;
        wake.closing
    }
}

impl std::task::Wake for DispatcherWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notify(|w| w.pending = true);
    }
}

/// The waker a [`Drive`] polls its run with. A wake that comes while the `Drive` is being
/// polled (the run woke itself: the sync it ran here finished, or it sent an answer) only
/// marks the poll to be repeated; later wakes go to the executor's waker. Passing every wake
/// on made tokio end each commit's poll by requeueing the task and waking an idle worker for
/// it (an eventfd write and a context switch per commit).
pub(super) struct PollAgain {
    state: AtomicU8,
    executor: futures::task::AtomicWaker,
    /// Where wakes go while the driver runs I/O ([`BUSY`]).
    dispatcher: Arc<DispatcherWake>,
}

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;
/// The driver is running the run's I/O, with the run parked: a wake (a call that arrived
/// while it polled, the end of a hold) goes to the dispatcher, which takes the run meanwhile.
pub(super) const BUSY: u8 = 3;

thread_local! {
    /// This thread is a driver running its run's I/O (see [`BUSY`]).
    pub(super) static RUNNING_OWN_IO: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl PollAgain {
    pub(super) fn new(dispatcher: Arc<DispatcherWake>) -> PollAgain {
        PollAgain {
            state: AtomicU8::new(IDLE),
            executor: futures::task::AtomicWaker::new(),
            dispatcher,
        }
    }

    /// A wake came during this pass; the pass goes on as if it had not (polling again).
    pub(super) fn take_woken(&self) -> bool {
        self.state
            .compare_exchange(WOKEN, POLLING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The driver is about to run I/O; `true` if a wake came since [`Self::take_woken`].
    pub(super) fn busy(&self) -> bool {
        self.state.swap(BUSY, Ordering::SeqCst) == WOKEN
    }

    pub(super) fn done_busy(&self) {
        self.state.store(POLLING, Ordering::SeqCst);
    }

    pub(super) fn begin(&self, executor: &Waker) {
        self.executor.register(executor);
        self.state.store(POLLING, Ordering::SeqCst);
    }

    /// Ends a pass; `true` if the run was woken during it (the pass should be repeated, and
    /// the state is polling again), `false` if not (wakes go to the executor from now on).
    pub(super) fn end_pass(&self) -> bool {
        match self
            .state
            .compare_exchange(POLLING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => false,
            Err(_) => {
                self.state.store(POLLING, Ordering::SeqCst);
                true
            }
        }
    }

    /// Ends the poll: wakes go to the executor from now on.
    pub(super) fn finish(&self) {
        self.state.store(IDLE, Ordering::SeqCst);
    }
}

impl std::task::Wake for PollAgain {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::SeqCst, Ordering::SeqCst)
        {
            Err(IDLE) => self.executor.wake(),
            // Its own I/O finishing: the driver polls the run right after, no one else need.
            Err(BUSY) if RUNNING_OWN_IO.get() => {}
            Err(BUSY) => self.dispatcher.notify(|w| w.pending = true),
            _ => {}
        }
    }
}
