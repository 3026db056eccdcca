//! What `wasmtime::component::bindgen!` generates from Stele's WIT (`wit/`), public so that an
//! embedder calls the engine's exports with typed functions, and reuses these types in a
//! `bindgen!` of its own through `with:`:
//!
//! ```ignore
//! wasmtime::component::bindgen!({
//!     // A package of the embedder's own whose world imports `stele:log/wal@0.6.0` (as
//!     // `host/examples/plugin/wit` does); Stele's `wit/` comes first, so that it resolves.
//!     world: "my:platform/my-plugin",
//!     path: ["vendor/stele/wit", "wit"],
//!     with: { "stele:log/vfs": stele_host::bindings::stele::log::vfs },
//! });
//! ```
//!
//! - At the top: world `engine` (`stele.wasm`): [`Engine`], [`EnginePre`], and the interfaces
//!   under [`stele::log`]. Its imports (`vfs`) are plain functions.
//! - [`engine_async`]: world `engine-async` (`stele-async.wasm`), whose exports are called
//!   with `call_async` or inside `run_concurrent`, and whose `vfs-async` imports suspend.
//!
//! Every `vfs` and `vfs-async` import call runs in a `tracing` span at TRACE level (target
//! `stele_host::bindings`), with an event for its arguments and one for its result; bytes
//! (`list<u8>`) show as `...`, paths in full. The `vfs` resources are
//! [`crate::embed::imports::HostFile`] and [`crate::embed::imports::HostLock`];
//! [`crate::add_to_linker_sync`] and [`crate::add_to_linker_async`] link them.

#![allow(missing_docs)] // generated; the WIT's own doc comments come through

wasmtime::component::bindgen!({
    world: "engine",
    path: "wit",
    imports: { default: trappable | tracing },
    with: {
        "stele:log/vfs.file": crate::embed::imports::HostFile,
        "stele:log/vfs.file-lock": crate::embed::imports::HostLock,
    },
});

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
