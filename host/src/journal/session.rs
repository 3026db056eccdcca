//! The journal's session in the async instance: [`crate::Journal`]'s calls become
//! `journal-async` calls, each a guest task of its own ([`serve_each`]). No grouping policy: a
//! journal's calls are applied one at a time, in the order they reach the guest.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use stele::vfs::Vfs;
use tokio::sync::mpsc;
use wasmtime::Store;
use wasmtime::component::{Accessor, ResourceAny};

use super::convert::with_async::from_wit_journal_error;
use super::error::JournalError;
use crate::embed::bindings::engine_async::EngineAsync;
use crate::embed::bindings::engine_async::exports::stele::log::journal as wit;
use crate::sandbox::SandboxError;
use crate::sandbox::guest_calls::{GuestCalls, Task, answer_with, serve_each};
use crate::sandbox::instance::{Reply, Run, Served};
use crate::sandbox::posted_io::block_on_running_io;
use crate::sandbox::runtime::{GuestState, SandboxLimits, trap_error};
use crate::sandbox::start::start_session;
use crate::sandbox::store_driver::StoreDriver;

/// Where a journal call's answer goes.
pub(crate) type JournalReply<T> = Reply<T, JournalError>;

pub(crate) enum JournalRequest {
    Append {
        frames: Vec<u8>,
        reply: JournalReply<()>,
    },
    Compact {
        snapshot: Vec<u8>,
        reply: JournalReply<()>,
    },
    CleanEnd {
        reply: JournalReply<u64>,
    },
}

/// The journal's instance and everything needed to serve it, handed from thread to thread.
pub(crate) struct JournalSession {
    store: Store<GuestState>,
    bindings: EngineAsync,
    writer: ResourceAny,
    queue: mpsc::UnboundedReceiver<JournalRequest>,
}

/// A sandboxed journal writer on the async instance: the store driver serving its session.
pub(crate) type AsyncJournal = StoreDriver<JournalSession>;

/// Instantiates the async component and opens the journal in it ([`start_session`]).
pub(crate) fn start(
    vfs: Arc<dyn Vfs>,
    path: &str,
    limits: SandboxLimits,
) -> Result<AsyncJournal, JournalError> {
    let path = path.to_owned();
    let (driver, ()) = start_session(vfs, limits, move |mut store, bindings, io, queue| {
        let opened = block_on_running_io(
            store.run_concurrent(async |acc| {
                bindings
                    .stele_log_journal_async()
                    .writer()
                    .call_open(acc, path)
                    .await
            }),
            io,
        );
        let writer = answer(opened.and_then(|r| r), |writer| writer)?;
        let session = JournalSession {
            store,
            bindings,
            writer,
            queue,
        };
        Ok((Box::new(session), ()))
    })?;
    Ok(driver)
}

impl Served for JournalSession {
    type Request = JournalRequest;
    type Error = JournalError;

    fn awaits_sync(request: &JournalRequest) -> bool {
        matches!(
            request,
            JournalRequest::Append { .. } | JournalRequest::Compact { .. }
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

impl JournalSession {
    async fn serve_queued(&mut self, calls_outstanding: &AtomicUsize) -> Result<(), SandboxError> {
        let calls = Calls {
            bindings: &self.bindings,
            writer: self.writer,
        };
        let queue = &mut self.queue;
        let outcome = self
            .store
            .run_concurrent(async |acc| serve_each(acc, &calls, queue, calls_outstanding).await)
            .await;
        outcome.map_err(trap_error).and_then(|served| served)
    }
}

/// What one run's guest tasks share.
struct Calls<'s> {
    bindings: &'s EngineAsync,
    writer: ResourceAny,
}

/// Turns a guest call's outcome into the caller's.
fn answer<T, U>(
    result: wasmtime::Result<Result<T, wit::JournalError>>,
    map: impl FnOnce(T) -> U,
) -> Result<U, JournalError> {
    match result {
        Ok(Ok(value)) => Ok(map(value)),
        Ok(Err(err)) => Err(from_wit_journal_error(err)),
        Err(trap) => Err(trap_error(trap).into()),
    }
}

impl GuestCalls for Calls<'_> {
    type Request = JournalRequest;

    fn start<'a>(&'a self, acc: &'a Accessor<GuestState>, request: JournalRequest) -> Task<'a> {
        let api = self.bindings.stele_log_journal_async().writer();
        let writer = self.writer;
        match request {
            JournalRequest::Append { frames, reply } => Box::pin(async move {
                let r = api.call_append(acc, writer, frames).await;
                answer_with(reply, answer(r, |()| ()))
            }),
            JournalRequest::Compact { snapshot, reply } => Box::pin(async move {
                let r = api.call_compact(acc, writer, snapshot).await;
                answer_with(reply, answer(r, |()| ()))
            }),
            JournalRequest::CleanEnd { reply } => Box::pin(async move {
                let r = api.call_clean_end(acc, writer).await;
                answer_with(reply, answer(r.map(Ok), |end| end))
            }),
        }
    }
}
