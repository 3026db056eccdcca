//! The `stele:log/wal` export: a thin shell that converts WIT values and errors and calls
//! [`crate::wal::WalWriter`].

use std::cell::RefCell;
use std::sync::Arc;

use crate::header::HeaderError;
use crate::wal::{
    DurabilityPolicy, LogEnd, LogSeq, READ_BATCH_RECORDS_MAX, Recovery, WalFollower, WalOpenError,
    WalOptions, WalReader, WalRetentionError, WalRetireError, WalTruncation, WalWriteError,
    WalWriter, WalWriterStats,
};

use super::Component;
use super::exports::stele::log::wal as wit;
use super::vfs::{WitVfs, quota_to_wit, to_wit};

pub struct GuestWriter(WalWriter);

/// Interior mutability because WIT methods take `&self`; the component is single-threaded.
pub struct GuestReader(RefCell<WalReader>);

/// A `follower` resource: `poll` advances it, hence the `RefCell`, as for the reader.
pub struct GuestFollower(RefCell<WalFollower>);

pub(crate) fn options(o: wit::WalOptions) -> Result<WalOptions, wit::WalError> {
    let group_bytes_max = match o.group_bytes_max {
        None => None,
        Some(b) => Some(usize::try_from(b).map_err(|_| {
            wit::WalError::GroupTooLarge(wit::TooLarge {
                bytes: b,
                bytes_max: u32::MAX.into(),
            })
        })?),
    };
    Ok(WalOptions {
        policy: match o.policy {
            wit::DurabilityPolicy::FullSync => DurabilityPolicy::FullSync,
            wit::DurabilityPolicy::Barrier => DurabilityPolicy::Barrier,
            wit::DurabilityPolicy::Skip => DurabilityPolicy::Skip,
        },
        first_seq: LogSeq(o.first_seq),
        group_bytes_max,
        retained_bytes_max: usize::try_from(o.retained_bytes_max).unwrap_or(usize::MAX),
        segment_bytes: o.segment_bytes,
    })
}

fn too_large(bytes: usize, bytes_max: usize) -> wit::TooLarge {
    wit::TooLarge {
        bytes: bytes as u64,
        bytes_max: bytes_max as u64,
    }
}

pub(crate) fn write_error(err: WalWriteError) -> wit::WalError {
    match err {
        WalWriteError::Failed { cause } => wit::WalError::Failed(to_wit(cause)),
        WalWriteError::Poisoned { cause } => wit::WalError::Poisoned(to_wit(cause)),
        WalWriteError::Stalled { cause } => wit::WalError::Stalled(to_wit(cause)),
        WalWriteError::StalledRefused { cause } => wit::WalError::StalledRefused(to_wit(cause)),
        WalWriteError::GroupTooLarge { bytes, bytes_max } => {
            wit::WalError::GroupTooLarge(too_large(bytes, bytes_max))
        }
        WalWriteError::PayloadTooLarge { bytes, bytes_max } => {
            wit::WalError::PayloadTooLarge(too_large(bytes, bytes_max))
        }
        WalWriteError::RetentionFull {
            batch_bytes,
            retained_bytes,
            retained_bytes_max,
        } => wit::WalError::RetentionFull(wit::RetentionFull {
            batch_bytes: batch_bytes as u64,
            retained_bytes: retained_bytes as u64,
            retained_bytes_max: retained_bytes_max as u64,
        }),
        WalWriteError::QuotaExceeded(refusal) => {
            wit::WalError::QuotaExceeded(quota_to_wit(refusal))
        }
        WalWriteError::Unreserved { cause } => wit::WalError::Unreserved(to_wit(cause)),
    }
}

pub(crate) fn header_error(err: HeaderError) -> wit::HeaderError {
    match err {
        HeaderError::TooShort { len } => wit::HeaderError::TooShort(len),
        HeaderError::BadMagic => wit::HeaderError::BadMagic,
        HeaderError::Checksum => wit::HeaderError::Checksum,
        HeaderError::WrongFamily { found, expected } => {
            wit::HeaderError::WrongFamily(wit::HeaderMismatch {
                found: found.into(),
                expected: expected.into(),
            })
        }
        HeaderError::UnsupportedVersion { found, supported } => {
            wit::HeaderError::UnsupportedVersion(wit::HeaderMismatch {
                found: found.into(),
                expected: supported.into(),
            })
        }
        HeaderError::NonzeroReserved => wit::HeaderError::NonzeroReserved,
    }
}

