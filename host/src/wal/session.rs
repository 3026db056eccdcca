//! The WAL's session in the async instance: requests from the typed API become `wal-async`
//! calls, and their outcomes go back as answers. Single-record commits travel as one-record
//! batches, so there is one request kind per behaviour. Durable calls (`commit-many-durable`,
//! `flush`) become concurrent guest tasks: while one leads and awaits the host's sync, the run
//! starts the next requests, which stage into the next group. Every export of `wal-async` is an
//! `async func`: a store with async host functions accepts only async-lifted calls.
//!
//! Answers go out in bursts: the calls one group completes finish about one per turn of the
//! store, and the run collects them all before it sends any (turns continue while they bring
//! answers, at most one per call in flight; no timer), so that callers answered together come
//! back together and stage into one group.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use stele::vfs::Vfs;
use stele::wal::{
    LogSeq, Recovery, VisibleRecord, WalOptions, WalRetirement, WalTruncation, WalWriterStats,
};
use tokio::sync::mpsc;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::with_async::{
    as_retention_error, from_wit_error, from_wit_range, from_wit_recovery, from_wit_retirement,
    from_wit_stats, from_wit_truncation, from_wit_visible, wit_batch, wit_options,
};
use super::engine::{Batch, Pending, WalEngine};
use super::error::WalError;
use super::grouping::{AnswerBurst, Call, DurableBatches, gather_durable_commits};
use super::request::{Request, WalReply};
use crate::Mode;
use crate::embed::bindings::engine_async::EngineAsync;
use crate::embed::bindings::engine_async::exports::stele::log::wal as wit;
use crate::embed::io_lane::IoLane;
use crate::sandbox::SandboxError;
use crate::sandbox::guest_calls::{Answer, Sent, Task, answer_with};
use crate::sandbox::instance::{Run, Served};
use crate::sandbox::posted_io::block_on_running_io;
use crate::sandbox::runtime::{GuestState, SandboxLimits, trap_error};
use crate::sandbox::start::start_session;
use crate::sandbox::store_driver::StoreDriver;

/// The WAL's instance and everything needed to serve it, handed from thread to thread.
pub(super) struct WalSession {
    pub(super) store: Store<GuestState>,
    pub(super) bindings: EngineAsync,
    pub(super) writer: ResourceAny,
    pub(super) queue: mpsc::UnboundedReceiver<Request>,
    /// The writer's group bound: how many bytes of durable commits one guest call gathers.
    pub(super) group_bytes_max: usize,
}

/// Turns a guest call's outcome into the caller's, noting a trap.
pub(super) fn answer<T, U>(
    result: wasmtime::Result<Result<T, wit::WalError>>,
    map: impl FnOnce(T) -> U,
) -> Result<U, WalError> {
    match result {
        Ok(Ok(value)) => Ok(map(value)),
        Ok(Err(err)) => Err(from_wit_error(err)),
        Err(trap) => Err(trap_error(trap).into()),
    }
}

