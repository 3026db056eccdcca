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
        },
    });
}

/// The component this crate embeds, as built by `build.rs`.
pub static COMPONENT_WASM: &[u8] = include_bytes!(env!("STELE_COMPONENT_WASM_EMBEDDED"));

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

/// The process-wide engine and pre-linked component.
pub struct Runtime {
    engine: Engine,
    pre: bindings::EnginePre<GuestState>,
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
        let engine = Engine::new(&config)?;
        let component = Component::new(&engine, COMPONENT_WASM)?;
        let mut linker = Linker::<GuestState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        bindings::Engine::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let pre = bindings::EnginePre::new(linker.instantiate_pre(&component)?)?;
        Ok(Runtime { engine, pre })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A new instance whose `vfs` import is served by `vfs`.
    pub(crate) fn instantiate(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Result<(Store<GuestState>, bindings::Engine), SandboxError> {
        let state = GuestState {
            vfs,
            table: ResourceTable::new(),
            open_files: 0,
            open_files_max: limits.open_files_max,
            wasi: WasiCtx::builder().build(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes_max)
                .build(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))?;
        Ok((store, bindings))
    }
}
