//! [`Wal`] and [`AsyncWal`]: the typed Rust API over the WAL engine, in every [`Mode`].
//!
//! All modes run the same engine code over the same [`Vfs`]; they differ only in where it runs.
//! - [`Mode::Native`]: the engine ([`stele::wal::WalWriter`]) is called directly; concurrent
//!   threads share group commits.
//! - [`Mode::Sandboxed`]: the engine runs in the async-ABI component. One instance serves every
//!   thread and task, driven by the callers themselves and a dispatcher thread (see
//!   `sandbox_async`), and concurrent durable commits share syncs exactly as native threads do.
//! - [`Mode::SandboxedPlain`]: the plain WASI 0.2 component. Calls on one instance are
//!   serialized; each durable commit syncs on its own.
//!
//! Durability claims are the engine's (see [`stele::wal::WalWriter`]); they hold in every mode,
//! because the sandboxed engine issues the same syncs through its imports.

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use stele::vfs::Vfs;
use stele::wal::group_commit::check_batch_bytes;
use stele::wal::{
    LogSeq, READ_BATCH_RECORDS_MAX, Recovery, VisibleRecord, WalOpenError, WalOptions, WalReader,
    WalRetentionError, WalRetireError, WalRetirement, WalTruncation, WalWriteError, WalWriter,
    WalWriterStats,
};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::archive_gate::{ArchiveBacklog, ArchiveGate};
use crate::bindings;
use crate::bindings::exports::stele::log::wal as wit;
use crate::convert::plain::{
    as_retention_error, from_wit_error, from_wit_range, from_wit_recovery, from_wit_retirement,
    from_wit_stats, from_wit_truncation, from_wit_visible, wit_batch, wit_options,
};
use crate::runtime::{GuestState, PlainInstance, Runtime, SandboxLimits, trap_error};
use crate::sandbox_async::{AsyncSandbox, Request};
use crate::{Mode, SandboxError};

