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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{
    self as engine, CompactionPolicy, CompactionReport, Finish, PushLogError, ReservedSection,
    ScannedFrame, ipc,
};
pub use stele::recovery::LogEnd;
use stele::vfs::Vfs;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::bindings;
use crate::bindings::exports::stele::log::push_log as wit;
use crate::runtime::{GuestState, PlainInstance, Runtime, SandboxLimits, trap_error};
use crate::{Mode, SandboxError};

/// Any error a [`PushLog`] call can return: the engine's (typed the same in every mode; Arrow
/// failures inside the guest arrive as [`PushLogCallError::Arrow`] text), plus the sandbox's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushLogCallError {
    /// The engine's own error, the same in every mode.
    #[error(transparent)]
    PushLog(#[from] PushLogError),
    /// A batch or schema could not be encoded or decoded as Arrow IPC on the host's side.
    #[error("arrow: {0}")]
    Arrow(String),
    /// What only a sandboxed push log can fail with (a trap, a limit).
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
    Sandboxed(Mutex<PlainInstance>),
}

fn from_wit(err: wit::PushLogError) -> PushLogCallError {
    use wit::PushLogError as E;
    let engine_error = match err {
        E::Vfs(e) => PushLogError::Vfs(crate::vfs_host::from_wit(e)),
        E::BadHeader(h) => PushLogError::BadHeader(crate::convert::plain::from_wit_header(h)),
        E::SchemaMismatch(found) => PushLogError::SchemaMismatch { found },
        E::PushTooLarge(s) => PushLogError::PushTooLarge {
            bytes: usize::try_from(s.bytes).unwrap_or(usize::MAX),
            bytes_max: usize::try_from(s.bytes_max).unwrap_or(usize::MAX),
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
            cause: crate::vfs_host::from_wit(f.cause),
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
        // The component exports whole compactions only (the crash points are native test
        // hooks, `stele::push_log::PushLog::compact_with`).
        finished: Finish::Swap,
    }
}

fn arrow(e: impl std::fmt::Display) -> PushLogCallError {
    PushLogCallError::Arrow(e.to_string())
}

impl PushLog {
    /// A push log at `path` whose batches have `schema`; touches nothing until the first push.
    /// Sandboxed, the instance has the default [`SandboxLimits`].
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn new(
        vfs: Arc<dyn Vfs>,
        path: &str,
        schema: SchemaRef,
        mode: Mode,
    ) -> Result<PushLog, PushLogCallError> {
        PushLog::new_with_limits(vfs, path, schema, mode, SandboxLimits::default())
    }

    /// [`PushLog::new`], with the sandboxed instance bounded by `limits` (ignored natively).
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn new_with_limits(
        vfs: Arc<dyn Vfs>,
        path: &str,
        schema: SchemaRef,
        mode: Mode,
        limits: SandboxLimits,
    ) -> Result<PushLog, PushLogCallError> {
        let inner = match mode {
            Mode::Native => Inner::Native(engine::PushLog::new(vfs, path, schema.clone())),
            Mode::Sandboxed | Mode::SandboxedPlain => {
                let (mut store, engine) = Runtime::get()?.instantiate(vfs, limits)?;
                let schema_ipc = ipc::encode_schema(&schema).map_err(arrow)?;
                let log = engine
                    .stele_log_push_log()
                    .log()
                    .call_open(&mut store, path, &schema_ipc)
                    .map_err(trap_error)?
                    .map_err(from_wit)?;
                Inner::Sandboxed(Mutex::new(PlainInstance::new(store, engine, log)))
            }
        };
        Ok(PushLog { schema, inner })
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Runs one call in the instance; see [`PlainInstance::call`].
    fn guest<R>(
        guest: &Mutex<PlainInstance>,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::Engine,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let result = guest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(call)?;
        result.map_err(from_wit)
    }

    /// Appends one push and makes it durable; returns its frame's offset. See
    /// [`stele::push_log::PushLog::append`].
    #[tracing::instrument(level = "debug", skip_all)]
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.append(batch)?),
            Inner::Sandboxed(guest) => {
                let bytes = ipc::encode_stream(batch).map_err(arrow)?;
                // Refused here, not after a copy into the guest's memory, which may be smaller.
                engine::check_push_size(bytes.len())?;
                Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log().log().call_append(st, log, &bytes)
                })
            }
        }
    }

    /// A streamed scan: the log's frames in order, then how it ended ([`PushLogScan::end`]). Memory
    /// stays bounded by a few frames in every mode; sandboxed, the guest hands frames over in
    /// lists of at most 64 frames or about 4 MiB. A missing file is an empty, clean log.
    #[tracing::instrument(level = "debug", skip_all)]
    pub fn scan(&self) -> Result<PushLogScan<'_>, PushLogCallError> {
        let source = match &self.inner {
            Inner::Native(log) => Source::Native(log.scan()?),
            Inner::Sandboxed(guest) => {
                let handle = Self::guest(guest, |st, e, log| {
                    e.stele_log_push_log().log().call_scan(st, log)
                })?;
                Source::Sandboxed {
                    guest,
                    handle: Some(handle),
                    fetched: VecDeque::new(),
                    end: None,
                }
            }
        };
        Ok(PushLogScan {
            schema: &self.schema,
            source,
            failed: false,
        })
    }

    /// Every frame of the log, in order, and how it ended: [`PushLog::scan`] collected.
    #[tracing::instrument(level = "debug", skip_all)]
    pub fn scan_all(&self) -> Result<(Vec<ScannedFrame>, LogEnd), PushLogCallError> {
        let mut scan = self.scan()?;
        let frames = scan.by_ref().collect::<Result<Vec<_>, _>>()?;
        Ok((frames, scan.end()))
    }

    /// How many whole frames the log holds.
    #[tracing::instrument(level = "debug", skip_all)]
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
    #[tracing::instrument(level = "info", skip_all)]
    pub fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.compact()?),
            Inner::Sandboxed(guest) => Self::guest(guest, |st, e, log| {
                e.stele_log_push_log().log().call_compact(st, log)
            })
            .map(from_wit_report),
        }
    }

    /// Compacts if `policy` says so; `None` when it did not run.
    #[tracing::instrument(level = "info", skip_all)]
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
    #[tracing::instrument(level = "info", skip_all)]
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

