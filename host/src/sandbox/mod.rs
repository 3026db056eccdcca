//! Sandboxed mode on the async-ABI component: one instance, many concurrent callers. One
//! concept per file:
//! - [`store_driver`]: serves one instance to concurrent callers, generic over what it serves
//!   (runs, parking, the dispatcher thread); [`drive`]: one caller's wait, driving the run when
//!   it can; [`wakes`]: the wakes both use;
//! - [`posted_io`]: where a run's posted I/O (a guest's sync) runs: the caller's thread, its
//!   tokio worker, or the store's I/O thread ([`crate::io_thread`]);
//! - [`guest_calls`]: what every session shares: a caller's task and answer, the sticky
//!   broken-contract flag, and the loop that serves a run's tasks one after another;
//! - [`wal_session`]: the WAL's requests as `wal-async` calls, and their answers;
//! - [`journal_session`], [`push_log_session`]: the journal's and the push log's requests as
//!   `journal-async` and `push-log-async` calls;
//! - [`grouping`]: how callers reach the guest's group commit (durable commits queued together
//!   travel as one call; a run waits for the threads it answered).
//!
//! The figures behind each rule are in `docs/BENCHMARKS.md`, "The sandboxed driver".

mod drive;
mod grouping;
mod guest_calls;
pub(crate) mod journal_session;
mod posted_io;
pub(crate) mod push_log_session;
mod store_driver;
#[cfg(test)]
mod tests;
mod wakes;
mod wal_session;

use std::sync::Arc;

use stele::vfs::Vfs;
use stele::wal::{Recovery, WalOptions};

use tokio::sync::mpsc;
use wasmtime::Store;

use crate::WalError;
use crate::bindings::engine_async::EngineAsync;
use crate::io_thread::IoThread;
use crate::runtime::{GuestState, Runtime, SandboxLimits};
use posted_io::block_on_sending_io;
use store_driver::{Served, StoreDriver};
use wal_session::{WalSession, open_session};

pub(crate) use wal_session::{Request, WalReply};

/// Instantiates the async component in a store of its own (with its I/O thread) and opens a
/// session in it with `open`, on the store driver's dispatcher thread; returns the driver
/// serving it, and what `open` returned beside the session. Every facet's sandboxed handle
/// starts here, so each is one instance serving concurrent callers, whose first trap (or broken
/// contract) stops it for every later call.
pub(crate) fn start_session<S: Served, R: Send + 'static>(
    vfs: Arc<dyn Vfs>,
    limits: SandboxLimits,
    open: impl FnOnce(
        Store<GuestState>,
        EngineAsync,
        &IoThread,
        mpsc::UnboundedReceiver<S::Request>,
    ) -> Result<(Box<S>, R), S::Error>
    + Send
    + 'static,
) -> Result<(StoreDriver<S>, R), S::Error> {
    let runtime = Runtime::get()?;
    let mut store = runtime.store_for_async(vfs, limits)?;
    let io = store
        .data()
        .stele
        .io_thread()
        .cloned()
        .expect("store_for_async gives the store an I/O thread");
    StoreDriver::start(io, move |io, queue| {
        let bindings = block_on_sending_io(runtime.instantiate_async_in(&mut store), io)?;
        open(store, bindings, io, queue)
    })
}

/// The sandboxed WAL's handle: the store driver serving one WAL session. Dropping it stops the
/// dispatcher thread (after it has served what is queued) and drops the instance.
pub(crate) struct AsyncSandbox(StoreDriver<WalSession>);

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
        let path = path.to_owned();
        let (driver, recovery) = start_session(vfs, limits, move |store, bindings, io, queue| {
            open_session(store, bindings, io, path, options, create, queue)
        })?;
        Ok((AsyncSandbox(driver), recovery))
    }

    /// Sends a request and awaits its answer, driving the instance on this task when the
    /// call is alone and the instance idle.
    pub(crate) async fn request<T>(
        &self,
        make: impl FnOnce(WalReply<T>) -> Request,
    ) -> Result<T, WalError> {
        self.0.request(make).await
    }

    /// [`Self::request`] for synchronous callers (threads). It blocks the calling thread, and
    /// drives the instance on it when the call is alone and the instance idle. Inside a tokio
    /// runtime (where it must not be called; use `AsyncWal` there) it drives as a task would,
    /// rather than panic.
    pub(crate) fn request_blocking<T>(
        &self,
        make: impl FnOnce(WalReply<T>) -> Request,
    ) -> Result<T, WalError> {
        self.0.request_blocking(make)
    }
}