/// Any error a [`Wal`] call can return: the engine's typed errors, in every mode, plus what
/// only the sandbox can add.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// Creating or recovering the log failed.
    #[error(transparent)]
    Open(#[from] WalOpenError),
    /// A commit or flush failed, or was refused.
    #[error(transparent)]
    Write(#[from] WalWriteError),
    /// Retiring retained records was refused.
    #[error(transparent)]
    Retire(#[from] WalRetireError),
    /// A checkpoint or truncation was refused or failed.
    #[error(transparent)]
    Retention(#[from] WalRetentionError),
    /// What only a sandboxed log can fail with (a trap, a limit).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A commit refused because the attached archiver is too far behind
    /// ([`ArchiveGate`]); nothing of the batch was written.
    #[error(transparent)]
    ArchiveBacklog(#[from] ArchiveBacklog),
    /// [`Wal::attach_archive_gate`] on a log that already has an archiver.
    #[error("this log already has an archiver attached")]
    ArchiveAttached,
}

/// A write-ahead log, native or sandboxed, for threads. `Clone` (shared), `Send + Sync`.
/// [`Wal::to_async`] gives the tokio API over the same log and, sandboxed, the same instance.
#[derive(Clone)]
pub struct Wal {
    inner: Arc<Inner>,
    /// The writer's resolved group bound: sandboxed, a batch past it (or past
    /// [`stele::wal::record::PAYLOAD_BYTES_MAX`] per payload) is refused here, before it is
    /// copied into the guest's memory, with the error the guest would give.
    group_bytes_max: usize,
    /// The archiver's gate, once one is attached; shared by every clone.
    archive_gate: Arc<OnceLock<Arc<ArchiveGate>>>,
}

/// The tokio API over a [`Wal`]: the same log, and sandboxed the same instance, so threads and
/// tasks share groups. `Clone`, `Send + Sync`.
///
/// Natively, commits and flushes wait as tasks (`WalWriter::commit_many_durable_async` and
/// its siblings): a waiting call holds a waker, not a thread, and only a group's leader blocks,
/// once per group (in `block_in_place` on a multi-thread runtime, on the blocking pool on a
/// current-thread one); the rarer calls run whole on the blocking pool. Sandboxed-plain, every
/// call runs on the blocking pool.
///
/// Cancellation: dropping a future returned here never loses a record. Natively a dropped
/// call's records are staged before it first waits and go out with the next group (a leader's
/// turn it started runs to its end); sandboxed the guest task runs to completion in
/// the instance. A record staged by a dropped call becomes durable with its group.
#[derive(Clone, Debug)]
pub struct AsyncWal {
    wal: Wal,
}

// One `Inner` per log, behind an `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Inner {
    /// In an `Arc` of its own, for [`AsyncWal`]'s task driver (`WalWriter::*_async`), whose
    /// leader's turn outlives the call that started it.
    Native(Arc<WalWriter>),
    Async(AsyncSandbox),
    Plain(Mutex<PlainInstance>),
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

fn guest_call<R>(call: wasmtime::Result<Result<R, wit::WalError>>) -> Result<R, WalError> {
    call.map_err(trap_error)?.map_err(from_wit_error)
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
        let inner = match mode {
            Mode::Native if options.segment_bytes.is_some() => {
                Inner::Native(Arc::new(WalWriter::create_segmented(vfs, path, options)?))
            }
            Mode::Native => Inner::Native(Arc::new(WalWriter::create_with(&*vfs, path, options)?)),
            Mode::Sandboxed => {
                Inner::Async(AsyncSandbox::start(vfs, path, options, limits, true)?.0)
            }
            Mode::SandboxedPlain => {
                let (mut store, bindings) = Runtime::get()?.instantiate(vfs, limits)?;
                let writer = guest_call(bindings.stele_log_wal().writer().call_create(
                    &mut store,
                    path,
                    wit_options(options),
                ))?;
                Inner::Plain(Mutex::new(PlainInstance::new(store, bindings, writer)))
            }
        };
        Ok(Wal {
            inner: Arc::new(inner),
            group_bytes_max: options.resolved_group_bytes_max(),
            archive_gate: Arc::default(),
        })
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
        let (inner, recovery) = match mode {
            Mode::Native if options.segment_bytes.is_some() => {
                let (writer, found) = WalWriter::open_segmented(vfs, path, options)?;
                (Inner::Native(Arc::new(writer)), found.recovery)
            }
            Mode::Native => {
                let (writer, recovery) = WalWriter::open_with(&*vfs, path, options)?;
                (Inner::Native(Arc::new(writer)), recovery)
            }
            Mode::Sandboxed => {
                let (sandbox, recovery) = AsyncSandbox::start(vfs, path, options, limits, false)?;
                (Inner::Async(sandbox), recovery)
            }
            Mode::SandboxedPlain => {
                let (mut store, bindings) = Runtime::get()?.instantiate(vfs, limits)?;
                let (writer, recovery) = guest_call(bindings.stele_log_wal().writer().call_open(
                    &mut store,
                    path,
                    wit_options(options),
                ))?;
                let plain = PlainInstance::new(store, bindings, writer);
                (Inner::Plain(Mutex::new(plain)), from_wit_recovery(recovery))
            }
        };
        Ok((
            Wal {
                inner: Arc::new(inner),
                group_bytes_max: options.resolved_group_bytes_max(),
                archive_gate: Arc::default(),
            },
            recovery,
        ))
    }

    /// Sandboxed, refuses a batch the writer would refuse, before it crosses into the guest;
    /// else returns its encoded size.
    fn check_batch(&self, records: &[(u16, &[u8])]) -> Result<usize, WalError> {
        Ok(check_batch_bytes(records, self.group_bytes_max)?)
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

    /// With an archiver attached, admits the batch against its backlog bound (see
    /// [`ArchiveGate::admit`]); a batch the writer would refuse anyway is refused first, with
    /// the writer's error, so that it never counts.
    fn admit(&self, records: &[(u16, &[u8])]) -> Result<(), WalError> {
        if let Some(gate) = self.archive_gate.get() {
            let bytes = self.check_batch(records)?;
            gate.admit(bytes as u64)?;
        }
        Ok(())
    }

    /// Where this log's engine runs.
    pub fn mode(&self) -> Mode {
        match &*self.inner {
            Inner::Native(_) => Mode::Native,
            Inner::Async(_) => Mode::Sandboxed,
            Inner::Plain(_) => Mode::SandboxedPlain,
        }
    }

    /// The tokio API over this same log.
    pub fn to_async(&self) -> AsyncWal {
        AsyncWal { wal: self.clone() }
    }

    /// Runs one call in the plain sandbox; see [`PlainInstance::call`].
    fn plain<R>(
        sandbox: &Mutex<PlainInstance>,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::Engine,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::WalError>>,
    ) -> Result<R, WalError> {
        let result = sandbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(call)?;
        result.map_err(from_wit_error)
    }

    /// See [`WalWriter::commit`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        match &*self.inner {
            Inner::Async(_) => return self.commit_many(&[(op, payload)]).map(|r| r.start),
            Inner::Native(_) | Inner::Plain(_) => self.admit(&[(op, payload)])?,
        }
        match &*self.inner {
            Inner::Native(w) => Ok(w.commit(op, payload)?),
            Inner::Async(_) => unreachable!("answered above"),
            Inner::Plain(s) => {
                self.check_batch(&[(op, payload)])?;
                Self::plain(s, |st, b, w| {
                    b.stele_log_wal().writer().call_commit(st, w, op, payload)
                })
                .map(LogSeq)
            }
        }
    }

    /// See [`WalWriter::commit_durable`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        match &*self.inner {
            Inner::Async(_) => {
                return self.commit_many_durable(&[(op, payload)]).map(|r| r.start);
            }
            Inner::Native(_) | Inner::Plain(_) => self.admit(&[(op, payload)])?,
        }
        match &*self.inner {
            Inner::Native(w) => Ok(w.commit_durable(op, payload)?),
            Inner::Async(_) => unreachable!("answered above"),
            Inner::Plain(s) => {
                self.check_batch(&[(op, payload)])?;
                Self::plain(s, |st, b, w| {
                    b.stele_log_wal()
                        .writer()
                        .call_commit_durable(st, w, op, payload)
                })
                .map(LogSeq)
            }
        }
    }

    /// See [`WalWriter::commit_many`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        self.admit(records)?;
        match &*self.inner {
            Inner::Native(w) => Ok(w.commit_many(records)?),
            Inner::Async(s) => {
                self.check_batch(records)?;
                let records = async_batch(records);
                s.request_blocking(|reply| Request::CommitMany { records, reply })
            }
            Inner::Plain(s) => {
                self.check_batch(records)?;
                let batch = wit_batch(records);
                Self::plain(s, |st, b, w| {
                    b.stele_log_wal().writer().call_commit_many(st, w, &batch)
                })
                .map(from_wit_range)
            }
        }
    }

    /// See [`WalWriter::commit_many_durable`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn commit_many_durable(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        self.admit(records)?;
        match &*self.inner {
            Inner::Native(w) => Ok(w.commit_many_durable(records)?),
            Inner::Async(s) => {
                let encoded_bytes = self.check_batch(records)?;
                let records = async_batch(records);
                s.request_blocking(|reply| Request::CommitManyDurable {
                    records,
                    encoded_bytes,
                    reply,
                })
            }
            Inner::Plain(s) => {
                self.check_batch(records)?;
                let batch = wit_batch(records);
                Self::plain(s, |st, b, w| {
                    b.stele_log_wal()
                        .writer()
                        .call_commit_many_durable(st, w, &batch)
                })
                .map(from_wit_range)
            }
        }
    }

    /// See [`WalWriter::flush`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn flush(&self) -> Result<(), WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.flush()?),
            Inner::Async(s) => s.request_blocking(|reply| Request::Flush { reply }),
            Inner::Plain(s) => {
                Self::plain(s, |st, b, w| b.stele_log_wal().writer().call_flush(st, w))
            }
        }
    }

    /// See [`WalWriter::seal_active_segment`]: starts a new segment so that every durable
    /// record lies in a sealed one; `false` when there was nothing to seal.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn seal_active_segment(&self) -> Result<bool, WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.seal_active_segment()?),
            Inner::Async(s) => s.request_blocking(|reply| Request::SealActiveSegment { reply }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal().writer().call_seal_active_segment(st, w)
            }),
        }
    }

    /// See [`WalWriter::visible_records`]. `limit` is capped at `u32::MAX` when sandboxed.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        match &*self.inner {
            Inner::Native(w) => Ok(w.visible_records(first_seq, limit)),
            Inner::Async(s) => s.request_blocking(|reply| Request::VisibleRecords {
                first_seq: first_seq.0,
                limit: limit32,
                reply,
            }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal()
                    .writer()
                    .call_visible_records(st, w, first_seq.0, limit32)
            })
            .map(from_wit_visible),
        }
    }

    /// See [`WalWriter::retire_visible_through`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.retire_visible_through(absorbed_through)?),
            Inner::Async(s) => s.request_blocking(|reply| Request::Retire {
                through: absorbed_through.0,
                reply,
            }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal()
                    .writer()
                    .call_retire_visible_through(st, w, absorbed_through.0)
            })
            .map(from_wit_retirement),
        }
    }

    /// See [`WalWriter::stats`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn stats(&self) -> Result<WalWriterStats, WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.stats()),
            Inner::Async(s) => s.request_blocking(|reply| Request::Stats { reply }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal().writer().call_stats(st, w).map(Ok)
            })
            .map(from_wit_stats),
        }
    }

    /// See [`WalWriter::checkpoint`]: on `Ok` the checkpoint survives power loss, whatever the
    /// policy, in every mode.
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.checkpoint(absorbed_through)?),
            Inner::Async(s) => s.request_blocking(|reply| Request::Checkpoint {
                through: absorbed_through.0,
                reply,
            }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal()
                    .writer()
                    .call_checkpoint(st, w, absorbed_through.0)
            })
            .map_err(as_retention_error),
        }
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
        self.truncate_through_unchecked(through)
    }

    fn truncate_through_unchecked(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.truncate_through(through)?),
            Inner::Async(s) => s.request_blocking(|reply| Request::TruncateThrough {
                through: through.0,
                reply,
            }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal()
                    .writer()
                    .call_truncate_through(st, w, through.0)
            })
            .map(from_wit_truncation),
        }
    }

    /// See [`WalWriter::segments`]: the first seqs of the live segments, in order.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        match &*self.inner {
            Inner::Native(w) => Ok(w.segments()),
            Inner::Async(s) => s.request_blocking(|reply| Request::Segments { reply }),
            Inner::Plain(s) => Self::plain(s, |st, b, w| {
                b.stele_log_wal().writer().call_segments(st, w).map(Ok)
            })
            .map(|seqs| seqs.into_iter().map(LogSeq).collect()),
        }
    }
}

