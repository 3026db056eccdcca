//! The wasmtime side of sandboxed mode: one [`wasmtime::Engine`] and one compiled
//! [`Component`] per process, and a fresh [`Store`] per log instance.
//!
//! The components (`stele.wasm` and `stele-async.wasm`, from the `stele-components` crate) are
//! embedded in this crate. Each is compiled on its first use, or loaded from the on-disk
//! [`super::code_cache`] that an earlier process filled, and kept for the life of the process;
//! each instance then costs one `InstancePre::instantiate` (about 17 µs on this machine).
//!
//! What a guest gets: the `stele:log/vfs` import, served from the [`Vfs`] the caller chose, and
//! the `wasi:cli`, `wasi:io`, `wasi:random` and `wasi:clocks` imports that Rust's std links,
//! served by a WASI context with no preopened directories, no environment, no arguments, no
//! network and no inherited stdio. Its only file access is therefore `stele:log/vfs`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use stele::vfs::{QuotaLimits, Vfs};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, PoolingAllocationConfig, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::error::SandboxError;
use crate::embed::bindings;
use crate::embed::bindings::engine_async as bindings_async;
use crate::embed::imports::{SteleCtx, SteleCtxView, SteleView};
use crate::embed::io_lane::IoLane;
use crate::workers::Workers;

/// The plain WASI 0.2 component (world `engine`): synchronous exports, for any
/// component-model host. From the `stele-components` crate.
pub use stele_components::STELE_WASM as COMPONENT_WASM;

/// The async-ABI component (world `engine-async`): what [`crate::Mode::Sandboxed`] runs, so
/// that concurrent durable commits share syncs. From the `stele-components` crate.
pub use stele_components::STELE_ASYNC_WASM as COMPONENT_ASYNC_WASM;

/// Default bound on one instance's linear memory. The engine keeps at most one group (16 MiB
/// under full sync), its retained records (64 MiB by default) and a replay window (one frame,
/// up to 64 MiB) in memory; 256 MiB covers that with room to spare. Chosen, not measured.
pub const MEMORY_BYTES_MAX_DEFAULT: usize = 256 << 20;

pub use crate::embed::imports::OPEN_FILES_MAX_DEFAULT;

/// The address space [`Runtime::default_config`] reserves for one instance's linear memory up
/// front, in place of wasmtime's 4 GiB (which ended a process near 32,000 logs, 3.97 TiB at
/// 1,000). It covers what the engine keeps in memory at the defaults without moving: its
/// starting memory (about 1.3 MiB), a group under full sync (16 MiB), the retained records
/// (64 MiB) and a replay window. A memory that outgrows it (a larger
/// [`SandboxLimits::memory_bytes_max`] used in full) is moved once, copied into a new
/// reservation with [`MEMORY_GROWTH_RESERVATION_BYTES`] to spare. Below 4 GiB, wasmtime bounds-
/// checks each access explicitly instead of relying on guard pages (measured: see
/// `docs/BENCHMARKS.md`, "Many logs").
pub const MEMORY_RESERVATION_BYTES: u64 = 128 << 20;

/// The unmapped guard after a linear memory, in place of wasmtime's 32 MiB: with explicit
/// bounds checks it only lets accesses at a constant offset share one check, and the engine's
/// constant offsets (struct fields) are far below 2 MiB.
pub const MEMORY_GUARD_BYTES: u64 = 2 << 20;

/// The room reserved beyond a memory that outgrew [`MEMORY_RESERVATION_BYTES`] and moved, in
/// place of wasmtime's 2 GiB: each later growth past it moves the memory again.
pub const MEMORY_GROWTH_RESERVATION_BYTES: u64 = 64 << 20;

/// How often the epoch ticker advances the engine's epoch, once some instance has a
/// [`SandboxLimits::busy_deadline`]: the resolution of that deadline. A guest stuck in a loop
/// is interrupted between `busy_deadline` and `busy_deadline` + 2 ticks after it last touched
/// the host. 2 ms keeps the ticker's cost (500 wake-ups a second, only once a deadline is in
/// use) small against any deadline worth setting.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Most table elements one instance may grow to. The component needs a few hundred (its
/// function table); the bound only stops a guest from growing tables without end.
pub const TABLE_ELEMENTS_MAX: usize = 1 << 16;

