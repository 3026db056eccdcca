//! Sandboxed mode on the async-ABI component: one instance, many concurrent callers.
//!
//! `Store::run_concurrent` owns the store while guest tasks are in flight. A [`Run`] is one
//! such serving: a future that owns the [`Session`] (the store and the request queue), starts
//! every request it finds queued, and gives the session back once nothing is queued or in
//! flight. Whoever polls a run is its *driver*; a run may change drivers between polls:
//!
//! - **A lone caller** (no other call outstanding, the instance idle) drives the run itself,
//!   on its own thread or tokio task, and runs the I/O the run posts ([`IoThread`]) itself too.
//!   It saves every wake-up of a round trip through other threads: two to the dispatcher and
//!   two to the I/O thread, 38 µs each on this 2-core VM. Tokio tasks at N=1 went from
//!   0.41x-0.53x native to 0.70x-0.80x.
//! - **The dispatcher thread**, woken by a caller that did not drive, drives until nothing is
//!   queued or in flight, and sends the I/O to the instance's I/O thread, so that it keeps
//!   serving while a sync runs.
//!
//! The hand-offs keep the instance open to every caller at all times:
//! - While a lone caller runs a sync itself, its run is *parked* ([`Instance::Parked`]): a call
//!   that arrives meanwhile wakes the dispatcher, which takes the run over, so the new call
//!   stages into the next group (and `stats` answers) during the sync. The lone caller takes
//!   the run back after the sync unless the dispatcher did.
//! - Once a lone caller has its own answer, it parks whatever is still in flight and wakes the
//!   dispatcher: it does not go on serving others.
//! - A lone caller whose future is dropped mid-run parks the run the same way.
//!
//! Single-record commits travel as one-record batches, so there is one request kind per
//! behaviour. Durable calls (`commit-many-durable`, `flush`) become concurrent guest tasks:
//! while one leads and awaits the host's sync (on the I/O thread, or its lone caller's), the run
//! starts the next requests, which stage into the next group. (Small writes run inline: see
//! `WRITE_INLINE_BYTES_MAX` in `vfs_import`. Every export of `wal-async` is an `async func`: a
//! store with async host functions accepts only async-lifted calls.)
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
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
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

use crate::convert::with_async::{
    as_retention_error, from_wit_error, from_wit_range, from_wit_recovery, from_wit_retirement,
    from_wit_stats, from_wit_truncation, from_wit_visible, wit_options,
};
use crate::io_thread::{IoThread, PostedIo};
use crate::runtime::bindings_async::EngineAsync;
use crate::runtime::bindings_async::exports::stele::log::wal as wit;
use crate::runtime::{GuestState, Runtime, SandboxLimits, trap_error};
use crate::{SandboxError, WalError};

type Reply<T> = oneshot::Sender<Result<T, WalError>>;

pub(crate) enum Request {
    CommitManyDurable {
        records: Vec<wit::CommitRecord>,
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
    /// Wakes the dispatcher thread: a caller sent a request it does not drive, or the handle
    /// was dropped.
    wake: Mutex<Wake>,
    woken: Condvar,
}

/// Where the instance is.
enum Instance {
    /// Nobody is serving it: the next driver starts a run.
    Idle(Box<Session>),
    /// A run with calls in flight that nobody is polling: its lone caller is running the run's
    /// I/O itself (and takes it back after), or has its answer and left the rest to the
    /// dispatcher.
    Parked(Run),
    /// Someone is polling a run (or the log is still being opened).
    Driven,
    /// The instance trapped; `Shared::stopped` says why.
    Stopped,
}

/// A session being served: owns it, and gives it back with the outcome once nothing is queued
/// or in flight. `Send`, so that it can change drivers between polls.
type Run = Pin<Box<dyn Future<Output = (Box<Session>, Result<(), SandboxError>)> + Send>>;

#[derive(Default)]
struct Wake {
    pending: bool,
    closing: bool,
}

/// The instance and everything needed to serve it, handed from thread to thread.
struct Session {
    store: Store<GuestState>,
    bindings: EngineAsync,
    writer: ResourceAny,
    queue: mpsc::UnboundedReceiver<Request>,
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
            .io
            .clone()
            .expect("store_for_async gives the store an I/O thread");
        let (requests, queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            requests,
            calls_outstanding: Arc::new(AtomicUsize::new(0)),
            instance: Mutex::new(Instance::Driven),
            io,
            stopped: Mutex::new(None),
            wake: Mutex::new(Wake::default()),
            woken: Condvar::new(),
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
        self.drive(make, RunIo::for_this_caller())?.await
    }

