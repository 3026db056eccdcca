//! One error enum per operation, each carrying the numbers that explain it.

use crate::header::HeaderError;
use crate::vfs::{QuotaExceeded, VfsError};

use super::LogSeq;

/// Why a commit or flush did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalWriteError {
    /// A write or sync failed while this call's records were staged or in flight. They stay
    /// visible, but none of them is reported durable, and the writer is now poisoned. Whether
    /// any of their bytes reached the disk is unknown: reopen the log to find out.
    #[error("WAL write or sync failed; the writer is poisoned")]
    Failed {
        /// The write or sync error.
        #[source]
        cause: VfsError,
    },
    /// The disk (or the quota, for a write the engine had not reserved) had no room for a group
    /// holding this call's records, and the failure came before the group's sync: nothing
    /// durable was put at risk, so the writer is **not** poisoned. The records stay visible and
    /// pending, with their seqs: do not commit them again. They become durable with the next
    /// group that finds room: [`crate::wal::WalWriter::flush`] (or any commit or seal) retries
    /// them first, and a commit refused while the retry still finds no room stages nothing. A
    /// failed sync is never this: it poisons ([`Self::Failed`]).
    #[error("the disk has no room for the WAL's next group; its records stay pending")]
    Stalled {
        /// The write's error: [`VfsError::NoSpace`] or [`VfsError::QuotaExceeded`].
        #[source]
        cause: VfsError,
    },
    /// Refused before anything of this call was staged: the writer is stalled ([`Self::Stalled`])
    /// and the retry of its pending records, which this call led or waited for first, still
    /// found no room. No seq was consumed and the writer is not poisoned: call again once room
    /// is freed.
    #[error("the WAL is stalled on a full disk; nothing of this call was staged")]
    StalledRefused {
        /// The retry's error: [`VfsError::NoSpace`] or [`VfsError::QuotaExceeded`].
        #[source]
        cause: VfsError,
    },
    /// An earlier write or sync failed; this writer accepts nothing more. Reopen the log.
    #[error("WAL writer is poisoned by an earlier failure")]
    Poisoned {
        /// The error that poisoned the writer.
        #[source]
        cause: VfsError,
    },
    /// One call's records encode to more than one group may hold. Nothing was staged.
    #[error("batch encodes to {bytes} bytes, more than the group bound of {bytes_max}")]
    GroupTooLarge {
        /// The batch's size, encoded.
        bytes: usize,
        /// The writer's group bound.
        bytes_max: usize,
    },
    /// One payload exceeds the format's bound. Nothing was staged.
    #[error("payload of {bytes} bytes exceeds the limit of {bytes_max}")]
    PayloadTooLarge {
        /// The payload's size.
        bytes: usize,
        /// [`super::record::PAYLOAD_BYTES_MAX`].
        bytes_max: usize,
    },
    /// The disk quota has no room for what this batch needs (a new segment, or a longer single
    /// file). Nothing was staged or written, no seq was consumed, and the writer is not
    /// poisoned: smaller batches that fit still succeed, and so does this one once
    /// `truncate_through` (or another of the tenant's logs) has freed room.
    #[error(transparent)]
    QuotaExceeded(QuotaExceeded),
    /// Reserving the room this batch needs failed for another reason than the quota (the
    /// backend's error). Nothing was staged; the writer is not poisoned.
    #[error("reserving disk room failed; nothing was staged")]
    Unreserved {
        /// The backend's error.
        #[source]
        cause: VfsError,
    },
    /// Retaining this batch for `visible_records` would exceed the retention bound; retire
    /// absorbed records first. Nothing was staged.
    #[error(
        "retaining {batch_bytes} more bytes would exceed the retention bound of \
         {retained_bytes_max} ({retained_bytes} retained); retire absorbed records"
    )]
    RetentionFull {
        /// The batch's size, encoded.
        batch_bytes: usize,
        /// Bytes retained now.
        retained_bytes: usize,
        /// The writer's retention bound.
        retained_bytes_max: usize,
    },
}

impl WalWriteError {
    /// The error of a call refused before staging because the retry of a stalled writer's
    /// records ran into [`Self::Stalled`]: those records are not this call's.
    pub fn before_staging(self) -> Self {
        match self {
            WalWriteError::Stalled { cause } => WalWriteError::StalledRefused { cause },
            other => other,
        }
    }

    /// A failed reservation, typed: the quota's refusal as [`Self::QuotaExceeded`].
    pub fn unreserved(cause: VfsError) -> Self {
        match cause {
            VfsError::QuotaExceeded(refusal) => WalWriteError::QuotaExceeded(refusal),
            cause => WalWriteError::Unreserved { cause },
        }
    }
}

/// Why `retire_visible_through` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalRetireError {
    /// Only durable records can be retired; the request is never clamped.
    #[error("cannot retire through {requested:?}: durable end is {durable_end:?}")]
    BeyondDurable {
        /// The seq the caller asked to retire through.
        requested: LogSeq,
        /// The first seq not yet durable.
        durable_end: LogSeq,
    },
}

