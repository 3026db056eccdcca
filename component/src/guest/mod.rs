//! The component side (wasm32 only): the WIT bindings, a [`crate::vfs::Vfs`] over the
//! `stele:log/vfs` imports, and the exports over the engine.
//!
//! Two builds come from these sources:
//! - plain WASI 0.2 (world `engine`): `stele:log/wal` and `stele:log/journal`, synchronous; the
//!   host serializes calls on one instance and each durable commit syncs on its own;
//! - async ABI (feature `component-async`, world `engine-async`): adds `stele:log/wal-async`,
//!   `stele:log/journal-async` and `stele:log/push-log-async`, whose calls are `async func`s
//!   over the same engine code ([`wit_io::WitIo::Async`] awaits the `vfs-async` imports), so
//!   one instance serves concurrent callers: the WAL's durable commits share syncs
//!   ([`wal_async`]), and a journal's or push log's calls wait for each other ([`baton`]).

#[cfg(feature = "component-async")]
mod baton;
mod journal;
#[cfg(feature = "component-async")]
mod journal_async;
mod push_log;
#[cfg(feature = "component-async")]
mod push_log_async;
mod vfs;
mod wal;
#[cfg(feature = "component-async")]
mod wal_async;
#[cfg(feature = "component-async")]
mod wit_io;

#[cfg(not(feature = "component-async"))]
wit_bindgen::generate!({
    world: "engine",
    path: "../wit",
});

#[cfg(feature = "component-async")]
wit_bindgen::generate!({
    world: "engine-async",
    path: "../wit",
});

struct Component;

export!(Component);