pub(crate) fn open_error(err: WalOpenError) -> wit::WalError {
    match err {
        WalOpenError::Vfs(e) => wit::WalError::Vfs(to_wit(e)),
        WalOpenError::Locked { lock_path } => wit::WalError::Locked(lock_path),
        WalOpenError::NotEmpty { len } => wit::WalError::NotEmpty(len),
        WalOpenError::BadHeader(h) => wit::WalError::BadHeader(header_error(h)),
        WalOpenError::Corrupt {
            offset,
            valid_record_at,
        } => wit::WalError::Corrupt(wit::Corruption {
            offset,
            valid_record_at,
        }),
        WalOpenError::MalformedRecord { offset } => wit::WalError::MalformedRecord(offset),
        WalOpenError::SeqGap {
            offset,
            expected,
            found,
        } => wit::WalError::SeqGap(wit::SeqGap {
            offset,
            expected,
            found,
        }),
        WalOpenError::SegmentGap {
            segment,
            expected,
            found,
        } => wit::WalError::SegmentGap(wit::SegmentGap {
            segment,
            expected,
            found,
        }),
        WalOpenError::CheckpointGap {
            checkpoint,
            first_seq,
        } => wit::WalError::CheckpointGap(wit::CheckpointGap {
            checkpoint,
            first_seq,
        }),
        WalOpenError::SegmentMisnamed {
            segment,
            header_first_seq,
        } => wit::WalError::SegmentMisnamed(wit::SegmentMisnamed {
            segment,
            header_first_seq,
        }),
        WalOpenError::BadCheckpoint(h) => wit::WalError::BadCheckpoint(header_error(h)),
        WalOpenError::SegmentTooSmall { bytes, bytes_min } => {
            wit::WalError::SegmentTooSmall(wit::TooSmall { bytes, bytes_min })
        }
        WalOpenError::SingleFileLog { path } => wit::WalError::SingleFileLog(path),
        WalOpenError::SegmentOptionsForSingleFile { segment_bytes } => {
            wit::WalError::SegmentOptionsForSingleFile(segment_bytes)
        }
    }
}

pub(crate) fn retention_error(err: WalRetentionError) -> wit::WalError {
    match err {
        WalRetentionError::BeyondDurable {
            requested,
            durable_end,
        } => wit::WalError::BeyondDurable(wit::BeyondDurable {
            requested: requested.0,
            durable_end: durable_end.0,
        }),
        WalRetentionError::Regressed { requested, current } => {
            wit::WalError::CheckpointRegressed(wit::CheckpointRegressed {
                requested: requested.0,
                current: current.0,
            })
        }
        WalRetentionError::BeyondCheckpoint {
            requested,
            checkpoint,
        } => wit::WalError::BeyondCheckpoint(wit::BeyondCheckpoint {
            requested: requested.0,
            checkpoint: checkpoint.map(|c| c.0),
        }),
        WalRetentionError::NotSegmented => wit::WalError::NotSegmented,
        WalRetentionError::Io(e) => wit::WalError::RetentionIo(to_wit(e)),
    }
}

pub(crate) fn truncation(t: WalTruncation) -> wit::Truncation {
    wit::Truncation {
        segments_removed: t.segments_removed,
        first_kept_seq: t.first_kept_seq.0,
    }
}

/// Creates or recovers the log `options` describe: a segment directory when they set a segment
/// size, else one file.
pub(crate) fn start_writer(
    path: &str,
    options: WalOptions,
    create: bool,
) -> Result<(WalWriter, Recovery), WalOpenError> {
    match (options.segment_bytes.is_some(), create) {
        (true, true) => {
            let writer = WalWriter::create_segmented(Arc::new(WitVfs), path, options)?;
            let recovery = Recovery::new_log(options.first_seq, 0);
            Ok((writer, recovery))
        }
        (true, false) => WalWriter::open_segmented(Arc::new(WitVfs), path, options)
            .map(|(writer, found)| (writer, found.recovery)),
        (false, true) => {
            let writer = WalWriter::create_with(&WitVfs, path, options)?;
            Ok((writer, Recovery::new_log(options.first_seq, 0)))
        }
        (false, false) => WalWriter::open_with(&WitVfs, path, options),
    }
}