fn async_batch(
    records: &[(u16, &[u8])],
) -> Vec<crate::bindings::engine_async::exports::stele::log::wal::CommitRecord> {
    crate::convert::with_async::wit_batch(records)
}

impl AsyncWal {
    /// The synchronous API over this same log.
    pub fn to_sync(&self) -> Wal {
        self.wal.clone()
    }

    /// Where this log's engine runs.
    pub fn mode(&self) -> Mode {
        self.wal.mode()
    }

    /// Runs a synchronous call on tokio's blocking pool (native and plain-sandboxed modes).
    async fn blocking<R: Send + 'static>(
        &self,
        call: impl FnOnce(&Wal) -> Result<R, WalError> + Send + 'static,
    ) -> Result<R, WalError> {
        let wal = self.wal.clone();
        match tokio::task::spawn_blocking(move || call(&wal)).await {
            Ok(result) => result,
            Err(join) => Err(SandboxError::Panicked(format!("the blocking call: {join}")).into()),
        }
    }

    /// See [`WalWriter::commit`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many(&[(op, payload)]).await.map(|r| r.start)
    }

    /// See [`WalWriter::commit_durable`]: once this resolves `Ok`, the record is durable as the
    /// policy says.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many_durable(&[(op, payload)])
            .await
            .map(|r| r.start)
    }

    /// See [`WalWriter::commit_many`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                self.wal.check_batch(records)?;
                self.wal.admit(records)?;
                let records = async_batch(records);
                s.request(|reply| Request::CommitMany { records, reply })
                    .await
            }
            Inner::Native(w) => {
                self.wal.admit(records)?;
                Ok(w.commit_many_async(records).await?)
            }
            Inner::Plain(_) => {
                let owned: Vec<(u16, Vec<u8>)> =
                    records.iter().map(|(op, p)| (*op, p.to_vec())).collect();
                self.blocking(move |w| w.commit_many(&borrow_batch(&owned)))
                    .await
            }
        }
    }

    /// See [`WalWriter::commit_many_durable`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                let encoded_bytes = self.wal.check_batch(records)?;
                self.wal.admit(records)?;
                let records = async_batch(records);
                s.request(|reply| Request::CommitManyDurable {
                    records,
                    encoded_bytes,
                    reply,
                })
                .await
            }
            Inner::Native(w) => {
                self.wal.admit(records)?;
                Ok(w.commit_many_durable_async(records).await?)
            }
            Inner::Plain(_) => {
                let owned: Vec<(u16, Vec<u8>)> =
                    records.iter().map(|(op, p)| (*op, p.to_vec())).collect();
                self.blocking(move |w| w.commit_many_durable(&borrow_batch(&owned)))
                    .await
            }
        }
    }

    /// See [`WalWriter::flush`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn flush(&self) -> Result<(), WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => s.request(|reply| Request::Flush { reply }).await,
            Inner::Native(w) => Ok(w.flush_async().await?),
            Inner::Plain(_) => self.blocking(|w| w.flush()).await,
        }
    }

    /// See [`Wal::seal_active_segment`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn seal_active_segment(&self) -> Result<bool, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                s.request(|reply| Request::SealActiveSegment { reply })
                    .await
            }
            _ => self.blocking(|w| w.seal_active_segment()).await,
        }
    }

    /// See [`WalWriter::visible_records`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                let limit = u32::try_from(limit).unwrap_or(u32::MAX);
                s.request(|reply| Request::VisibleRecords {
                    first_seq: first_seq.0,
                    limit,
                    reply,
                })
                .await
            }
            _ => {
                self.blocking(move |w| w.visible_records(first_seq, limit))
                    .await
            }
        }
    }

    /// See [`WalWriter::retire_visible_through`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                s.request(|reply| Request::Retire {
                    through: absorbed_through.0,
                    reply,
                })
                .await
            }
            _ => {
                self.blocking(move |w| w.retire_visible_through(absorbed_through))
                    .await
            }
        }
    }

    /// See [`WalWriter::stats`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn stats(&self) -> Result<WalWriterStats, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => s.request(|reply| Request::Stats { reply }).await,
            _ => self.blocking(|w| w.stats()).await,
        }
    }

    /// See [`Wal::checkpoint`].
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub async fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => {
                s.request(|reply| Request::Checkpoint {
                    through: absorbed_through.0,
                    reply,
                })
                .await
            }
            _ => self.blocking(move |w| w.checkpoint(absorbed_through)).await,
        }
    }

    /// See [`Wal::truncate_through`].
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub async fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        match &*self.wal.inner {
            // The gate's bound needs the live segments first: two calls, taken together on
            // the blocking pool.
            _ if self.wal.archive_gate.get().is_some() => {
                self.blocking(move |w| w.truncate_through(through)).await
            }
            Inner::Async(s) => {
                s.request(|reply| Request::TruncateThrough {
                    through: through.0,
                    reply,
                })
                .await
            }
            _ => self.blocking(move |w| w.truncate_through(through)).await,
        }
    }

    /// See [`Wal::segments`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        match &*self.wal.inner {
            Inner::Async(s) => s.request(|reply| Request::Segments { reply }).await,
            _ => self.blocking(|w| w.segments()).await,
        }
    }
}

