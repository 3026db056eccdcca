//! `stele-host`: runs the Stele engine natively, or sandboxed in its WebAssembly component, in
//! your wasmtime or in Stele's own.
//!
//! **In your own wasmtime** ([`vfs_host`]): implement [`SteleView`] on your store data, add
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
//! let stele = stele_host::bindings::Engine::instantiate(&mut store, &component, &linker)?;
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
pub mod bindings;
pub mod code_cache;
mod convert;
pub mod fs;
mod io_thread;
mod journal;
#[cfg(feature = "test-support")]
pub mod peak_rss;
mod push_log;
pub mod runtime;
mod sandbox_async;
pub mod vfs_host;
mod wal;

pub use journal::{
    Journal, JournalError, replay_blocking as replay_journal_blocking, replay_journal,
};
pub use push_log::{PushLog, PushLogCallError, PushLogScan};
pub use runtime::SandboxLimits;
pub use stele;
pub use vfs_host::{
    READ_BYTES_MAX, SteleCtx, SteleCtxView, SteleVfs, SteleView, add_to_linker_async,
    add_to_linker_sync,
};
pub use wal::{AsyncWal, Wal, WalError, WalScan, WalTail, read_wal, read_wal_from};
/// The wasmtime this crate is built on, so that an embedder names the same `Engine`, `Linker`
/// and `Store` types. See the README's "Which wasmtime".
pub use wasmtime;

/// Where the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The engine is called directly, in this process's address space.
    Native,
    /// The engine runs inside the component (the async-ABI build), in its own wasmtime store,
    /// with no file access but the `stele:log/vfs` imports. For the WAL, the journal and the
    /// push log alike, one instance per handle serves every thread and task concurrently (so
    /// durable commits share syncs as they do natively), and its first trap or broken
    /// contract refuses every later call.
    Sandboxed,
    /// The engine runs inside the plain WASI 0.2 build of the component: what a host without
    /// the async ABI runs. Calls on one instance are serialized; each durable commit syncs on
    /// its own.
    SandboxedPlain,
}

impl Mode {
    /// Every mode, for running one check in each.
    pub const ALL: [Mode; 3] = [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain];

    /// The mode's name in tables and on the command line: `native`, `sandboxed`,
    /// `sandboxed-plain`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Sandboxed => "sandboxed",
            Mode::SandboxedPlain => "sandboxed-plain",
        }
    }
}

/// What only sandboxed mode can fail with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The embedded component failed to compile or link.
    #[error("loading the Stele component failed: {0}")]
    Load(String),
    /// Creating an instance failed (a store limit, say).
    #[error("instantiating the Stele component failed: {0}")]
    Instantiate(String),
    /// The guest trapped. Its state is unknown, so this instance refuses every later call; the
    /// host and other instances are unaffected.
    #[error("the Stele component trapped; this instance is unusable: {0}")]
    Trapped(String),
    /// The component broke its interface's contract in a way wasmtime cannot see (it answered
    /// a different number of outcomes than it was given batches, say): it is not Stele's
    /// engine, or it is broken. Its state is unknown, so the instance refuses every later call.
    #[error("the Stele component broke its interface's contract; this instance is unusable: {0}")]
    BrokenContract(String),
    /// Host code serving the call panicked (a blocking call on tokio's pool, a thread serving
    /// the instance). Nothing says the guest is at fault; the call's outcome is unknown.
    #[error("the host code serving a Stele call panicked: {0}")]
    Panicked(String),
    /// The guest tried to grow its memory past [`runtime::SandboxLimits::memory_bytes_max`].
    /// The call did not complete, and the instance refuses every later call.
    #[error(
        "the Stele component asked for {requested_bytes} bytes of memory, past its limit of \
         {limit_bytes}; this instance is unusable"
    )]
    MemoryLimit {
        /// The instance's limit.
        limit_bytes: usize,
        /// The size the guest asked its memory to grow to.
        requested_bytes: usize,
    },
    /// [`runtime::Runtime::init_with_engine`] came after the process's runtime was made.
    #[error("the Stele runtime is already initialized; init_with_engine must come first")]
    AlreadyInitialized,
    /// The guest ran past [`runtime::SandboxLimits::busy_deadline`] without returning to the
    /// host, and was interrupted. The instance refuses every later call.
    #[error(
        "the Stele component ran past its busy deadline of {deadline:?} and was interrupted; \
         this instance is unusable"
    )]
    Interrupted {
        /// The instance's busy deadline.
        deadline: std::time::Duration,
    },
}
