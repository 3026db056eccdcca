//! The push log's session in the async instance: requests from [`crate::PushLog`] become
//! `push-log-async` calls, each a guest task of its own ([`serve_each`]): while a push awaits
//! the host's sync, the run starts the next requests (a scan, a count, the next push, which
//! waits in the guest for the first to finish). No grouping policy: pushes to one log are
//! applied one at a time.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use stele::push_log::{CompactionPolicy, CompactionReport, ReservedSection};
use stele::recovery::LogEnd;
use stele::vfs::Vfs;
use tokio::sync::mpsc;
use wasmtime::Store;
use wasmtime::component::{Accessor, ResourceAny};

use super::convert::with_async::{
    from_wit_frames, from_wit_push_log_error, from_wit_report, from_wit_scan_end, from_wit_section,
    wit_policy,
};
use super::error::PushLogCallError;
use crate::embed::bindings::engine_async::EngineAsync;
use crate::embed::bindings::engine_async::exports::stele::log::push_log as wit;
use crate::sandbox::guest_calls::{GuestCalls, Task, answer_with, serve_each};
use crate::sandbox::instance::{Reply, Run, Served};
use crate::sandbox::posted_io::block_on_running_io;
use crate::sandbox::runtime::{GuestState, SandboxLimits, trap_error};
use crate::sandbox::start::start_session;
use crate::sandbox::store_driver::StoreDriver;
use crate::sandbox::{SandboxError, lock};

/// Where a push-log call's answer goes.
pub(crate) type PushLogReply<T> = Reply<T, PushLogCallError>;

pub(crate) enum PushLogRequest {
    Append {
        batch_ipc: Vec<u8>,
        reply: PushLogReply<u64>,
    },
    Scan {
        reply: PushLogReply<ResourceAny>,
    },
    NextFrames {
        scan: ResourceAny,
        frames_max: u32,
        reply: PushLogReply<Vec<(u64, Vec<u8>)>>,
    },
    ScanEnd {
        scan: ResourceAny,
        reply: PushLogReply<LogEnd>,
    },
    /// Releases the scan's file and window in the guest; the handle itself is dropped once
    /// the run ends (no handle can be dropped from inside one).
    CloseScan {
        scan: ResourceAny,
        reply: PushLogReply<()>,
    },
    FrameCount {
        reply: PushLogReply<u64>,
    },
    Compact {
        reply: PushLogReply<CompactionReport>,
    },
    MaybeCompact {
        policy: CompactionPolicy,
        reply: PushLogReply<Option<CompactionReport>>,
    },
    SealSection {
        module_name: String,
        reply: PushLogReply<ReservedSection>,
    },
}

/// The push log's instance and everything needed to serve it, handed from thread to thread.
pub(crate) struct PushLogSession {
    store: Store<GuestState>,
    bindings: EngineAsync,
    log: ResourceAny,
    queue: mpsc::UnboundedReceiver<PushLogRequest>,
    /// Scans closed during a run, whose handles go at its end.
    closed_scans: Arc<Mutex<Vec<ResourceAny>>>,
}

/// A sandboxed push log on the async instance: the store driver serving its session.
pub(crate) type AsyncPushLog = StoreDriver<PushLogSession>;

/// Instantiates the async component and opens the log in it ([`start_session`]).
pub(crate) fn start(
    vfs: Arc<dyn Vfs>,
    path: &str,
    schema_ipc: Vec<u8>,
    limits: SandboxLimits,
) -> Result<AsyncPushLog, PushLogCallError> {
    let path = path.to_owned();
    let (driver, ()) = start_session(vfs, limits, move |mut store, bindings, io, queue| {
        let opened = block_on_running_io(
            store.run_concurrent(async |acc| {
                bindings
                    .stele_log_push_log_async()
                    .log()
                    .call_open(acc, path, schema_ipc)
                    .await
            }),
            io,
        );
        let log = answer(opened.and_then(|r| r), |log| log)?;
        let session = PushLogSession {
            store,
            bindings,
            log,
            queue,
            closed_scans: Arc::default(),
        };
        Ok((Box::new(session), ()))
    })?;
    Ok(driver)
}

