//! The store driver: serves one component instance to many concurrent callers. It is generic
//! over what it serves ([`Served`]: a session with its own request type) and knows nothing of
//! the WAL: it owns runs, drivers, parking, the dispatcher's turns, and where a run's posted
//! I/O runs ([`super::posted_io`]).
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
//!   - otherwise the dispatcher, woken by the caller that parked the run with the sync
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
//! The dispatcher is not a thread of the instance's own: a wake queues its *turn* on the
//! process's shared worker threads ([`crate::workers`], bounded by the embedder), which serves
//! the instance as the thread did and returns once there is nothing to do; at most one turn of
//! an instance is queued or running at a time. A turn runs syncs, holding its worker for the
//! sync; it never waits on another turn, so a bounded set of threads cannot deadlock.
//!
//! A caller that stops waiting (a dropped future) only stops listening: a run never cancels a
//! guest task it started, and never gives the session back with one in flight. Why each rule
//! is there, with figures: `docs/BENCHMARKS.md`, "The sandboxed driver".

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::sync::{mpsc, oneshot};

use super::drive::Drive;
use super::instance::{DISPATCHER, Instance, Reply, Served, Shared};
use super::poison::lock;
use super::posted_io::RunIo;
use super::wakes::{DispatcherWake, PollAgain};
use crate::embed::io_lane::IoLane;
use crate::workers::{TURN_STEPS_MAX, Turn, Workers};

/// The handle callers hold. Dropping it waits until the dispatcher has served what is queued
/// and in flight, and drops the instance.
pub(crate) struct StoreDriver<S: Served> {
    shared: Arc<Shared<S>>,
}

impl<S: Served> StoreDriver<S> {
    /// Opens the session with `open` (given the store's I/O lane and the request queue) on
    /// this thread, then serves it: callers drive it, and the dispatcher's turns run on
    /// `workers` when no caller is there to.
    pub(crate) fn start<R: Send + 'static>(
        io: IoLane,
        workers: &Workers,
        open: impl FnOnce(&IoLane, mpsc::UnboundedReceiver<S::Request>) -> Result<(Box<S>, R), S::Error>,
    ) -> Result<(StoreDriver<S>, R), S::Error> {
        let (requests, queue) = mpsc::unbounded_channel();
        let (session, opened_with) = open(&io, queue)?;
        let shared = Arc::new(Shared {
            requests,
            calls_outstanding: Arc::new(AtomicUsize::new(0)),
            instance: Mutex::new(Instance::Idle(session)),
            io,
            stopped: Mutex::default(),
            wake: Arc::new(DispatcherWake::new(workers.clone())),
            next_driver: AtomicU64::new(DISPATCHER + 1),
            departures: Arc::default(),
        });
        let turn: Arc<dyn Turn> = shared.clone();
        shared.wake.set_turn(Arc::downgrade(&turn));
        Ok((StoreDriver { shared }, opened_with))
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
        self.shared.wake.wait_stopped();
    }
}

impl<S: Served> Shared<S> {
    /// The dispatcher's pass: drives the instance on this thread while it can take it, running
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
                // Work posted behind the I/O lane's (an `OnIoLane` driver's) goes there too,
                // in order.
                Poll::Pending => match self.io.take_posted_in_order() {
                    Some(posted) => {
                        self.park(polled, DISPATCHER);
                        if self.wake.take_pending() {
                            // Woken just before the park: whoever woke it may be waiting on
                            // this turn, so the I/O goes to the I/O lane instead.
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

/// The dispatcher's turn, on a shared worker thread: serves the instance while a run it parked
/// woke or a caller left a run to it, and stops it once the handle is dropped and nothing is in
/// flight. It ends when there is nothing to do (the next wake queues another turn), or after
/// [`TURN_STEPS_MAX`] passes, queueing itself again behind the other instances' turns.
impl<S: Served> Turn for Shared<S> {
    fn run_turn(self: Arc<Self>) {
        let waker = Waker::from(self.wake.clone());
        for _ in 0..TURN_STEPS_MAX {
            let Some(closing) = self.wake.next_pass() else {
                return;
            };
            self.serve(&waker);
            // Guest tasks whose callers stopped listening may still be in flight: a record
            // they staged becomes durable with its group, so the instance stops only once idle.
            if closing {
                let mut instance = lock(&self.instance);
                if matches!(*instance, Instance::Idle(_) | Instance::Stopped) {
                    let session = std::mem::replace(&mut *instance, Instance::Stopped);
                    drop(instance);
                    drop(session);
                    self.wake.set_stopped();
                    return;
                }
            }
        }
        self.wake.requeue();
    }
}
