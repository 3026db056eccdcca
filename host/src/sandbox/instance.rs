//! What the store driver and each caller's drive share: the session being served
//! ([`Served`]), a run of it ([`Run`]), where the instance is ([`Instance`]: idle, parked by a
//! driver, driven, stopped) and the state every driver of one instance reaches ([`Shared`]).
//! The rules for who drives when are in [`super::store_driver`]'s doc; this file only keeps
//! the instance's state consistent under its lock. May import the rest of `sandbox/` below
//! the drivers (departures, error, poison, posted I/O, wakes) and `crate::embed::io_lane`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::departures::{Departures, HeldForDepartures};
use super::error::{SandboxError, StickyFailure};
use super::poison::lock;
use super::wakes::DispatcherWake;
use crate::embed::io_lane::IoLane;

/// What a store driver (`super::store_driver::StoreDriver`) serves: a session that owns the store and its request queue.
pub(crate) trait Served: Send + Sized + 'static {
    /// What callers send.
    type Request: Send + 'static;
    /// What callers get back when a call fails; a stopped instance answers with its
    /// [`SandboxError`].
    type Error: From<SandboxError> + Send + 'static;
    /// The call is answered only after a sync has returned (its caller may as well run it).
    fn awaits_sync(request: &Self::Request) -> bool;
    /// A run of this session: serves every request it finds queued, until nothing is queued
    /// or in flight, and gives the session back. `Err` when the instance can no longer run.
    /// `calls_outstanding` is lowered by one per call answered.
    fn serve(self: Box<Self>, calls_outstanding: Arc<AtomicUsize>) -> Run<Self>;
}

/// A session being served: owns it, and gives it back with the outcome once nothing is queued
/// or in flight. `Send`, so that it can change drivers between polls.
pub(crate) type Run<S> = Pin<Box<dyn Future<Output = (Box<S>, Result<(), SandboxError>)> + Send>>;

/// Where a call's answer goes.
pub(crate) struct Reply<T, E> {
    pub(super) sender: oneshot::Sender<Result<T, E>>,
    /// Set for a blocked thread: the run holds the instance until it has taken its answer.
    pub(super) departures: Option<Arc<Departures>>,
}

impl<T, E> Reply<T, E> {
    /// A reply to a task's call (no thread to wait for), for tests that build requests by hand.
    #[cfg(test)]
    pub(crate) fn to_task(sender: oneshot::Sender<Result<T, E>>) -> Reply<T, E> {
        Reply {
            sender,
            departures: None,
        }
    }

    /// Sends the answer; a caller that stopped waiting only stops listening.
    pub(crate) fn send(self, result: Result<T, E>) {
        if let Some(departures) = &self.departures {
            departures.answered();
        }
        // A caller that stopped waiting only stops listening: nothing to undo.
        if self.sender.send(result).is_err()
            && let Some(departures) = &self.departures
        {
            departures.left();
        }
    }
}

/// One instance's state, shared by its store driver, its dispatcher turns (on the shared worker
/// threads) and every caller driving it.
pub(super) struct Shared<S: Served> {
    pub(super) requests: mpsc::UnboundedSender<S::Request>,
    /// Requests sent and not yet answered: raised before a send, lowered after the answer.
    pub(super) calls_outstanding: Arc<AtomicUsize>,
    pub(super) instance: Mutex<Instance<S>>,
    /// The instance's I/O lane, and the work its imports posted.
    pub(super) io: IoLane,
    /// Why the instance stopped, once it has (a trap, a broken contract).
    pub(super) stopped: Mutex<StickyFailure>,
    /// Wakes the dispatcher (queues its turn): a run it parked woke, a caller left a run to it,
    /// or the handle was dropped.
    pub(super) wake: Arc<DispatcherWake>,
    /// Numbers the drivers (`super::drive::Drive`), from 1.
    pub(super) next_driver: AtomicU64,
    pub(super) departures: Arc<Departures>,
}