fn borrow_batch(owned: &[(u16, Vec<u8>)]) -> Vec<(u16, &[u8])> {
    owned.iter().map(|(op, p)| (*op, &p[..])).collect()
}

/// Reads a WAL's valid prefix batch by batch, in any [`Mode`], without writing to it: the
/// streaming form of [`read_wal`]. Memory is one read window of one segment plus the batch the
/// caller asks for, not the log. Natively it is [`WalReader`]; sandboxed, the plain
/// component's `reader` resource on an instance of its own.
pub struct WalScan {
    inner: ScanInner,
}

enum ScanInner {
    Native(Box<WalReader>),
    Sandboxed(Box<GuestReadHandle>),
}

/// A read-only resource of the plain component (`reader` or `follower`) on an instance of its
/// own: nothing else runs on it, so no trap rule is needed beyond returning the trap.
struct GuestReadHandle {
    store: Store<GuestState>,
    bindings: bindings::Engine,
    resource: ResourceAny,
}

impl GuestReadHandle {
    /// Instantiates the plain component over `vfs` and opens the resource with `open`.
    fn open(
        vfs: Arc<dyn Vfs>,
        open: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::Engine,
        ) -> wasmtime::Result<Result<ResourceAny, wit::WalError>>,
    ) -> Result<Box<GuestReadHandle>, WalError> {
        let (mut store, bindings) = Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
        let resource = guest_call(open(&mut store, &bindings))?;
        Ok(Box::new(GuestReadHandle {
            store,
            bindings,
            resource,
        }))
    }
}

