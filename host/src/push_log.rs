//! [`PushLog`]: the push log's API with `arrow` record batches, the same in every [`Mode`].
//!
//! - [`Mode::Native`]: the engine's [`stele::push_log::PushLog`] over the caller's [`Vfs`].
//! - [`Mode::Sandboxed`] and [`Mode::SandboxedPlain`]: the component's `stele:log/push-log`
//!   export, in an instance of its own. Batches cross as Arrow IPC stream bytes; the guest
//!   decodes each pushed batch and checks its schema before writing. The push log has no async
//!   export (a push is one write and one sync, and the log serializes its pushes), so both
//!   sandboxed modes run the plain build.
//!
//! Durability claims are the engine's ([`stele::push_log::PushLog::append`] and `compact`);
//! they hold in every mode, because the guest issues the same syncs through its imports.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{
    self as engine, CompactionPolicy, CompactionReport, Finish, PushLogEnd, PushLogError,
    ReservedSection, ScannedFrame, ipc,
};
use stele::vfs::Vfs;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::runtime::bindings::exports::stele::log::push_log as wit;
use crate::runtime::{GuestState, Runtime, SandboxLimits, bindings};
use crate::{Mode, SandboxError};

/// Any error a [`PushLog`] call can return: the engine's (typed the same in every mode; Arrow
/// failures inside the guest arrive as [`PushLogCallError::Arrow`] text), plus the sandbox's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushLogCallError {
    #[error(transparent)]
    PushLog(#[from] PushLogError),
    #[error("arrow: {0}")]
    Arrow(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// A push log, native or sandboxed. `Send + Sync`; pushes are serialized.
#[derive(Debug)]
pub struct PushLog {
    schema: SchemaRef,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Native(engine::PushLog),
    Sandboxed(Mutex<GuestLog>),
}

struct GuestLog {
    store: Store<GuestState>,
    /// Boxed: the generated bindings are large, and the native variant is not.
    engine: Box<bindings::Engine>,
    log: ResourceAny,
    trapped: Option<String>,
}

impl std::fmt::Debug for GuestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestLog")
            .field("trapped", &self.trapped)
            .finish_non_exhaustive()
    }
}

fn from_wit(err: wit::PushLogError) -> PushLogCallError {
    use wit::PushLogError as E;
    let engine_error = match err {
        E::Vfs(e) => PushLogError::Vfs(crate::vfs_import::from_wit(e)),
        E::BadHeader(h) => PushLogError::BadHeader(crate::convert::plain::from_wit_header(h)),
        E::SchemaMismatch(found) => PushLogError::SchemaMismatch { found },
        E::PushTooLarge(s) => PushLogError::PushTooLarge {
            bytes: usize::try_from(s.actual).unwrap_or(usize::MAX),
            max: usize::try_from(s.limit).unwrap_or(usize::MAX),
        },
        E::Corrupt(d) => PushLogError::Corrupt {
            offset: d.offset,
            valid_frame_at: d.valid_frame_at,
        },
        E::MalformedFrame(m) => PushLogError::MalformedFrame {
            offset: m.offset,
            why: m.why,
        },
        E::Locked(lock_path) => PushLogError::Locked { lock_path },
        E::AppendFailed(f) => PushLogError::AppendFailed {
            cause: crate::vfs_import::from_wit(f.cause),
            rolled_back: f.rolled_back,
        },
        E::Arrow(message) => return PushLogCallError::Arrow(message),
    };
    engine_error.into()
}

fn from_wit_report(r: wit::CompactionReport) -> CompactionReport {
    CompactionReport {
        frames_before: r.frames_before as usize,
        frames_after: r.frames_after as usize,
        rows: r.rows as usize,
        bytes_before: r.bytes_before,
        bytes_after: r.bytes_after,
        finished: match r.finished {
            wit::Finish::AfterStage => Finish::AfterStage,
            wit::Finish::AfterStageSync => Finish::AfterStageSync,
            wit::Finish::AfterRename => Finish::AfterRename,
            wit::Finish::BeforeDirSync => Finish::BeforeDirSync,
            wit::Finish::Swap => Finish::Swap,
        },
    }
}

fn arrow(e: impl std::fmt::Display) -> PushLogCallError {
    PushLogCallError::Arrow(e.to_string())
}

