//! [`Wal`]: the WAL's typed API for threads, the same in every [`Mode`]. The mode is matched
//! once, where the log is opened ([`open_engine`]); every later call goes to the
//! [`WalEngine`] it picked, after the checks every mode makes in one order ([`Wal::checked`]).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use stele::vfs::Vfs;
use stele::wal::group_commit::check_batch_bytes;
use stele::wal::{
    LogSeq, Recovery, VisibleRecord, WalOptions, WalRetirement, WalTruncation, WalWriter,
    WalWriterStats,
};

use super::engine::{Batch, WalEngine};
use super::error::WalError;
use super::plain::PlainWal;
use super::session::AsyncSandbox;
use crate::Mode;
use crate::archive_gate::ArchiveGate;
use crate::quota::{Pacer, with_quota};
use crate::sandbox::SandboxLimits;

/// A write-ahead log, native or sandboxed, for threads. `Clone` (shared), `Send + Sync`.
/// [`Wal::to_async`] gives the tokio API over the same log and, sandboxed, the same instance.
#[derive(Clone)]
pub struct Wal {
    pub(super) engine: Arc<dyn WalEngine>,
    /// The writer's resolved group bound: a batch past it (or past
    /// [`stele::wal::record::PAYLOAD_BYTES_MAX`] per payload) is refused here, in every mode,
    /// before it reaches the engine (sandboxed: before it is copied into the guest's memory),
    /// with the error the writer would give.
    group_bytes_max: usize,
    /// The archiver's gate, once one is attached; shared by every clone.
    pub(super) archive_gate: Arc<OnceLock<Arc<ArchiveGate>>>,
    /// The tenant's rates, asked before every commit ([`Pacer`]).
    pub(super) pacer: Pacer,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

/// The one place a WAL handle matches on its mode: the engine that serves every later call.
fn open_engine(
    vfs: Arc<dyn Vfs>,
    path: &str,
    options: WalOptions,
    mode: Mode,
    limits: SandboxLimits,
    create: bool,
) -> Result<(Arc<dyn WalEngine>, Recovery), WalError> {
    Ok(match mode {
        Mode::Native => {
            let segmented = options.segment_bytes.is_some();
            let (writer, recovery) = match (create, segmented) {
                (true, true) => {
                    let writer = WalWriter::create_segmented(vfs, path, options)?;
                    (writer, Recovery::new_log(options.first_seq, 0))
                }
                (true, false) => {
                    let writer = WalWriter::create_with(&*vfs, path, options)?;
                    (writer, Recovery::new_log(options.first_seq, 0))
                }
                (false, true) => {
                    let (writer, found) = WalWriter::open_segmented(vfs, path, options)?;
                    (writer, found.recovery)
                }
                (false, false) => WalWriter::open_with(&*vfs, path, options)?,
            };
            (Arc::new(writer), recovery)
        }
        Mode::Sandboxed => {
            let (sandbox, recovery) = AsyncSandbox::start(vfs, path, options, limits, create)?;
            (Arc::new(sandbox), recovery)
        }
        Mode::SandboxedPlain => {
            let (plain, recovery) = PlainWal::start(vfs, path, options, limits, create)?;
            (Arc::new(plain), recovery)
        }
    })
}

impl Wal {
    /// Creates a new log at `path`: a directory of segments when `options.segment_bytes` is
    /// set ([`WalWriter::create_segmented`]), else one file, missing or zero bytes
    /// ([`WalWriter::create_with`]). Sandboxed, the instance has the default
    /// [`SandboxLimits`].
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn create(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
    ) -> Result<Wal, WalError> {
        Wal::create_with_limits(vfs, path, options, mode, SandboxLimits::default())
    }

    /// [`Wal::create`], with the sandboxed instance bounded by `limits` (ignored natively).
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn create_with_limits(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
        limits: SandboxLimits,
    ) -> Result<Wal, WalError> {
        let vfs = with_quota(vfs, &limits).map_err(stele::wal::WalOpenError::Vfs)?;
        let pacer = Pacer::over(&vfs);
        let (engine, _) = open_engine(vfs, path, options, mode, limits, true)?;
        Ok(Wal::over(engine, options, pacer))
    }

    /// Recovers the log at `path` (missing or empty, it becomes a new log) and resumes
    /// appending: a directory of segments when `options.segment_bytes` is set
    /// ([`WalWriter::open_segmented`]), else one file ([`WalWriter::open_with`]). Sandboxed,
    /// the instance has the default [`SandboxLimits`].
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn open(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
    ) -> Result<(Wal, Recovery), WalError> {
        Wal::open_with_limits(vfs, path, options, mode, SandboxLimits::default())
    }

    /// [`Wal::open`], with the sandboxed instance bounded by `limits` (ignored natively).
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub fn open_with_limits(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
        limits: SandboxLimits,
    ) -> Result<(Wal, Recovery), WalError> {
        let vfs = with_quota(vfs, &limits).map_err(stele::wal::WalOpenError::Vfs)?;
        let pacer = Pacer::over(&vfs);
        let (engine, recovery) = open_engine(vfs, path, options, mode, limits, false)?;
        Ok((Wal::over(engine, options, pacer), recovery))
    }

