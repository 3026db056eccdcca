//! The store driver: serves one component instance to many concurrent callers. It is generic
//! over what it serves ([`Served`]: a session with its own request type) and knows nothing of
//! the WAL: it owns runs, drivers, parking, the dispatcher thread, and where a run's posted I/O
//! runs ([`super::posted_io`]).
//!
//! `Store::run_concurrent` owns the store while guest tasks are in flight. A [`Run`] is one
//! such serving: a future that owns the session (the store and the request queue), starts
//! every request it finds queued, and gives the session back once nothing is queued or in
//! flight. Whoever polls a run is its *driver*; a run changes drivers between polls, and is
//! never held by a driver that waits: between polls it is *parked* ([`Instance::Parked`]), so
//! the next caller to arrive takes it and starts its own call at once.
//!
//! - **Every caller drives** when it finds the run parked (or the instance idle): it polls the
//!   run until the run waits on something, parks it, and waits for its answer. The run's wakes
//!   go to its last driver (its *parker*), which takes the run again when woken; a parker that
//!   leaves first wakes the dispatcher to listen in its place.
//! - **Whoever drives when a sync is posted runs it**, with the run parked meanwhile, so that
//!   callers arriving during the sync take the run and stage into the next group:
//!   - a lone caller (no other call outstanding), on its own thread or tokio task: a durable
//!     commit then costs no wake-up at all;
//!   - a thread whose own call awaits a sync (a durable commit, a flush): it would only wait
//!     otherwise, as the native leader does;
//!   - otherwise the dispatcher thread, woken by the caller that parked the run with the sync
//!     posted. It takes the run back after the sync, answers the group and runs the next
//!     group's sync, so groups follow each other with no wake-up in between. A call that does
//!     not await a sync never waits for one, and a task never blocks its worker unless it is
//!     alone.
//! - **A run waits for the threads it answered** ([`Departures`]), as the native leader does.
//!
//! Wakes are never lost: a run is either polled (its driver sees the wake and polls again
//! before it blocks on I/O, see [`PollAgain`]), parked by a driver that listens for it (a
//! waiting caller, or the dispatcher), parked by a driver running I/O (its wakes go to the
//! dispatcher meanwhile, see [`super::wakes::BUSY`]), or being taken by someone who polls it
//! next. A caller whose future is dropped mid-run, or that leaves while its run's wakes come
//! to it, wakes the dispatcher to listen instead. The one delay left: a wake that comes to the
//! dispatcher while it runs a sync (the end of a [`Departures`] hold on a run it parked) waits
//! for that sync; callers that arrive meanwhile still take the run themselves.
//!
//! A caller that stops waiting (a dropped future) only stops listening: a run never cancels a
//! guest task it started, and never gives the session back with one in flight. Why each rule
//! is there, with figures: `docs/BENCHMARKS.md`, "The sandboxed driver".

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::sync::{mpsc, oneshot};

use super::departures::{Departures, HeldForDepartures};
use super::drive::Drive;
use super::error::SandboxError;
use super::error::StickyFailure;
use super::poison::lock;
use super::posted_io::RunIo;
use super::wakes::{DispatcherWake, PollAgain};
use crate::embed::io_thread::IoThread;

/// What a [`StoreDriver`] serves: a session that owns the store and its request queue.
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

/// The handle callers hold. Dropping it stops the dispatcher thread (after it has served
/// what is queued) and drops the instance.
pub(crate) struct StoreDriver<S: Served> {
    shared: Arc<Shared<S>>,
    dispatcher: Option<std::thread::JoinHandle<()>>,
}

impl<S: Served> StoreDriver<S> {
    /// Starts the dispatcher thread, which opens the session with `open` (given the store's
    /// I/O thread and the request queue) and then serves it. Returns once `open` has: the
    /// caller may be inside a tokio runtime, where opening must not block it.
    pub(crate) fn start<R: Send + 'static>(
        io: IoThread,
        open: impl FnOnce(
            &IoThread,
            mpsc::UnboundedReceiver<S::Request>,
        ) -> Result<(Box<S>, R), S::Error>
        + Send
        + 'static,
    ) -> Result<(StoreDriver<S>, R), S::Error> {
        let (requests, queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            requests,
            calls_outstanding: Arc::new(AtomicUsize::new(0)),
            instance: Mutex::new(Instance::Driven),
            io,
            stopped: Mutex::default(),
            wake: Arc::default(),
            next_driver: AtomicU64::new(DISPATCHER + 1),
            departures: Arc::default(),
        });
        let (opened, opened_rx) = std::sync::mpsc::channel();
        let shared_in = shared.clone();
        let dispatcher = std::thread::Builder::new()
            .name("stele-sandbox".into())
            .spawn(move || {
                match open(&shared_in.io, queue) {
                    Ok((session, opened_with)) => {
                        *lock(&shared_in.instance) = Instance::Idle(session);
                        let _ = opened.send(Ok(opened_with));
                    }
                    Err(err) => {
                        let _ = opened.send(Err(err));
                        return;
                    }
                }
                dispatch(&shared_in);
            })
            .map_err(|e| SandboxError::Instantiate(format!("spawn the dispatcher: {e}")))?;
        let driver = StoreDriver {
            shared,
            dispatcher: Some(dispatcher),
        };
        let opened_with = opened_rx
            .recv()
            .map_err(|_| S::Error::from(driver.shared.stopped_error()))??;
        Ok((driver, opened_with))
    }

    /// Sends a request and awaits its answer, driving the instance on this task when the
    /// call is alone and the instance idle.
    pub(crate) async fn request<T>(
        &self,
        make: impl FnOnce(Reply<T, S::Error>) -> S::Request,
    ) -> Result<T, S::Error> {
        self.drive(make, RunIo::for_this_caller(), false)?.await
    }

    /// [`Self::request`] for synchronous callers (threads). It blocks the calling thread, and
    /// drives the instance on it when the call is alone and the instance idle. Inside a tokio
    /// runtime (where it must not be called; use `AsyncWal` there) it drives as a task would,
    /// rather than panic.
    pub(crate) fn request_blocking<T>(
        &self,
        make: impl FnOnce(Reply<T, S::Error>) -> S::Request,
    ) -> Result<T, S::Error> {
        futures::executor::block_on(self.drive(make, RunIo::for_this_caller(), true)?)
    }

    /// Queues a request and takes the instance to serve it, unless someone is polling it (that
    /// driver then starts the request: the queue wakes it).
    fn drive<T>(
        &self,
        make: impl FnOnce(Reply<T, S::Error>) -> S::Request,
        run_io: RunIo,
        blocked_thread: bool,
    ) -> Result<Drive<'_, S, T>, S::Error> {
        let (sender, answer) = oneshot::channel();
        let departures = blocked_thread.then(|| self.shared.departures.clone());
        let request = make(Reply {
            sender,
            departures: departures.clone(),
        });
        let awaits_sync = S::awaits_sync(&request);
        self.shared.send(request)?;
        Ok(Drive {
            shared: &self.shared,
            run: self.shared.take_run(),
            answer,
            departures,
            run_io,
            awaits_sync,
            poll_again: Arc::new(PollAgain::new(self.shared.wake.clone())),
            id: self.shared.next_driver.fetch_add(1, Ordering::Relaxed),
        })
    }
}