impl PushLog {
    /// A push log at `path` whose batches have `schema`; touches nothing until the first push.
    pub fn new(
        vfs: Arc<dyn Vfs>,
        path: &str,
        schema: SchemaRef,
        mode: Mode,
    ) -> Result<PushLog, PushLogCallError> {
        let inner = match mode {
            Mode::Native => Inner::Native(engine::PushLog::new(vfs, path, schema.clone())),
            Mode::Sandboxed | Mode::SandboxedPlain => {
                let (mut store, engine) =
                    Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
                let schema_ipc = ipc::encode_schema(&schema).map_err(arrow)?;
                let log = engine
                    .stele_log_push_log()
                    .log()
                    .call_open(&mut store, path, &schema_ipc)
                    .map_err(trapped)?
                    .map_err(from_wit)?;
                Inner::Sandboxed(Mutex::new(GuestLog {
                    store,
                    engine: Box::new(engine),
                    log,
                    trapped: None,
                }))
            }
        };
        Ok(PushLog { schema, inner })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Runs one call in the instance, turning a trap into a sticky [`SandboxError::Trapped`].
    fn guest<R>(
        guest: &Mutex<GuestLog>,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::Engine,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let mut guard: MutexGuard<'_, GuestLog> =
            guest.lock().unwrap_or_else(PoisonError::into_inner);
        let g = &mut *guard;
        if let Some(message) = &g.trapped {
            return Err(SandboxError::Trapped(message.clone()).into());
        }
        match call(&mut g.store, &g.engine, g.log) {
            Ok(result) => result.map_err(from_wit),
            Err(e) => {
                let message = format!("{e:#}");
                g.trapped = Some(message.clone());
                Err(SandboxError::Trapped(message).into())
            }
        }
    }

    /// Appends one push and makes it durable; returns its frame's offset. See
    /// [`stele::push_log::PushLog::append`].
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.append(batch)?),
            Inner::Sandboxed(guest) => {
                let bytes = ipc::encode_stream(batch).map_err(arrow)?;
                Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log().log().call_append(st, log, &bytes)
                })
            }
        }
    }

    /// Every frame of the log, in order, and how it ended. (Natively,
    /// [`stele::push_log::PushLog::scan`] streams instead.)
    pub fn scan_all(&self) -> Result<(Vec<ScannedFrame>, PushLogEnd), PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => {
                let mut scan = log.scan()?;
                let frames = scan.by_ref().collect::<Result<Vec<_>, _>>()?;
                Ok((frames, scan.end()))
            }
            Inner::Sandboxed(guest) => {
                let scan = Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log().log().call_scan(st, log)
                })?;
                let mut frames = Vec::new();
                loop {
                    let batch = Self::guest(guest, |st, e, _| {
                        e.stele_log_push_log().scan().call_next_frames(st, scan, 64)
                    })?;
                    if batch.is_empty() {
                        break;
                    }
                    for f in batch {
                        let batch = ipc::decode_stream(&f.ipc_stream, &self.schema)
                            .map_err(PushLogCallError::Arrow)?;
                        frames.push(ScannedFrame {
                            offset: f.offset,
                            batch,
                        });
                    }
                }
                let end = Self::guest(guest, |st, e, _| {
                    e.stele_log_push_log().scan().call_end(st, scan).map(Ok)
                })?;
                Self::guest(guest, |st, _, _| scan.resource_drop(st).map(Ok))?;
                let end = match end {
                    None | Some(wit::ScanEnd::Clean) => PushLogEnd::Clean,
                    Some(wit::ScanEnd::TornTail(t)) => PushLogEnd::TornTail {
                        valid_end: t.valid_end,
                        file_len: t.file_len,
                    },
                    Some(wit::ScanEnd::Corrupt(d)) => PushLogEnd::Corrupt {
                        offset: d.offset,
                        valid_frame_at: d.valid_frame_at,
                    },
                };
                Ok((frames, end))
            }
        }
    }

    /// How many whole frames the log holds.
    pub fn frame_count(&self) -> Result<usize, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.frame_count()?),
            Inner::Sandboxed(guest) => Self::guest(guest, |st, e, log| {
                e.stele_log_push_log().log().call_frame_count(st, log)
            })
            .map(|n| n as usize),
        }
    }

    /// Compacts atomically; see [`stele::push_log::PushLog::compact`].
    pub fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        self.compact_with(Finish::Swap)
    }

    /// Compacts, stopping where `finish` says; see
    /// [`stele::push_log::PushLog::compact_with`].
    pub fn compact_with(&self, finish: Finish) -> Result<CompactionReport, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.compact_with(finish)?),
            Inner::Sandboxed(guest) => {
                let finish = match finish {
                    Finish::AfterStage => wit::Finish::AfterStage,
                    Finish::AfterStageSync => wit::Finish::AfterStageSync,
                    Finish::AfterRename => wit::Finish::AfterRename,
                    Finish::BeforeDirSync => wit::Finish::BeforeDirSync,
                    Finish::Swap => wit::Finish::Swap,
                };
                Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log()
                        .log()
                        .call_compact_with(st, log, finish)
                })
                .map(from_wit_report)
            }
        }
    }

    /// Compacts if `policy` says so; `None` when it did not run.
    pub fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.maybe_compact(policy)?),
            Inner::Sandboxed(guest) => {
                let policy = wit::CompactionPolicy {
                    frames: policy.frames.map(|n| n as u64),
                    bytes: policy.bytes,
                };
                Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log()
                        .log()
                        .call_maybe_compact(st, log, policy)
                })
                .map(|r| r.map(from_wit_report))
            }
        }
    }

    /// Seals the recovered pushes into an archive section; see
    /// [`stele::push_log::PushLog::seal_section`].
    pub fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.seal_section(module_name)?),
            Inner::Sandboxed(guest) => Self::guest(guest, |st, e, log| {
                e.stele_log_push_log()
                    .log()
                    .call_seal_section(st, log, module_name)
            })
            .map(|s| ReservedSection {
                name: s.name,
                payload: s.payload,
            }),
        }
    }
}

fn trapped(e: wasmtime::Error) -> SandboxError {
    SandboxError::Trapped(format!("{e:#}"))
}
