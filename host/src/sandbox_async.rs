//! Sandboxed mode on the async-ABI component: one instance, many concurrent callers.
//!
//! `Store::run_concurrent` owns the store while guest tasks are in flight. Whoever holds the
//! instance ([`Session`]) serves requests in one `run_concurrent`, then puts it back. Two kinds
//! of holder:
//!
//! - **The dispatcher thread**, woken by a caller, serves everything queued and everything that
//!   arrives while calls are in flight, until nothing is queued or in flight. Tokio tasks always
//!   go through it (they cannot block their worker), and so do threads whenever other calls are
//!   outstanding.
//! - **A lone thread**: a synchronous call that finds no other call outstanding and the
//!   instance idle runs its own call on its own thread (with whatever was queued when it
//!   started), then hands anything that arrived meanwhile to the dispatcher. A lone writer so
//!   saves the two wake-ups of a round trip to the dispatcher (38 µs each on this 2-core VM;
//!   measured at N=1, medians of four runs: p50 105 µs above native, from 182 µs); under
//!   concurrency the dispatcher keeps the instance, so groups form as before. Its session takes
//!   no later request, so nothing else can enter the instance while its sync runs: it runs that
//!   sync on its own thread too ([`crate::runtime::GuestState::io_inline`]), saving the round
//!   trip to the I/O thread.
//!
//! Single-record commits travel as one-record batches, so there is one request kind per
//! behaviour. Durable calls (`commit-many-durable`, `flush`) become concurrent guest tasks:
//! while one leads and awaits the host's sync (on the instance's I/O thread), the session
//! starts the next requests, which stage into the next group. (Small writes run inline: see
//! `WRITE_INLINE_BYTES_MAX` in `vfs_import`. Every export of `wal-async` is an `async func`: a
//! store with async host functions accepts only async-lifted calls.)
//!
//! Answers go out in bursts: the calls one group completes finish about one per turn of the
//! store, and the session collects them all before it sends any answer (turns continue while
//! they bring answers, at most one per call in flight; no timer). Callers answered together
//! come back together and stage into one group. Answers sent between guest turns came back
//! staggered, and the first caller back led a group of one: measured at N=64, 0.98x native
//! records/s with threads, against 1.12x with bursts (medians of three runs).
//!
//! A caller that stops waiting (a dropped future) only stops listening: a session never cancels
//! a guest task it started, and never returns the instance with one in flight, so a record
//! staged by it still becomes durable with its group.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

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
    /// The instance while nobody serves it; `None` while a session runs, or for good once the
    /// instance has trapped.
    idle: Mutex<Option<Box<Session>>>,
    /// Why the instance stopped, once it has (a trap).
    stopped: Mutex<Option<SandboxError>>,
    /// Wakes the dispatcher thread: a task sent a request, or the handle was dropped.
    wake: Mutex<Wake>,
    woken: Condvar,
}

#[derive(Default)]
struct Wake {
    pending: bool,
    closing: bool,
}