impl WalScan {
    /// Opens the log at `path` (which must exist: a file, or a directory of segments) to read
    /// from seq `from` on; see [`WalReader::open_at`]: a segment directory is entered at the
    /// segment that holds `from`, by name, so reading from near the end reads about one
    /// segment. Sandboxed, the instance has the default [`SandboxLimits`].
    #[tracing::instrument(level = "debug", skip_all, fields(path = %path, from = from.0, mode = mode.name()))]
    pub fn open_at(
        vfs: Arc<dyn Vfs>,
        path: &str,
        from: LogSeq,
        mode: Mode,
    ) -> Result<WalScan, WalError> {
        let inner = match mode {
            Mode::Native => ScanInner::Native(Box::new(WalReader::open_at(vfs, path, from)?)),
            Mode::Sandboxed | Mode::SandboxedPlain => {
                ScanInner::Sandboxed(GuestReadHandle::open(vfs, |store, bindings| {
                    bindings
                        .stele_log_wal()
                        .reader()
                        .call_open_at(store, path, from.0)
                })?)
            }
        };
        Ok(WalScan { inner })
    }

    /// Up to `records_max` next records (at least one is asked for when 0 is given; a
    /// sandboxed batch holds at most 4,096); empty at the end of the valid prefix, after
    /// which [`Self::recovery`] says how it ended.
    pub fn next_batch(&mut self, records_max: usize) -> Result<Vec<VisibleRecord>, WalError> {
        let records_max = records_max.max(1);
        match &mut self.inner {
            ScanInner::Native(reader) => {
                let mut batch = Vec::new();
                while batch.len() < records_max {
                    let Some(r) = reader.next_record()? else {
                        break;
                    };
                    batch.push(VisibleRecord {
                        seq: r.seq,
                        op: r.op,
                        payload: Bytes::copy_from_slice(r.payload),
                    });
                }
                Ok(batch)
            }
            ScanInner::Sandboxed(guest) => {
                let asked = records_max.min(READ_BATCH_RECORDS_MAX) as u32;
                let batch = guest_call(guest.bindings.stele_log_wal().reader().call_next_batch(
                    &mut guest.store,
                    guest.resource,
                    asked,
                ))?;
                Ok(from_wit_visible(batch))
            }
        }
    }

