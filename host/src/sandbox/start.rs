//! [`start_session`]: every facet's `Sandboxed` handle starts here, as one async instance in a
//! store of its own, served by a [`StoreDriver`].

use std::sync::Arc;

use stele::vfs::Vfs;
use tokio::sync::mpsc;
use wasmtime::Store;

use super::instance::Served;
use super::posted_io::block_on_sending_io;
use super::runtime::{GuestState, Runtime, SandboxLimits};
use super::store_driver::StoreDriver;
use crate::embed::bindings::engine_async::EngineAsync;
use crate::embed::io_thread::IoThread;

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
