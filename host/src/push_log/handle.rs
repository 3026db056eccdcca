//! [`PushLog`]: the push log's API with `arrow` record batches, the same in every [`Mode`].
//!
//! - [`Mode::Native`]: the engine's [`stele::push_log::PushLog`] over the caller's [`Vfs`].
//! - [`Mode::Sandboxed`]: the async-ABI component's `stele:log/push-log-async` export, one
//!   instance serving every thread concurrently through the store driver (as the sandboxed
//!   WAL's does): while one push awaits its sync, a scan or a count from another thread runs,
//!   and a second push waits in the guest for the first.
//! - [`Mode::SandboxedPlain`]: the plain component's `stele:log/push-log` export, in an
//!   instance of its own whose calls are serialized.
//!
//! Batches cross as Arrow IPC stream bytes; the guest decodes each pushed batch and checks its
//! schema before writing. Durability claims are the engine's
//! ([`stele::push_log::PushLog::append`] and `compact`); they hold in every mode, because the
//! guest issues the same syncs through its imports.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{
    self as engine, CompactionPolicy, CompactionReport, PushLogError, ReservedSection,
    ScannedFrame, ipc,
};
pub use stele::recovery::LogEnd;
use stele::vfs::Vfs;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::plain::{
    from_wit_frames, from_wit_push_log_error, from_wit_report, from_wit_scan_end, from_wit_section,
    wit_policy,
};
use super::error::PushLogCallError;
use super::session::{self as push_log_session, AsyncPushLog, PushLogRequest};
use crate::Mode;
use crate::archive_gate::CompactionListener;
use crate::embed::bindings::{self, exports::stele::log::push_log as wit};
use crate::sandbox::PlainInstance;
use crate::sandbox::runtime::{GuestState, Runtime, SandboxLimits, trap_error};

/// A push log, native or sandboxed. `Send + Sync`; pushes are serialized.
#[derive(Debug)]
pub struct PushLog {
    schema: SchemaRef,
    inner: Inner,
    path: String,
    compaction_listener: std::sync::OnceLock<Arc<dyn CompactionListener>>,
}

enum Inner {
    Native(engine::PushLog),
    Sandboxed(Guest),
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inner::Native(log) => f.debug_tuple("Native").field(log).finish(),
            Inner::Sandboxed(Guest::Async(_)) => f.write_str("Sandboxed"),
            Inner::Sandboxed(Guest::Plain(guest)) => {
                f.debug_tuple("SandboxedPlain").field(guest).finish()
            }
        }
    }
}

/// A sandboxed log's instance: the calls [`PushLog`] and its scans make, the same for both
/// builds, answered in the engine's types.
enum Guest {
    Async(AsyncPushLog),
    Plain(Mutex<PlainInstance>),
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
            Mode::Sandboxed => {
                let schema_ipc = ipc::encode_schema(&schema).map_err(arrow)?;
                Inner::Sandboxed(Guest::Async(push_log_session::start(
                    vfs, path, schema_ipc, limits,
                )?))
            }
            Mode::SandboxedPlain => {
                let (mut store, engine) = Runtime::get()?.instantiate(vfs, limits)?;
                let schema_ipc = ipc::encode_schema(&schema).map_err(arrow)?;
                let log = engine
                    .stele_log_push_log()
                    .log()
                    .call_open(&mut store, path, &schema_ipc)
                    .map_err(trap_error)?
                    .map_err(from_wit_push_log_error)?;
                Inner::Sandboxed(Guest::Plain(Mutex::new(PlainInstance::new(
                    store, engine, log,
                ))))
            }
        };
        Ok(PushLog {
            schema,
            inner,
            path: path.to_owned(),
            compaction_listener: std::sync::OnceLock::new(),
        })
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
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
                guest.append(bytes)
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
            Inner::Sandboxed(guest) => Source::Sandboxed {
                handle: Some(guest.open_scan()?),
                guest,
                fetched: VecDeque::new(),
                end: None,
            },
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
            Inner::Sandboxed(guest) => guest.frame_count().map(|n| n as usize),
        }
    }

    /// Compacts atomically; see [`stele::push_log::PushLog::compact`]. On `Ok` the attached
    /// [`CompactionListener`], if any, is told.
    #[tracing::instrument(level = "info", skip_all)]
    pub fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        let report = match &self.inner {
            Inner::Native(log) => log.compact()?,
            Inner::Sandboxed(guest) => guest.compact()?,
        };
        self.tell_compacted();
        Ok(report)
    }

    /// Compacts if `policy` says so; `None` when it did not run. When it ran, the attached
    /// [`CompactionListener`], if any, is told.
    #[tracing::instrument(level = "info", skip_all)]
    pub fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        let report = match &self.inner {
            Inner::Native(log) => log.maybe_compact(policy)?,
            Inner::Sandboxed(guest) => guest.maybe_compact(policy)?,
        };
        if report.is_some() {
            self.tell_compacted();
        }
        Ok(report)
    }

    /// Tells `listener` of every later compaction (an archiver ships each generation:
    /// `stele-archive`). One listener for the life of the log; a second is refused and handed
    /// back.
    pub fn set_compaction_listener(
        &self,
        listener: Arc<dyn CompactionListener>,
    ) -> Result<(), Arc<dyn CompactionListener>> {
        self.compaction_listener.set(listener)
    }

    /// The log's root-relative path.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn tell_compacted(&self) {
        if let Some(listener) = self.compaction_listener.get() {
            listener.compacted(&self.path);
        }
    }

    /// Seals the recovered pushes into an archive section; see
    /// [`stele::push_log::PushLog::seal_section`].
    #[tracing::instrument(level = "info", skip_all)]
    pub fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        match &self.inner {
            Inner::Native(log) => Ok(log.seal_section(module_name)?),
            Inner::Sandboxed(guest) => guest.seal_section(module_name),
        }
    }
}

