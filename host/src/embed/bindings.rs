//! What `wasmtime::component::bindgen!` generates from Stele's WIT (`wit/`), public so that an
//! embedder calls the engine's exports with typed functions, and reuses these types in a
//! `bindgen!` of its own through `with:`:
//!
//! ```ignore
//! wasmtime::component::bindgen!({
//!     // A package of the embedder's own whose world imports `stele:log/wal@0.9.0` (as
//!     // `host/examples/plugin/wit` does); Stele's `wit/` comes first, so that it resolves.
//!     world: "my:platform/my-plugin",
//!     path: ["vendor/stele/wit", "wit"],
//!     with: { "stele:log/vfs": stele_host::bindings::stele::log::vfs },
//! });
//! ```
//!
//! - At the top: world `engine` (`stele.wasm`): [`SteleEngine`], [`SteleEnginePre`], and the
//!   interfaces under [`stele::log`]. Its imports (`vfs`) are plain functions. `bindgen!` names
//!   the world's types `Engine` and `EnginePre`; they are re-exported with a `Stele` prefix,
//!   so that they do not clash with `wasmtime::Engine` in an embedder's code.
//! - [`engine_async`]: world `engine-async` (`stele-async.wasm`), whose exports are called
//!   with `call_async` or inside `run_concurrent`, and whose `vfs-async` imports suspend.
//!
//! Every `vfs` and `vfs-async` import call runs in a `tracing` span at TRACE level (target
//! `stele_host::bindings`), with an event for its arguments and one for its result; bytes
//! (`list<u8>`) show as `...`, paths in full. The `vfs` resources are
//! [`crate::embed::imports::HostFile`], [`crate::embed::imports::HostLock`] and
//! [`crate::embed::imports::HostReservation`];
//! [`crate::add_to_linker_sync`] and [`crate::add_to_linker_async`] link them.

#![allow(missing_docs)] // generated; the WIT's own doc comments come through

mod generated {
    wasmtime::component::bindgen!({
        world: "engine",
        path: "wit",
        imports: { default: trappable | tracing },
        with: {
            "stele:log/vfs.file": crate::embed::imports::HostFile,
            "stele:log/vfs.file-lock": crate::embed::imports::HostLock,
            "stele:log/vfs.reservation": crate::embed::imports::HostReservation,
        },
    });
}

/// World `engine` (`stele.wasm`): instantiate it, then call its exports (`stele_log_wal()`,
/// `stele_log_journal()`, `stele_log_push_log()`).
pub use generated::Engine as SteleEngine;
/// The indices of world `engine`'s exports, looked up once per component.
pub use generated::EngineIndices as SteleEngineIndices;
/// World `engine`, pre-instantiated: [`SteleEngine`] without the linking, per store.
pub use generated::EnginePre as SteleEnginePre;
pub use generated::{exports, stele};

/// World `engine-async`: `stele-async.wasm`.
pub mod engine_async {
    wasmtime::component::bindgen!({
        world: "engine-async",
        path: "wit",
        imports: {
            "stele:log/vfs-async": async | store | trappable | tracing,
            default: trappable | tracing,
        },
        exports: { default: async },
        with: {
            "stele:log/vfs": super::stele::log::vfs,
        },
    });
}