    /// How the valid prefix ended, once [`Self::next_batch`] has returned an empty batch;
    /// `None` before. Opened at a seq, it describes the segments read.
    pub fn recovery(&mut self) -> Result<Option<Recovery>, WalError> {
        match &mut self.inner {
            ScanInner::Native(reader) => Ok(reader.recovery()),
            ScanInner::Sandboxed(guest) => Ok(guest
                .bindings
                .stele_log_wal()
                .reader()
                .call_recovery(&mut guest.store, guest.resource)
                .map_err(trap_error)?
                .map(from_wit_recovery)),
        }
    }
}

/// Follows a live WAL in any [`Mode`]: each [`Self::poll`] returns the records appended since
/// the last one, reading only bytes not read before (see [`stele::wal::WalFollower`] for what
/// a follower checks and what it leaves to recovery). Sandboxed, the plain component's
/// `follower` resource on an instance of its own.
pub struct WalTail {
    inner: TailInner,
}

enum TailInner {
    Native(stele::wal::WalFollower),
    Sandboxed(Box<GuestReadHandle>),
}

impl WalTail {
    /// Follows the log at `path` from seq `from` on; see
    /// [`stele::wal::WalFollower::open_at`].
    #[tracing::instrument(level = "debug", skip_all, fields(path = %path, from = from.0, mode = mode.name()))]
    pub fn open_at(
        vfs: Arc<dyn Vfs>,
        path: &str,
        from: LogSeq,
        mode: Mode,
    ) -> Result<WalTail, WalError> {
        let inner = match mode {
            Mode::Native => TailInner::Native(stele::wal::WalFollower::open_at(vfs, path, from)?),
            Mode::Sandboxed | Mode::SandboxedPlain => {
                TailInner::Sandboxed(GuestReadHandle::open(vfs, |store, bindings| {
                    bindings
                        .stele_log_wal()
                        .follower()
                        .call_open(store, path, from.0)
                })?)
            }
        };
        Ok(WalTail { inner })
    }