impl<S: Served> Drop for StoreDriver<S> {
    fn drop(&mut self) {
        self.shared.wake.notify(|w| w.closing = true);
        if let Some(thread) = self.dispatcher.take() {
            let _ = thread.join();
        }
    }
}

pub(super) struct Shared<S: Served> {
    pub(super) requests: mpsc::UnboundedSender<S::Request>,
    /// Requests sent and not yet answered: raised before a send, lowered after the answer.
    pub(super) calls_outstanding: Arc<AtomicUsize>,
    pub(super) instance: Mutex<Instance<S>>,
    /// The instance's I/O thread, and the work its imports posted.
    pub(super) io: IoThread,
    /// Why the instance stopped, once it has (a trap, a broken contract).
    pub(super) stopped: Mutex<StickyFailure>,
    /// Wakes the dispatcher thread: a run it parked woke, a caller left a run to it, or the
    /// handle was dropped.
    pub(super) wake: Arc<DispatcherWake>,
    /// Numbers the [`Drive`]s, from 1.
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
    /// Someone is polling a run (or the log is still being opened).
    Driven,
    /// The instance trapped; `Shared::stopped` says why.
    Stopped,
}

/// Who parked a run: [`DISPATCHER`], or a [`Drive`] (numbered from 1).
pub(super) type DriverId = u64;

/// The dispatcher thread's [`DriverId`].
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

    /// The dispatcher's turn: drives the instance on this thread while it can take it, running
    /// the I/O the run posts itself, with the run parked meanwhile (so that callers arriving
    /// during a sync take it and stage into the next group). It stops when the run is someone
    /// else's, or parked waiting on nothing it can do: the run's wakes then come to `waker`.
    fn serve(&self, waker: &Waker) {
        let mut cx = Context::from_waker(waker);
        let mut run = self.take_run();
        while let Some(mut polled) = run.take() {
            match polled.as_mut().poll(&mut cx) {
                Poll::Ready((session, outcome)) => {
                    self.finish(session, outcome);
                    if self.calls_outstanding.load(Ordering::SeqCst) == 0 {
                        return;
                    }
                    run = self.take_run();
                }
                // Woken during the poll (a call arrived that found the run driven, say): poll
                // again before anything blocks, so that nothing waits on this thread.
                Poll::Pending if self.wake.take_pending() => run = Some(polled),
                // Work posted behind the I/O thread's (an `OnIoThread` driver's) goes there
                // too, in order.
                Poll::Pending => match self.io.take_posted_in_order() {
                    Some(posted) => {
                        self.park(polled, DISPATCHER);
                        if self.wake.take_pending() {
                            // Woken just before the park: whoever woke it may be waiting on
                            // this thread, so the I/O goes to the I/O thread instead.
                            self.io.send(posted);
                        } else {
                            posted.run_here();
                        }
                        run = self.reclaim();
                    }
                    None => self.park(polled, DISPATCHER),
                },
            }
        }
    }
}

/// The dispatcher thread, once the log is open: serves the instance whenever a run it parked
/// wakes or a caller leaves a run to it, until the handle is dropped and nothing is in flight.
fn dispatch<S: Served>(shared: &Shared<S>) {
    let waker = Waker::from(shared.wake.clone());
    let mut closing = false;
    loop {
        closing = shared.wake.wait(closing);
        shared.serve(&waker);
        // Guest tasks whose callers stopped listening may still be in flight: a record they
        // staged becomes durable with its group, so the instance stops only once idle.
        if closing
            && matches!(
                *lock(&shared.instance),
                Instance::Idle(_) | Instance::Stopped
            )
        {
            *lock(&shared.instance) = Instance::Stopped;
            return;
        }
    }
}