    fn over(engine: Arc<dyn WalEngine>, options: WalOptions, pacer: Pacer) -> Wal {
        Wal {
            engine,
            group_bytes_max: options.resolved_group_bytes_max(),
            archive_gate: Arc::default(),
            pacer,
        }
    }

    /// The checks every commit makes before it reaches the engine, in this order and in every
    /// mode, for threads and tasks alike: the writer's size bounds
    /// ([`check_batch_bytes`]: the error the writer itself would give), then the attached
    /// archiver's backlog bound ([`ArchiveGate::admit`]), so that a batch the writer would
    /// refuse never counts against the backlog. Returns the batch's encoded size.
    pub(super) fn checked(&self, records: Batch<'_>) -> Result<usize, WalError> {
        let encoded_bytes = check_batch_bytes(records, self.group_bytes_max)?;
        if let Some(gate) = self.archive_gate.get() {
            gate.admit(encoded_bytes as u64)?;
        }
        Ok(encoded_bytes)
    }

    /// Attaches an archiver's gate: from now on this log (every clone of this handle) holds to
    /// its retention and backlog rules (see [`crate::archive_gate`]). One gate per handle,
    /// for the life of the handle.
    ///
    /// # Errors
    /// [`WalError::ArchiveAttached`] if a gate is already attached.
    pub fn attach_archive_gate(&self, gate: Arc<ArchiveGate>) -> Result<(), WalError> {
        self.archive_gate
            .set(gate)
            .map_err(|_| WalError::ArchiveAttached)
    }

    /// The attached archiver's gate, if any.
    pub fn archive_gate(&self) -> Option<&Arc<ArchiveGate>> {
        self.archive_gate.get()
    }

    /// Where this log's engine runs.
    pub fn mode(&self) -> Mode {
        self.engine.mode()
    }

    /// See [`WalWriter::commit`]: `op` is the record's caller-defined kind, returned with it
    /// on every read; the result is the record's seq.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many(&[(op, payload)]).map(|r| r.start)
    }

    /// See [`WalWriter::commit_durable`]: once this returns `Ok`, the record is durable as the
    /// policy says, in every mode.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many_durable(&[(op, payload)]).map(|r| r.start)
    }

    /// See [`WalWriter::commit_many`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        let encoded_bytes = self.checked(records)?;
        self.pacer.pace_blocking()?;
        self.engine.commit_many(records, encoded_bytes, false)
    }

    /// See [`WalWriter::commit_many_durable`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_many_durable(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        let encoded_bytes = self.checked(records)?;
        self.pacer.pace_blocking()?;
        self.engine.commit_many(records, encoded_bytes, true)
    }

    /// See [`WalWriter::flush`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn flush(&self) -> Result<(), WalError> {
        self.engine.flush()
    }

    /// See [`WalWriter::seal_active_segment`]: starts a new segment so that every durable
    /// record lies in a sealed one; `false` when there was nothing to seal.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn seal_active_segment(&self) -> Result<bool, WalError> {
        self.engine.seal_active_segment()
    }

    /// See [`WalWriter::visible_records`]. `limit` is capped at `u32::MAX` when sandboxed.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        self.engine.visible_records(first_seq, limit)
    }

    /// See [`WalWriter::retire_visible_through`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalError> {
        self.engine.retire_visible_through(absorbed_through)
    }

    /// See [`WalWriter::stats`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn stats(&self) -> Result<WalWriterStats, WalError> {
        self.engine.stats()
    }

    /// The quota's figures (disk bytes used against the bound, syncs, bytes written, times
    /// throttled and refused) when the log's storage has one: its own
    /// ([`SandboxLimits::quota`]) or the tenant's ([`crate::fs::QuotaVfs`]), which counts all
    /// the tenant's logs.
    pub fn quota_stats(&self) -> Option<stele::vfs::QuotaStats> {
        self.pacer.stats()
    }

    /// See [`WalWriter::checkpoint`]: on `Ok` the checkpoint survives power loss, whatever the
    /// policy, in every mode.
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalError> {
        self.engine.checkpoint(absorbed_through)
    }

    /// See [`WalWriter::truncate_through`]: on `Ok` the deletions survive power loss. With an
    /// archiver attached, `through` is first lowered so that no unarchived segment and none of
    /// the local retention window goes ([`ArchiveGate::truncation_bound`]).
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        let through = match self.archive_gate.get() {
            None => through,
            Some(gate) => {
                let live = self.segments()?;
                match gate.truncation_bound(through, &live) {
                    Some(bound) => bound,
                    None => {
                        return Ok(WalTruncation {
                            segments_removed: 0,
                            first_kept_seq: live.first().copied().unwrap_or_default(),
                        });
                    }
                }
            }
        };
        self.engine.truncate_through(through)
    }

    /// See [`WalWriter::segments`]: the first seqs of the live segments, in order.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        self.engine.segments()
    }
}
