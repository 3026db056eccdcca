//! [`start_session`]: every facet's `Sandboxed` handle starts here, as one async instance in a
//! store of its own, served by a [`StoreDriver`].

use std::sync::Arc;

use stele::vfs::Vfs;
use tokio::sync::mpsc;
use wasmtime::Store;

use super::instance::Served;
use super::posted_io::block_on_running_io;
use super::runtime::{GuestState, Runtime, SandboxLimits};
use super::store_driver::StoreDriver;
use crate::embed::bindings::engine_async::EngineAsync;
use crate::embed::io_lane::IoLane;

/// Instantiates the async component in a store of its own (with its I/O lane) and opens a
/// session in it with `open`, on this thread; returns the driver serving it, and what `open`
/// returned beside the session. Every facet's sandboxed handle starts here, so each is one
/// instance serving concurrent callers, whose first trap (or broken contract) stops it for
/// every later call. Opening blocks this thread (its I/O runs here): call it where blocking is
/// allowed.
pub(crate) fn start_session<S: Served, R: Send + 'static>(
    vfs: Arc<dyn Vfs>,
    limits: SandboxLimits,
    open: impl FnOnce(
        Store<GuestState>,
        EngineAsync,
        &IoLane,
        mpsc::UnboundedReceiver<S::Request>,
    ) -> Result<(Box<S>, R), S::Error>,
) -> Result<(StoreDriver<S>, R), S::Error> {
    let runtime = Runtime::get()?;
    let mut store = runtime.store_for_async(vfs, limits)?;
    let io = store
        .data()
        .stele
        .io_lane()
        .cloned()
        .expect("store_for_async gives the store an I/O lane");
    StoreDriver::start(io, runtime.workers(), move |io, queue| {
        let bindings = block_on_running_io(runtime.instantiate_async_in(&mut store), io)?;
        open(store, bindings, io, queue)
    })
}
