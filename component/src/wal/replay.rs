//! Recovery: reads a WAL file front to back and decides where its valid prefix ends.
//!
//! The rules (FORMAT.md restates them for other implementers):
//! 1. A missing or zero-byte file is an empty log.
//! 2. A file shorter than the header whose bytes are a prefix of a WAL header, or all zero, is a
//!    creation that crashed before its header sync returned; nothing in it was ever acknowledged,
//!    so it is an empty log too. Any other bad header is refused.
//! 3. Records follow the header; each must be a valid frame whose body is a record whose seq is
//!    one more than the previous (the first equals the header's first seq).
//! 4. The first frame that is invalid or incomplete ends the prefix. If no valid frame starts at
//!    any later byte it is a torn tail (an unfinished group write); otherwise it is corruption,
//!    refused with its offset.
//!
//! Replay holds at most one read chunk or one frame in memory (see [`crate::frame::FrameReader`]).

use crate::frame::{FrameReader, Next, ScanEnd};
use crate::header::{Family, FileHeader, HEADER_BYTES, HeaderError, MAGIC};
use crate::recovery::LogEnd;

use crate::vfs::VfsFile;

use super::record::{self, RecordRef};
use super::{LogSeq, WAL_VERSION, WalOpenError};

/// What replay found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The log's first seq: from the header, or the caller's choice for a new log.
    pub first_seq: LogSeq,
    /// The seq the next appended record gets.
    pub next_seq: LogSeq,
    /// Records recovered.
    pub records: u64,
    /// Byte offset where the valid prefix ends: the next append goes here. Zero when the file
    /// has no header yet.
    pub valid_end: u64,
    /// The file's length when replay read it.
    pub file_len: u64,
    /// The end of the last non-zero byte after `valid_end`, or `valid_end` when every byte
    /// after it is zero: what a writer of a preallocated segment must clear before appending.
    pub dirty_end: u64,
    /// How the valid prefix ended: [`LogEnd::Empty`] when the file holds no header (missing,
    /// empty, or a crashed creation's partial header), [`LogEnd::TornTail`] (up to
    /// `file_len`; `dirty_end` says where its non-zero bytes end) when bytes follow the last
    /// record; never [`LogEnd::Corrupt`], which replay refuses ([`WalOpenError::Corrupt`]).
    pub end: LogEnd,
}

impl Recovery {
    /// What a log that holds no header yet recovers to: nothing, starting at `first_seq`.
    pub const fn new_log(first_seq: LogSeq, file_len: u64) -> Recovery {
        Recovery {
            first_seq,
            next_seq: first_seq,
            records: 0,
            valid_end: 0,
            file_len,
            dirty_end: file_len,
            end: LogEnd::Empty,
        }
    }

    /// Bytes after the valid prefix that recovery discards.
    pub fn torn_bytes(&self) -> u64 {
        self.file_len - self.valid_end
    }
}

fn header_prefix_is_creation_residue(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0) || MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())])
}

/// The record-level scan over a [`FrameReader`]: header check, record decoding, contiguity.
/// It does not own the file: [`replay`] lends it one, [`WalReader`] and the segment reader own
/// theirs.
#[derive(Debug)]
pub(super) struct RecordScan {
    frames: Option<FrameReader>,
    pub(super) first_seq: LogSeq,
    expected: LogSeq,
    records: u64,
    file_len: u64,
    pub(super) finished: Option<Recovery>,
}

