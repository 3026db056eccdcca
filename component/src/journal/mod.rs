//! The journal: a session state (ordered key/value operations) persisted as an append-only file
//! that is compacted to a snapshot from time to time.
//!
//! What this module owns so far: the op encoding ([`ops`]), the in-memory [`SessionState`] the
//! ops fold into, [`encode_frames`] / [`snapshot_ops`], and recovery ([`replay`]). The writer
//! (lazy header, append + fsync with rollback, compaction by temp file and rename) builds on
//! these; see `../shared/reference/journal-writer-api.txt`.
//!
//! File layout: the 32-byte [`crate::header`] (family journal, version [`JOURNAL_VERSION`],
//! family word 0), then one [`crate::frame`] per op. A zero-byte file is an empty journal: the
//! writer writes the header lazily, with the first append, so a journal that is opened and never
//! used stays zero bytes.

pub mod ops;
mod replay;

pub use ops::{JournalOp, SessionState, encode_frames, snapshot_ops};
pub use replay::{JournalRecovery, replay};

use crate::header::HeaderError;
use crate::vfs::VfsError;

/// The journal format version this build reads and writes.
pub const JOURNAL_VERSION: u16 = 1;

/// Why a journal could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error(transparent)]
    Vfs(#[from] VfsError),
    #[error("bad journal header: {0}")]
    BadHeader(#[from] HeaderError),
    /// The frame at `offset` is damaged but a valid frame follows at `valid_frame_at`.
    #[error("journal corrupt at byte {offset} (a valid frame follows at byte {valid_frame_at})")]
    Corrupt { offset: u64, valid_frame_at: u64 },
    /// A frame with a valid checksum does not hold a well-formed op.
    #[error("malformed journal op at byte {offset}: {why}")]
    MalformedOp { offset: u64, why: &'static str },
}
