//! Reading a WAL without writing to it, in any [`Mode`]: [`WalScan`] (the valid prefix,
//! batch by batch), [`WalTail`] (a live log, as it grows) and [`read_wal`] (the whole valid
//! prefix at once). Sandboxed, each is a read-only resource of the plain component on an
//! instance of its own.

use std::sync::Arc;

use bytes::Bytes;
use stele::vfs::Vfs;
use stele::wal::{LogSeq, READ_BATCH_RECORDS_MAX, Recovery, VisibleRecord, WalReader};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::plain::{from_wit_recovery, from_wit_visible};
use super::error::WalError;
use super::plain::guest_call;
use crate::Mode;
use crate::embed::bindings::{self, exports::stele::log::wal as wit};
use crate::sandbox::SandboxError;
use crate::sandbox::runtime::{GuestState, Runtime, SandboxLimits, trap_error};

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
    bindings: bindings::SteleEngine,
    resource: ResourceAny,
}

impl GuestReadHandle {
    /// Instantiates the plain component over `vfs` and opens the resource with `open`.
    fn open(
        vfs: Arc<dyn Vfs>,
        open: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::SteleEngine,
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
