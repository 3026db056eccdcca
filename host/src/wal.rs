//! [`Wal`]: the typed Rust API over the WAL engine, in either [`Mode`].
//!
//! Both modes run the same engine code ([`stele::wal::WalWriter`]) over the same [`Vfs`]; they
//! differ only in where it runs. Natively the writer is called directly, and concurrent
//! threads share group commits. Sandboxed, the writer runs inside the component, in its own
//! store, and reaches the Vfs only through the `stele:log/vfs` imports. This build of the
//! component exports plain (synchronous) WASI 0.2 functions, so calls on one sandboxed `Wal`
//! are serialized and each durable commit syncs on its own.
//!
//! Durability claims are the engine's: see [`stele::wal::WalWriter`]. They hold in both modes,
//! because the sandboxed engine issues the same syncs through the import.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use stele::header::HeaderError;
use stele::vfs::Vfs;
use stele::wal::{
    DurabilityPolicy, LogSeq, Recovery, RecoveryEnd, VisibleRecord, WalOpenError, WalOptions,
    WalReader, WalRetireError, WalRetirement, WalWriteError, WalWriter, WalWriterStats,
};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::runtime::bindings::exports::stele::log::wal as wit;
use crate::runtime::{GuestState, Runtime, SandboxLimits, bindings};
use crate::vfs_import::from_wit;
use crate::{Mode, SandboxError};