/// Why a log could not be created or recovered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalOpenError {
    /// The filesystem refused or failed an operation.
    #[error(transparent)]
    Vfs(#[from] VfsError),
    /// Another writer holds the log's lock (in this process or another): nothing was read or
    /// written. See [`super::lock`].
    #[error("the WAL is held by another writer (lock file {lock_path})")]
    Locked {
        /// The lock file the other writer holds.
        lock_path: String,
    },
    /// `create` found a file that already holds bytes; use `open` to recover it.
    #[error("log already holds {len} bytes; open it instead of creating it")]
    NotEmpty {
        /// The file's length.
        len: u64,
    },
    /// The header is damaged, or of another family or version.
    #[error("bad WAL header")]
    BadHeader(#[from] HeaderError),
    /// The record at `offset` is damaged but a valid record follows at `valid_record_at`, so
    /// this is not an unfinished write and dropping it could lose acknowledged records.
    #[error("WAL corrupt at byte {offset} (a valid record follows at byte {valid_record_at})")]
    Corrupt {
        /// Where the damaged record starts.
        offset: u64,
        /// Where the next valid record starts.
        valid_record_at: u64,
    },
    /// A frame with a valid checksum is too short to be a record.
    #[error("malformed WAL record at byte {offset}")]
    MalformedRecord {
        /// Where the frame starts.
        offset: u64,
    },
    /// A valid record carries the wrong sequence number.
    #[error("WAL sequence gap at byte {offset}: expected seq {expected}, found {found}")]
    SeqGap {
        /// Where the record starts.
        offset: u64,
        /// The seq that should be there.
        expected: u64,
        /// The seq that is.
        found: u64,
    },
    /// Segment `segment` does not start where the one before it ends: a segment in the middle
    /// is missing, or one was cut short.
    #[error(
        "WAL segment {segment} starts at seq {found}, but the segment before it ends before \
         seq {expected}: a segment is missing or damaged"
    )]
    SegmentGap {
        /// The segment's file name.
        segment: String,
        /// The seq the segment before it ends at.
        expected: u64,
        /// The seq this segment starts at.
        found: u64,
    },
    /// The first surviving segment starts after the checkpoint's next seq, so records the
    /// owner had not absorbed are gone.
    #[error(
        "the first WAL segment starts at seq {first_seq}, but the checkpoint covers only \
         through seq {checkpoint}: the records in between are missing"
    )]
    CheckpointGap {
        /// The last seq the checkpoint covers.
        checkpoint: u64,
        /// The first surviving segment's first seq.
        first_seq: u64,
    },
    /// A segment's header names another first seq than its file name.
    #[error("WAL segment {segment} holds a header for first seq {header_first_seq}")]
    SegmentMisnamed {
        /// The segment's file name.
        segment: String,
        /// The first seq its header holds.
        header_first_seq: u64,
    },
    /// The checkpoint file is there but is not one valid checkpoint header.
    #[error("bad WAL checkpoint file: {0}")]
    BadCheckpoint(HeaderError),
    /// A single-file constructor was given options that ask for segments. Refused rather than
    /// ignored: the caller meant a segment directory.
    #[error(
        "the options ask for segments of {segment_bytes} bytes, but this call opens a single-file \
         log; use WalWriter::open_segmented or create_segmented"
    )]
    SegmentOptionsForSingleFile {
        /// The segment size the options asked for.
        segment_bytes: u64,
    },
    /// The configured segment size cannot hold a header and a few records.
    #[error("segment size {bytes} is below the minimum of {bytes_min} bytes")]
    SegmentTooSmall {
        /// The configured size.
        bytes: u64,
        /// [`super::segment::SEGMENT_BYTES_MIN`].
        bytes_min: u64,
    },
    /// A segmented open found a single-file log (the foundation's format) at its path.
    #[error(
        "{path} is a single-file WAL, not a segment directory; convert it with \
         `stele wal convert {path} DIR`"
    )]
    SingleFileLog {
        /// The path that holds the single-file log.
        path: String,
    },
}

/// Why `checkpoint` or `truncate_through` refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalRetentionError {
    /// Only durable records can be checkpointed; the request is never clamped.
    #[error("cannot checkpoint through seq {requested}: the durable end is seq {durable_end}")]
    BeyondDurable {
        /// The seq the caller asked to checkpoint through.
        requested: LogSeq,
        /// The first seq not yet durable.
        durable_end: LogSeq,
    },
    /// A checkpoint never moves backwards.
    #[error("cannot checkpoint through seq {requested}: the checkpoint is already at {current}")]
    Regressed {
        /// The seq the caller asked for.
        requested: LogSeq,
        /// The checkpoint now.
        current: LogSeq,
    },
    /// Truncation deletes only what a durable checkpoint covers.
    #[error(
        "cannot truncate through seq {requested}: the checkpoint is {checkpoint:?} \
         (truncate only through a checkpointed seq)"
    )]
    BeyondCheckpoint {
        /// The seq the caller asked to truncate through.
        requested: LogSeq,
        /// The checkpoint now, if any.
        checkpoint: Option<LogSeq>,
    },
    /// Checkpoints and truncation need a segmented log.
    #[error("this WAL is a single file; checkpoint and truncation need a segmented WAL")]
    NotSegmented,
    /// Writing the checkpoint, or deleting a segment, failed. The log's records are untouched;
    /// the checkpoint is the old or the new one, and deleted segments are a prefix.
    #[error("WAL retention I/O failed")]
    Io(#[from] VfsError),
}