    /// [`Self::request`] for synchronous callers (threads). It blocks the calling thread, and
    /// drives the instance on it when the call is alone and the instance idle. Inside a tokio
    /// runtime (where it must not be called; use `AsyncWal` there) it drives as a task would,
    /// rather than panic.
    pub(crate) fn request_blocking<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, WalError> {
        futures::executor::block_on(self.drive(make, RunIo::for_this_caller())?)
    }

    /// Queues a request and decides who serves it: this caller, if no other call is
    /// outstanding and the instance is idle; the dispatcher otherwise.
    fn drive<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
        run_io: RunIo,
    ) -> Result<Drive<'_, T>, WalError> {
        let (reply, answer) = oneshot::channel();
        let alone = self.shared.send(make(reply))?;
        let run = if alone { self.shared.take_run() } else { None };
        if run.is_none() {
            self.shared.wake_dispatcher(|w| w.pending = true);
        }
        Ok(Drive {
            shared: &self.shared,
            run,
            answer,
            run_io,
            poll_again: Arc::default(),
        })
    }
}

impl Shared {
    /// Queues a request; `true` when no other call was outstanding.
    fn send(&self, request: Request) -> Result<bool, WalError> {
        let others = self.calls_outstanding.fetch_add(1, Ordering::SeqCst);
        if self.requests.send(request).is_err() {
            self.calls_outstanding.fetch_sub(1, Ordering::SeqCst);
            return Err(self.stopped_error());
        }
        Ok(others == 0)
    }

    fn wake_dispatcher(&self, set: impl FnOnce(&mut Wake)) {
        set(&mut lock(&self.wake));
        self.woken.notify_one();
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
            Instance::Parked(run) => Some(run),
            Instance::Idle(session) if start_idle => {
                Some(session.run(self.calls_outstanding.clone()))
            }
            other => {
                *instance = other;
                None
            }
        }
    }

    fn park(&self, run: Run) {
        *lock(&self.instance) = Instance::Parked(run);
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

    /// The dispatcher's turn: drives the instance on this thread if nobody else does, until
    /// nothing is queued or in flight. A request sent while a run was ending, by a caller that
    /// found the instance driven, would wait for nobody: so after a run, look again.
    fn serve_until_idle(&self) {
        while let Some(run) = self.take_run() {
            let (session, outcome) = block_on_sending_io(run, &self.io);
            self.finish(session, outcome);
            if self.calls_outstanding.load(Ordering::SeqCst) == 0 {
                return;
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

/// One caller's wait for its answer, driving the instance's run meanwhile if it holds it.
struct Drive<'a, T> {
    shared: &'a Shared,
    run: Option<Run>,
    answer: oneshot::Receiver<Result<T, WalError>>,
    run_io: RunIo,
    poll_again: Arc<PollAgain>,
}

impl<T> Drive<'_, T> {
    /// Leaves the run, with whatever is still in flight in it, to the dispatcher.
    fn hand_off(&mut self) {
        if let Some(run) = self.run.take() {
            self.shared.io.send_posted();
            self.shared.park(run);
            self.shared.wake_dispatcher(|w| w.pending = true);
        }
    }

    fn answered(
        &self,
        answer: Result<Result<T, WalError>, oneshot::error::RecvError>,
    ) -> Result<T, WalError> {
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
    /// One pass: drives the run until it needs something to happen, then looks at the answer.
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, WalError>> {
        while let Some(run) = self.run.as_mut() {
            if let Poll::Ready((session, outcome)) = run.as_mut().poll(cx) {
                self.run = None;
                self.shared.finish(session, outcome);
                // A call sent as the run was ending found the instance driven, and left it to
                // this driver: pass it on.
                if self.shared.calls_outstanding.load(Ordering::SeqCst) > 0 {
                    self.shared.wake_dispatcher(|w| w.pending = true);
                }
                break;
            }
            if let Poll::Ready(answer) = Pin::new(&mut self.answer).poll(cx) {
                // This caller is done; it does not go on serving the others.
                self.hand_off();
                return Poll::Ready(self.answered(answer));
            }
            let posted = match self.run_io {
                RunIo::OnIoThread => None,
                RunIo::Here | RunIo::InPlace => self.shared.io.take_posted(),
            };
            let Some(posted) = posted else {
                self.shared.io.send_posted();
                return Poll::Pending;
            };
            // Run the posted I/O (the leader's sync) here, with the run parked meanwhile: a call
            // that arrives during the sync wakes the dispatcher, which takes the run over and
            // stages that call into the next group.
            let run = self.run.take().expect("the loop holds a run");
            self.shared.park(run);
            match self.run_io {
                RunIo::InPlace => run_in_place(posted, &self.shared.io),
                RunIo::Here | RunIo::OnIoThread => posted.run_here(),
            }
            self.run = self.shared.reclaim();
        }
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| self.answered(answer))
    }
}

/// The waker a [`Drive`] polls its run with. A wake that comes while the `Drive` is being
/// polled (the run woke itself: the sync it ran here finished, or it sent an answer) only
/// marks the poll to be repeated; later wakes go to the executor's waker. Passing every wake
/// on made tokio end each commit's poll by requeueing the task and waking an idle worker for
/// it (an eventfd write and a context switch per commit).
#[derive(Default)]
struct PollAgain {
    state: AtomicU8,
    executor: futures::task::AtomicWaker,
}

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;

impl PollAgain {
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
        if let Err(IDLE) =
            self.state
                .compare_exchange(POLLING, WOKEN, Ordering::SeqCst, Ordering::SeqCst)
        {
            self.executor.wake();
        }
    }
}

impl<T> Drop for Drive<'_, T> {
    /// A caller that stops waiting mid-run leaves the run to the dispatcher: the calls in it,
    /// its own included, still complete (see the module doc).
    fn drop(&mut self) {
        self.hand_off();
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
/// every poll: the dispatcher's way, which keeps the instance served while a sync runs.
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
        self.shared.wake_dispatcher(|w| w.closing = true);
        if let Some(thread) = self.dispatcher.take() {
            let _ = thread.join();
        }
    }
}

