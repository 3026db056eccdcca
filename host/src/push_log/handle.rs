//! [`PushLog`]: the push log's API with `arrow` record batches, the same in every [`Mode`].
//!
//! Where the engine runs is picked once, when the log is made ([`super::engine`]):
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

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{
    self as engine, CompactionPolicy, CompactionReport, ReservedSection, ScannedFrame,
};
pub use stele::recovery::LogEnd;
use stele::vfs::Vfs;

use super::engine::{PushLogEngine, arrow};
use super::error::PushLogCallError;
use super::plain::PlainPushLog;
use super::scan::PushLogScan;
use super::session;
use crate::Mode;
use crate::archive_gate::CompactionListener;
use crate::quota::{Pacer, with_quota};
use crate::sandbox::runtime::SandboxLimits;

/// A push log, native or sandboxed. `Send + Sync`; pushes are serialized.
pub struct PushLog {
    schema: SchemaRef,
    engine: Box<dyn PushLogEngine>,
    mode: Mode,
    path: String,
    compaction_listener: std::sync::OnceLock<Arc<dyn CompactionListener>>,
    /// The tenant's rates, asked before every push and compaction.
    pacer: Pacer,
}

impl std::fmt::Debug for PushLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushLog")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
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
        let vfs = with_quota(vfs, &limits).map_err(stele::push_log::PushLogError::Vfs)?;
        let pacer = Pacer::over(&vfs);
        let engine = open_engine(vfs, path, &schema, mode, limits)?;
        Ok(PushLog {
            pacer,
            schema,
            engine,
            mode,
            path: path.to_owned(),
            compaction_listener: std::sync::OnceLock::new(),
        })
    }

    /// Where this log's engine runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The quota's figures when the log's storage has one; see [`crate::Wal::quota_stats`].
    pub fn quota_stats(&self) -> Option<stele::vfs::QuotaStats> {
        self.pacer.stats()
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Appends one push and makes it durable; returns its frame's offset. See
    /// [`stele::push_log::PushLog::append`].
    #[tracing::instrument(level = "debug", skip_all)]
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        // Checked here, first, in every mode: a batch of another schema gets the same error
        // whether or not it would also be too large for a frame.
        engine::check_schema(&self.schema, batch)?;
        self.pacer.pace_blocking()?;
        self.engine.append(batch)
    }

    /// A streamed scan: the log's frames in order, then how it ended ([`PushLogScan::end`]). Memory
    /// stays bounded by a few frames in every mode; sandboxed, the guest hands frames over in
    /// lists of at most 64 frames or about 4 MiB. A missing file is an empty, clean log.
    #[tracing::instrument(level = "debug", skip_all)]
    pub fn scan(&self) -> Result<PushLogScan<'_>, PushLogCallError> {
        Ok(PushLogScan::new(self.engine.scan(&self.schema)?))
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
        self.engine.frame_count()
    }

    /// Compacts atomically; see [`stele::push_log::PushLog::compact`]. On `Ok` the attached
    /// [`CompactionListener`], if any, is told.
    #[tracing::instrument(level = "info", skip_all)]
    pub fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        self.pacer.pace_blocking()?;
        let report = self.engine.compact()?;
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
        let report = self.engine.maybe_compact(policy)?;
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
        self.engine.seal_section(module_name)
    }
}

/// The engine for a push log at `path` with `schema`, where `mode` says; `limits` bound a
/// sandboxed instance.
pub(crate) fn open_engine(
    vfs: Arc<dyn Vfs>,
    path: &str,
    schema: &SchemaRef,
    mode: Mode,
    limits: SandboxLimits,
) -> Result<Box<dyn PushLogEngine>, PushLogCallError> {
    Ok(match mode {
        Mode::Native => Box::new(engine::PushLog::new(vfs, path, schema.clone())),
        Mode::Sandboxed => Box::new(session::start(vfs, path, schema_ipc(schema)?, limits)?),
        Mode::SandboxedPlain => {
            Box::new(PlainPushLog::open(vfs, path, &schema_ipc(schema)?, limits)?)
        }
    })
}

fn schema_ipc(schema: &SchemaRef) -> Result<Vec<u8>, PushLogCallError> {
    engine::ipc::encode_schema(schema).map_err(arrow)
}