pub(crate) fn retire_error(err: WalRetireError) -> wit::WalError {
    match err {
        WalRetireError::BeyondDurable {
            requested,
            durable_end,
        } => wit::WalError::BeyondDurable(wit::BeyondDurable {
            requested: requested.0,
            durable_end: durable_end.0,
        }),
    }
}

pub(crate) fn recovery(r: Recovery) -> wit::Recovery {
    wit::Recovery {
        first_seq: r.first_seq.0,
        next_seq: r.next_seq.0,
        records: r.records,
        valid_end: r.valid_end,
        file_len: r.file_len,
        dirty_end: r.dirty_end,
        end: match r.end {
            LogEnd::Empty => wit::RecoveryEnd::NewLog,
            LogEnd::Clean => wit::RecoveryEnd::Clean,
            LogEnd::TornTail { .. } => wit::RecoveryEnd::TornTail,
            // Replay refuses corruption with an error; a recovery never holds it.
            LogEnd::Corrupt { .. } => wit::RecoveryEnd::Clean,
        },
    }
}

pub(crate) fn range(r: std::ops::Range<LogSeq>) -> wit::SeqRange {
    wit::SeqRange {
        start: r.start.0,
        end: r.end.0,
    }
}

pub(crate) fn visible(records: Vec<crate::wal::VisibleRecord>) -> Vec<wit::VisibleRecord> {
    records
        .into_iter()
        .map(|r| wit::VisibleRecord {
            seq: r.seq.0,
            op: r.op,
            payload: r.payload.to_vec(),
        })
        .collect()
}

pub(crate) fn retirement(r: crate::wal::WalRetirement) -> wit::Retirement {
    wit::Retirement {
        records: r.records,
        bytes: r.bytes,
        retained_bytes: r.retained_bytes,
    }
}

pub(crate) fn batch(records: &[wit::CommitRecord]) -> Vec<(u16, &[u8])> {
    records
        .iter()
        .map(|r| (r.op, r.payload.as_slice()))
        .collect()
}

impl wit::Guest for Component {
    type Writer = GuestWriter;
    type Reader = GuestReader;
    type Follower = GuestFollower;
}

impl wit::GuestFollower for GuestFollower {
    fn open(path: String, from_seq: u64) -> Result<wit::Follower, wit::WalError> {
        let follower =
            WalFollower::open_at(Arc::new(WitVfs), &path, LogSeq(from_seq)).map_err(open_error)?;
        Ok(wit::Follower::new(GuestFollower(RefCell::new(follower))))
    }

    fn poll(&self, records_max: u32) -> Result<Vec<wit::VisibleRecord>, wit::WalError> {
        let records = self
            .0
            .borrow_mut()
            .poll((records_max as usize).min(READ_BATCH_RECORDS_MAX))
            .map_err(open_error)?;
        Ok(records
            .into_iter()
            .map(|r| wit::VisibleRecord {
                seq: r.seq.0,
                op: r.op,
                payload: r.payload.to_vec(),
            })
            .collect())
    }

    fn next_seq(&self) -> Option<u64> {
        self.0.borrow().next_seq().map(|seq| seq.0)
    }
}

impl wit::GuestReader for GuestReader {
    fn open(path: String) -> Result<wit::Reader, wit::WalError> {
        Self::open_at(path, 0)
    }

    fn open_at(path: String, from_seq: u64) -> Result<wit::Reader, wit::WalError> {
        let reader =
            WalReader::open_at(Arc::new(WitVfs), &path, LogSeq(from_seq)).map_err(open_error)?;
        Ok(wit::Reader::new(GuestReader(RefCell::new(reader))))
    }

