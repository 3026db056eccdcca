//! The component side (wasm32 only): the WIT bindings, a [`crate::vfs::Vfs`] over the
//! `stele:log/vfs` imports, and the exports over the engine.
//!
//! Two builds come from these sources:
//! - plain WASI 0.2 (world `engine`): `stele:log/wal` and `stele:log/journal`, synchronous; the
//!   host serializes calls on one instance and each durable commit syncs on its own;
//! - async ABI (feature `component-async`, world `engine-async`): adds `stele:log/wal-async`
//!   and `stele:log/journal-async`,
//!   whose durable calls are `async func`s driven by [`wal_async`] over the same group-commit
//!   core, so concurrent calls on one instance share syncs.

mod journal;
#[cfg(feature = "component-async")]
mod journal_async;
mod push_log;
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