impl Served for PushLogSession {
    type Request = PushLogRequest;
    type Error = PushLogCallError;

    fn awaits_sync(request: &PushLogRequest) -> bool {
        matches!(
            request,
            PushLogRequest::Append { .. }
                | PushLogRequest::Compact { .. }
                | PushLogRequest::MaybeCompact { .. }
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

impl PushLogSession {
    async fn serve_queued(&mut self, calls_outstanding: &AtomicUsize) -> Result<(), SandboxError> {
        let calls = Calls {
            bindings: &self.bindings,
            log: self.log,
            closed_scans: &self.closed_scans,
        };
        let queue = &mut self.queue;
        let outcome = self
            .store
            .run_concurrent(async |acc| serve_each(acc, &calls, queue, calls_outstanding).await)
            .await;
        let served = outcome.map_err(trap_error).and_then(|served| served);
        let closed = std::mem::take(&mut *lock(&self.closed_scans));
        for scan in closed {
            scan.resource_drop_async(&mut self.store)
                .await
                .map_err(trap_error)?;
        }
        served
    }
}

/// What one run's guest tasks share.
struct Calls<'s> {
    bindings: &'s EngineAsync,
    log: ResourceAny,
    closed_scans: &'s Mutex<Vec<ResourceAny>>,
}

/// Turns a guest call's outcome into the caller's.
fn answer<T, U>(
    result: wasmtime::Result<Result<T, wit::PushLogError>>,
    map: impl FnOnce(T) -> U,
) -> Result<U, PushLogCallError> {
    match result {
        Ok(Ok(value)) => Ok(map(value)),
        Ok(Err(err)) => Err(from_wit_push_log_error(err)),
        Err(trap) => Err(trap_error(trap).into()),
    }
}

impl GuestCalls for Calls<'_> {
    type Request = PushLogRequest;

    fn start<'a>(&'a self, acc: &'a Accessor<GuestState>, request: PushLogRequest) -> Task<'a> {
        let log_api = self.bindings.stele_log_push_log_async().log();
        let scan_api = self.bindings.stele_log_push_log_async().scan();
        let log = self.log;
        match request {
            PushLogRequest::Append { batch_ipc, reply } => Box::pin(async move {
                let r = log_api.call_append(acc, log, batch_ipc).await;
                answer_with(reply, answer(r, |offset| offset))
            }),
            PushLogRequest::Scan { reply } => Box::pin(async move {
                let r = log_api.call_scan(acc, log).await;
                answer_with(reply, answer(r, |scan| scan))
            }),
            PushLogRequest::NextFrames {
                scan,
                frames_max,
                reply,
            } => Box::pin(async move {
                let r = scan_api.call_next_frames(acc, scan, frames_max).await;
                answer_with(reply, answer(r, from_wit_frames))
            }),
            PushLogRequest::ScanEnd { scan, reply } => Box::pin(async move {
                let r = scan_api.call_end(acc, scan).await;
                answer_with(reply, answer(r.map(Ok), from_wit_scan_end))
            }),
            PushLogRequest::CloseScan { scan, reply } => Box::pin(async move {
                let r = scan_api.call_close(acc, scan).await;
                if r.is_ok() {
                    lock(self.closed_scans).push(scan);
                }
                answer_with(reply, answer(r.map(Ok), |()| ()))
            }),
            PushLogRequest::FrameCount { reply } => Box::pin(async move {
                let r = log_api.call_frame_count(acc, log).await;
                answer_with(reply, answer(r, |n| n))
            }),
            PushLogRequest::Compact { reply } => Box::pin(async move {
                let r = log_api.call_compact(acc, log).await;
                answer_with(reply, answer(r, from_wit_report))
            }),
            PushLogRequest::MaybeCompact { policy, reply } => Box::pin(async move {
                let r = log_api
                    .call_maybe_compact(acc, log, wit_policy(policy))
                    .await;
                answer_with(reply, answer(r, |r| r.map(from_wit_report)))
            }),
            PushLogRequest::SealSection { module_name, reply } => Box::pin(async move {
                let r = log_api.call_seal_section(acc, log, module_name).await;
                answer_with(reply, answer(r, from_wit_section))
            }),
        }
    }
}