    /// The records appended since the last poll, at most `records_max` (a sandboxed poll
    /// returns at most 4,096), in seq order; empty when nothing new is whole yet.
    pub fn poll(&mut self, records_max: usize) -> Result<Vec<VisibleRecord>, WalError> {
        match &mut self.inner {
            TailInner::Native(follower) => Ok(follower.poll(records_max)?),
            TailInner::Sandboxed(guest) => {
                let asked = records_max.clamp(1, READ_BATCH_RECORDS_MAX) as u32;
                let batch = guest_call(guest.bindings.stele_log_wal().follower().call_poll(
                    &mut guest.store,
                    guest.resource,
                    asked,
                ))?;
                Ok(from_wit_visible(batch))
            }
        }
    }

    /// The seq the next record returned will carry, once the follower has read a header.
    pub fn next_seq(&mut self) -> Result<Option<LogSeq>, WalError> {
        match &mut self.inner {
            TailInner::Native(follower) => Ok(follower.next_seq()),
            TailInner::Sandboxed(guest) => Ok(guest
                .bindings
                .stele_log_wal()
                .follower()
                .call_next_seq(&mut guest.store, guest.resource)
                .map_err(trap_error)?
                .map(LogSeq)),
        }
    }
}

/// Reads every valid record of the log at `path` (which must exist: a file, or a directory of
/// segments) and how its valid prefix ended, without writing to it. Sandboxed (either build),
/// the plain component's `reader` resource reads it, in batches of at most 4,096 records per
/// call. Memory holds the whole log's records: [`WalScan`] streams them instead, and
/// [`read_wal_from`] starts at a seq.
pub fn read_wal(
    vfs: Arc<dyn Vfs>,
    path: &str,
    mode: Mode,
) -> Result<(Vec<VisibleRecord>, Recovery), WalError> {
    read_wal_from(vfs, path, LogSeq(0), mode)
}

/// [`read_wal`] from seq `from` on: no record below it is returned, and a segment directory's
/// segments before the one that holds `from` are never opened ([`WalScan::open_at`]). The
/// recovery then describes the segments read.
#[tracing::instrument(level = "info", skip_all, fields(path = %path, from = from.0, mode = mode.name()))]
pub fn read_wal_from(
    vfs: Arc<dyn Vfs>,
    path: &str,
    from: LogSeq,
    mode: Mode,
) -> Result<(Vec<VisibleRecord>, Recovery), WalError> {
    let mut scan = WalScan::open_at(vfs, path, from, mode)?;
    let mut records = Vec::new();
    loop {
        let batch = scan.next_batch(READ_BATCH_RECORDS_MAX)?;
        if batch.is_empty() {
            break;
        }
        records.extend(batch);
    }
    let recovery = scan.recovery()?.ok_or_else(|| {
        SandboxError::BrokenContract("the reader ended without a recovery".into())
    })?;
    Ok((records, recovery))
}