/// The size of a WebAssembly page: a pooled memory's bound is rounded up to it.
const WASM_PAGE_BYTES: u64 = 64 << 10;

/// Core instances in one instance of either Stele component (the engine's module and the
/// canonical-ABI shims wasmtime adds), for [`Runtime::pooling_config`]: counted, with room.
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 8;

/// Linear memories in one instance of either Stele component: the engine's own.
pub const MEMORIES_PER_COMPONENT: u32 = 1;

/// Tables in one instance of either Stele component (the engine's function table and the
/// shims' tables): counted, with room.
pub const TABLES_PER_COMPONENT: u32 = 4;

/// Per-instance limits. Natively ([`crate::Mode::Native`]) there is no instance, and these
/// do not apply, except [`Self::quota`], which bounds the log's storage in every mode. `#[non_exhaustive]`, so that a new limit is not a breaking change: start from
/// `SandboxLimits::default()` and change what you need with the `with_*` setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxLimits {
    /// Bound on the instance's linear memory. A guest that tries to grow past it traps, and the
    /// call (and every later call on that instance) fails with [`SandboxError::MemoryLimit`].
    pub memory_bytes_max: usize,
    /// Bound on the files and locks the instance holds open at once. Past it, `open` and
    /// `lock-exclusive` answer `too-many-handles`, which reaches the caller as
    /// [`stele::vfs::VfsError::TooManyHandles`] inside the facet's typed error.
    pub open_files_max: usize,
    /// When set, the longest the guest may run without calling into the host (an import) or
    /// returning: a guest stuck in a loop is interrupted, and the call (and every later call on
    /// that instance) fails with [`SandboxError::Interrupted`]. Time the host spends serving
    /// an import (a slow fsync, say) does not count. Measured in [`EPOCH_TICK`]s. `None` (the
    /// default): no deadline.
    pub busy_deadline: Option<Duration>,
    /// Disk bytes and rates ([`QuotaLimits`]), in every mode, natively too: a handle opened
    /// with a bounded quota puts its [`stele::vfs::Vfs`] under a
    /// [`stele::vfs::QuotaVfs`] of its own, which counts every file under that root. For one
    /// bound over several logs of a tenant, open them all over one shared `QuotaVfs` instead
    /// (as [`crate::Tenants`] does with its options' quota). Unbounded by default.
    pub quota: QuotaLimits,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes_max: MEMORY_BYTES_MAX_DEFAULT,
            open_files_max: OPEN_FILES_MAX_DEFAULT,
            busy_deadline: None,
            quota: QuotaLimits::unbounded(),
        }
    }
}

impl SandboxLimits {
    /// These limits with another memory bound.
    pub const fn with_memory_bytes_max(mut self, memory_bytes_max: usize) -> Self {
        self.memory_bytes_max = memory_bytes_max;
        self
    }

    /// These limits with another bound on open files and locks.
    pub const fn with_open_files_max(mut self, open_files_max: usize) -> Self {
        self.open_files_max = open_files_max;
        self
    }

    /// These limits with a busy deadline (`None`: none).
    pub const fn with_busy_deadline(mut self, busy_deadline: Option<Duration>) -> Self {
        self.busy_deadline = busy_deadline;
        self
    }

    /// These limits with a quota (disk bytes, rates).
    pub const fn with_quota(mut self, quota: QuotaLimits) -> Self {
        self.quota = quota;
        self
    }
}

/// The typed reason behind a trap that a limit caused, carried inside the trap's error so that
/// [`trap_error`] can tell it from a guest's own trap.
#[derive(Clone, Copy, Debug, thiserror::Error)]
enum LimitTrap {
    #[error(
        "the guest asked to grow its memory to {requested_bytes} bytes, past its limit of {limit_bytes}"
    )]
    Memory {
        limit_bytes: usize,
        requested_bytes: usize,
    },
    #[error(
        "the guest ran for longer than its busy deadline of {deadline:?} without returning to the host"
    )]
    Busy { deadline: Duration },
}