    fn next_batch(&self, records_max: u32) -> Result<Vec<wit::VisibleRecord>, wit::WalError> {
        let mut reader = self.0.borrow_mut();
        let mut out = Vec::new();
        while out.len() < (records_max as usize).min(READ_BATCH_RECORDS_MAX) {
            match reader.next_record().map_err(open_error)? {
                Some(r) => out.push(wit::VisibleRecord {
                    seq: r.seq.0,
                    op: r.op,
                    payload: r.payload.to_vec(),
                }),
                None => break,
            }
        }
        Ok(out)
    }

    fn recovery(&self) -> Option<wit::Recovery> {
        self.0.borrow().recovery().map(recovery)
    }
}

impl wit::GuestWriter for GuestWriter {
    fn create(path: String, options: wit::WalOptions) -> Result<wit::Writer, wit::WalError> {
        let (writer, _) = start_writer(&path, self::options(options)?, true).map_err(open_error)?;
        Ok(wit::Writer::new(GuestWriter(writer)))
    }

    fn open(
        path: String,
        options: wit::WalOptions,
    ) -> Result<(wit::Writer, wit::Recovery), wit::WalError> {
        let (writer, rec) =
            start_writer(&path, self::options(options)?, false).map_err(open_error)?;
        Ok((wit::Writer::new(GuestWriter(writer)), recovery(rec)))
    }

    fn commit(&self, op: u16, payload: Vec<u8>) -> Result<u64, wit::WalError> {
        self.0
            .commit(op, &payload)
            .map(|s| s.0)
            .map_err(write_error)
    }

    fn commit_durable(&self, op: u16, payload: Vec<u8>) -> Result<u64, wit::WalError> {
        self.0
            .commit_durable(op, &payload)
            .map(|s| s.0)
            .map_err(write_error)
    }

    fn commit_many(&self, records: Vec<wit::CommitRecord>) -> Result<wit::SeqRange, wit::WalError> {
        self.0
            .commit_many(&batch(&records))
            .map(range)
            .map_err(write_error)
    }

    fn commit_many_durable(
        &self,
        records: Vec<wit::CommitRecord>,
    ) -> Result<wit::SeqRange, wit::WalError> {
        self.0
            .commit_many_durable(&batch(&records))
            .map(range)
            .map_err(write_error)
    }

    fn flush(&self) -> Result<(), wit::WalError> {
        self.0.flush().map_err(write_error)
    }

    fn seal_active_segment(&self) -> Result<bool, wit::WalError> {
        self.0.seal_active_segment().map_err(write_error)
    }

    fn visible_records(
        &self,
        first_seq: u64,
        limit: u32,
    ) -> Result<Vec<wit::VisibleRecord>, wit::WalError> {
        Ok(visible(
            self.0.visible_records(LogSeq(first_seq), limit as usize),
        ))
    }

    fn retire_visible_through(
        &self,
        absorbed_through: u64,
    ) -> Result<wit::Retirement, wit::WalError> {
        let r = self
            .0
            .retire_visible_through(LogSeq(absorbed_through))
            .map_err(retire_error)?;
        Ok(retirement(r))
    }

    fn stats(&self) -> wit::WalStats {
        stats(self.0.stats())
    }

    fn checkpoint(&self, absorbed_through: u64) -> Result<(), wit::WalError> {
        self.0
            .checkpoint(LogSeq(absorbed_through))
            .map_err(retention_error)
    }

    fn truncate_through(&self, through: u64) -> Result<wit::Truncation, wit::WalError> {
        self.0
            .truncate_through(LogSeq(through))
            .map(truncation)
            .map_err(retention_error)
    }

    fn segments(&self) -> Vec<u64> {
        self.0.segments().into_iter().map(|s| s.0).collect()
    }
}

pub(crate) fn stats(s: WalWriterStats) -> wit::WalStats {
    wit::WalStats {
        groups: s.groups,
        records: s.records,
        bytes: s.bytes,
        syncs: s.syncs,
        dir_syncs: s.dir_syncs,
        segments_started: s.segments_started,
        group_records_histogram: s.group_records_histogram.to_vec(),
        durable_end: s.durable_end.0,
        visible_end: s.visible_end.0,
        retained_bytes: s.retained_bytes,
        retained_records: s.retained_records,
    }
}