/// Sends each caller of a `commit-batches-durable` call its own batch's outcome. A trap
/// answers every caller with it, and so does a component that answers a different number of
/// batches than it was given: which batch an outcome belongs to is then unknown, and so is
/// what the component made durable, so that also stops the instance.
pub(super) fn answer_batches(
    replies: Vec<WalReply<Range<LogSeq>>>,
    result: wasmtime::Result<Vec<Result<wit::SeqRange, wit::WalError>>>,
) -> Sent {
    let calls = replies.len();
    let mut broken = None;
    let outcomes: Result<_, WalError> = match result {
        Ok(outcomes) if outcomes.len() == calls => Ok(outcomes),
        Ok(outcomes) => {
            let error = SandboxError::BrokenContract(format!(
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

/// Creates or opens the log in the instance: the session every later call is served in.
pub(super) fn open_session(
    mut store: Store<GuestState>,
    bindings: EngineAsync,
    io: &IoLane,
    path: String,
    options: WalOptions,
    create: bool,
    queue: mpsc::UnboundedReceiver<Request>,
) -> Result<(Box<WalSession>, Recovery), WalError> {
    let started = block_on_running_io(
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
        Box::new(WalSession {
            store,
            bindings,
            writer,
            queue,
            group_bytes_max: options.resolved_group_bytes_max(),
        }),
        recovery,
    ))
}

impl Served for WalSession {
    type Request = Request;
    type Error = WalError;

    fn awaits_sync(request: &Request) -> bool {
        matches!(
            request,
            Request::CommitManyDurable { .. }
                | Request::Flush { .. }
                | Request::SealActiveSegment { .. }
        )
    }

    fn serve(self: Box<Self>, calls_outstanding: Arc<AtomicUsize>) -> Run<Self> {
        Box::pin(async move {
            let mut session = self;
            let outcome = session.serve_queued(&calls_outstanding).await;
            (session, outcome)
        })
    }
}

impl WalSession {
    /// `Err` when the instance can no longer run: it trapped (the trap, typed), or it broke the
    /// interface's contract in a way wasmtime cannot see (see [`Sent::broken`]).
    async fn serve_queued(&mut self, calls_outstanding: &AtomicUsize) -> Result<(), SandboxError> {
        let WalSession {
            store,
            bindings,
            writer,
            queue,
            group_bytes_max,
        } = self;
        let writer = *writer;
        let group_bytes_max = *group_bytes_max;
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
                                // Collected as one burst (see `AnswerBurst`), then sent.
                                let mut answers = vec![first];
                                let mut burst = AnswerBurst::begin(in_flight.len());
                                while burst.another_turn(answers.len()) {
                                    tokio::task::yield_now().await;
                                    while let Some(Some(more)) = in_flight.next().now_or_never() {
                                        answers.push(more);
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
                    for call in gather_durable_commits(requests, group_bytes_max) {
                        in_flight.push(start(acc, writer_api, writer, call));
                    }
                }
            })
            .await;
        outcome.map_err(trap_error)?
    }
}

/// Starts one call as a guest task.
fn start<'a>(
    acc: &'a wasmtime::component::Accessor<GuestState>,
    writer_api: &'a crate::embed::bindings::engine_async::exports::stele::log::wal_async::GuestWriter<'a>,
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
        Request::SealActiveSegment { reply } => Box::pin(async move {
            let r = writer_api.call_seal_active_segment(acc, writer).await;
            answer_with(reply, answer(r, |sealed| sealed))
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
/// The WAL's engine in the async instance: the store driver serving one WAL session. Dropping
/// it waits for the dispatcher to serve what is queued, and drops the instance.
pub(crate) struct AsyncSandbox(StoreDriver<WalSession>);

impl AsyncSandbox {
    /// Instantiates the async component and creates (`create`) or opens the log in it, on this
    /// thread (which blocks meanwhile, its I/O running here).
    pub(crate) fn start(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        limits: SandboxLimits,
        create: bool,
    ) -> Result<(AsyncSandbox, Recovery), WalError> {
        let path = path.to_owned();
        let (driver, recovery) = start_session(vfs, limits, move |store, bindings, io, queue| {
            open_session(store, bindings, io, path, options, create, queue)
        })?;
        Ok((AsyncSandbox(driver), recovery))
    }

    /// Sends a request and blocks this thread for its answer (see
    /// [`StoreDriver::request_blocking`]).
    fn blocking<T>(&self, make: impl FnOnce(WalReply<T>) -> Request) -> Result<T, WalError> {
        self.0.request_blocking(make)
    }

    /// Sends a request; the returned future awaits its answer (see [`StoreDriver::request`]).
    fn pending<T: Send + 'static>(
        self: Arc<Self>,
        make: impl FnOnce(WalReply<T>) -> Request + Send + 'static,
    ) -> Pending<'static, T> {
        Box::pin(async move { self.0.request(make).await })
    }
}

/// Every call is a request to the session; a thread's call blocks on it, a task's awaits it.
impl WalEngine for AsyncSandbox {
    fn mode(&self) -> Mode {
        Mode::Sandboxed
    }

    fn commit_many(
        &self,
        records: Batch<'_>,
        encoded_bytes: usize,
        durable: bool,
    ) -> Result<Range<LogSeq>, WalError> {
        let records = wit_batch(records);
        self.blocking(|reply| commit_request(records, encoded_bytes, durable, reply))
    }
    fn flush(&self) -> Result<(), WalError> {
        self.blocking(|reply| Request::Flush { reply })
    }
    fn seal_active_segment(&self) -> Result<bool, WalError> {
        self.blocking(|reply| Request::SealActiveSegment { reply })
    }
    fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        self.blocking(|reply| visible_request(first_seq, limit, reply))
    }
    fn retire_visible_through(&self, through: LogSeq) -> Result<WalRetirement, WalError> {
        self.blocking(|reply| Request::Retire {
            through: through.0,
            reply,
        })
    }
    fn stats(&self) -> Result<WalWriterStats, WalError> {
        self.blocking(|reply| Request::Stats { reply })
    }
    fn checkpoint(&self, through: LogSeq) -> Result<(), WalError> {
        self.blocking(|reply| Request::Checkpoint {
            through: through.0,
            reply,
        })
    }
    fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        self.blocking(|reply| Request::TruncateThrough {
            through: through.0,
            reply,
        })
    }
    fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        self.blocking(|reply| Request::Segments { reply })
    }

    fn commit_many_async<'a>(
        self: Arc<Self>,
        records: Batch<'a>,
        encoded_bytes: usize,
        durable: bool,
    ) -> Pending<'a, Range<LogSeq>> {
        // Copied into the request now: the call's future does not borrow the caller's batch.
        let records = wit_batch(records);
        self.pending(move |reply| commit_request(records, encoded_bytes, durable, reply))
    }
    fn flush_async(self: Arc<Self>) -> Pending<'static, ()> {
        self.pending(|reply| Request::Flush { reply })
    }
    fn seal_active_segment_async(self: Arc<Self>) -> Pending<'static, bool> {
        self.pending(|reply| Request::SealActiveSegment { reply })
    }
    fn visible_records_async(
        self: Arc<Self>,
        first_seq: LogSeq,
        limit: usize,
    ) -> Pending<'static, Vec<VisibleRecord>> {
        self.pending(move |reply| visible_request(first_seq, limit, reply))
    }
    fn retire_visible_through_async(
        self: Arc<Self>,
        through: LogSeq,
    ) -> Pending<'static, WalRetirement> {
        self.pending(move |reply| Request::Retire {
            through: through.0,
            reply,
        })
    }
    fn stats_async(self: Arc<Self>) -> Pending<'static, WalWriterStats> {
        self.pending(|reply| Request::Stats { reply })
    }
    fn checkpoint_async(self: Arc<Self>, through: LogSeq) -> Pending<'static, ()> {
        self.pending(move |reply| Request::Checkpoint {
            through: through.0,
            reply,
        })
    }
    fn truncate_through_async(self: Arc<Self>, through: LogSeq) -> Pending<'static, WalTruncation> {
        self.pending(move |reply| Request::TruncateThrough {
            through: through.0,
            reply,
        })
    }
    fn segments_async(self: Arc<Self>) -> Pending<'static, Vec<LogSeq>> {
        self.pending(|reply| Request::Segments { reply })
    }
}

fn commit_request(
    records: Vec<wit::CommitRecord>,
    encoded_bytes: usize,
    durable: bool,
    reply: WalReply<Range<LogSeq>>,
) -> Request {
    match durable {
        true => Request::CommitManyDurable {
            records,
            encoded_bytes,
            reply,
        },
        false => Request::CommitMany { records, reply },
    }
}

/// `limit` is capped at `u32::MAX`, the WIT's width.
fn visible_request(
    first_seq: LogSeq,
    limit: usize,
    reply: WalReply<Vec<VisibleRecord>>,
) -> Request {
    Request::VisibleRecords {
        first_seq: first_seq.0,
        limit: u32::try_from(limit).unwrap_or(u32::MAX),
        reply,
    }
}
