//! The journal: a session state (ordered key/value operations) persisted as an append-only file
//! that is compacted to a snapshot from time to time.
//!
//! What this module owns: the op encoding ([`ops`]), the in-memory [`SessionState`] the ops fold
//! into, [`encode_frames`] / [`snapshot_ops`], recovery ([`replay`]), the writer's state and I/O
//! sequences ([`JournalFile`], one code path for every driver) and, natively, the tokio
//! [`Writer`] of `../shared/reference/journal-writer-api.txt`.
//!
//! File layout: the 32-byte [`crate::header`] (family journal, version [`JOURNAL_VERSION`],
//! family word 0), then one [`crate::frame`] per op. A zero-byte file is an empty journal: the
//! writer writes the header lazily, with the first append, so a journal that is opened and never
//! used stays zero bytes.
//!
//! What it promises: an acknowledged append survives any crash (its bytes, the header and the
//! directory entry were synced before the acknowledgment); a compaction is atomic; one writer
//! at a time holds a journal (the advisory lock `<path>.lock`, taken through
//! [`crate::vfs::Vfs::lock_exclusive`]).
//!
//! A failed directory sync or rename never leaves an acknowledgement depending on a name that is
//! not durable: the writer syncs the directory at the start of its first append (a writer before
//! it may have created or compacted the file and failed before its own directory sync returned)
//! and, after a compaction whose rename landed but whose directory sync failed, at the start of
//! its next append, before writing; the append fails, with nothing written, if that sync fails.
//! A failed rename leaves the old journal and the writer as they were.

pub mod ops;
mod replay;
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
mod tokio_writer;
mod writer;

pub use crate::vfs::replace::COMPACTING_SUFFIX;
pub use ops::{JournalOp, JournalOpRef, SessionState, check_frames, encode_frames, snapshot_ops};
pub use replay::{JournalRecovery, replay, replay_file};
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
pub use tokio_writer::{BlockingJournal, Writer};
pub use writer::{APPEND_BYTES_MAX, JournalFile, check_append};

use crate::frame::appender::{FramedFormat, OpenError};
use crate::header::{Family, HeaderError};
use crate::vfs::{QuotaExceeded, VfsError};

/// The journal format version this build reads and writes.
pub const JOURNAL_VERSION: u16 = 1;

/// A journal file's header: family journal, [`JOURNAL_VERSION`].
pub const JOURNAL_FORMAT: FramedFormat = FramedFormat {
    family: Family::Journal,
    version: JOURNAL_VERSION,
};

pub use crate::frame::appender::lock_path;

/// Why a journal call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The filesystem refused or failed an operation.
    #[error(transparent)]
    Vfs(#[from] VfsError),
    /// The disk quota has no room for this append or compaction: refused before anything was
    /// written, and the journal and this writer are as they were. Smaller appends that fit still
    /// succeed; a compaction that shrinks the journal frees room.
    #[error(transparent)]
    QuotaExceeded(QuotaExceeded),
    /// The header names another family, or a version this build does not write
    /// ([`HeaderError::UnsupportedVersion`] names both).
    #[error("bad journal header")]
    BadHeader(#[from] HeaderError),
    /// The frame at `offset` is damaged but a valid frame follows at `valid_frame_at`.
    #[error("journal corrupt at byte {offset} (a valid frame follows at byte {valid_frame_at})")]
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next valid frame starts.
        valid_frame_at: u64,
    },
    /// A frame with a valid checksum does not hold a well-formed op.
    #[error("malformed journal op at byte {offset}: {why}")]
    MalformedOp {
        /// Where the frame starts.
        offset: u64,
        /// What is wrong with the op.
        why: String,
    },
    /// Another writer holds the journal.
    #[error("the journal is held by another writer (lock file {lock_path})")]
    Locked {
        /// The lock file the other writer holds.
        lock_path: String,
    },
    /// Bytes handed to `append` or `compact` are not whole op frames; nothing was written.
    #[error("refused to write: byte {offset} of the buffer is not a whole op frame: {why}")]
    MalformedAppend {
        /// The offset in the caller's buffer.
        offset: u64,
        /// What is wrong there.
        why: String,
    },
    /// A multi-op append larger than one frame can hold; nothing was written.
    #[error("an append of {bytes} bytes exceeds the {bytes_max}-byte limit of one atomic append")]
    AppendTooLarge {
        /// The append's size.
        bytes: usize,
        /// [`APPEND_BYTES_MAX`].
        bytes_max: usize,
    },
    /// An append's write or sync failed. The file was cut back to its length before the call
    /// (`rolled_back`), or, if that failed too, the next append cuts it first.
    #[error("append failed; rolled back: {rolled_back}")]
    AppendFailed {
        /// The write or sync error.
        #[source]
        cause: VfsError,
        /// Whether the file was cut back to its length before the call.
        rolled_back: bool,
    },
    /// A compaction failed before its rename: the journal and the writer are unchanged.
    #[error("compaction failed before replacing the journal; nothing changed")]
    CompactFailed {
        /// The error.
        #[source]
        cause: VfsError,
    },
    /// A compaction replaced the journal, but the directory sync that makes the replacement
    /// durable failed; the next append retries it before writing.
    #[error("compaction replaced the journal but the directory sync failed")]
    CompactNotDurable {
        /// The directory sync's error.
        #[source]
        cause: VfsError,
    },
    /// The writer lost its file handle (a compaction could not reopen the journal after its
    /// rename, or a blocking operation panicked); every call fails until the journal is
    /// reopened.
    #[error("the journal writer has no file handle: {why}")]
    NoHandle {
        /// How the handle was lost.
        why: String,
    },
}

/// Opening a journal's file failed, in the journal's terms.
impl From<OpenError> for JournalError {
    fn from(error: OpenError) -> Self {
        match error {
            OpenError::Vfs(cause) => JournalError::Vfs(cause),
            OpenError::BadHeader(cause) => JournalError::BadHeader(cause),
            OpenError::Corrupt {
                offset,
                valid_frame_at,
            } => JournalError::Corrupt {
                offset,
                valid_frame_at,
            },
            OpenError::Locked { lock_path } => JournalError::Locked { lock_path },
            OpenError::NoHandle { why } => JournalError::NoHandle { why },
        }
    }
}