/// Where the instance is.
pub(super) enum Instance<S: Served> {
    /// Nobody is serving it: the next driver starts a run.
    Idle(Box<S>),
    /// A run with calls in flight that nobody is polling. Its `parker` polled it last, so the
    /// run's wakes go to it: it takes the run back when woken (after running the run's I/O, if
    /// it parked to do that), or, if it leaves first, wakes the dispatcher to listen instead.
    /// Any caller that arrives meanwhile takes the run and starts its own call.
    Parked { run: Run<S>, parker: DriverId },
    /// Someone is polling a run.
    Driven,
    /// The instance trapped; `Shared::stopped` says why.
    Stopped,
}

/// Who parked a run: [`DISPATCHER`], or a caller's drive (numbered from 1).
pub(super) type DriverId = u64;

/// The dispatcher's [`DriverId`] (whichever worker thread runs its turn).
pub(super) const DISPATCHER: DriverId = 0;

impl<S: Served> Shared<S> {
    pub(super) fn send(&self, request: S::Request) -> Result<(), S::Error> {
        self.calls_outstanding.fetch_add(1, Ordering::SeqCst);
        if self.requests.send(request).is_err() {
            self.calls_outstanding.fetch_sub(1, Ordering::SeqCst);
            return Err(self.stopped_error().into());
        }
        Ok(())
    }

    /// No call but the asker's is outstanding.
    pub(super) fn alone(&self) -> bool {
        self.calls_outstanding.load(Ordering::SeqCst) <= 1
    }

    pub(super) fn wake_dispatcher(&self) {
        self.wake.notify(|w| w.pending = true);
    }

    pub(super) fn stopped_error(&self) -> SandboxError {
        let error = lock(&self.stopped).failure().cloned();
        error.unwrap_or_else(|| {
            // The instance stops with a reason (a trap, a broken contract) except when a thread
            // serving it panicked and dropped the session.
            SandboxError::Panicked("the instance stopped without a recorded reason".into())
        })
    }

    /// The instance, to drive: a parked run, or a new run of the idle session. `None` while
    /// someone else drives it, or once it has stopped.
    pub(super) fn take_run(&self) -> Option<Run<S>> {
        self.take(true)
    }

    /// Takes back a run this driver parked, unless the dispatcher took it meanwhile.
    pub(super) fn reclaim(&self) -> Option<Run<S>> {
        self.take(false)
    }

    /// A parked run, or (if `start_idle`) a new run of the idle session; the instance is then
    /// driven.
    fn take(&self, start_idle: bool) -> Option<Run<S>> {
        let mut instance = lock(&self.instance);
        match std::mem::replace(&mut *instance, Instance::Driven) {
            Instance::Parked { run, .. } => Some(run),
            Instance::Idle(session) if start_idle => Some(Box::pin(HeldForDepartures {
                departures: self.departures.clone(),
                run: session.serve(self.calls_outstanding.clone()),
            })),
            other => {
                *instance = other;
                None
            }
        }
    }

    pub(super) fn park(&self, run: Run<S>, parker: DriverId) {
        *lock(&self.instance) = Instance::Parked { run, parker };
    }

    /// The run is parked, and its wakes go to `driver`.
    pub(super) fn parked_by(&self, driver: DriverId) -> bool {
        matches!(*lock(&self.instance), Instance::Parked { parker, .. } if parker == driver)
    }

    /// A run ended: the session goes back, or, if the instance trapped, the reason is kept
    /// and the session dropped (which drops the queue, so every caller still waiting gets
    /// `stopped_error`).
    pub(super) fn finish(&self, session: Box<S>, outcome: Result<(), SandboxError>) {
        match outcome {
            Ok(()) => *lock(&self.instance) = Instance::Idle(session),
            Err(error) => {
                lock(&self.stopped).record(error);
                *lock(&self.instance) = Instance::Stopped;
                drop(session);
            }
        }
    }
}
