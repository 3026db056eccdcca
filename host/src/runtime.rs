//! The wasmtime side of sandboxed mode: one [`wasmtime::Engine`] and one compiled
//! [`Component`] per process, and a fresh [`Store`] per log instance.
//!
//! The component (`stele.wasm`, built by `build.rs`) is embedded in this crate. It is compiled
//! once, on first use, and cached for the life of the process; each instance then costs one
//! `InstancePre::instantiate` (about 17 µs on this machine).
//!
//! What a guest gets: the `stele:log/vfs` import, served from the [`Vfs`] the caller chose, and
//! the `wasi:cli`, `wasi:io`, `wasi:random` and `wasi:clocks` imports that Rust's std links,
//! served by a WASI context with no preopened directories, no environment, no arguments, no
//! network and no inherited stdio. Its only file access is therefore `stele:log/vfs`.

use std::sync::{Arc, OnceLock};

use stele::vfs::Vfs;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::SandboxError;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "engine",
        path: "../wit",
        imports: { default: trappable },
        with: {
            "stele:log/vfs.file": crate::vfs_import::HostFile,
            "stele:log/vfs.file-lock": crate::vfs_import::HostLock,
        },
    });
}

pub(crate) mod bindings_async {
    wasmtime::component::bindgen!({
        world: "engine-async",
        path: "../wit",
        imports: {
            "stele:log/vfs-async": async | store | trappable,
            default: trappable,
        },
        exports: { default: async },
        with: {
            "stele:log/vfs": super::bindings::stele::log::vfs,
        },
    });
}

/// The plain WASI 0.2 component (world `engine`), as built by `build.rs`: synchronous exports,
/// for any component-model host.
pub static COMPONENT_WASM: &[u8] = include_bytes!(env!("STELE_COMPONENT_WASM_EMBEDDED"));

/// The async-ABI component (world `engine-async`), as built by `build.rs`: what
/// [`crate::Mode::Sandboxed`] runs, so that concurrent durable commits share syncs.
pub static COMPONENT_ASYNC_WASM: &[u8] =
    include_bytes!(env!("STELE_COMPONENT_ASYNC_WASM_EMBEDDED"));

/// Default bound on one instance's linear memory. The engine keeps at most one group (16 MiB
/// under full sync), its retained records (64 MiB by default) and a replay window (one frame,
/// up to 64 MiB) in memory; 256 MiB covers that with room to spare. Chosen, not measured.
pub const MEMORY_BYTES_MAX_DEFAULT: usize = 256 << 20;

/// Default bound on files one instance may hold open at once. A WAL holds one; the bound only
/// stops a misbehaving guest from exhausting the host's descriptors.
pub const OPEN_FILES_MAX_DEFAULT: usize = 64;

/// Per-instance limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    pub memory_bytes_max: usize,
    pub open_files_max: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes_max: MEMORY_BYTES_MAX_DEFAULT,
            open_files_max: OPEN_FILES_MAX_DEFAULT,
        }
    }
}

/// What one store holds: the Vfs the guest's imports are served from, and the resources.
pub struct GuestState {
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) table: ResourceTable,
    /// Runs the async imports' blocking work; present in async instances only.
    pub(crate) io: Option<crate::io_thread::IoThread>,
    pub(crate) open_files: usize,
    pub(crate) open_files_max: usize,
    wasi: WasiCtx,
    limits: StoreLimits,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The process-wide engine and the two pre-linked components.
pub struct Runtime {
    engine: Engine,
    pre: bindings::EnginePre<GuestState>,
    pre_async: bindings_async::EngineAsyncPre<GuestState>,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

impl Runtime {
    /// The runtime, compiling the component on first use.
    pub fn get() -> Result<&'static Runtime, SandboxError> {
        RUNTIME
            .get_or_init(|| Runtime::new().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| SandboxError::Load(e.clone()))
    }

    fn new() -> wasmtime::Result<Runtime> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.wasm_component_model_async(true);
        let engine = Engine::new(&config)?;

