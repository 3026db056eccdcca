//! The write-ahead log: group commit over one append-only file or a directory of segments.
//!
//! What it owns: the WAL file format ([`record`], on top of [`crate::frame`] and
//! [`crate::header`]), segments ([`segment`]), recovery ([`mod@replay`]), the group-commit
//! state machine ([`group_commit::GroupCommit`], sans-I/O), the one implementation of
//! carrying out its groups ([`executor`], over [`crate::vfs::FileIo`]) and the native drivers:
//! threads ([`WalWriter`]) and, over the same writer, tokio tasks
//! ([`WalWriter::commit_many_durable_async`] and its siblings).
//!
//! What it promises, in one place (the method docs repeat the part that concerns them):
//! - Sequences are dense: every committed record gets the next [`LogSeq`], and replay refuses a
//!   log whose seqs are not contiguous.
//! - A record is **visible** when its commit call returns `Ok`; visibility is in-memory only.
//! - A record is **durable** when `durable_end` passes it. Under [`DurabilityPolicy::FullSync`]
//!   and [`DurabilityPolicy::Barrier`] that means a sync of the tier's kind returned after the
//!   record's bytes were written; under [`DurabilityPolicy::Skip`] it means the bytes were
//!   handed to the OS. `durable_end` never passes a sync that has not returned `Ok`.
//! - After a failed sync, or a write that failed for any reason but a lack of room, the writer
//!   is poisoned: nothing more is reported durable (fsyncgate: a failed sync may have dropped
//!   pages it reported on). Reopen the log to recover.
//! - A group that finds no room before its sync ([`crate::vfs::VfsError::NoSpace`] from a
//!   segment's creation, a write or its zero fill, or a quota's refusal of a write the engine had
//!   not reserved) **stalls** the writer instead: no sync ran, so nothing durable is in doubt.
//!   Its records stay visible and pending, its waiters get [`WalWriteError::Stalled`], and the
//!   next `flush`, commit or seal retries them (the same bytes at the same offset, over whatever
//!   part of them landed) before anything new, refusing new work with
//!   [`WalWriteError::StalledRefused`] while the disk is still full. Once room is freed the same
//!   writer goes on. Only the writer can tell: a full disk seen at the sync poisons.
//! - One writer per log: every writer holds the log's advisory lock ([`lock`]) from before it
//!   reads the log until it is dropped; a second one gets [`WalOpenError::Locked`].
//! - A failed directory sync (or rename) never leaves a later acknowledgement depending on a
//!   name that is not durable. Each step handles it one way:
//!   - creating or recovering a log: the call fails; the next `open` syncs the directory again
//!     (it always does, under a syncing policy) before it returns a writer;
//!   - a rotation: the group fails, its callers get [`WalWriteError::Failed`], and the writer
//!     is poisoned, so it acknowledges nothing more (a rotation that found no room for the new
//!     segment, before any sync, stalls instead, and its retry creates the segment again);
//!   - a checkpoint: the call fails with [`WalRetentionError::Io`] and the writer keeps the old
//!     checkpoint, so no truncation relies on the new one; calling `checkpoint` again writes it
//!     again;
//!   - a truncation: the call fails with [`WalRetentionError::Io`]; no acknowledgement depends
//!     on a deletion, and a crash can only bring back a prefix of the deleted segments, which
//!     the checkpoint covers.
//!
//! File layout: a 32-byte [`crate::header`] (family WAL, version [`WAL_VERSION`], family word
//! = first seq), then records back to back. A log is either one such file that grows, or a
//! directory of preallocated segment files of that layout ([`segment`]), with rotation,
//! checkpoint and truncation. `docs/FORMAT.md` has the byte-level description.

pub mod executor;
pub mod follow;
pub mod group_commit;
pub mod lock;
pub mod reader;
pub mod record;
pub mod replay;
pub mod report;
pub mod segment;
pub mod setup;

mod error;
mod writer;