/// How many frames a sandboxed scan asks the guest for at once; the guest also stops near 4 MiB.
const SCAN_FRAMES_PER_CALL: u32 = 64;

/// A streamed scan of a [`PushLog`], from [`PushLog::scan`]. Yields each frame's batch and
/// offset; after the last one, [`PushLogScan::end`] says how the log ended. The first error ends it.
pub struct PushLogScan<'a> {
    schema: &'a SchemaRef,
    source: Source<'a>,
    failed: bool,
}

enum Source<'a> {
    Native(engine::PushLogScan),
    Sandboxed {
        guest: &'a Mutex<PlainInstance>,
        /// The guest's scan resource, until the scan ends (or the scan is dropped).
        handle: Option<ResourceAny>,
        fetched: VecDeque<wit::ScannedFrame>,
        end: Option<LogEnd>,
    },
}

impl std::fmt::Debug for PushLogScan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushLogScan")
            .field("end", &self.end())
            .finish_non_exhaustive()
    }
}

impl PushLogScan<'_> {
    /// How the log ended: empty, clean, a torn tail (not yet cut) or middle corruption. Final
    /// once the iterator has returned `None`; [`LogEnd::Clean`] before that.
    pub fn end(&self) -> LogEnd {
        match &self.source {
            Source::Native(scan) => scan.end(),
            Source::Sandboxed { end, .. } => end.unwrap_or(LogEnd::Clean),
        }
    }

    fn next_sandboxed(&mut self) -> Option<Result<ScannedFrame, PushLogCallError>> {
        let Source::Sandboxed {
            guest,
            handle,
            fetched,
            end,
        } = &mut self.source
        else {
            unreachable!("next_sandboxed is only called on a sandboxed source")
        };
        if fetched.is_empty() {
            let scan = (*handle)?;
            let frames = PushLog::guest(guest, |st, e, _| {
                e.stele_log_push_log()
                    .scan()
                    .call_next_frames(st, scan, SCAN_FRAMES_PER_CALL)
            });
            match frames {
                Ok(frames) if frames.is_empty() => {
                    let found = PushLog::guest(guest, |st, e, _| {
                        e.stele_log_push_log().scan().call_end(st, scan).map(Ok)
                    });
                    close(guest, handle);
                    *end = Some(match found {
                        Ok(Some(wit::ScanEnd::Empty)) => LogEnd::Empty,
                        Ok(None | Some(wit::ScanEnd::Clean)) => LogEnd::Clean,
                        Ok(Some(wit::ScanEnd::TornTail(t))) => LogEnd::TornTail {
                            valid_end: t.valid_end,
                            torn_end: t.file_len,
                        },
                        Ok(Some(wit::ScanEnd::Corrupt(d))) => LogEnd::Corrupt {
                            offset: d.offset,
                            valid_frame_at: d.valid_frame_at,
                        },
                        Err(e) => return Some(Err(e)),
                    });
                    return None;
                }
                Ok(frames) => fetched.extend(frames),
                Err(e) => {
                    close(guest, handle);
                    return Some(Err(e));
                }
            }
        }
        // The guest forwards frame bodies undecoded (checksums verified): decoding them here
        // is the schema check, exactly as a native scan does it.
        let frame = fetched.pop_front()?;
        Some(
            ipc::decode_stream(&frame.ipc_stream, self.schema)
                .map(|batch| ScannedFrame {
                    offset: frame.offset,
                    batch,
                })
                .map_err(|why| {
                    PushLogError::MalformedFrame {
                        offset: frame.offset,
                        why,
                    }
                    .into()
                }),
        )
    }
}

/// Drops the guest's scan resource once; a trap here is already sticky on the instance.
fn close(guest: &Mutex<PlainInstance>, handle: &mut Option<ResourceAny>) {
    if let Some(scan) = handle.take() {
        let _ = PushLog::guest(guest, |st, _, _| scan.resource_drop(st).map(Ok));
    }
}

impl Iterator for PushLogScan<'_> {
    type Item = Result<ScannedFrame, PushLogCallError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = match &mut self.source {
            Source::Native(scan) => scan.next().map(|r| r.map_err(PushLogCallError::from)),
            Source::Sandboxed { .. } => self.next_sandboxed(),
        };
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

impl Drop for PushLogScan<'_> {
    fn drop(&mut self) {
        if let Source::Sandboxed { guest, handle, .. } = &mut self.source {
            close(guest, handle);
        }
    }
}