        let component = Component::new(&engine, COMPONENT_WASM)?;
        let mut linker = Linker::<GuestState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        bindings::Engine::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let pre = bindings::EnginePre::new(linker.instantiate_pre(&component)?)?;

        let component_async = Component::new(&engine, COMPONENT_ASYNC_WASM)?;
        let mut linker = Linker::<GuestState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        bindings_async::EngineAsync::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let pre_async =
            bindings_async::EngineAsyncPre::new(linker.instantiate_pre(&component_async)?)?;
        Ok(Runtime {
            engine,
            pre,
            pre_async,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn new_store(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
        io: Option<crate::io_thread::IoThread>,
    ) -> Store<GuestState> {
        let state = GuestState {
            vfs,
            table: ResourceTable::new(),
            io,
            open_files: 0,
            open_files_max: limits.open_files_max,
            wasi: WasiCtx::builder().build(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes_max)
                .build(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        store
    }

    /// A new instance of the plain component whose `vfs` import is served by `vfs`.
    pub(crate) fn instantiate(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Result<(Store<GuestState>, bindings::Engine), SandboxError> {
        let mut store = self.new_store(vfs, limits, None);
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))?;
        Ok((store, bindings))
    }

    /// A new store for the async component, with its own I/O thread. The instance itself is
    /// made by [`Self::instantiate_async_in`], on the thread that will drive the store: its
    /// host functions are async, so instantiation must be too.
    pub(crate) fn store_for_async(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Result<Store<GuestState>, SandboxError> {
        let io = crate::io_thread::IoThread::spawn("stele-io")
            .map_err(|e| SandboxError::Instantiate(format!("spawn the I/O thread: {e}")))?;
        Ok(self.new_store(vfs, limits, Some(io)))
    }

    /// A new store for the async component without an I/O thread: its async imports run
    /// inline. For instances driven from a thread that may block (tokio's blocking pool), where
    /// a hop to an I/O thread would only add latency.
    pub(crate) fn store_for_async_inline(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Store<GuestState> {
        self.new_store(vfs, limits, None)
    }

    /// Instantiates the async component in `store` (made by [`Self::store_for_async`] or
    /// [`Self::store_for_async_inline`]).
    pub(crate) async fn instantiate_async_in(
        &self,
        store: &mut Store<GuestState>,
    ) -> Result<bindings_async::EngineAsync, SandboxError> {
        self.pre_async
            .instantiate_async(store)
            .await
            .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))
    }
}

/// One instance of the plain component and the resource its calls act on (a WAL writer, a push
/// log). A trap leaves the instance's state unknown, so the first one is sticky: every later
/// call gets the same [`SandboxError::Trapped`].
pub(crate) struct PlainInstance {
    store: Store<GuestState>,
    /// Boxed: the generated bindings are large, and the enums holding an instance have small
    /// native variants.
    bindings: Box<bindings::Engine>,
    resource: wasmtime::component::ResourceAny,
    trapped: Option<String>,
}

impl std::fmt::Debug for PlainInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainInstance")
            .field("trapped", &self.trapped)
            .finish_non_exhaustive()
    }
}

impl PlainInstance {
    pub(crate) fn new(
        store: Store<GuestState>,
        bindings: bindings::Engine,
        resource: wasmtime::component::ResourceAny,
    ) -> PlainInstance {
        PlainInstance {
            store,
            bindings: Box::new(bindings),
            resource,
            trapped: None,
        }
    }

    /// Runs one call; the outer `Err` is a trap (now, or an earlier one).
    pub(crate) fn call<R, E>(
        &mut self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::Engine,
            wasmtime::component::ResourceAny,
        ) -> wasmtime::Result<Result<R, E>>,
    ) -> Result<Result<R, E>, SandboxError> {
        if let Some(message) = &self.trapped {
            return Err(SandboxError::Trapped(message.clone()));
        }
        call(&mut self.store, &self.bindings, self.resource).map_err(|e| {
            let message = format!("{e:#}");
            self.trapped = Some(message.clone());
            SandboxError::Trapped(message)
        })
    }
}