pub use crate::recovery::LogEnd;
pub use error::{WalOpenError, WalRetentionError, WalRetireError, WalWriteError};
pub use follow::WalFollower;
pub use reader::WalReader;
pub use record::RecordRef;
pub use replay::{READ_BATCH_RECORDS_MAX, Recovery, replay};
pub use segment::WalTruncation;
pub use setup::{
    SegmentedSetup, SetupMode, SingleFileLock, lock_single_file, setup_log, setup_segments,
};
pub use writer::{VisibleRecord, WalRetirement, WalWriter, WalWriterStats};

use crate::vfs::SyncKind;

/// The WAL format version this build reads and writes.
pub const WAL_VERSION: u16 = 1;

/// Default encoded-byte bound of one group under the barrier and skip tiers: large enough that
/// 128-byte records at 64 writers never hit it, small enough that one group's write stays in the
/// low milliseconds on this disk. Follows the reference writer; modeled, not measured.
pub const GROUP_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// Group bound under [`DurabilityPolicy::FullSync`]: fsync is the expensive step, so a full-sync
/// group may amortize it over more bytes. 16 MiB follows the InnoDB, PostgreSQL and Lucene
/// convention; modeled, not measured.
pub const GROUP_BYTES_MAX_FULL_SYNC: usize = 16 << 20;

/// Default bound on bytes kept in memory for [`WalWriter::visible_records`] until retired.
/// It turns an ingest owner that forgets to retire into a typed
/// [`WalWriteError::RetentionFull`] instead of unbounded memory growth. Chosen, not measured.
pub const RETAINED_BYTES_MAX_DEFAULT: usize = 64 << 20;

const _: () = assert!(GROUP_BYTES_MAX_DEFAULT <= GROUP_BYTES_MAX_FULL_SYNC);
const _: () = assert!(
    GROUP_BYTES_MAX_FULL_SYNC <= crate::frame::BODY_BYTES_MAX,
    "a record that fills a group must still fit one frame"
);

/// A record's sequence number. Ranges of them are half-open: `durable_end` is the first seq
/// that is *not* durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogSeq(pub u64);

impl LogSeq {
    /// The seq after this one.
    pub const fn next(self) -> LogSeq {
        LogSeq(self.0 + 1)
    }
}

impl std::fmt::Display for LogSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a durable commit promises once it returns `Ok`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DurabilityPolicy {
    /// Each group ends with `fsync` ([`SyncKind::Full`]): the record survives power loss.
    FullSync,
    /// Each group ends with a barrier ([`SyncKind::Barrier`]): `F_BARRIERFSYNC` on macOS, which
    /// orders writes but does not force them to stable media; on Linux the host issues
    /// `fdatasync`, so there the record survives power loss as under `FullSync`'s data promise.
    Barrier,
    /// No sync: the record is written to the OS. It survives a crash of this process, not a
    /// power loss or kernel crash.
    Skip,
}

impl DurabilityPolicy {
    /// The sync that ends each group under this policy, if any.
    pub const fn group_sync(self) -> Option<SyncKind> {
        match self {
            DurabilityPolicy::FullSync => Some(SyncKind::Full),
            DurabilityPolicy::Barrier => Some(SyncKind::Barrier),
            DurabilityPolicy::Skip => None,
        }
    }

    /// The group bound this policy uses unless told otherwise.
    pub const fn group_bytes_max_default(self) -> usize {
        match self {
            DurabilityPolicy::FullSync => GROUP_BYTES_MAX_FULL_SYNC,
            DurabilityPolicy::Barrier | DurabilityPolicy::Skip => GROUP_BYTES_MAX_DEFAULT,
        }
    }
}

