//! Sandboxed mode on the async-ABI component: one instance, many concurrent callers.
//!
//! `Store::run_concurrent` owns the store while guest tasks are in flight. A [`Run`] is one
//! such serving: a future that owns the [`Session`] (the store and the request queue), starts
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
//!     commit then costs no wake-up at all (tokio tasks at N=1 went from 0.41x-0.53x native to
//!     0.70x-0.80x);
//!   - a thread whose own call awaits a sync (a durable commit, a flush): it would only wait
//!     otherwise, as the native leader does;
//!   - otherwise the dispatcher thread, woken by the caller that parked the run with the sync
//!     posted. It takes the run back after the sync, answers the group and runs the next
//!     group's sync, so groups follow each other with no wake-up in between. A call that does
//!     not await a sync (`stats`, a non-durable commit) never waits for one, and a task never
//!     blocks its worker unless it is alone. (When the dispatcher sent every sync to the I/O
//!     thread and every caller woke the dispatcher, a group paid about four wake-ups of 38 µs
//!     on this 2-core VM.)
//! - **A group waits for the threads it answered** ([`Departures`]), as the native leader
//!   does: without it, the first thread back led a group of itself.
//!
//! Wakes are never lost: a run is either polled (its driver sees the wake and polls again
//! before it blocks on I/O, see [`PollAgain`]), parked by a driver that listens for it (a
//! waiting caller, or the dispatcher), parked by a driver running I/O (its wakes go to the
//! dispatcher meanwhile, see [`BUSY`]), or being taken by someone who polls it next. A caller
//! whose future is dropped mid-run, or that leaves while its run's wakes come to it, wakes the
//! dispatcher to listen instead. The one delay left: a wake that comes to the dispatcher while
//! it runs a sync (the end of a [`Departures`] hold on a run it parked) waits for that sync;
//! callers that arrive meanwhile still take the run themselves.
//!
//! Single-record commits travel as one-record batches, so there is one request kind per
//! behaviour. Durable calls (`commit-many-durable`, `flush`) become concurrent guest tasks:
//! while one leads and awaits the host's sync (run by one of its callers, or the dispatcher),
//! the run starts the next requests, which stage into the next group. (Small writes run inline:
//! see `stele::vfs::INLINE_WRITE_BYTES_MAX`. Every export of `wal-async` is an `async func`:
//! a store with async host functions accepts only async-lifted calls.)
//!
//! Durable commits that are queued together (the callers a group answered, back at once) start
//! as one `commit-batches-durable` call, up to one group's bytes ([`gather_durable_commits`]):
//! each batch keeps its own seqs and its own outcome, and the group pays for one guest task
//! instead of one per caller. Measured at N=16 threads, 0.79x and 0.90x native records/s
//! against 0.61x and 0.75x with a task per caller (two alternated runs).
//!
//! Answers go out in bursts: the calls one group completes finish about one per turn of the
//! store, and the run collects them all before it sends any answer (turns continue while
//! they bring answers, at most one per call in flight; no timer). Callers answered together
//! come back together and stage into one group. Answers sent between guest turns came back
//! staggered, and the first caller back led a group of one: measured at N=64, 0.98x native
//! records/s with threads, against 1.12x with bursts (medians of three runs).
//!
//! A caller that stops waiting (a dropped future) only stops listening: a run never cancels a
//! guest task it started, and never gives the session back with one in flight, so a record
//! staged by it still becomes durable with its group.

use std::future::Future;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use stele::vfs::Vfs;
use stele::wal::{
    LogSeq, Recovery, VisibleRecord, WalOptions, WalRetirement, WalTruncation, WalWriterStats,
};
use tokio::sync::{mpsc, oneshot};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::bindings::engine_async::EngineAsync;
use crate::bindings::engine_async::exports::stele::log::wal as wit;
use crate::convert::with_async::{
    as_retention_error, from_wit_error, from_wit_range, from_wit_recovery, from_wit_retirement,
    from_wit_stats, from_wit_truncation, from_wit_visible, wit_options,
};
use crate::io_thread::{IoThread, PostedIo};
use crate::runtime::{GuestState, Runtime, SandboxLimits, trap_error};
use crate::{SandboxError, WalError};

/// Where a call's answer goes.
pub(crate) struct Reply<T> {
    sender: oneshot::Sender<Result<T, WalError>>,
    /// Set for a blocked thread: the run holds the instance until it has taken its answer.
    departures: Option<Arc<Departures>>,
}

