//! `stele-host`: runs the Stele engine natively, or sandboxed in its WebAssembly component, in
//! your wasmtime or in Stele's own.
//!
//! **In your own wasmtime** ([`embed`]): implement [`SteleView`] on your store data, add
//! the imports to your linker with [`add_to_linker_sync`] (or [`add_to_linker_async`]) beside
//! wasmtime-wasi's, and run `stele.wasm` or a plugin composed with it in your own stores:
//!
//! ```no_run
//! use std::sync::Arc;
//! use stele_host::fs::RealFs;
//! use stele_host::wasmtime::component::{Linker, ResourceTable};
//! use stele_host::wasmtime::{Config, Engine, Store};
//! use stele_host::{SteleCtx, SteleCtxView, SteleView};
//! use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
//!
//! struct Platform {
//!     wasi: WasiCtx,
//!     table: ResourceTable,
//!     stele: SteleCtx,
//! }
//! impl SteleView for Platform {
//!     fn stele(&mut self) -> SteleCtxView<'_> {
//!         SteleCtxView { ctx: &mut self.stele, table: &mut self.table }
//!     }
//! }
//! impl WasiView for Platform {
//!     fn ctx(&mut self) -> WasiCtxView<'_> {
//!         WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
//!     }
//! }
//!
//! let engine = Engine::new(&Config::new())?;
//! let mut linker = Linker::<Platform>::new(&engine);
//! wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
//! stele_host::add_to_linker_sync(&mut linker)?;
//! let fs = Arc::new(RealFs::open_root("/srv/tenants/a")?);
//! let mut store = Store::new(&engine, Platform {
//!     wasi: WasiCtx::builder().build(),
//!     table: ResourceTable::new(),
//!     stele: SteleCtx::new(fs),
//! });
//! let engine_bytes = stele_host::runtime::COMPONENT_WASM;
//! let component = stele_host::wasmtime::component::Component::new(&engine, engine_bytes)?;
//! let stele = stele_host::bindings::SteleEngine::instantiate(&mut store, &component, &linker)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `host/examples/platform.rs` does this for two tenants, in sync and in async stores.
//!
//! **The typed API** runs on Stele's own engine ([`runtime::Runtime`]), or on yours
//! ([`runtime::Runtime::init_with_engine`]):
//! - [`Wal`]: the write-ahead log's typed API, the same in both [`Mode`]s.
//! - [`Journal`]: the journal writer's tokio API, the same in both [`Mode`]s.
//! - [`PushLog`]: the push log with `arrow` record batches, the same in both [`Mode`]s.
//! - [`fs::RealFs`]: the real filesystem, confined to one root directory.
//!
//! ```no_run
//! use std::sync::Arc;
//! use stele::wal::{DurabilityPolicy, WalOptions};
//! use stele_host::{Mode, Wal, fs::RealFs};
//!
//! let fs = Arc::new(RealFs::open_root("/var/lib/myapp")?);
//! let (wal, recovery) =
//!     Wal::open(fs, "events", WalOptions::new(DurabilityPolicy::FullSync), Mode::Sandboxed)?;
//! let seq = wal.commit_durable(1, b"hello")?; // survives power loss once this returns
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod archive_gate;
pub mod embed;
pub mod fs;
mod journal;
mod mode;
#[cfg(feature = "test-support")]
pub mod peak_rss;
mod push_log;
mod quota;
pub mod sandbox;
pub mod tenants;
mod wal;
mod workers;

// The paths embedders have used since before the layout by facet.
pub use embed::bindings;
pub use embed::imports as vfs_host;
pub use embed::imports::{
    READ_BYTES_MAX, SteleCtx, SteleCtxView, SteleVfs, SteleView, add_to_linker_async,
    add_to_linker_sync,
};
pub use journal::{
    Journal, JournalError, replay_blocking as replay_journal_blocking, replay_journal,
};
pub use mode::Mode;
pub use push_log::{PushLog, PushLogCallError, PushLogScan};
pub use sandbox::{SandboxError, SandboxLimits, code_cache, runtime};
pub use stele;
pub use tenants::{
    TenantJournal, TenantPushLog, TenantState, TenantStats, TenantWal, Tenants, TenantsError,
    TenantsOptions,
};
pub use wal::{AsyncWal, Wal, WalError, WalScan, WalTail, read_wal, read_wal_from};
/// The wasmtime this crate is built on, so that an embedder names the same `Engine`, `Linker`
/// and `Store` types. See `docs/EMBEDDING.md`, "Which wasmtime".
pub use wasmtime;
