//! [`WalReader`]: reads either layout (one file, or a directory of segments) record by record,
//! without writing to it. Above both [`super::replay`] (one file's scan) and
//! [`super::segment`] (a directory's), so neither imports the other's reader.

use std::sync::Arc;

use crate::vfs::{OpenMode, Vfs, VfsFile};

use super::record::RecordRef;
use super::replay::{RecordScan, Recovery};
use super::segment::{self, SegmentReader, SegmentedRecovery};
use super::{LogSeq, WalOpenError};

/// Reads a WAL record by record, without writing to it: the reader behind `stele wal dump`, the
/// component's `reader` resource, and tests. Memory is bounded as in [`replay`]. It reads a
/// single-file log or a segment directory (see [`super::segment::SegmentReader`]).
#[derive(Debug)]
pub struct WalReader {
    vfs: Arc<dyn Vfs>,
    source: Source,
    /// Records below this seq are read (their checksums and seqs checked) but not returned.
    from: LogSeq,
}

#[derive(Debug)]
enum Source {
    SingleFile {
        file: Box<dyn VfsFile>,
        scan: RecordScan,
    },
    Segments(SegmentReader),
}

impl WalReader {
    /// Opens the log at `path`, which must exist: a file (a zero-byte file reads as an empty
    /// log) or a directory of segments.
    pub fn open(vfs: Arc<dyn Vfs>, path: &str) -> Result<Self, WalOpenError> {
        Self::open_at(vfs, path, LogSeq(0))
    }

    /// Opens the log at `path` to read from seq `from` on: [`Self::next_record`] returns no
    /// record below it. A segment directory is entered at the segment that holds `from`,
    /// found by the segments' names: the segments before it are never opened, so reading from
    /// the last seq reads about one segment, however long the log. A single file has no index
    /// and is read from its start (records below `from` are checked, not returned). Memory
    /// is one read window either way.
    ///
    /// A `from` past the end returns no record; [`Self::recovery`] then says where the log
    /// ends. For a segment directory it describes the segments read, not the skipped ones.
    pub fn open_at(vfs: Arc<dyn Vfs>, path: &str, from: LogSeq) -> Result<Self, WalOpenError> {
        let source = match vfs.open(path, OpenMode::Existing) {
            Ok(file) => {
                let scan = RecordScan::start(&*file, LogSeq(0))?;
                Source::SingleFile { file, scan }
            }
            // A directory cannot be opened as a file: a real filesystem says so (EISDIR), a
            // flat in-memory one finds no file. A listing that names a segment or a checkpoint
            // tells it is a segmented log; anything else keeps the open's error.
            Err(open_error) => match vfs.list(path) {
                Ok(names)
                    if names.iter().any(|n| {
                        segment::parse_segment_file_name(n).is_some()
                            || n == segment::CHECKPOINT_FILE
                    }) =>
                {
                    Source::Segments(SegmentReader::start_at(&*vfs, path, LogSeq(0), from)?)
                }
                _ => return Err(open_error.into()),
            },
        };
        Ok(WalReader { vfs, source, from })
    }

    /// The next valid record, or `None` at the end of the valid prefix (after which
    /// [`Self::recovery`] says how it ended).
    pub fn next_record(&mut self) -> Result<Option<RecordRef<'_>>, WalOpenError> {
        // Two passes so that the record returned borrows the source once: skip, then read.
        loop {
            let seq = match &mut self.source {
                Source::SingleFile { file, scan } => scan.next(&**file)?.map(|r| r.seq),
                Source::Segments(reader) => reader.next_record(&*self.vfs)?.map(|r| r.seq),
            };
            match seq {
                None => return Ok(None),
                Some(seq) if seq >= self.from => break,
                Some(_) => {}
            }
        }
        Ok(Some(match &self.source {
            Source::SingleFile { scan, .. } => scan.record(),
            Source::Segments(reader) => reader.current_record(),
        }))
    }

    /// How the valid prefix ended, once [`Self::next_record`] has returned `None`. For a
    /// segmented log this is the log as a whole ([`SegmentedRecovery::recovery`]).
    pub fn recovery(&self) -> Option<Recovery> {
        match &self.source {
            Source::SingleFile { scan, .. } => scan.finished,
            Source::Segments(reader) => reader.recovery().map(|r| r.recovery),
        }
    }

    /// Per-segment detail, for a segmented log that has been read to its end.
    pub fn segmented_recovery(&self) -> Option<SegmentedRecovery> {
        match &self.source {
            Source::SingleFile { .. } => None,
            Source::Segments(reader) => reader.recovery(),
        }
    }
}