/// The dispatcher thread, once the log is open: serves the instance whenever a caller wakes
/// it, until the handle is dropped.
fn dispatch(shared: &Shared) {
    loop {
        let closing = {
            let mut wake = lock(&shared.wake);
            while !wake.pending && !wake.closing {
                wake = shared
                    .woken
                    .wait(wake)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            wake.pending = false;
            wake.closing
        };
        shared.serve_until_idle();
        if closing {
            // Runs end with nothing in flight, so nothing staged is abandoned here.
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

/// A finished guest call's answer, not yet sent to its caller.
type Answer = Box<dyn FnOnce() + Send>;

fn answer_with<T: Send + 'static>(reply: Reply<T>, result: Result<T, WalError>) -> Answer {
    Box::new(move || {
        // A caller that stopped waiting only stops listening: nothing to undo.
        let _ = reply.send(result);
    })
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
        }),
        recovery,
    ))
}

impl Session {
    /// A run of this session: serves every request it finds queued, until nothing is queued
    /// or in flight.
    fn run(self: Box<Self>, calls_outstanding: Arc<AtomicUsize>) -> Run {
        Box::pin(async move {
            let mut session = self;
            let outcome = session.serve(&calls_outstanding).await;
            (session, outcome)
        })
    }

    /// `Err` (the trap, typed) when the instance can no longer run.
    async fn serve(&mut self, calls_outstanding: &AtomicUsize) -> Result<(), SandboxError> {
        let Session {
            store,
            bindings,
            writer,
            queue,
        } = self;
        let writer = *writer;
        let outcome = store
            .run_concurrent(async |acc| {
                let writer_api = &bindings.stele_log_wal_async().writer();
                let mut in_flight: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
                loop {
                    let first = if in_flight.is_empty() {
                        match queue.try_recv() {
                            Ok(request) => request,
                            // Nothing queued, nothing in flight: give the instance back.
                            Err(_) => break,
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
                                for send in answers {
                                    send();
                                    calls_outstanding.fetch_sub(1, Ordering::SeqCst);
                                }
                                continue;
                            }
                            Some(request) = queue.recv() => request,
                        }
                    };
                    // Start everything already queued before the guest runs again: a gathering
                    // leader then sees all of them staged in its first round.
                    let queued = std::iter::from_fn(|| queue.try_recv().ok());
                    acc.with(|mut access| access.data_mut().touch());
                    for request in std::iter::once(first).chain(queued) {
                        in_flight.push(start(acc, writer_api, writer, request));
                    }
                }
            })
            .await;
        outcome.map_err(trap_error)
    }
}

/// Starts one request as a guest task.
fn start<'a>(
    acc: &'a wasmtime::component::Accessor<GuestState>,
    writer_api: &'a crate::runtime::bindings_async::exports::stele::log::wal_async::GuestWriter<'a>,
    writer: ResourceAny,
    request: Request,
) -> Task<'a> {
    match request {
        Request::CommitManyDurable { records, reply } => Box::pin(async move {
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
