//! Segment images: a sealed segment as it is archived (its header and records, trimmed of the
//! preallocated zeros after them), checked record by record with the engine's own recovery.
//!
//! The same scan judges a local segment before it is uploaded and an object after it is
//! fetched, so the archive holds only what a normal open would recover, and a restore refuses
//! exactly what a normal open would.

use bytes::Bytes;
use stele::header::HEADER_BYTES;
use stele::recovery::LogEnd;
use stele::vfs::{OpenMode, Vfs, VfsError, VfsFile};
use stele::wal::record::{RecordRef, encoded_len};
use stele::wal::segment::segment_path;
use stele::wal::{LogSeq, WalOpenError, replay};

use crate::ArchiveError;

/// A segment's archived form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentImage {
    /// Its first seq.
    pub first_seq: LogSeq,
    /// The seq after its last record.
    pub next_seq: LogSeq,
    /// The header and the records, nothing after.
    pub bytes: Bytes,
    /// CRC32C of `bytes`.
    pub crc32c: u32,
    /// The local file's length, which a restore pads back to.
    pub file_len: u64,
}

impl SegmentImage {
    /// The encoded record bytes it holds (what the backlog counts).
    pub fn record_bytes(&self) -> u64 {
        (self.bytes.len() as u64).saturating_sub(HEADER_BYTES as u64)
    }
}

/// Bytes in memory as a read-only [`VfsFile`], so that the engine's replay reads them where they
/// are.
#[derive(Debug)]
struct BytesFile(Bytes);

impl VfsFile for BytesFile {
    fn len(&self) -> Result<u64, VfsError> {
        Ok(self.0.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let n = buf.len().min(self.0.len() - start);
        buf[..n].copy_from_slice(&self.0[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, _: u64, _: &[u8]) -> Result<(), VfsError> {
        Err(VfsError::PermissionDenied)
    }

    fn set_len(&self, _: u64) -> Result<(), VfsError> {
        Err(VfsError::PermissionDenied)
    }

    fn sync(&self, _: stele::vfs::SyncKind) -> Result<(), VfsError> {
        Ok(())
    }
}

/// What [`scan`] found in a segment's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanOutcome {
    /// The seq after the last valid record.
    pub next_seq: LogSeq,
    /// The byte after the last valid record.
    pub valid_end: u64,
    /// Whether non-zero bytes follow the valid records (a torn tail).
    pub torn: bool,
}

/// Replays `bytes` as a segment whose first seq is `first_seq`, calling `visit` for each
/// record. `key` names the bytes in errors.
///
/// # Errors
/// [`ArchiveError::Corrupt`] with the offset of the first bad byte (the header's, a damaged
/// record's, a seq out of place).
pub fn scan(
    key: &str,
    bytes: &Bytes,
    first_seq: LogSeq,
    visit: impl FnMut(RecordRef<'_>),
) -> Result<ScanOutcome, ArchiveError> {
    let file = BytesFile(bytes.clone());
    let corrupt = |offset: u64, reason: String| ArchiveError::Corrupt {
        key: key.to_owned(),
        offset,
        reason,
    };
    let recovery = replay(&file, first_seq, visit).map_err(|error| match error {
        WalOpenError::Corrupt { offset, .. }
        | WalOpenError::MalformedRecord { offset }
        | WalOpenError::SeqGap { offset, .. } => corrupt(offset, error.to_string()),
        other => corrupt(0, other.to_string()),
    })?;
    if recovery.end == LogEnd::Empty {
        return Err(corrupt(0, "no segment header".into()));
    }
    if recovery.first_seq != first_seq {
        return Err(corrupt(
            0,
            format!(
                "the header says first seq {}, expected {first_seq}",
                recovery.first_seq
            ),
        ));
    }
    Ok(ScanOutcome {
        next_seq: recovery.next_seq,
        valid_end: recovery.valid_end,
        torn: recovery.dirty_end > recovery.valid_end,
    })
}

/// Reads the local segment of `first_seq` in `dir` and trims it to its records.
///
/// # Errors
/// The read's error, or the segment's corruption. A sealed segment with a torn tail is
/// refused too: the writer only moves to a new segment once its groups are written whole, so
/// non-zero bytes after the records are damage, not an unfinished write.
pub fn read_local_segment(
    vfs: &dyn Vfs,
    dir: &str,
    first_seq: LogSeq,
) -> Result<SegmentImage, ArchiveError> {
    let path = segment_path(dir, first_seq);
    let file = vfs
        .open(&path, OpenMode::Existing)
        .map_err(ArchiveError::local(&path))?;
    let file_len = file.len().map_err(ArchiveError::local(&path))?;
    // Bounded by the bytes present: the file's own length, not a field read from it.
    let mut bytes = vec![0u8; usize::try_from(file_len).unwrap_or(usize::MAX)];
    file.read_exact_at(0, &mut bytes)
        .map_err(ArchiveError::local(&path))?;
    let bytes = Bytes::from(bytes);
    let outcome = scan(&path, &bytes, first_seq, |_| {}).map_err(|error| match error {
        ArchiveError::Corrupt { offset, reason, .. } => ArchiveError::LocalSegment {
            path: path.clone(),
            source: WalOpenError::Vfs(VfsError::Io(format!("at byte {offset}: {reason}"))),
        },
        other => other,
    })?;
    if outcome.torn {
        return Err(ArchiveError::LocalSegment {
            path,
            source: WalOpenError::Vfs(VfsError::Io(format!(
                "a sealed segment holds non-zero bytes after its records at byte {}",
                outcome.valid_end
            ))),
        });
    }
    let bytes = bytes.slice(..outcome.valid_end as usize);
    Ok(SegmentImage {
        first_seq,
        next_seq: outcome.next_seq,
        crc32c: crc32c::crc32c(&bytes),
        bytes,
        file_len,
    })
}

/// The byte offset where record `seq` ends in a segment's bytes (so `bytes[..end]` holds the
/// records through `seq`), by the same scan.
pub fn end_of_record(
    key: &str,
    bytes: &Bytes,
    first_seq: LogSeq,
    seq: LogSeq,
) -> Result<u64, ArchiveError> {
    let mut end = HEADER_BYTES as u64;
    scan(key, bytes, first_seq, |record| {
        if record.seq <= seq {
            end += encoded_len(record.payload.len()) as u64;
        }
    })?;
    Ok(end)
}