/// Turns a call's trap into the caller's error: a limit's own variant when a limit caused it,
/// else [`SandboxError::Trapped`] with the trap's message.
pub(crate) fn trap_error(trap: wasmtime::Error) -> SandboxError {
    match trap.downcast_ref::<LimitTrap>() {
        Some(&LimitTrap::Memory {
            limit_bytes,
            requested_bytes,
        }) => SandboxError::MemoryLimit {
            limit_bytes,
            requested_bytes,
        },
        Some(&LimitTrap::Busy { deadline }) => SandboxError::Interrupted { deadline },
        None => SandboxError::Trapped(format!("{trap:#}")),
    }
}

/// The store's [`ResourceLimiter`]: refuses growth past the limits with a typed trap rather
/// than a failed `memory.grow`, which the guest's allocator would turn into an abort whose
/// cause the host could not tell.
struct Limiter {
    memory_bytes_max: usize,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes_max {
            return Err(LimitTrap::Memory {
                limit_bytes: self.memory_bytes_max,
                requested_bytes: desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_MAX)
    }
}

/// What the busy deadline watches: how often the guest touched the host, as of the last
/// epoch tick that found it running, and how many ticks in a row found no new touch.
#[derive(Default)]
struct BusyWatch {
    touches_seen: u64,
    ticks_without_touch: u64,
}

/// Starts the process's epoch ticker, once: a thread that advances the engine's epoch every
/// [`EPOCH_TICK`]. Only started when an instance has a busy deadline.
fn start_epoch_ticker(engine: &Engine) {
    static TICKER: OnceLock<()> = OnceLock::new();
    TICKER.get_or_init(|| {
        let engine = engine.clone();
        // If the thread cannot start, deadlines never fire; instances still work. Spawning only
        // fails when the process is out of threads, where the deadline is the least concern.
        let _ = std::thread::Builder::new()
            .name("stele-epoch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            });
    });
}

/// What one of Stele's own stores holds: the `vfs` imports' context, the resources, a WASI
/// context with nothing in it, and the limits. An embedder's own store holds its own state
/// instead, and implements [`SteleView`] on it (see [`crate::embed::imports`]).
pub struct GuestState {
    pub(crate) stele: SteleCtx,
    pub(crate) table: ResourceTable,
    busy: BusyWatch,
    wasi: WasiCtx,
    limiter: Limiter,
}

impl GuestState {
    /// Notes that the host called into the guest: the busy deadline restarts.
    pub(crate) fn touch(&mut self) {
        self.stele.touch();
    }
}

impl SteleView for GuestState {
    fn stele(&mut self) -> SteleCtxView<'_> {
        SteleCtxView {
            ctx: &mut self.stele,
            table: &mut self.table,
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The process-wide engine and the two pre-linked components, each compiled (or loaded from the
/// [`super::code_cache`]) on its first use: a process that runs only the plain build never
/// compiles the async one.
pub struct Runtime {
    engine: Engine,
    code_cache_dir: Option<PathBuf>,
    pre: OnceLock<Result<bindings::SteleEnginePre<GuestState>, String>>,
    pre_async: OnceLock<Result<bindings_async::EngineAsyncPre<GuestState>, String>>,
    /// The threads every async instance shares for its dispatcher turns and posted I/O.
    workers: Workers,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// What `cell` holds, made by `load` on first use. A failure is kept as its message, so every
/// later call gets the same [`SandboxError::Load`] without loading again.
fn loaded<T>(
    cell: &OnceLock<Result<T, String>>,
    load: impl FnOnce() -> wasmtime::Result<T>,
) -> Result<&T, SandboxError> {
    cell.get_or_init(|| load().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| SandboxError::Load(e.clone()))
}

/// How the process's [`Runtime`] is made, for [`Runtime::init`]: the engine, and where
/// compiled code is kept between processes. The default is Stele's own engine
/// ([`Runtime::default_config`]) and no code cache: nothing is written to disk unless the
/// embedder names a directory. `#[non_exhaustive]`: start from `RuntimeOptions::default()`
/// and change what you need with the `with_*` setters.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct RuntimeOptions {
    /// The embedder's engine, so that Stele's sandboxed modes share its compiled code, its
    /// allocator and its epoch; `None`: an engine of Stele's own.
    pub engine: Option<Engine>,
    /// The directory of the on-disk compiled-code cache ([`super::code_cache`]): the first
    /// sandboxed call of a later process then loads machine code instead of compiling (3.4 s
    /// of CPU for both builds on a 2-vCPU machine, against milliseconds). `None` (the
    /// default): compile in every process, write nothing. The directory must be writable only
    /// by the user that runs Stele (see the module doc of [`super::code_cache`]).
    pub code_cache_dir: Option<PathBuf>,
    /// The most threads the process's async instances share, for the work no caller is there
    /// to do: an instance's dispatcher turns (a group's sync that no waiting caller runs, calls
    /// left by callers that stopped listening) and I/O that a caller on a current-thread tokio
    /// runtime cannot block for. They are started as work finds the others busy, and never
    /// grow with the number of logs. `None` (the default): [`worker_threads_default`]. A turn
    /// that runs a sync holds its thread for the sync, so fewer threads than logs syncing at
    /// once add latency to the others (callers that wait still run their own syncs).
    pub worker_threads_max: Option<usize>,
}

/// The default of [`RuntimeOptions::worker_threads_max`]: twice the cores the process may use
/// (at least 2), so that threads blocked in syncs leave as many free to serve the others.
pub fn worker_threads_default() -> usize {
    2 * std::thread::available_parallelism().map_or(1, usize::from)
}

impl RuntimeOptions {
    /// These options on the embedder's `engine`.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// These options caching compiled code under `dir` (`None`: no cache).
    pub fn with_code_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.code_cache_dir = dir;
        self
    }

    /// These options with at most `threads` shared worker threads (`None`: the default).
    pub fn with_worker_threads_max(mut self, threads: Option<usize>) -> Self {
        self.worker_threads_max = threads;
        self
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("engine", &self.engine.as_ref().map(|_| "the embedder's"))
            .field("code_cache_dir", &self.code_cache_dir)
            .field("worker_threads_max", &self.worker_threads_max)
            .finish()
    }
}

impl Runtime {
    /// The process's runtime, which [`crate::Wal`], [`crate::Journal`] and [`crate::PushLog`]
    /// run their sandboxed modes on. Made on first use with `RuntimeOptions::default()` (an
    /// engine of Stele's own, no code cache), unless [`Runtime::init`] came first.
    pub fn get() -> Result<&'static Runtime, SandboxError> {
        loaded(&RUNTIME, || {
            Engine::new(&Runtime::default_config())
                .map(|engine| Runtime::new(engine, RuntimeOptions::default()))
        })
    }

    /// Makes the process's runtime as `options` say. Call it before the first sandboxed
    /// handle opens. With [`RuntimeOptions::engine`] set, both builds are compiled here
    /// (through the code cache, when one is given), so that an engine that cannot run them
    /// fails now, with [`SandboxError::Load`]; that failure is not kept, so a later call (or
    /// [`Runtime::get`]) can still make the runtime. Without, each build is compiled on its
    /// first use, as [`Runtime::get`] does. The embedder's engine needs
    /// `wasm_component_model_async(true)` (the async build), and `epoch_interruption(true)`
    /// for [`SandboxLimits::busy_deadline`] to fire (Stele's ticker then advances this
    /// engine's epoch every [`EPOCH_TICK`]; leave deadlines unset if you drive the epoch
    /// yourself). Fails with [`SandboxError::AlreadyInitialized`] once the runtime exists.
    pub fn init(options: RuntimeOptions) -> Result<&'static Runtime, SandboxError> {
        if RUNTIME.get().is_some() {
            return Err(SandboxError::AlreadyInitialized);
        }
        let made = match options.engine.clone() {
            Some(engine) => {
                let made = Runtime::new(engine, options);
                made.pre()?;
                made.pre_async()?;
                made
            }
            None => Engine::new(&Runtime::default_config())
                .map(|engine| Runtime::new(engine, options))
                .map_err(|e| SandboxError::Load(format!("{e:#}")))?,
        };
        let mut installed = false;
        let runtime = RUNTIME.get_or_init(|| {
            installed = true;
            Ok(made)
        });
        match runtime {
            Ok(runtime) if installed => Ok(runtime),
            // Another thread made the runtime between the check and here.
            _ => Err(SandboxError::AlreadyInitialized),
        }
    }

    /// [`Runtime::init`] on the embedder's `engine`, without a code cache.
    pub fn init_with_engine(engine: Engine) -> Result<&'static Runtime, SandboxError> {
        Runtime::init(RuntimeOptions::default().with_engine(engine))
    }

    /// The config of the engine [`Runtime::get`] makes: the component model with its async
    /// ABI, epoch interruption for busy deadlines, and small memory reservations
    /// ([`MEMORY_RESERVATION_BYTES`], [`MEMORY_GUARD_BYTES`],
    /// [`MEMORY_GROWTH_RESERVATION_BYTES`], no guard before a memory: six memory mappings per
    /// instance of the async build, so that 10,000 fit Linux's default `vm.max_map_count`). Everything else is wasmtime's default, including
    /// the on-demand allocator and copy-on-write memory images (an instance's data pages are
    /// shared until it writes them).
    /// Start from it to make an engine of your own (with a profiler, say) for
    /// [`RuntimeOptions::with_engine`].
    pub fn default_config() -> Config {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.wasm_component_model_async(true);
        // For the busy deadline: every loop head and function entry checks the epoch. Stores
        // without a deadline never reach theirs.
        config.epoch_interruption(true);
        // Small instances (see the constants): a log's address space is what its memory may
        // reach, not wasmtime's 4 GiB default, so that 10,000 logs fit in a process.
        config.memory_reservation(MEMORY_RESERVATION_BYTES);
        config.memory_guard_size(MEMORY_GUARD_BYTES);
        config.memory_reservation_for_growth(MEMORY_GROWTH_RESERVATION_BYTES);
        // No guard region before each linear memory: it is one more memory mapping per
        // instance, and Linux's default `vm.max_map_count` (65,530) ended a process at 9,356
        // sandboxed logs with it (seven mappings each). wasmtime documents it as protection
        // against code-generator bugs only: no wasm access reaches below a memory, and the
        // guard after it stays.
        config.guard_before_linear_memory(false);
        config
    }

    /// A config for an engine that runs up to `instances_max` Stele instances (and
    /// [`crate::embed`] stores of the embedder's own) at once from wasmtime's pooling
    /// allocator, each memory bounded by `limits.memory_bytes_max`: [`Runtime::default_config`]
    /// with the pool sized for Stele's components. The pool reserves its address space up
    /// front (`instances_max` × the memory bound, rounded up to 64 KiB pages, plus
    /// [`MEMORY_GUARD_BYTES`] each) and instantiates from preallocated slots with copy-on-write
    /// memory images; an instance past `instances_max` fails to instantiate (wasmtime's error,
    /// as [`SandboxError::Instantiate`]) until one is dropped. A pooled memory never moves, so
    /// its reservation is the whole bound. Epoch interruption is on, as in
    /// [`Runtime::default_config`]: a store of your own on this engine needs an epoch deadline
    /// (`Store::set_epoch_deadline`), or its first call traps with an interrupt.
    ///
    /// Stele's own engine uses the on-demand allocator instead (no cap on instances, nothing
    /// reserved for instances that do not exist; open latency is the log's I/O either way:
    /// see `docs/BENCHMARKS.md`, "Many logs"). Pass this to [`RuntimeOptions::with_engine`]
    /// through [`Engine::new`], or make your own engine from it.
    pub fn pooling_config(limits: &SandboxLimits, instances_max: u32) -> Config {
        let mut config = Runtime::default_config();
        let memory_bytes = (limits.memory_bytes_max as u64).next_multiple_of(WASM_PAGE_BYTES);
        config.memory_reservation(memory_bytes);
        config.memory_reservation_for_growth(0);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(instances_max)
            .total_core_instances(instances_max.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .total_memories(instances_max.saturating_mul(MEMORIES_PER_COMPONENT))
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .total_tables(instances_max.saturating_mul(TABLES_PER_COMPONENT))
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .total_stacks(instances_max)
            .table_elements(TABLE_ELEMENTS_MAX)
            .max_memory_size(limits.memory_bytes_max);
        config.allocation_strategy(pool);
        config
    }

    fn new(engine: Engine, options: RuntimeOptions) -> Runtime {
        let threads_max = options
            .worker_threads_max
            .unwrap_or_else(worker_threads_default);
        Runtime {
            engine,
            code_cache_dir: options.code_cache_dir,
            pre: OnceLock::new(),
            pre_async: OnceLock::new(),
            workers: Workers::new(threads_max),
        }
    }

    /// The shared worker threads running now, and the most there may be
    /// ([`RuntimeOptions::worker_threads_max`]).
    pub fn worker_threads(&self) -> (usize, usize) {
        self.workers.threads()
    }

    /// Compiles `wasm` through the code cache.
    fn component(&self, name: &str, wasm: &[u8]) -> wasmtime::Result<Component> {
        let (component, outcome) = super::code_cache::load_or_compile(
            &self.engine,
            name,
            wasm,
            self.code_cache_dir.as_deref(),
        )?;
        tracing::debug!(component = name, ?outcome, "component ready");
        Ok(component)
    }

    /// The plain build, linked through the public [`crate::add_to_linker_sync`], the path an
    /// embedder takes.
    fn pre(&self) -> Result<&bindings::SteleEnginePre<GuestState>, SandboxError> {
        loaded(&self.pre, || {
            let component = self.component("stele", COMPONENT_WASM)?;
            let mut linker = Linker::<GuestState>::new(&self.engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
            crate::add_to_linker_sync(&mut linker)?;
            bindings::SteleEnginePre::new(linker.instantiate_pre(&component)?)
        })
    }

    /// The async build, linked through the public [`crate::add_to_linker_async`].
    fn pre_async(&self) -> Result<&bindings_async::EngineAsyncPre<GuestState>, SandboxError> {
        loaded(&self.pre_async, || {
            let component = self.component("stele-async", COMPONENT_ASYNC_WASM)?;
            let mut linker = Linker::<GuestState>::new(&self.engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
            crate::add_to_linker_async(&mut linker)?;
            bindings_async::EngineAsyncPre::new(linker.instantiate_pre(&component)?)
        })
    }

    /// The process-wide wasmtime engine the components run on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn new_store(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
        io: Option<IoLane>,
    ) -> Store<GuestState> {
        let mut stele = SteleCtx::new(vfs)
            .with_open_files_max(limits.open_files_max)
            .allow_blocking_current_thread(true);
        if let Some(io) = io {
            stele = stele.with_io_lane(io);
        }
        // One ahead of what the watch has seen: the store's first call counts as a touch.
        stele.touch();
        let state = GuestState {
            stele,
            table: ResourceTable::new(),
            busy: BusyWatch::default(),
            wasi: WasiCtx::builder().build(),
            limiter: Limiter {
                memory_bytes_max: limits.memory_bytes_max,
            },
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        match limits.busy_deadline {
            // Epoch checks are compiled into every instance; without a deadline the store's
            // deadline is put out of reach (not u64::MAX: wasmtime adds the current epoch).
            None => store.set_epoch_deadline(u64::MAX / 2),
            Some(deadline) => {
                start_epoch_ticker(&self.engine);
                // A tick that finds the guest running with no touch since the previous tick
                // is one tick of uninterrupted guest time; more ticks than the deadline holds,
                // and the guest is stuck.
                let ticks_allowed = deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64;
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(move |mut ctx| {
                    let state = ctx.data_mut();
                    let touches = state.stele.import_calls();
                    if touches != state.busy.touches_seen {
                        state.busy.touches_seen = touches;
                        state.busy.ticks_without_touch = 0;
                    } else {
                        state.busy.ticks_without_touch += 1;
                    }
                    if state.busy.ticks_without_touch > ticks_allowed {
                        return Err(LimitTrap::Busy { deadline }.into());
                    }
                    Ok(UpdateDeadline::Continue(1))
                });
            }
        }
        store
    }

    /// A linker for any component that imports `stele:log/vfs`: a plugin composed with the
    /// engine (`wac plug plugin.wasm --plug stele.wasm`, as `examples/plugin_host.rs` does), or
    /// a component of your own. It serves `stele:log/vfs` from the store's [`Vfs`], and the
    /// WASI interfaces std links from a context with no preopened directories, no environment,
    /// no arguments, no network and no inherited stdio: the component's only file access is
    /// `stele:log/vfs`, confined as that [`Vfs`] confines it.
    ///
    /// Components must be compiled with [`Runtime::engine`], and run in stores from
    /// [`Runtime::vfs_store`].
    pub fn vfs_linker(&self) -> Result<Linker<GuestState>, SandboxError> {
        let mut linker = Linker::<GuestState>::new(&self.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .and_then(|()| crate::add_to_linker_sync(&mut linker))
            .map_err(|e| SandboxError::Load(format!("{e:#}")))?;
        Ok(linker)
    }

    /// A store for a component linked with [`Runtime::vfs_linker`]: its `stele:log/vfs`
    /// import is served from `vfs`, under `limits` (memory, open files, busy deadline), exactly
    /// as for the engine's own instances. A limit the component breaks traps the call, and
    /// [`Runtime::trap_error`] tells which limit it was.
    pub fn vfs_store(&self, vfs: Arc<dyn Vfs>, limits: SandboxLimits) -> Store<GuestState> {
        self.new_store(vfs, limits, None)
    }

    /// The typed reason for a trap in a store from [`Runtime::vfs_store`]:
    /// [`SandboxError::MemoryLimit`] or [`SandboxError::Interrupted`] when a limit caused it,
    /// else [`SandboxError::Trapped`] with the trap's message.
    pub fn trap_error(trap: wasmtime::Error) -> SandboxError {
        trap_error(trap)
    }

    /// A new instance of the plain component whose `vfs` import is served by `vfs`.
    pub(crate) fn instantiate(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Result<(Store<GuestState>, bindings::SteleEngine), SandboxError> {
        let mut store = self.new_store(vfs, limits, None);
        let bindings = self
            .pre()?
            .instantiate(&mut store)
            .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))?;
        Ok((store, bindings))
    }

    /// A new store for the async component, with an I/O lane of its own on the shared worker
    /// threads. The instance itself is made by [`Self::instantiate_async_in`]: its host
    /// functions are async, so instantiation must be too.
    pub(crate) fn store_for_async(
        &self,
        vfs: Arc<dyn Vfs>,
        limits: SandboxLimits,
    ) -> Result<Store<GuestState>, SandboxError> {
        self.workers.ensure_started().map_err(|e| {
            SandboxError::Instantiate(format!("start the first shared worker thread: {e}"))
        })?;
        let io = IoLane::new(self.workers.clone());
        Ok(self.new_store(vfs, limits, Some(io)))
    }

    /// The shared worker threads, for the store drivers' dispatcher turns.
    pub(crate) fn workers(&self) -> &Workers {
        &self.workers
    }

    /// A new store for the async component without an I/O lane: its async imports run
    /// inline. For instances driven from a thread that may block (tokio's blocking pool), where
    /// a hop to a worker thread would only add latency.
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
        self.pre_async()?
            .instantiate_async(store)
            .await
            .map_err(|e| SandboxError::Instantiate(format!("{e:#}")))
    }
}