/// How to create or open a writer. [`WalOptions::new`] gives a segmented log (64 MiB segments);
/// [`WalOptions::single_file`] the original one-file format; the `with_*` setters change one
/// field each:
///
/// ```
/// use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};
/// let options = WalOptions::new(DurabilityPolicy::FullSync)
///     .with_first_seq(LogSeq(100))
///     .with_retained_bytes_max(0);
/// assert_eq!(options.first_seq, LogSeq(100));
/// ```
///
/// `#[non_exhaustive]`, so that a new option is not a breaking change: build it from a
/// constructor, never from a struct literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalOptions {
    /// What each group's write is followed by, and so what a durable commit promises.
    pub policy: DurabilityPolicy,
    /// The first seq of a new log. Ignored when an existing log is recovered: its header says.
    pub first_seq: LogSeq,
    /// Encoded bytes one group may hold; `None` uses [`DurabilityPolicy::group_bytes_max_default`].
    pub group_bytes_max: Option<usize>,
    /// Bytes of committed records kept for [`WalWriter::visible_records`] until retired. `0`
    /// keeps none: `visible_records` then always returns an empty list.
    pub retained_bytes_max: usize,
    /// `Some(bytes)`: the log is a directory of preallocated segment files of this size, header
    /// included (see [`segment`]); at least [`segment::SEGMENT_BYTES_MIN`]. The default, with
    /// [`segment::SEGMENT_BYTES_DEFAULT`] (64 MiB).
    /// `None`: the log is one file that grows (the foundation's format; [`Self::single_file`]).
    pub segment_bytes: Option<u64>,
}

impl WalOptions {
    /// The defaults under `policy`: a segmented log of [`segment::SEGMENT_BYTES_DEFAULT`]
    /// segments, the policy's group bound, [`RETAINED_BYTES_MAX_DEFAULT`] of retention, seqs
    /// from 0.
    pub const fn new(policy: DurabilityPolicy) -> Self {
        WalOptions {
            policy,
            first_seq: LogSeq(0),
            group_bytes_max: None,
            retained_bytes_max: RETAINED_BYTES_MAX_DEFAULT,
            segment_bytes: Some(segment::SEGMENT_BYTES_DEFAULT),
        }
    }

    /// [`Self::new`] for the foundation's single-file format: one file that grows, no
    /// rotation, no checkpoint or truncation. What [`WalWriter::open_with`] and the other
    /// single-file constructors take.
    pub const fn single_file(policy: DurabilityPolicy) -> Self {
        WalOptions {
            segment_bytes: None,
            ..WalOptions::new(policy)
        }
    }

    /// [`Self::new`] for a segmented log with segments of `segment_bytes`.
    pub const fn segmented(policy: DurabilityPolicy, segment_bytes: u64) -> Self {
        WalOptions {
            segment_bytes: Some(segment_bytes),
            ..WalOptions::new(policy)
        }
    }

    /// These options under another durability policy.
    pub const fn with_policy(mut self, policy: DurabilityPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// These options with a new log's first seq (ignored when a log is recovered).
    pub const fn with_first_seq(mut self, first_seq: LogSeq) -> Self {
        self.first_seq = first_seq;
        self
    }

    /// These options with a group bound (`None`: the policy's default).
    pub const fn with_group_bytes_max(mut self, group_bytes_max: Option<usize>) -> Self {
        self.group_bytes_max = group_bytes_max;
        self
    }

    /// These options keeping this many bytes of committed records for `visible_records`.
    pub const fn with_retained_bytes_max(mut self, retained_bytes_max: usize) -> Self {
        self.retained_bytes_max = retained_bytes_max;
        self
    }

    /// These options with segments of this size (`Some`), or as a single file (`None`).
    pub const fn with_segment_bytes(mut self, segment_bytes: Option<u64>) -> Self {
        self.segment_bytes = segment_bytes;
        self
    }

    /// The group bound in effect: the configured or default one, and never more than one
    /// segment's record space, so that a group (and so every batch) fits one segment.
    pub const fn resolved_group_bytes_max(&self) -> usize {
        let bytes = match self.group_bytes_max {
            Some(bytes) => bytes,
            None => self.policy.group_bytes_max_default(),
        };
        match self.segment_bytes {
            Some(segment) => {
                let room = segment.saturating_sub(crate::header::HEADER_BYTES as u64);
                if (bytes as u64) < room {
                    bytes
                } else {
                    room as usize
                }
            }
            None => bytes,
        }
    }
}