impl Guest {
    /// Runs one call in the plain instance; see [`PlainInstance::call`].
    fn plain<R>(
        guest: &Mutex<PlainInstance>,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestLog<'_>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let result = guest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(|st, e: &bindings::Engine, log| call(st, &e.stele_log_push_log().log(), log))?;
        result.map_err(from_wit_push_log_error)
    }

    /// [`Self::plain`] for a call on a scan resource.
    fn plain_scan<R>(
        guest: &Mutex<PlainInstance>,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestScan<'_>,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let result = guest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(|st, e: &bindings::Engine, _| call(st, &e.stele_log_push_log().scan()))?;
        result.map_err(from_wit_push_log_error)
    }

    fn append(&self, batch_ipc: Vec<u8>) -> Result<u64, PushLogCallError> {
        match self {
            Guest::Async(log) => {
                log.request_blocking(|reply| PushLogRequest::Append { batch_ipc, reply })
            }
            Guest::Plain(g) => Self::plain(g, |st, api, log| api.call_append(st, log, &batch_ipc)),
        }
    }

    fn open_scan(&self) -> Result<ResourceAny, PushLogCallError> {
        match self {
            Guest::Async(log) => log.request_blocking(|reply| PushLogRequest::Scan { reply }),
            Guest::Plain(g) => Self::plain(g, |st, api, log| api.call_scan(st, log)),
        }
    }

    fn next_frames(
        &self,
        scan: ResourceAny,
        frames_max: u32,
    ) -> Result<Vec<(u64, Vec<u8>)>, PushLogCallError> {
        match self {
            Guest::Async(log) => log.request_blocking(|reply| PushLogRequest::NextFrames {
                scan,
                frames_max,
                reply,
            }),
            Guest::Plain(g) => {
                Self::plain_scan(g, |st, api| api.call_next_frames(st, scan, frames_max))
                    .map(from_wit_frames)
            }
        }
    }

    fn scan_end(&self, scan: ResourceAny) -> Result<LogEnd, PushLogCallError> {
        match self {
            Guest::Async(log) => {
                log.request_blocking(|reply| PushLogRequest::ScanEnd { scan, reply })
            }
            Guest::Plain(g) => {
                Self::plain_scan(g, |st, api| api.call_end(st, scan).map(Ok)).map(from_wit_scan_end)
            }
        }
    }

    /// Releases a scan's resource; a trap here is already sticky on the instance.
    fn close_scan(&self, scan: ResourceAny) {
        let _ = match self {
            Guest::Async(log) => {
                log.request_blocking(|reply| PushLogRequest::CloseScan { scan, reply })
            }
            Guest::Plain(g) => Self::plain_scan(g, |st, _| scan.resource_drop(st).map(Ok)),
        };
    }

    fn frame_count(&self) -> Result<u64, PushLogCallError> {
        match self {
            Guest::Async(log) => log.request_blocking(|reply| PushLogRequest::FrameCount { reply }),
            Guest::Plain(g) => Self::plain(g, |st, api, log| api.call_frame_count(st, log)),
        }
    }

    fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        match self {
            Guest::Async(log) => log.request_blocking(|reply| PushLogRequest::Compact { reply }),
            Guest::Plain(g) => {
                Self::plain(g, |st, api, log| api.call_compact(st, log)).map(from_wit_report)
            }
        }
    }

    fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        match self {
            Guest::Async(log) => {
                log.request_blocking(|reply| PushLogRequest::MaybeCompact { policy, reply })
            }
            Guest::Plain(g) => Self::plain(g, |st, api, log| {
                api.call_maybe_compact(st, log, wit_policy(policy))
            })
            .map(|r| r.map(from_wit_report)),
        }
    }

    fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        match self {
            Guest::Async(log) => log.request_blocking(|reply| PushLogRequest::SealSection {
                module_name: module_name.to_owned(),
                reply,
            }),
            Guest::Plain(g) => Self::plain(g, |st, api, log| {
                api.call_seal_section(st, log, module_name)
            })
            .map(from_wit_section),
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
        guest: &'a Guest,
        /// The guest's scan resource, until the scan ends (or the scan is dropped).
        handle: Option<ResourceAny>,
        /// Offsets and IPC stream bytes, not yet decoded.
        fetched: VecDeque<(u64, Vec<u8>)>,
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
            match guest.next_frames(scan, SCAN_FRAMES_PER_CALL) {
                Ok(frames) if frames.is_empty() => {
                    let found = guest.scan_end(scan);
                    close(guest, handle);
                    *end = Some(match found {
                        Ok(found) => found,
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
        let (offset, ipc_stream) = fetched.pop_front()?;
        Some(
            ipc::decode_stream(&ipc_stream, self.schema)
                .map(|batch| ScannedFrame { offset, batch })
                .map_err(|why| PushLogError::MalformedFrame { offset, why }.into()),
        )
    }
}

/// Releases the guest's scan resource once.
fn close(guest: &Guest, handle: &mut Option<ResourceAny>) {
    if let Some(scan) = handle.take() {
        guest.close_scan(scan);
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
