//! Sandboxed mode on the async-ABI component: one instance, many concurrent callers. One
//! concept per file:
//! - [`store_driver`]: serves one instance to concurrent callers, generic over what it serves
//!   (runs, parking, the dispatcher thread); [`drive`]: one caller's wait, driving the run when
//!   it can; [`wakes`]: the wakes both use;
//! - [`posted_io`]: where a run's posted I/O (a guest's sync) runs: the caller's thread, its
//!   tokio worker, or the store's I/O thread ([`crate::io_thread`]);
//! - [`wal_session`]: the WAL's requests as `wal-async` calls, and their answers;
//! - [`grouping`]: how callers reach the guest's group commit (durable commits queued together
//!   travel as one call; a run waits for the threads it answered).
//!
//! The figures behind each rule are in `docs/BENCHMARKS.md`, "The sandboxed driver".

mod drive;
mod grouping;
mod posted_io;
mod store_driver;
#[cfg(test)]
mod tests;
mod wakes;
mod wal_session;

use std::sync::Arc;

use stele::vfs::Vfs;
use stele::wal::{Recovery, WalOptions};

use crate::WalError;
use crate::runtime::{Runtime, SandboxLimits};
use store_driver::StoreDriver;
use wal_session::{WalSession, open_session};

pub(crate) use wal_session::{Request, WalReply};

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
        let runtime = Runtime::get()?;
        let store = runtime.store_for_async(vfs, limits)?;
        let io = store
            .data()
            .stele
            .io_thread()
            .cloned()
            .expect("store_for_async gives the store an I/O thread");
        let path = path.to_owned();
        let (driver, recovery) = StoreDriver::start(io, move |io, queue| {
            open_session(runtime, store, io, path, options, create, queue)
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