/// Any error a [`Wal`] call can return: the engine's typed errors, in both modes, plus what
/// only the sandbox can add.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error(transparent)]
    Open(#[from] WalOpenError),
    #[error(transparent)]
    Write(#[from] WalWriteError),
    #[error(transparent)]
    Retire(#[from] WalRetireError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// A write-ahead log, native or sandboxed. `Send + Sync`: share it across threads with `Arc`.
pub struct Wal {
    inner: Inner,
}

enum Inner {
    Native(WalWriter),
    Sandboxed(Mutex<Sandboxed>),
}

struct Sandboxed {
    store: Store<GuestState>,
    bindings: bindings::Engine,
    writer: ResourceAny,
    /// Set by the first trap: the instance's state is then unknown, so every later call is
    /// refused with the same message.
    trapped: Option<String>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Creates a new log at `path` (missing or zero bytes); see [`WalWriter::create_with`].
    pub fn create(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
    ) -> Result<Wal, WalError> {
        match mode {
            Mode::Native => Ok(Wal {
                inner: Inner::Native(WalWriter::create_with(&*vfs, path, options)?),
            }),
            Mode::Sandboxed => {
                let (mut store, bindings) =
                    Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
                let writer = guest_call(bindings.stele_log_wal().writer().call_create(
                    &mut store,
                    path,
                    wit_options(options),
                ))?;
                Ok(Wal::sandboxed(store, bindings, writer))
            }
        }
    }

    /// Recovers the log at `path` (a missing or empty file becomes a new log) and resumes
    /// appending; see [`WalWriter::open_with`].
    pub fn open(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        mode: Mode,
    ) -> Result<(Wal, Recovery), WalError> {
        match mode {
            Mode::Native => {
                let (writer, recovery) = WalWriter::open_with(&*vfs, path, options)?;
                Ok((
                    Wal {
                        inner: Inner::Native(writer),
                    },
                    recovery,
                ))
            }
            Mode::Sandboxed => {
                let (mut store, bindings) =
                    Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
                let (writer, recovery) = guest_call(bindings.stele_log_wal().writer().call_open(
                    &mut store,
                    path,
                    wit_options(options),
                ))?;
                Ok((
                    Wal::sandboxed(store, bindings, writer),
                    from_wit_recovery(recovery),
                ))
            }
        }
    }

    fn sandboxed(store: Store<GuestState>, bindings: bindings::Engine, writer: ResourceAny) -> Wal {
        Wal {
            inner: Inner::Sandboxed(Mutex::new(Sandboxed {
                store,
                bindings,
                writer,
                trapped: None,
            })),
        }
    }

    pub fn mode(&self) -> Mode {
        match self.inner {
            Inner::Native(_) => Mode::Native,
            Inner::Sandboxed(_) => Mode::Sandboxed,
        }
    }

    /// Runs one call in the sandbox, turning a trap into a sticky [`SandboxError::Trapped`].
    fn guest<R>(
        sandbox: &Mutex<Sandboxed>,
        call: impl FnOnce(&mut Store<GuestState>, &bindings::Engine, ResourceAny) -> wasmtime::Result<R>,
    ) -> Result<R, SandboxError> {
        let mut guard: MutexGuard<'_, Sandboxed> =
            sandbox.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        if let Some(message) = &s.trapped {
            return Err(SandboxError::Trapped(message.clone()));
        }
        call(&mut s.store, &s.bindings, s.writer).map_err(|e| {
            let message = format!("{e:#}");
            s.trapped = Some(message.clone());
            SandboxError::Trapped(message)
        })
    }

    /// See [`WalWriter::commit`].
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.commit(op, payload)?),
            Inner::Sandboxed(s) => {
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal().writer().call_commit(st, w, op, payload)
                })?;
                r.map(LogSeq).map_err(from_wit_error)
            }
        }
    }

    /// See [`WalWriter::commit_durable`].
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.commit_durable(op, payload)?),
            Inner::Sandboxed(s) => {
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal()
                        .writer()
                        .call_commit_durable(st, w, op, payload)
                })?;
                r.map(LogSeq).map_err(from_wit_error)
            }
        }
    }

    /// See [`WalWriter::commit_many`].
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.commit_many(records)?),
            Inner::Sandboxed(s) => {
                let batch = wit_batch(records);
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal().writer().call_commit_many(st, w, &batch)
                })?;
                r.map(from_wit_range).map_err(from_wit_error)
            }
        }
    }

    /// See [`WalWriter::commit_many_durable`].
    pub fn commit_many_durable(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.commit_many_durable(records)?),
            Inner::Sandboxed(s) => {
                let batch = wit_batch(records);
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal()
                        .writer()
                        .call_commit_many_durable(st, w, &batch)
                })?;
                r.map(from_wit_range).map_err(from_wit_error)
            }
        }
    }

    /// See [`WalWriter::flush`].
    pub fn flush(&self) -> Result<(), WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.flush()?),
            Inner::Sandboxed(s) => {
                let r = Self::guest(s, |st, b, w| b.stele_log_wal().writer().call_flush(st, w))?;
                r.map_err(from_wit_error)
            }
        }
    }

    /// See [`WalWriter::visible_records`]. `limit` is capped at `u32::MAX` in sandboxed mode.
    pub fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.visible_records(first_seq, limit)),
            Inner::Sandboxed(s) => {
                let limit = u32::try_from(limit).unwrap_or(u32::MAX);
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal()
                        .writer()
                        .call_visible_records(st, w, first_seq.0, limit)
                })?;
                let records = r.map_err(from_wit_error)?;
                Ok(records
                    .into_iter()
                    .map(|r| VisibleRecord {
                        seq: LogSeq(r.seq),
                        op: r.op,
                        payload: Bytes::from(r.payload),
                    })
                    .collect())
            }
        }
    }

    /// See [`WalWriter::retire_visible_through`].
    pub fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.retire_visible_through(absorbed_through)?),
            Inner::Sandboxed(s) => {
                let r = Self::guest(s, |st, b, w| {
                    b.stele_log_wal().writer().call_retire_visible_through(
                        st,
                        w,
                        absorbed_through.0,
                    )
                })?;
                let r = r.map_err(from_wit_error)?;
                Ok(WalRetirement {
                    records: r.records,
                    bytes: r.bytes,
                    retained_bytes: r.retained_bytes,
                })
            }
        }
    }

    /// See [`WalWriter::stats`].
    pub fn stats(&self) -> Result<WalWriterStats, WalError> {
        match &self.inner {
            Inner::Native(w) => Ok(w.stats()),
            Inner::Sandboxed(s) => {
                let st = Self::guest(s, |st, b, w| b.stele_log_wal().writer().call_stats(st, w))?;
                let mut histogram = [0u64; stele::wal::group_commit::GROUP_HISTOGRAM_BUCKETS];
                for (slot, value) in histogram.iter_mut().zip(st.group_records_histogram) {
                    *slot = value;
                }
                Ok(WalWriterStats {
                    groups: st.groups,
                    records: st.records,
                    bytes: st.bytes,
                    syncs: st.syncs,
                    dir_syncs: st.dir_syncs,
                    group_records_histogram: histogram,
                    durable_end: LogSeq(st.durable_end),
                    visible_end: LogSeq(st.visible_end),
                    retained_bytes: st.retained_bytes,
                    retained_records: st.retained_records,
                })
            }
        }
    }
}

/// Reads every valid record of the log at `path` (which must exist) and how its valid prefix
/// ended, without writing to it. Sandboxed, the component's `reader` resource reads it in
/// batches of at most 4,096 records per call.
pub fn read_wal(
    vfs: Arc<dyn Vfs>,
    path: &str,
    mode: Mode,
) -> Result<(Vec<VisibleRecord>, Recovery), WalError> {
    match mode {
        Mode::Native => {
            let mut reader = WalReader::open(&*vfs, path)?;
            let mut records = Vec::new();
            while let Some(r) = reader.next_record()? {
                records.push(VisibleRecord {
                    seq: r.seq,
                    op: r.op,
                    payload: Bytes::copy_from_slice(r.payload),
                });
            }
            Ok((
                records,
                reader.recovery().expect("finished reader has a recovery"),
            ))
        }
        Mode::Sandboxed => {
            let (mut store, bindings) =
                Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
            let api = bindings.stele_log_wal().reader();
            let reader = guest_call(api.call_open(&mut store, path))?;
            let mut records = Vec::new();
            loop {
                let batch = guest_call(api.call_next_batch(&mut store, reader, 4096))?;
                if batch.is_empty() {
                    break;
                }
                records.extend(batch.into_iter().map(|r| VisibleRecord {
                    seq: LogSeq(r.seq),
                    op: r.op,
                    payload: Bytes::from(r.payload),
                }));
            }
            let recovery = api
                .call_recovery(&mut store, reader)
                .map_err(|e| SandboxError::Trapped(format!("{e:#}")))?
                .ok_or_else(|| SandboxError::Trapped("reader ended without a recovery".into()))?;
            Ok((records, from_wit_recovery(recovery)))
        }
    }
}