/// The instance and everything needed to serve it, handed from thread to thread.
struct Session {
    runtime: tokio::runtime::Runtime,
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
    /// dispatcher thread (the caller may be inside a tokio runtime, where blocking on another
    /// is refused).
    pub(crate) fn start(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        limits: SandboxLimits,
        create: bool,
    ) -> Result<(AsyncSandbox, Recovery), WalError> {
        let runtime = Runtime::get()?;
        let calls_outstanding = Arc::new(AtomicUsize::new(0));
        let store = runtime.store_for_async(vfs, limits)?;
        let (requests, queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            requests,
            calls_outstanding,
            idle: Mutex::new(None),
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
                match open_session(runtime, store, path, options, create, queue) {
                    Ok((session, recovery)) => {
                        *lock(&shared_in.idle) = Some(session);
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

    /// Sends a request and awaits its answer; the dispatcher thread serves it, unless a thread
    /// holding the instance does first.
    pub(crate) async fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, WalError> {
        let (reply, answer) = oneshot::channel();
        self.shared.send(make(reply))?;
        self.shared.wake_dispatcher(|w| w.pending = true);
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(self.shared.stopped_error()),
        }
    }

    /// [`Self::request`] for synchronous callers (threads). It blocks the calling thread, and
    /// serves the instance on it when it is idle. Inside a tokio runtime (where it must not be
    /// called; use `AsyncWal` there) it falls back to the dispatcher rather than panic.
    pub(crate) fn request_blocking<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, WalError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return futures::executor::block_on(self.request(make));
        }
        let (reply, answer) = oneshot::channel();
        let alone = self.shared.send(make(reply))?;
        if !(alone && self.shared.serve_lone_call()) {
            self.shared.wake_dispatcher(|w| w.pending = true);
        }
        match answer.blocking_recv() {
            Ok(result) => result,
            Err(_) => Err(self.shared.stopped_error()),
        }
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

    /// The dispatcher's turn: serves the instance on this thread if it is idle, until nothing
    /// is queued or in flight. A request sent while a session was ending, by a caller that found
    /// the instance taken, would wait for nobody: so after putting the instance back, look
    /// again.
    fn serve_until_idle(&self) {
        loop {
            if !self.serve_once(Serve::UntilIdle) {
                return;
            }
            if self.calls_outstanding.load(Ordering::SeqCst) == 0 {
                return;
            }
        }
    }

    /// A lone thread's turn: runs the calls queued now (its own among them) on this thread, if
    /// the instance is idle. `false` if it was not (the dispatcher must serve). Calls that
    /// arrived meanwhile are left to the dispatcher.
    fn serve_lone_call(&self) -> bool {
        if !self.serve_once(Serve::QueuedNow) {
            return false;
        }
        if self.calls_outstanding.load(Ordering::SeqCst) > 0 {
            self.wake_dispatcher(|w| w.pending = true);
        }
        true
    }

    /// One session, if the instance is idle; `false` if it was not.
    fn serve_once(&self, serve: Serve) -> bool {
        let Some(mut session) = lock(&self.idle).take() else {
            return false;
        };
        match session.serve(&self.calls_outstanding, serve) {
            Ok(()) => *lock(&self.idle) = Some(session),
            // The instance is gone. Dropping the session drops the queue, so every caller
            // still waiting gets `stopped_error`.
            Err(error) => *lock(&self.stopped) = Some(error),
        }
        true
    }
}

/// How long a session serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serve {
    /// Until nothing is queued or in flight: the dispatcher.
    UntilIdle,
    /// The requests queued when it starts, to completion: a lone thread.
    QueuedNow,
}

impl Drop for AsyncSandbox {
    fn drop(&mut self) {
        self.shared.wake_dispatcher(|w| w.closing = true);
        if let Some(thread) = self.dispatcher.take() {
            let _ = thread.join();
        }
    }
}

/// The dispatcher thread, once the log is open: serves the instance whenever a task wakes it,
/// until the handle is dropped.
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
            // Sessions end with nothing in flight, so nothing staged is abandoned here.
            drop(lock(&shared.idle).take());
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
type Task<'a> = Pin<Box<dyn Future<Output = Answer> + 'a>>;

/// A finished guest call's answer, not yet sent to its caller.
type Answer = Box<dyn FnOnce()>;

fn answer_with<T: 'static>(reply: Reply<T>, result: Result<T, WalError>) -> Answer {
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
    path: String,
    options: WalOptions,
    create: bool,
    queue: mpsc::UnboundedReceiver<Request>,
) -> Result<(Box<Session>, Recovery), WalError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| SandboxError::Instantiate(format!("dispatcher runtime: {e}")))?;
    let bindings: EngineAsync =
        runtime.block_on(runtime_engine.instantiate_async_in(&mut store))?;
    let started = runtime.block_on(store.run_concurrent(async |acc| {
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
    }));
    let started = started.and_then(|r| r);
    let (writer, recovery) = answer(started, |x| x)?;
    Ok((
        Box::new(Session {
            runtime,
            store,
            bindings,
            writer,
            queue,
        }),
        recovery,
    ))
}

impl Session {
    /// Serves requests as `serve` says. `Err` (the trap, typed) when the instance can no longer
    /// run.
    fn serve(&mut self, calls_outstanding: &AtomicUsize, serve: Serve) -> Result<(), SandboxError> {
        let Session {
            runtime,
            store,
            bindings,
            writer,
            queue,
        } = self;
        let writer = *writer;
        // A lone session takes no request after the ones queued when it starts, so nothing
        // else can use the instance while its I/O runs: run that I/O on this thread, saving a
        // round trip to the I/O thread (two wake-ups) per sync.
        store.data_mut().io_inline = serve == Serve::QueuedNow;
        let outcome = runtime.block_on(store.run_concurrent(async |acc| {
            let writer_api = &bindings.stele_log_wal_async().writer();
            let mut in_flight: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
            let mut accepting = true;
            loop {
                let first = if in_flight.is_empty() {
                    if !accepting {
                        break;
                    }
                    match queue.try_recv() {
                        Ok(request) => request,
                        // Nothing queued, nothing in flight: give the instance back.
                        Err(_) => break,
                    }
                } else {
                    tokio::select! {
                        biased;
                        Some(first) = in_flight.next() => {
                            // A group's callers finish about one per turn of the store. Collect
                            // them all (turns continue while they bring answers; at most one per
                            // call in flight, no timer), then answer them together: callers
                            // answered in one burst come back together and stage into one
                            // group, where answers trickled out between guest turns would come
                            // back staggered.
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
                        Some(request) = queue.recv(), if accepting => request,
                    }
                };
                // Start everything already queued before the guest runs again: a gathering
                // leader then sees all of them staged in its first round.
                let queued = std::iter::from_fn(|| queue.try_recv().ok());
                acc.with(|mut access| access.data_mut().touch());
                for request in std::iter::once(first).chain(queued) {
                    in_flight.push(start(acc, writer_api, writer, request));
                }
                accepting = serve == Serve::UntilIdle;
            }
        }));
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
