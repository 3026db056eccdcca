//! The wakes of the store driver: the dispatcher's ([`DispatcherWake`], which queues the
//! instance's dispatcher turn on the shared worker threads) and the waker a caller polls its
//! run with ([`PollAgain`]), which turns a wake that comes during the poll into one more pass
//! instead of a trip through the executor.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::task::Waker;

use super::poison::lock;
use crate::workers::{Turn, Workers};

#[derive(Default)]
pub(super) struct Wake {
    /// Woken since the dispatcher last looked.
    pub(super) pending: bool,
    /// The handle was dropped.
    pub(super) closing: bool,
    /// A dispatcher turn has seen `closing`.
    closing_seen: bool,
    /// A dispatcher turn is queued or running: at most one is, so that one instance is served
    /// by one thread at a time.
    scheduled: bool,
    /// The dispatcher has stopped the instance; no turn runs again.
    stopped: bool,
}

impl Wake {
    /// There is something for a dispatcher turn to do.
    fn due(&self) -> bool {
        self.pending || (self.closing && !self.closing_seen)
    }
}

/// The dispatcher's wake-up: a wake queues the instance's dispatcher turn on the shared worker
/// threads (unless one is queued or running), and is the waker that turn polls runs with.
pub(super) struct DispatcherWake {
    state: Mutex<Wake>,
    workers: Workers,
    /// The instance's dispatcher turn, set once the instance's state exists. Weak: the state
    /// owns this wake.
    turn: OnceLock<Weak<dyn Turn>>,
    /// Signalled when the dispatcher stops the instance.
    stopped: Condvar,
}

impl DispatcherWake {
    pub(super) fn new(workers: Workers) -> DispatcherWake {
        DispatcherWake {
            state: Mutex::default(),
            workers,
            turn: OnceLock::new(),
            stopped: Condvar::new(),
        }
    }

    /// Sets the turn wakes queue. Called once, before the first wake.
    pub(super) fn set_turn(&self, turn: Weak<dyn Turn>) {
        let _ = self.turn.set(turn);
    }

    pub(super) fn notify(&self, set: impl FnOnce(&mut Wake)) {
        let submit = {
            let mut wake = lock(&self.state);
            set(&mut wake);
            let submit = wake.due() && !wake.scheduled && !wake.stopped;
            wake.scheduled |= submit;
            submit
        };
        if submit {
            self.submit_turn();
        }
    }

    /// Queues the dispatcher's turn on the workers (the caller has set `scheduled`).
    fn submit_turn(&self) {
        match self.turn.get().and_then(Weak::upgrade) {
            Some(turn) => self.workers.submit(turn),
            // The instance's state is gone: nothing is left to serve.
            None => lock(&self.state).scheduled = false,
        }
    }

    /// Takes the wake that came since the last one was taken, if any.
    pub(super) fn take_pending(&self) -> bool {
        std::mem::take(&mut lock(&self.state).pending)
    }

    /// A dispatcher turn's next pass: `Some(closing)` if it has something to do (a wake came,
    /// or the handle was dropped), taking the wake; `None` ends the turn (a later wake queues
    /// another).
    pub(super) fn next_pass(&self) -> Option<bool> {
        let mut wake = lock(&self.state);
        if wake.due() {
            wake.pending = false;
            wake.closing_seen |= wake.closing;
            Some(wake.closing)
        } else {
            wake.scheduled = false;
            None
        }
    }

    /// Queues the turn again behind the others, still scheduled: a turn that has taken its
    /// share of passes ([`crate::workers::TURN_STEPS_MAX`]) with more to do.
    pub(super) fn requeue(&self) {
        self.submit_turn();
    }

    /// The dispatcher stopped the instance: no turn runs again, and [`Self::wait_stopped`]
    /// returns.
    pub(super) fn set_stopped(&self) {
        let mut wake = lock(&self.state);
        wake.stopped = true;
        wake.scheduled = false;
        self.stopped.notify_all();
    }

    /// Blocks until the dispatcher has stopped the instance.
    pub(super) fn wait_stopped(&self) {
        let mut wake = lock(&self.state);
        while !wake.stopped {
            wake = self
                .stopped
                .wait(wake)
                .unwrap_or_else(PoisonError::into_inner);
        }
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