fn guest_call<R>(call: wasmtime::Result<Result<R, wit::WalError>>) -> Result<R, WalError> {
    call.map_err(|e| SandboxError::Trapped(format!("{e:#}")))?
        .map_err(from_wit_error)
}

fn wit_options(o: WalOptions) -> wit::WalOptions {
    wit::WalOptions {
        policy: match o.policy {
            DurabilityPolicy::FullSync => wit::DurabilityPolicy::FullSync,
            DurabilityPolicy::Barrier => wit::DurabilityPolicy::Barrier,
            DurabilityPolicy::Skip => wit::DurabilityPolicy::Skip,
        },
        first_seq: o.first_seq.0,
        max_group_bytes: o.max_group_bytes.map(|b| b as u64),
        retained_bytes_max: o.retained_bytes_max as u64,
    }
}

fn wit_batch(records: &[(u16, &[u8])]) -> Vec<wit::CommitRecord> {
    records
        .iter()
        .map(|(op, p)| wit::CommitRecord {
            op: *op,
            payload: p.to_vec(),
        })
        .collect()
}

fn from_wit_range(r: wit::SeqRange) -> Range<LogSeq> {
    LogSeq(r.start)..LogSeq(r.end)
}

fn from_wit_recovery(r: wit::Recovery) -> Recovery {
    Recovery {
        first_seq: LogSeq(r.first_seq),
        next_seq: LogSeq(r.next_seq),
        records: r.records,
        valid_end: r.valid_end,
        file_len: r.file_len,
        end: match r.end {
            wit::RecoveryEnd::NewLog => RecoveryEnd::NewLog,
            wit::RecoveryEnd::Clean => RecoveryEnd::Clean,
            wit::RecoveryEnd::TornTail => RecoveryEnd::TornTail,
        },
    }
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn u16_of(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn from_wit_header(h: wit::HeaderError) -> HeaderError {
    match h {
        wit::HeaderError::TooShort(len) => HeaderError::TooShort { len },
        wit::HeaderError::BadMagic => HeaderError::BadMagic,
        wit::HeaderError::Checksum => HeaderError::Checksum,
        wit::HeaderError::WrongFamily(m) => HeaderError::WrongFamily {
            found: u16_of(m.found),
            expected: u16_of(m.expected),
        },
        wit::HeaderError::UnsupportedVersion(m) => HeaderError::UnsupportedVersion {
            found: u16_of(m.found),
            supported: u16_of(m.expected),
        },
        wit::HeaderError::NonzeroReserved => HeaderError::NonzeroReserved,
    }
}

/// Maps the guest's error back onto the engine's typed errors: the WIT variants partition by
/// operation, so each lands in the same Rust enum a native call would have returned.
fn from_wit_error(err: wit::WalError) -> WalError {
    use wit::WalError as E;
    match err {
        E::Failed(cause) => WalWriteError::Failed {
            cause: from_wit(cause),
        }
        .into(),
        E::Poisoned(cause) => WalWriteError::Poisoned {
            cause: from_wit(cause),
        }
        .into(),
        E::GroupTooLarge(s) => WalWriteError::GroupTooLarge {
            encoded_bytes: usize_of(s.actual),
            max_group_bytes: usize_of(s.limit),
        }
        .into(),
        E::PayloadTooLarge(s) => WalWriteError::PayloadTooLarge {
            payload_bytes: usize_of(s.actual),
            payload_bytes_max: usize_of(s.limit),
        }
        .into(),
        E::RetentionFull(r) => WalWriteError::RetentionFull {
            batch_bytes: usize_of(r.batch_bytes),
            retained_bytes: usize_of(r.retained_bytes),
            retained_bytes_max: usize_of(r.retained_bytes_max),
        }
        .into(),
        E::BeyondDurable(b) => WalRetireError::BeyondDurable {
            requested: LogSeq(b.requested),
            durable_end: LogSeq(b.durable_end),
        }
        .into(),
        E::NotEmpty(len) => WalOpenError::NotEmpty { len }.into(),
        E::BadHeader(h) => WalOpenError::BadHeader(from_wit_header(h)).into(),
        E::Corrupt(c) => WalOpenError::Corrupt {
            offset: c.offset,
            valid_record_at: c.valid_record_at,
        }
        .into(),
        E::MalformedRecord(offset) => WalOpenError::MalformedRecord { offset }.into(),
        E::SeqGap(g) => WalOpenError::SeqGap {
            offset: g.offset,
            expected: g.expected,
            found: g.found,
        }
        .into(),
        E::Vfs(e) => WalOpenError::Vfs(from_wit(e)).into(),
    }
}