impl<T> Reply<T> {
    fn send(self, result: Result<T, WalError>) {
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

/// Answers sent to blocked threads and not yet taken. While there are any, no run is polled
/// (see [`HeldForDepartures`]); the calls those threads make next are started together once
/// the last is back, and join the group the calls already waiting are in.
///
/// Why: a group's callers are answered together, but each has to wake to take its answer, and
/// the first back would otherwise lead a group of itself and whoever had staged. The native
/// thread driver waits the same way (`GroupCommit::departing_waiters`). Starting each call as
/// it arrives does not do: a leader's gathering round resumes before the new call stages in
/// the same turn, ends quiet, and the group splits (2.7 records per fsync at N=4, against 3.5
/// holding everything). Only threads count: a thread always wakes on its answer, where a task
/// may be kept unpolled by its owner.
#[derive(Default)]
struct Departures {
    untaken: AtomicUsize,
    /// The last driver held back, woken once every answer is taken.
    held: Mutex<Option<Waker>>,
}

impl Departures {
    fn answered(&self) {
        self.untaken.fetch_add(1, Ordering::SeqCst);
    }

    fn left(&self) {
        if self.untaken.fetch_sub(1, Ordering::SeqCst) == 1
            && let Some(held) = lock(&self.held).take()
        {
            held.wake();
        }
    }

    fn poll_all_left(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.untaken.load(Ordering::SeqCst) == 0 {
            return Poll::Ready(());
        }
        *lock(&self.held) = Some(cx.waker().clone());
        // `left` may have found no waker to wake just before it was stored.
        if self.untaken.load(Ordering::SeqCst) == 0 {
            lock(&self.held).take();
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// A run that is not polled while threads have answers to take: see [`Departures`].
struct HeldForDepartures<F> {
    departures: Arc<Departures>,
    run: Pin<Box<F>>,
}

impl<F: Future> Future for HeldForDepartures<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        std::task::ready!(self.departures.poll_all_left(cx));
        self.run.as_mut().poll(cx)
    }
}

pub(crate) enum Request {
    CommitManyDurable {
        records: Vec<wit::CommitRecord>,
        /// The batch's size, encoded, as checked before it was sent.
        encoded_bytes: usize,
        reply: Reply<Range<LogSeq>>,
    },
    Flush {
        reply: Reply<()>,
    },
    CommitMany {
        records: Vec<wit::CommitRecord>,
        reply: Reply<Range<LogSeq>>,
    },
    VisibleRecords {
        first_seq: u64,
        limit: u32,
        reply: Reply<Vec<VisibleRecord>>,
    },
    Retire {
        through: u64,
        reply: Reply<WalRetirement>,
    },
    Stats {
        reply: Reply<WalWriterStats>,
    },
    Checkpoint {
        through: u64,
        reply: Reply<()>,
    },
    TruncateThrough {
        through: u64,
        reply: Reply<WalTruncation>,
    },
    Segments {
        reply: Reply<Vec<LogSeq>>,
    },
}

impl Request {
    /// The call is answered only after a sync has returned.
    fn awaits_sync(&self) -> bool {
        matches!(
            self,
            Request::CommitManyDurable { .. } | Request::Flush { .. }
        )
    }
}

/// The handle callers hold. Dropping it stops the dispatcher thread (after it has served
/// what is queued) and drops the instance.
pub(crate) struct AsyncSandbox {
    shared: Arc<Shared>,
    dispatcher: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    requests: mpsc::UnboundedSender<Request>,
    /// Requests sent and not yet answered: raised before a send, lowered after the answer.
    calls_outstanding: Arc<AtomicUsize>,
    instance: Mutex<Instance>,
    /// The instance's I/O thread, and the work its imports posted.
    io: IoThread,
    /// Why the instance stopped, once it has (a trap).
    stopped: Mutex<Option<SandboxError>>,
    /// Wakes the dispatcher thread: a run it parked woke, a caller left a run to it, or the
    /// handle was dropped.
    wake: Arc<DispatcherWake>,
    /// Numbers the [`Drive`]s, from 1.
    next_driver: AtomicU64,
    departures: Arc<Departures>,
}

/// Where the instance is.
enum Instance {
    /// Nobody is serving it: the next driver starts a run.
    Idle(Box<Session>),
    /// A run with calls in flight that nobody is polling. Its `parker` polled it last, so the
    /// run's wakes go to it: it takes the run back when woken (after running the run's I/O, if
    /// it parked to do that), or, if it leaves first, wakes the dispatcher to listen instead.
    /// Any caller that arrives meanwhile takes the run and starts its own call.
    Parked { run: Run, parker: DriverId },
    /// Someone is polling a run (or the log is still being opened).
    Driven,
    /// The instance trapped; `Shared::stopped` says why.
    Stopped,
}

/// Who parked a run: [`DISPATCHER`], or a [`Drive`] (numbered from 1).
type DriverId = u64;

/// The dispatcher thread's [`DriverId`].
const DISPATCHER: DriverId = 0;

/// A session being served: owns it, and gives it back with the outcome once nothing is queued
/// or in flight. `Send`, so that it can change drivers between polls.
type Run = Pin<Box<dyn Future<Output = (Box<Session>, Result<(), SandboxError>)> + Send>>;

#[derive(Default)]
struct Wake {
    pending: bool,
    closing: bool,
}

/// The dispatcher thread's wake-up, and the waker it polls runs with.
#[derive(Default)]
struct DispatcherWake {
    state: Mutex<Wake>,
    woken: Condvar,
}

impl DispatcherWake {
    fn notify(&self, set: impl FnOnce(&mut Wake)) {
        set(&mut lock(&self.state));
        self.woken.notify_one();
    }

    /// Takes the wake that came since the last one was taken, if any.
    fn take_pending(&self) -> bool {
        std::mem::take(&mut lock(&self.state).pending)
    }

    /// Sleeps until woken; `true` once the handle was dropped. After that (`closing_seen`), it
    /// sleeps until woken by a run.
    fn wait(&self, closing_seen: bool) -> bool {
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

/// The instance and everything needed to serve it, handed from thread to thread.
struct Session {
    store: Store<GuestState>,
    bindings: EngineAsync,
    writer: ResourceAny,
    queue: mpsc::UnboundedReceiver<Request>,
    /// The writer's group bound: how many bytes of durable commits one guest call gathers.
    max_group_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AsyncSandbox {
    /// Instantiates the async component and creates (`create`) or opens the log in it, on the
    /// dispatcher thread (the caller may be inside a tokio runtime, where it must not block).
    pub(crate) fn start(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        limits: SandboxLimits,
        create: bool,
    ) -> Result<(AsyncSandbox, Recovery), WalError> {
        let runtime = Runtime::get()?;
        let store = runtime.store_for_async(vfs, limits)?;
        let io = store
            .data()
            .stele
            .io_thread()
            .cloned()
            .expect("store_for_async gives the store an I/O thread");
        let (requests, queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            requests,
            calls_outstanding: Arc::new(AtomicUsize::new(0)),
            instance: Mutex::new(Instance::Driven),
            io,
            stopped: Mutex::new(None),
            wake: Arc::default(),
            next_driver: AtomicU64::new(DISPATCHER + 1),
            departures: Arc::default(),
        });
        let (opened, opened_rx) = std::sync::mpsc::channel();
        let path = path.to_owned();
        let shared_in = shared.clone();
        let dispatcher = std::thread::Builder::new()
            .name("stele-sandbox".into())
            .spawn(move || {
                match open_session(runtime, store, &shared_in.io, path, options, create, queue) {
                    Ok((session, recovery)) => {
                        *lock(&shared_in.instance) = Instance::Idle(session);
                        let _ = opened.send(Ok(recovery));
                    }
                    Err(err) => {
                        let _ = opened.send(Err(err));
                        return;
                    }
                }
                dispatch(&shared_in);
            })
            .map_err(|e| SandboxError::Instantiate(format!("spawn the dispatcher: {e}")))?;
        let sandbox = AsyncSandbox {
            shared,
            dispatcher: Some(dispatcher),
        };
        let recovery = opened_rx
            .recv()
            .map_err(|_| sandbox.shared.stopped_error())??;
        Ok((sandbox, recovery))
    }

    /// Sends a request and awaits its answer, driving the instance on this task when the
    /// call is alone and the instance idle.
    pub(crate) async fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, WalError> {
        self.drive(make, RunIo::for_this_caller(), false)?.await
    }

    /// [`Self::request`] for synchronous callers (threads). It blocks the calling thread, and
    /// drives the instance on it when the call is alone and the instance idle. Inside a tokio
    /// runtime (where it must not be called; use `AsyncWal` there) it drives as a task would,
    /// rather than panic.
    pub(crate) fn request_blocking<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, WalError> {
        futures::executor::block_on(self.drive(make, RunIo::for_this_caller(), true)?)
    }

    /// Queues a request and takes the instance to serve it, unless someone is polling it (that
    /// driver then starts the request: the queue wakes it).
    fn drive<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
        run_io: RunIo,
        blocked_thread: bool,
    ) -> Result<Drive<'_, T>, WalError> {
        let (sender, answer) = oneshot::channel();
        let departures = blocked_thread.then(|| self.shared.departures.clone());
        let request = make(Reply {
            sender,
            departures: departures.clone(),
        });
        let awaits_sync = request.awaits_sync();
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

impl Shared {
    fn send(&self, request: Request) -> Result<(), WalError> {
        self.calls_outstanding.fetch_add(1, Ordering::SeqCst);
        if self.requests.send(request).is_err() {
            self.calls_outstanding.fetch_sub(1, Ordering::SeqCst);
            return Err(self.stopped_error());
        }
        Ok(())
    }

    /// No call but the asker's is outstanding.
    fn alone(&self) -> bool {
        self.calls_outstanding.load(Ordering::SeqCst) <= 1
    }

    fn wake_dispatcher(&self) {
        self.wake.notify(|w| w.pending = true);
    }

    fn stopped_error(&self) -> WalError {
        let error = lock(&self.stopped).clone();
        error
            .unwrap_or_else(|| SandboxError::Trapped("the instance stopped".into()))
            .into()
    }

    /// The instance, to drive: a parked run, or a new run of the idle session. `None` while
    /// someone else drives it, or once it has stopped.
    fn take_run(&self) -> Option<Run> {
        self.take(true)
    }

    /// Takes back a run this driver parked, unless the dispatcher took it meanwhile.
    fn reclaim(&self) -> Option<Run> {
        self.take(false)
    }

    /// A parked run, or (if `start_idle`) a new run of the idle session; the instance is then
    /// driven.
    fn take(&self, start_idle: bool) -> Option<Run> {
        let mut instance = lock(&self.instance);
        match std::mem::replace(&mut *instance, Instance::Driven) {
            Instance::Parked { run, .. } => Some(run),
            Instance::Idle(session) if start_idle => {
                Some(session.run(self.calls_outstanding.clone(), self.departures.clone()))
            }
            other => {
                *instance = other;
                None
            }
        }
    }

    fn park(&self, run: Run, parker: DriverId) {
        *lock(&self.instance) = Instance::Parked { run, parker };
    }

    /// The run is parked, and its wakes go to `driver`.
    fn parked_by(&self, driver: DriverId) -> bool {
        matches!(*lock(&self.instance), Instance::Parked { parker, .. } if parker == driver)
    }

    /// A run ended: the session goes back, or, if the instance trapped, the reason is kept
    /// and the session dropped (which drops the queue, so every caller still waiting gets
    /// `stopped_error`).
    fn finish(&self, session: Box<Session>, outcome: Result<(), SandboxError>) {
        match outcome {
            Ok(()) => *lock(&self.instance) = Instance::Idle(session),
            Err(error) => {
                *lock(&self.stopped) = Some(error);
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

/// Where a lone caller that drives the instance runs the I/O its run posts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunIo {
    /// On the caller's thread, which is there to block.
    Here,
    /// On the caller's tokio worker, inside `block_in_place` (which moves the worker's other
    /// tasks elsewhere meanwhile).
    InPlace,
    /// On the I/O thread: a current-thread runtime cannot block its only worker.
    OnIoThread,
}

impl RunIo {
    /// A thread outside tokio blocks where it is; inside tokio, the runtime's flavour decides.
    fn for_this_caller() -> RunIo {
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => RunIo::InPlace,
            Ok(_) => RunIo::OnIoThread,
            Err(_) => RunIo::Here,
        }
    }
}

/// One caller's wait for its answer, driving the instance's run whenever it can take it.
struct Drive<'a, T> {
    shared: &'a Shared,
    run: Option<Run>,
    answer: oneshot::Receiver<Result<T, WalError>>,
    /// Set for a blocked thread until it has taken its answer.
    departures: Option<Arc<Departures>>,
    run_io: RunIo,
    /// The call is answered only after a sync: its caller may as well run syncs.
    awaits_sync: bool,
    poll_again: Arc<PollAgain>,
    id: DriverId,
}

impl<T> Drive<'_, T> {
    /// Leaves the run, with whatever is still in flight in it, to the dispatcher.
    fn hand_off(&mut self) {
        if let Some(run) = self.run.take() {
            self.shared.park(run, self.id);
            self.shared.wake_dispatcher();
        }
    }

    fn answered(
        &mut self,
        answer: Result<Result<T, WalError>, oneshot::error::RecvError>,
    ) -> Result<T, WalError> {
        // Counted only once sent: a reply dropped unsent (the instance stopped) was not.
        if let (Some(departures), Ok(_)) = (self.departures.take(), &answer) {
            departures.left();
        }
        answer.unwrap_or_else(|_| Err(self.shared.stopped_error()))
    }
}

impl<T> Future for Drive<'_, T> {
    type Output = Result<T, WalError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.poll_again.begin(cx.waker());
        let waker = Waker::from(this.poll_again.clone());
        let mut inner = Context::from_waker(&waker);
        for _ in 0..POLLS_PER_WAKE_MAX {
            if let Poll::Ready(answer) = this.poll_once(&mut inner) {
                this.poll_again.finish();
                return Poll::Ready(answer);
            }
            if !this.poll_again.end_pass() {
                // Not woken during the pass: a later wake goes to the executor.
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken, but out of passes or of tokio's budget: the executor polls again.
        this.poll_again.finish();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// How many times one poll of a [`Drive`] polls again because the run woke it meanwhile. The
/// bound lets a run that keeps waking itself (a task out of tokio's budget, whose every poll
/// wakes it at once) end the poll, so the executor runs its other tasks.
const POLLS_PER_WAKE_MAX: usize = 64;

impl<T> Drive<'_, T> {
    /// One pass: takes the run if nobody else holds it, drives it until it needs something to
    /// happen, parks it, then looks at the answer.
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, WalError>> {
        if self.run.is_none() {
            self.run = self.shared.take_run();
        }
        let mut repolls = 0;
        while let Some(run) = self.run.as_mut() {
            if let Poll::Ready((session, outcome)) = run.as_mut().poll(cx) {
                self.run = None;
                self.shared.finish(session, outcome);
                // A call sent as the run was ending found the instance driven, and left it to
                // this driver: pass it on.
                if self.shared.calls_outstanding.load(Ordering::SeqCst) > 0 {
                    self.shared.wake_dispatcher();
                }
                break;
            }
            if let Poll::Ready(answer) = Pin::new(&mut self.answer).poll(cx) {
                // This caller is done; it does not go on serving the others.
                self.hand_off();
                return Poll::Ready(self.answered(answer));
            }
            if repolls < POLLS_PER_WAKE_MAX && self.poll_again.take_woken() {
                // The run woke during this pass (a call arrived that found it driven, say):
                // poll again before anything blocks, so that nothing waits on this driver.
                repolls += 1;
                continue;
            }
            let run = self.run.take().expect("the loop holds a run");
            let Some(posted) = self.posted_io_to_run_here() else {
                // Parked, not held, while this caller waits: the run's wakes come here, but a
                // caller that arrives meanwhile starts its call at once, and the driver of a
                // sync that ends takes the run straight back.
                self.shared.park(run, self.id);
                if self.shared.io.has_posted() {
                    // A sync this caller is not to run: the dispatcher runs it.
                    self.shared.wake_dispatcher();
                }
                break;
            };
            // Run the posted I/O (the leader's sync) here, with the run parked meanwhile: a call
            // that arrives during the sync takes the run and stages into the next group, and
            // the run's wakes go to the dispatcher (see `BUSY`).
            self.shared.park(run, self.id);
            if self.poll_again.busy() {
                self.shared.wake_dispatcher();
            }
            RUNNING_OWN_IO.set(true);
            match self.run_io {
                RunIo::InPlace => run_in_place(posted, &self.shared.io),
                RunIo::Here | RunIo::OnIoThread => posted.run_here(),
            }
            RUNNING_OWN_IO.set(false);
            self.poll_again.done_busy();
            self.run = self.shared.reclaim();
        }
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| self.answered(answer))
    }

    /// The I/O the run just posted, if this driver is to run it: a lone caller runs its own
    /// sync (no wake-up at all), and a thread whose call awaits a sync runs any (it would only
    /// wait otherwise, and handing the sync over costs a wake-up on the group's path). Other
    /// callers leave it to the dispatcher: a call that does not await a sync (`stats`, a
    /// non-durable commit) must not wait for one, and a tokio task would block its worker. A
    /// current-thread runtime's task sends the I/O to the I/O thread.
    fn posted_io_to_run_here(&self) -> Option<PostedIo> {
        match self.run_io {
            RunIo::OnIoThread => {
                self.shared.io.send_posted();
                None
            }
            RunIo::Here if self.awaits_sync || self.shared.alone() => {
                self.shared.io.take_posted_in_order()
            }
            RunIo::InPlace if self.shared.alone() => self.shared.io.take_posted_in_order(),
            RunIo::Here | RunIo::InPlace => None,
        }
    }
}

/// The waker a [`Drive`] polls its run with. A wake that comes while the `Drive` is being
/// polled (the run woke itself: the sync it ran here finished, or it sent an answer) only
/// marks the poll to be repeated; later wakes go to the executor's waker. Passing every wake
/// on made tokio end each commit's poll by requeueing the task and waking an idle worker for
/// it (an eventfd write and a context switch per commit).
struct PollAgain {
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
const BUSY: u8 = 3;

thread_local! {
    /// This thread is a driver running its run's I/O (see [`BUSY`]).
    static RUNNING_OWN_IO: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl PollAgain {
    fn new(dispatcher: Arc<DispatcherWake>) -> PollAgain {
        PollAgain {
            state: AtomicU8::new(IDLE),
            executor: futures::task::AtomicWaker::new(),
            dispatcher,
        }
    }

    /// A wake came during this pass; the pass goes on as if it had not (polling again).
    fn take_woken(&self) -> bool {
        self.state
            .compare_exchange(WOKEN, POLLING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The driver is about to run I/O; `true` if a wake came since [`Self::take_woken`].
    fn busy(&self) -> bool {
        self.state.swap(BUSY, Ordering::SeqCst) == WOKEN
    }

    fn done_busy(&self) {
        self.state.store(POLLING, Ordering::SeqCst);
    }

    fn begin(&self, executor: &Waker) {
        self.executor.register(executor);
        self.state.store(POLLING, Ordering::SeqCst);
    }

    /// Ends a pass; `true` if the run was woken during it (the pass should be repeated, and
    /// the state is polling again), `false` if not (wakes go to the executor from now on).
    fn end_pass(&self) -> bool {
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
    fn finish(&self) {
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

impl<T> Drop for Drive<'_, T> {
    /// A caller that leaves (answered, or its future dropped mid-run) hands the run to the
    /// dispatcher if the run's wakes would otherwise come to it: the calls in the run, its own
    /// included, still complete (see the module doc).
    fn drop(&mut self) {
        if let Some(departures) = self.departures.take() {
            self.answer.close();
            if self.answer.try_recv().is_ok() {
                departures.left();
            }
        }
        if self.run.is_some() {
            self.hand_off();
        } else if self.shared.parked_by(self.id) {
            self.shared.wake_dispatcher();
        }
    }
}

/// Runs posted I/O on this tokio worker, inside `block_in_place`. Where tokio refuses that
/// (a `LocalSet`, say, which `RunIo::for_this_caller` cannot tell apart) it panics before
/// running anything: the work then goes to the I/O thread instead.
fn run_in_place(posted: PostedIo, io: &IoThread) {
    let mut posted = Some(posted);
    let refused = catch_unwind(AssertUnwindSafe(|| {
        tokio::task::block_in_place(|| posted.take().map(PostedIo::run_here))
    }))
    .is_err();
    if let (true, Some(posted)) = (refused, posted) {
        io.send(posted);
    }
}

/// Polls `run` to its end on this thread, sending the I/O it posts to the I/O thread after
/// every poll: how the dispatcher instantiates the component and opens the log, before any
/// caller can drive the instance.
fn block_on_sending_io<F: Future>(run: F, io: &IoThread) -> F::Output {
    let mut run = std::pin::pin!(run);
    futures::executor::block_on(std::future::poll_fn(|cx| {
        let polled = run.as_mut().poll(cx);
        if polled.is_pending() {
            io.send_posted();
        }
        polled
    }))
}

impl Drop for AsyncSandbox {
    fn drop(&mut self) {
        self.shared.wake.notify(|w| w.closing = true);
        if let Some(thread) = self.dispatcher.take() {
            let _ = thread.join();
        }
    }
}

/// The dispatcher thread, once the log is open: serves the instance whenever a run it parked
/// wakes or a caller leaves a run to it, until the handle is dropped and nothing is in flight.
fn dispatch(shared: &Shared) {
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

/// Turns a guest call's outcome into the caller's, noting a trap.
fn answer<T, U>(
    result: wasmtime::Result<Result<T, wit::WalError>>,
    map: impl FnOnce(T) -> U,
) -> Result<U, WalError> {
    match result {
        Ok(Ok(value)) => Ok(map(value)),
        Ok(Err(err)) => Err(from_wit_error(err)),
        Err(trap) => Err(trap_error(trap).into()),
    }
}

/// A started guest call. It resolves to its answer, which the session sends (see the loop).
type Task<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// A finished guest call's answers, not yet sent to their callers. Sending them says what they
/// answered.
type Answer = Box<dyn FnOnce() -> Sent + Send>;

/// What sending one guest call's answers did.
struct Sent {
    /// How many calls they answered.
    calls: usize,
    /// The component broke the interface's contract in a way wasmtime cannot see (it is not
    /// Stele's guest, or it is broken). Its state is then unknown, so the instance stops: the
    /// session ends with this error, and every later call gets it.
    broken: Option<SandboxError>,
}

fn answer_with<T: Send + 'static>(reply: Reply<T>, result: Result<T, WalError>) -> Answer {
    Box::new(move || {
        reply.send(result);
        Sent {
            calls: 1,
            broken: None,
        }
    })
}

/// Sends each caller of a `commit-batches-durable` call its own batch's outcome. A trap
/// answers every caller with it, and so does a component that answers a different number of
/// batches than it was given: which batch an outcome belongs to is then unknown, and so is
/// what the component made durable, so that also stops the instance.
fn answer_batches(
    replies: Vec<Reply<Range<LogSeq>>>,
    result: wasmtime::Result<Vec<Result<wit::SeqRange, wit::WalError>>>,
) -> Sent {
    let calls = replies.len();
    let mut broken = None;
    let outcomes: Result<_, WalError> = match result {
        Ok(outcomes) if outcomes.len() == calls => Ok(outcomes),
        Ok(outcomes) => {
            let error = SandboxError::Trapped(format!(
                "the component answered {} outcomes for {calls} batches",
                outcomes.len()
            ));
            broken = Some(error.clone());
            Err(error.into())
        }
        Err(trap) => Err(trap_error(trap).into()),
    };
    match outcomes {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                reply.send(answer(Ok(outcome), from_wit_range));
            }
        }
        Err(error) => {
            for reply in replies {
                reply.send(Err(error.clone()));
            }
        }
    }
    Sent { calls, broken }
}

/// Instantiates the component in `store` and creates or opens the log: the session every
/// later call is served in.
fn open_session(
    runtime_engine: &'static Runtime,
    mut store: Store<GuestState>,
    io: &IoThread,
    path: String,
    options: WalOptions,
    create: bool,
    queue: mpsc::UnboundedReceiver<Request>,
) -> Result<(Box<Session>, Recovery), WalError> {
    let bindings: EngineAsync =
        block_on_sending_io(runtime_engine.instantiate_async_in(&mut store), io)?;
    let started = block_on_sending_io(
        store.run_concurrent(async |acc| {
            let writer_api = bindings.stele_log_wal_async().writer();
            let wit_opts = wit_options(options);
            if create {
                writer_api
                    .call_create(acc, path.clone(), wit_opts)
                    .await
                    .map(|r| r.map(|w| (w, Recovery::new_log(options.first_seq, 0))))
            } else {
                writer_api
                    .call_open(acc, path.clone(), wit_opts)
                    .await
                    .map(|r| r.map(|(w, rec)| (w, from_wit_recovery(rec))))
            }
        }),
        io,
    );
    let started = started.and_then(|r| r);
    let (writer, recovery) = answer(started, |x| x)?;
    Ok((
        Box::new(Session {
            store,
            bindings,
            writer,
            queue,
            max_group_bytes: options.resolved_max_group_bytes(),
        }),
        recovery,
    ))
}

impl Session {
    /// A run of this session: serves every request it finds queued, until nothing is queued
    /// or in flight.
    fn run(
        self: Box<Self>,
        calls_outstanding: Arc<AtomicUsize>,
        departures: Arc<Departures>,
    ) -> Run {
        Box::pin(HeldForDepartures {
            departures,
            run: Box::pin(async move {
                let mut session = self;
                let outcome = session.serve(&calls_outstanding).await;
                (session, outcome)
            }),
        })
    }

    /// `Err` when the instance can no longer run: it trapped (the trap, typed), or it broke the
    /// interface's contract in a way wasmtime cannot see (see [`Sent::broken`]).
    async fn serve(&mut self, calls_outstanding: &AtomicUsize) -> Result<(), SandboxError> {
        let Session {
            store,
            bindings,
            writer,
            queue,
            max_group_bytes,
        } = self;
        let writer = *writer;
        let max_group_bytes = *max_group_bytes;
        let outcome = store
            .run_concurrent(async |acc| {
                let writer_api = &bindings.stele_log_wal_async().writer();
                let mut in_flight: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
                loop {
                    let first = if in_flight.is_empty() {
                        match queue.try_recv() {
                            Ok(request) => request,
                            // Nothing queued, nothing in flight: give the instance back.
                            Err(_) => return Ok(()),
                        }
                    } else {
                        tokio::select! {
                            biased;
                            Some(first) = in_flight.next() => {
                                // A group's callers finish about one per turn of the store.
                                // Collect them all (turns continue while they bring answers; at
                                // most one per call in flight, no timer), then answer them
                                // together: callers answered in one burst come back together
                                // and stage into one group, where answers trickled out between
                                // guest turns would come back staggered.
                                let mut answers = vec![first];
                                for _ in 0..in_flight.len() {
                                    tokio::task::yield_now().await;
                                    let before = answers.len();
                                    while let Some(Some(more)) = in_flight.next().now_or_never() {
                                        answers.push(more);
                                    }
                                    if answers.len() == before {
                                        break;
                                    }
                                }
                                let mut broken = None;
                                for send in answers {
                                    let sent = send();
                                    calls_outstanding.fetch_sub(sent.calls, Ordering::SeqCst);
                                    broken = broken.or(sent.broken);
                                }
                                match broken {
                                    Some(error) => return Err(error),
                                    None => continue,
                                }
                            }
                            Some(request) = queue.recv() => request,
                        }
                    };
                    // Start everything already queued before the guest runs again: a gathering
                    // leader then sees all of them staged in its first round.
                    let queued = std::iter::from_fn(|| queue.try_recv().ok());
                    acc.with(|mut access| access.data_mut().touch());
                    let requests = std::iter::once(first).chain(queued);
                    for call in gather_durable_commits(requests, max_group_bytes) {
                        in_flight.push(start(acc, writer_api, writer, call));
                    }
                }
            })
            .await;
        outcome.map_err(trap_error)?
    }
}

/// What one guest call serves: one request, or the durable commits of several callers.
enum Call {
    One(Request),
    DurableBatches(DurableBatches),
}

/// Durable commits of several callers that reached the instance together, for one
/// `commit-batches-durable` call. Each caller's batch keeps its own seqs and its own answer;
/// what the gathering saves is a guest task per caller (about 16 µs of the async ABI's CPU
/// each, on the group's critical path).
struct DurableBatches {
    batches: Vec<Vec<wit::CommitRecord>>,
    replies: Vec<Reply<Range<LogSeq>>>,
    encoded_bytes: usize,
}

/// Groups the non-empty durable commits among `requests` into calls of at most one group's
/// worth of records (more would be split across groups anyway, and each call's lifted copy in
/// the guest's memory stays bounded by the group bound); the other requests are started as
/// they are, in their order. An empty batch stays a call of its own: alone, it is answered at
/// once, without waiting for anyone's group.
fn gather_durable_commits(
    requests: impl Iterator<Item = Request>,
    max_group_bytes: usize,
) -> Vec<Call> {
    let mut calls = Vec::new();
    // Where in `calls` the durable commits still taking batches are.
    let mut gathering: Option<usize> = None;
    for request in requests {
        let (records, bytes, reply) = match request {
            Request::CommitManyDurable {
                records,
                encoded_bytes,
                reply,
            } if !records.is_empty() => (records, encoded_bytes, reply),
            other => {
                calls.push(Call::One(other));
                continue;
            }
        };
        if let Some(Call::DurableBatches(open)) = gathering.map(|at| &mut calls[at])
            && open.encoded_bytes + bytes <= max_group_bytes
        {
            open.batches.push(records);
            open.replies.push(reply);
            open.encoded_bytes += bytes;
            continue;
        }
        gathering = Some(calls.len());
        calls.push(Call::DurableBatches(DurableBatches {
            batches: vec![records],
            replies: vec![reply],
            encoded_bytes: bytes,
        }));
    }
    // A gathering of one is an ordinary commit.
    calls
        .into_iter()
        .map(|call| match call {
            Call::DurableBatches(mut one) if one.replies.len() == 1 => {
                Call::One(Request::CommitManyDurable {
                    records: one.batches.pop().expect("one batch per reply"),
                    encoded_bytes: one.encoded_bytes,
                    reply: one.replies.pop().expect("one reply"),
                })
            }
            call => call,
        })
        .collect()
}

/// Starts one call as a guest task.
fn start<'a>(
    acc: &'a wasmtime::component::Accessor<GuestState>,
    writer_api: &'a crate::bindings::engine_async::exports::stele::log::wal_async::GuestWriter<'a>,
    writer: ResourceAny,
    call: Call,
) -> Task<'a> {
    let request = match call {
        Call::One(request) => request,
        Call::DurableBatches(DurableBatches {
            batches, replies, ..
        }) => {
            return Box::pin(async move {
                let r = writer_api
                    .call_commit_batches_durable(acc, writer, batches)
                    .await;
                let send: Answer = Box::new(move || answer_batches(replies, r));
                send
            });
        }
    };
    match request {
        Request::CommitManyDurable { records, reply, .. } => Box::pin(async move {
            let r = writer_api
                .call_commit_many_durable(acc, writer, records)
                .await;
            answer_with(reply, answer(r, from_wit_range))
        }),
        Request::Flush { reply } => Box::pin(async move {
            let r = writer_api.call_flush(acc, writer).await;
            answer_with(reply, answer(r, |()| ()))
        }),
        Request::CommitMany { records, reply } => Box::pin(async move {
            let r = writer_api.call_commit_many(acc, writer, records).await;
            answer_with(reply, answer(r, from_wit_range))
        }),
        Request::VisibleRecords {
            first_seq,
            limit,
            reply,
        } => Box::pin(async move {
            let r = writer_api
                .call_visible_records(acc, writer, first_seq, limit)
                .await;
            answer_with(reply, answer(r, from_wit_visible))
        }),
        Request::Retire { through, reply } => Box::pin(async move {
            let r = writer_api
                .call_retire_visible_through(acc, writer, through)
                .await;
            answer_with(reply, answer(r, from_wit_retirement))
        }),
        Request::Stats { reply } => Box::pin(async move {
            let r = writer_api.call_stats(acc, writer).await;
            answer_with(reply, answer(r.map(Ok), from_wit_stats))
        }),
        Request::Checkpoint { through, reply } => Box::pin(async move {
            let r = writer_api.call_checkpoint(acc, writer, through).await;
            answer_with(reply, answer(r, |()| ()).map_err(as_retention_error))
        }),
        Request::TruncateThrough { through, reply } => Box::pin(async move {
            let r = writer_api.call_truncate_through(acc, writer, through).await;
            answer_with(reply, answer(r, from_wit_truncation))
        }),
        Request::Segments { reply } => Box::pin(async move {
            let r = writer_api.call_segments(acc, writer).await;
            answer_with(
                reply,
                answer(r.map(Ok), |seqs: Vec<u64>| {
                    seqs.into_iter().map(LogSeq).collect()
                }),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use stele::wal::record::encoded_len;
    use stele::wal::{DurabilityPolicy, WalWriteError};

    use super::*;
    use crate::fs::{FaultFs, FaultRule, InjectedError, OpKind};

    fn records(payload_bytes: &[usize]) -> Vec<wit::CommitRecord> {
        payload_bytes
            .iter()
            .enumerate()
            .map(|(i, &len)| wit::CommitRecord {
                op: 1,
                payload: vec![i as u8; len],
            })
            .collect()
    }

    fn durable(records: Vec<wit::CommitRecord>) -> Request {
        Request::CommitManyDurable {
            encoded_bytes: records.iter().map(|r| encoded_len(r.payload.len())).sum(),
            records,
            reply: Reply {
                sender: oneshot::channel().0,
                departures: None,
            },
        }
    }

    fn stats() -> Request {
        Request::Stats {
            reply: Reply {
                sender: oneshot::channel().0,
                departures: None,
            },
        }
    }

    /// What each call holds: `None` for a request other than a durable commit, else the
    /// number of records of each batch it holds.
    fn shape(calls: &[Call]) -> Vec<Option<Vec<usize>>> {
        calls
            .iter()
            .map(|call| match call {
                Call::One(Request::CommitManyDurable { records, .. }) => Some(vec![records.len()]),
                Call::One(_) => None,
                Call::DurableBatches(b) => Some(b.batches.iter().map(Vec::len).collect()),
            })
            .collect()
    }

    /// Durable commits that arrive together become one call, up to one group's bytes; an
    /// empty one, a lone one and every other request stay calls of their own, in order.
    #[test]
    fn durable_commits_that_arrive_together_share_a_call() {
        let group = 2 * encoded_len(100);
        let calls = gather_durable_commits(
            [
                durable(records(&[100])),
                stats(),
                durable(records(&[])),
                durable(records(&[100])),
                durable(records(&[1])),
            ]
            .into_iter(),
            group,
        );
        assert_eq!(
            shape(&calls),
            vec![Some(vec![1, 1]), None, Some(vec![0]), Some(vec![1])],
            "the third commit would take the first call past one group"
        );
        assert!(matches!(calls[0], Call::DurableBatches(_)));
        assert!(matches!(calls[3], Call::One(_)), "a gathering of one");
    }

    /// A component that answers fewer outcomes than it was given batches: every caller gets
    /// the same typed error (which batch an outcome belongs to is unknown), and the answer says
    /// the instance is broken, which ends the session (see `Session::serve`).
    #[test]
    fn a_miscounted_batch_answer_fails_every_caller_and_breaks_the_instance() {
        let (replies, answers): (Vec<_>, Vec<_>) = (0..3)
            .map(|_| {
                let (sender, answer) = oneshot::channel();
                (
                    Reply {
                        sender,
                        departures: None,
                    },
                    answer,
                )
            })
            .unzip();
        let one_outcome = vec![Ok(wit::SeqRange { start: 0, end: 1 })];
        let sent = answer_batches(replies, Ok(one_outcome));
        assert_eq!(sent.calls, 3);
        let Some(SandboxError::Trapped(why)) = sent.broken.clone() else {
            panic!("a miscount must break the instance, got {:?}", sent.broken);
        };
        assert_eq!(why, "the component answered 1 outcomes for 3 batches");
        for mut answer in answers {
            let got = answer.try_recv().expect("every caller is answered");
            assert_eq!(
                got,
                Err(WalError::Sandbox(SandboxError::Trapped(why.clone())))
            );
        }
    }

    /// A session on `fault` with the log `g` created under `options`.
    fn session(fault: &FaultFs, options: WalOptions) -> (Box<Session>, IoThread) {
        let runtime = Runtime::get().unwrap();
        let store = runtime
            .store_for_async(Arc::new(fault.clone()), SandboxLimits::default())
            .unwrap();
        let io = store.data().stele.io_thread().cloned().unwrap();
        let (_requests, queue) = mpsc::unbounded_channel();
        let (session, _) =
            open_session(runtime, store, &io, "g".into(), options, true, queue).unwrap();
        (session, io)
    }

    fn commit_batches(
        session: &mut Session,
        io: &IoThread,
        batches: Vec<Vec<wit::CommitRecord>>,
    ) -> Vec<Result<Range<LogSeq>, WalError>> {
        let Session {
            store,
            bindings,
            writer,
            ..
        } = session;
        let writer = *writer;
        let outcomes = block_on_sending_io(
            store.run_concurrent(async |acc| {
                let api = bindings.stele_log_wal_async().writer();
                api.call_commit_batches_durable(acc, writer, batches).await
            }),
            io,
        );
        let outcomes = outcomes.unwrap().unwrap();
        outcomes
            .into_iter()
            .map(|outcome| answer(Ok(outcome), from_wit_range))
            .collect()
    }

    /// The payload sizes of the log `g` as a power loss now would leave it: only what was
    /// synced.
    fn payload_lens_after_power_loss(fault: &FaultFs) -> Vec<usize> {
        let power_lost: Arc<dyn Vfs> =
            Arc::new(fault.crash(crate::fs::CrashPlan::KeepPrefix { ops: 0 }));
        let (recovered, _) = crate::read_wal(power_lost, "g", crate::Mode::Native).unwrap();
        recovered.iter().map(|r| r.payload.len()).collect()
    }

    fn seqs(range: Range<u64>) -> Result<Range<LogSeq>, WalError> {
        Ok(LogSeq(range.start)..LogSeq(range.end))
    }

    /// Each batch of a gathered call is staged on its own, as its own call would be: one the
    /// retention bound refuses stages nothing and takes no seqs, the batches around it are
    /// durable, and an empty one gets its place.
    #[test]
    fn gathered_batches_keep_their_own_outcomes() {
        let fault = FaultFs::new();
        let options = WalOptions {
            retained_bytes_max: encoded_len(400) + encoded_len(300) + 2 * encoded_len(50),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        let (mut session, io) = session(&fault, options);
        let outcomes = commit_batches(
            &mut session,
            &io,
            vec![
                records(&[400]),
                records(&[600]),
                records(&[300]),
                records(&[]),
                records(&[50, 50]),
            ],
        );
        assert_eq!(outcomes[0], seqs(0..1));
        assert!(
            matches!(
                outcomes[1],
                Err(WalError::Write(WalWriteError::RetentionFull { .. }))
            ),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[2..], [seqs(1..2), seqs(2..2), seqs(2..4)]);
        drop(session);
        assert_eq!(
            payload_lens_after_power_loss(&fault),
            [400, 300, 50, 50],
            "what was acknowledged, and only that"
        );
    }

    /// Gathered batches can span two groups: when the second group's sync fails, the batch of
    /// the first (durable) is acknowledged and the later one fails; the writer is poisoned.
    #[test]
    fn a_failed_group_fails_only_the_batches_in_it() {
        let fault = FaultFs::new();
        let options = WalOptions {
            max_group_bytes: Some(encoded_len(200) + 10),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        let (mut session, io) = session(&fault, options);
        fault.inject(FaultRule {
            op: OpKind::Sync,
            nth: fault.count(OpKind::Sync) + 2,
            error: InjectedError::Io,
        });
        let outcomes = commit_batches(&mut session, &io, vec![records(&[200]), records(&[200])]);
        assert_eq!(outcomes[0], seqs(0..1), "its group's sync returned");
        assert!(
            matches!(
                outcomes[1],
                Err(WalError::Write(WalWriteError::Failed { .. }))
            ),
            "{:?}",
            outcomes[1]
        );
        let later = commit_batches(&mut session, &io, vec![records(&[1])]);
        assert!(
            matches!(
                later[0],
                Err(WalError::Write(WalWriteError::Poisoned { .. }))
            ),
            "{:?}",
            later[0]
        );
        drop(session);
        assert_eq!(
            payload_lens_after_power_loss(&fault),
            [200],
            "the acknowledged record survives"
        );
    }
}