impl RecordScan {
    pub(super) fn start(
        file: &dyn VfsFile,
        first_seq_if_new: LogSeq,
    ) -> Result<Self, WalOpenError> {
        let file_len = file.len()?;
        let mut scan = RecordScan {
            frames: None,
            first_seq: first_seq_if_new,
            expected: first_seq_if_new,
            records: 0,
            file_len,
            finished: None,
        };
        let new_log = Recovery::new_log(first_seq_if_new, file_len);
        if file_len == 0 {
            scan.finished = Some(new_log);
            return Ok(scan);
        }
        let mut header_bytes = [0u8; HEADER_BYTES];
        let present = usize::try_from(file_len).map_or(HEADER_BYTES, |len| len.min(HEADER_BYTES));
        file.read_exact_at(0, &mut header_bytes[..present])?;
        if present < HEADER_BYTES {
            if header_prefix_is_creation_residue(&header_bytes[..present]) {
                scan.finished = Some(new_log);
                return Ok(scan);
            }
            return Err(HeaderError::TooShort { len: file_len }.into());
        }
        let header = FileHeader::decode_expecting(&header_bytes, Family::Wal, WAL_VERSION)?;
        scan.first_seq = LogSeq(header.family_word);
        scan.expected = scan.first_seq;
        scan.frames = Some(FrameReader::new(HEADER_BYTES as u64, file_len));
        Ok(scan)
    }

    /// Moves to the next valid record and says whether there is one ([`Self::record`] then
    /// borrows it). `false` means the valid prefix ended: `finished` says how.
    pub(super) fn advance(&mut self, file: &dyn VfsFile) -> Result<bool, WalOpenError> {
        if self.finished.is_some() {
            return Ok(false);
        }
        let frames = self
            .frames
            .as_mut()
            .expect("a scan with a header has a frame reader");
        let (valid_end, dirty_end, end) = match frames.next_frame(file)? {
            Next::Frame { offset, body } => {
                let rec =
                    record::decode_body(body).ok_or(WalOpenError::MalformedRecord { offset })?;
                if rec.seq != self.expected {
                    return Err(WalOpenError::SeqGap {
                        offset,
                        expected: self.expected.0,
                        found: rec.seq.0,
                    });
                }
                self.expected = self.expected.next();
                self.records += 1;
                return Ok(true);
            }
            Next::End(ScanEnd::Clean { end }) => (end, end, LogEnd::Clean),
            Next::End(ScanEnd::TornTail {
                valid_end,
                file_len,
                nonzero_end,
            }) => (
                valid_end,
                nonzero_end,
                LogEnd::TornTail {
                    valid_end,
                    torn_end: file_len,
                },
            ),
            Next::End(ScanEnd::Corrupt {
                offset,
                valid_frame_at,
            }) => {
                return Err(WalOpenError::Corrupt {
                    offset,
                    valid_record_at: valid_frame_at,
                });
            }
        };
        self.finished = Some(Recovery {
            first_seq: self.first_seq,
            next_seq: self.expected,
            records: self.records,
            valid_end,
            file_len: self.file_len,
            dirty_end,
            end,
        });
        Ok(false)
    }

    /// The record [`Self::advance`] moved to, which it validated.
    pub(super) fn record(&self) -> RecordRef<'_> {
        let body = self
            .frames
            .as_ref()
            .map_or(&[][..], FrameReader::last_frame_body);
        record::decode_body(body).expect("advance validated this record")
    }

    pub(super) fn next(
        &mut self,
        file: &dyn VfsFile,
    ) -> Result<Option<RecordRef<'_>>, WalOpenError> {
        Ok(if self.advance(file)? {
            Some(self.record())
        } else {
            None
        })
    }
}

/// Replays `file`, calling `visit` for each valid record in order, and reports where the valid
/// prefix ends. `first_seq_if_new` is the first seq when the file holds no header yet.
///
/// # Errors
/// A bad header, a corrupt record followed by a valid one, a malformed record, a seq gap, or a
/// read failure. A torn tail is not an error.
pub fn replay(
    file: &dyn VfsFile,
    first_seq_if_new: LogSeq,
    mut visit: impl FnMut(RecordRef<'_>),
) -> Result<Recovery, WalOpenError> {
    let mut scan = RecordScan::start(file, first_seq_if_new)?;
    while let Some(rec) = scan.next(file)? {
        visit(rec);
    }
    Ok(scan
        .finished
        .expect("a scan that returned None has finished"))
}

/// The most records one `reader.next-batch` or `follower.poll` of the component returns,
/// whatever the caller asks: bounds the list the host lifts in one call. The host asks for no
/// more than this.
pub const READ_BATCH_RECORDS_MAX: usize = 4096;
