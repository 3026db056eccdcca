//! Segments: a WAL as a directory of preallocated files, each named by its first seq.
//!
//! What it owns: segment naming, listing a segment directory, recovery across segments, the
//! checkpoint file, and the rule for which segments [`super::WalWriter::truncate_through`] may
//! delete. The writer (rotation, preallocation) lives in `writer.rs` ([`super::WalWriter`]).
//!
//! ```text
//! <dir>/00000000000000000000.wal   a segment whose first record is seq 0
//! <dir>/00000000000000004711.wal   the next one, first seq 4711
//! <dir>/checkpoint                 a 32-byte header alone: family wal-checkpoint, word = the
//!                                  seq the owner has absorbed through
//! <dir>/checkpoint.staging         a checkpoint being written; ignored by recovery
//! ```
//!
//! What it promises:
//! - A segment is a single-file WAL (same header, same records; its header's first seq equals
//!   the seq in its name) followed by zeros up to the segment size: unwritten, preallocated
//!   space. All-zero bytes after the last record are a clean end, never a torn tail.
//! - Records never straddle segments, and segments are contiguous: each one's first seq is the
//!   previous one's next seq. A missing segment in the middle is corruption
//!   ([`WalOpenError::SegmentGap`]); segments missing before the first survivor are what
//!   truncation leaves, and are fine while the checkpoint covers them.
//! - A rotation opens the new segment, writes its header, preallocates it (`set_len`) and
//!   writes the group there; under a syncing policy the group's own sync then makes header, size
//!   and records durable together, and a directory sync makes the name durable, before any
//!   record in it is acknowledged. One sync of the file, not two: a crash before both syncs
//!   returned loses only unacknowledged records. So a last segment whose header is still zero
//!   is an unfinished rotation that holds nothing acknowledged; recovery skips it and a writer
//!   removes it, and a last segment with a header and a torn group is a torn tail.
//! - The checkpoint is replaced atomically (stage, fsync, rename, fsync the directory), so after
//!   any crash it holds the old or the new seq, never a torn one.

use crate::header::{Family, FileHeader, HEADER_BYTES};
use crate::vfs::replace::replace_file;
use crate::vfs::{OpenMode, ReadyIo, Vfs, VfsError, VfsFile, complete_now};

use super::record::RecordRef;
use super::replay::{RecordScan, Recovery};
use super::{LogSeq, WAL_VERSION, WalOpenError, WalRetentionError};
use crate::recovery::LogEnd;

/// The segment size unless configured: etcd's choice, and large enough that rotation (one
/// create, one `set_len`, two syncs) is rare next to the groups it separates.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

/// The smallest segment: a header and room for a few small records. Crash tests use segments
/// this small so that a short run rotates many times.
pub const SEGMENT_BYTES_MIN: u64 = 4096;

/// The checkpoint file's name in a segment directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";

/// Where a new checkpoint is staged before it is renamed over [`CHECKPOINT_FILE`].
pub const CHECKPOINT_STAGING_FILE: &str = "checkpoint.staging";

/// The version of the checkpoint file format.
pub const CHECKPOINT_VERSION: u16 = 1;

const SEGMENT_SUFFIX: &str = ".wal";
/// Digits in a segment name: enough for every u64, so names sort as their seqs do.
const SEGMENT_NAME_DIGITS: usize = 20;

/// The file name of the segment whose first record is `first_seq`.
pub fn segment_file_name(first_seq: LogSeq) -> String {
    format!(
        "{:0width$}{SEGMENT_SUFFIX}",
        first_seq.0,
        width = SEGMENT_NAME_DIGITS
    )
}

/// The first seq a segment file name stands for, or `None` if `name` is not a segment's.
pub fn parse_segment_file_name(name: &str) -> Option<LogSeq> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(LogSeq)
}

/// `dir/name`, or `name` when `dir` is the root.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// The first seqs of the segments in `dir`, ascending. Other entries are ignored.
pub fn list_segments(vfs: &dyn Vfs, dir: &str) -> Result<Vec<LogSeq>, VfsError> {
    let mut seqs: Vec<LogSeq> = vfs
        .list(dir)?
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    seqs.sort();
    Ok(seqs)
}

/// The checkpoint recorded in `dir`, if any.
///
/// # Errors
/// [`WalOpenError::BadCheckpoint`] if the file is there but is not a whole, valid checkpoint
/// header (it is only ever replaced by rename, so a damaged one is corruption).
pub fn read_checkpoint(vfs: &dyn Vfs, dir: &str) -> Result<Option<LogSeq>, WalOpenError> {
    let file = match vfs.open(&join(dir, CHECKPOINT_FILE), OpenMode::Existing) {
        Ok(file) => file,
        Err(VfsError::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = file.len()?;
    if len != HEADER_BYTES as u64 {
        return Err(WalOpenError::BadCheckpoint(
            crate::header::HeaderError::TooShort { len },
        ));
    }
    let mut bytes = [0u8; HEADER_BYTES];
    file.read_exact_at(0, &mut bytes)?;
    let header = FileHeader::decode_expecting(&bytes, Family::WalCheckpoint, CHECKPOINT_VERSION)
        .map_err(WalOpenError::BadCheckpoint)?;
    Ok(Some(LogSeq(header.family_word)))
}

/// Durably records `absorbed_through` as the checkpoint of `dir`: stages the file, fsyncs it,
/// renames it over the old one and fsyncs the directory. On `Ok` the new checkpoint survives
/// power loss; after a crash before that, the old one (or none) is what recovery reads.
pub fn write_checkpoint(
    vfs: &dyn Vfs,
    dir: &str,
    absorbed_through: LogSeq,
) -> Result<(), VfsError> {
    let header = FileHeader {
        family: Family::WalCheckpoint,
        version: CHECKPOINT_VERSION,
        family_word: absorbed_through.0,
    };
    let staging = join(dir, CHECKPOINT_STAGING_FILE);
    let target = join(dir, CHECKPOINT_FILE);
    complete_now(replace_file(
        &ReadyIo(vfs),
        &staging,
        &target,
        &[(0, &header.encode())],
    ))
    .map_err(|error| error.cause)
}

/// What recovery found in one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    /// The seq its name and header give.
    pub first_seq: LogSeq,
    /// The seq after its last valid record.
    pub next_seq: LogSeq,
    /// Its valid records.
    pub records: u64,
    /// The byte after its last valid record.
    pub valid_end: u64,
    /// Its length: the segment size, for a preallocated segment.
    pub file_len: u64,
    /// How its valid prefix ended: [`LogEnd::Clean`] when whole records are followed by
    /// zeros or the end of the file; [`LogEnd::TornTail`] when non-zero bytes up to
    /// `torn_end` hold no valid record (an unfinished group write, which a writer zeroes
    /// before appending); [`LogEnd::Empty`] when the header is still zero, or shorter than a
    /// header (a rotation that crashed before its syncs returned: it holds nothing
    /// acknowledged, and only the last segment may be so).
    pub end: LogEnd,
}

/// What recovery found in a segment directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentedRecovery {
    /// The log as a whole: `first_seq` of the first surviving segment, `next_seq` after the
    /// last record, `valid_end`/`file_len`/`dirty_end` of the last usable segment, and `end`
    /// `Empty` when there is none, `TornTail` when its tail holds non-zero bytes, else `Clean`.
    pub recovery: Recovery,
    /// Every segment file, in seq order, the unfinished one included.
    pub segments: Vec<SegmentSummary>,
    /// The checkpoint file's seq, if there is one.
    pub checkpoint: Option<LogSeq>,
}

impl SegmentedRecovery {
    /// The segments that hold a header, in order: the ones a writer resumes over.
    pub fn usable_segments(&self) -> impl Iterator<Item = &SegmentSummary> {
        self.segments.iter().filter(|s| s.end != LogEnd::Empty)
    }

    /// The unfinished last segment, if there is one.
    pub fn unfinished_segment(&self) -> Option<&SegmentSummary> {
        self.segments.last().filter(|s| s.end == LogEnd::Empty)
    }
}

fn header_is_unwritten(file: &dyn VfsFile, file_len: u64) -> Result<bool, VfsError> {
    let present = file_len.min(HEADER_BYTES as u64) as usize;
    let mut bytes = [0u8; HEADER_BYTES];
    file.read_exact_at(0, &mut bytes[..present])?;
    Ok(present < HEADER_BYTES || bytes.iter().all(|&b| b == 0))
}

/// The segment a [`SegmentReader`] is reading.
#[derive(Debug)]
struct OpenSegment {
    first_seq: LogSeq,
    file: Box<dyn VfsFile>,
    scan: RecordScan,
}

/// Reads a segment directory record by record and checks, as it crosses from one segment to
/// the next, that they are contiguous with each other and with the checkpoint. It holds one
/// segment open at a time, and one read window of it (see [`crate::frame::FrameReader`]).
/// The Vfs is passed to each call, so the reader can live wherever its caller keeps the Vfs.
#[derive(Debug)]
pub struct SegmentReader {
    dir: String,
    first_seq_if_new: LogSeq,
    checkpoint: Option<LogSeq>,
    /// Segments not opened yet, in order.
    unread: std::collections::VecDeque<LogSeq>,
    current: Option<OpenSegment>,
    segments: Vec<SegmentSummary>,
    done: bool,
    /// Segments before the first one read were skipped by name ([`Self::start_at`]): the
    /// first one read is then not the log's first, and is not checked against the checkpoint.
    skipped_segments: usize,
}

impl SegmentReader {
    /// Lists `dir` and reads its checkpoint; `first_seq_if_new` is the first seq of a log that
    /// has neither segment nor checkpoint.
    pub fn start(vfs: &dyn Vfs, dir: &str, first_seq_if_new: LogSeq) -> Result<Self, WalOpenError> {
        Ok(SegmentReader {
            dir: dir.to_owned(),
            first_seq_if_new,
            checkpoint: read_checkpoint(vfs, dir)?,
            unread: list_segments(vfs, dir)?.into(),
            current: None,
            segments: Vec::new(),
            done: false,
            skipped_segments: 0,
        })
    }

    /// As [`Self::start`], but skips by name every segment that ends before `from`: each
    /// segment's name is its first seq, so the one that holds `from` is the last whose first
    /// seq is at or below it. The skipped segments are never opened, and [`Self::recovery`]
    /// then describes the segments read, from that one on.
    pub fn start_at(
        vfs: &dyn Vfs,
        dir: &str,
        first_seq_if_new: LogSeq,
        from: LogSeq,
    ) -> Result<Self, WalOpenError> {
        let mut reader = SegmentReader::start(vfs, dir, first_seq_if_new)?;
        let holding_from = reader
            .unread
            .iter()
            .rposition(|&first_seq| first_seq <= from)
            .unwrap_or(0);
        reader.unread.drain(..holding_from);
        reader.skipped_segments = holding_from;
        Ok(reader)
    }

    /// The next valid record, or `None` once the last segment's valid records end (then
    /// [`Self::recovery`] says what was found).
    ///
    /// # Errors
    /// A bad header, a seq gap inside or between segments, a first segment past the
    /// checkpoint's next seq, a misnamed segment, corruption, or a read failure.
    pub fn next_record(&mut self, vfs: &dyn Vfs) -> Result<Option<RecordRef<'_>>, WalOpenError> {
        loop {
            if self.done {
                return Ok(None);
            }
            match &mut self.current {
                Some(open) => {
                    if open.scan.advance(&*open.file)? {
                        break;
                    }
                    let r = open
                        .scan
                        .finished
                        .expect("a scan that stopped advancing has finished");
                    let end = match r.end {
                        // Empty or shorter than a header (only possible before the last
                        // segment, where header_is_unwritten does not apply): no records.
                        LogEnd::Empty | LogEnd::Clean => LogEnd::Clean,
                        // Zeros after the records: the preallocated segment's unwritten space.
                        LogEnd::TornTail { .. } if r.dirty_end == r.valid_end => LogEnd::Clean,
                        LogEnd::TornTail { valid_end, .. } => LogEnd::TornTail {
                            valid_end,
                            torn_end: r.dirty_end,
                        },
                        LogEnd::Corrupt { .. } => unreachable!("replay refuses corruption"),
                    };
                    self.segments.push(SegmentSummary {
                        first_seq: open.first_seq,
                        next_seq: r.next_seq,
                        records: r.records,
                        valid_end: r.valid_end,
                        file_len: r.file_len,
                        end,
                    });
                    self.current = None;
                }
                None => match self.unread.pop_front() {
                    Some(first_seq) => self.open_segment(vfs, first_seq)?,
                    None => self.done = true,
                },
            }
        }
        Ok(Some(self.current_record()))
    }

    /// The record [`Self::next_record`] last returned.
    pub(super) fn current_record(&self) -> RecordRef<'_> {
        let open = self
            .current
            .as_ref()
            .expect("next_record returned a record, so a segment is open");
        open.scan.record()
    }

    fn open_segment(&mut self, vfs: &dyn Vfs, first_seq: LogSeq) -> Result<(), WalOpenError> {
        let name = segment_file_name(first_seq);
        let file = vfs.open(&join(&self.dir, &name), OpenMode::Existing)?;
        let file_len = file.len()?;
        if self.unread.is_empty() && header_is_unwritten(&*file, file_len)? {
            self.segments.push(SegmentSummary {
                first_seq,
                next_seq: first_seq,
                records: 0,
                valid_end: 0,
                file_len,
                end: LogEnd::Empty,
            });
            return Ok(());
        }
        match self.segments.last() {
            Some(previous) if previous.next_seq != first_seq => {
                return Err(WalOpenError::SegmentGap {
                    segment: name,
                    expected: previous.next_seq.0,
                    found: first_seq.0,
                });
            }
            Some(_) => {}
            None if self.skipped_segments > 0 => {}
            None => {
                if let Some(checkpoint) = self.checkpoint
                    && first_seq.0 > checkpoint.0.saturating_add(1)
                {
                    return Err(WalOpenError::CheckpointGap {
                        checkpoint: checkpoint.0,
                        first_seq: first_seq.0,
                    });
                }
            }
        }
        let scan = RecordScan::start(&*file, first_seq)?;
        if scan.first_seq != first_seq {
            return Err(WalOpenError::SegmentMisnamed {
                segment: name,
                header_first_seq: scan.first_seq.0,
            });
        }
        self.current = Some(OpenSegment {
            first_seq,
            file,
            scan,
        });
        Ok(())
    }

    /// What the reader found, once [`Self::next_record`] has returned `None`.
    pub fn recovery(&self) -> Option<SegmentedRecovery> {
        if !self.done {
            return None;
        }
        let segments = self.segments.clone();
        let usable_last = segments.iter().rev().find(|s| s.end != LogEnd::Empty);
        let recovery = match usable_last {
            // With every segment truncated away, the log resumes after its checkpoint.
            None => Recovery::new_log(
                self.checkpoint.map_or(self.first_seq_if_new, LogSeq::next),
                0,
            ),
            Some(last) => Recovery {
                first_seq: segments[0].first_seq,
                next_seq: last.next_seq,
                records: segments.iter().map(|s| s.records).sum(),
                valid_end: last.valid_end,
                file_len: last.file_len,
                dirty_end: match last.end {
                    LogEnd::TornTail { torn_end, .. } => torn_end,
                    _ => last.valid_end,
                },
                // The log's torn tail runs to the file's end, as a single file's does; the
                // segment's own summary (and `dirty_end`) say where its non-zero bytes stop.
                end: match last.end {
                    LogEnd::TornTail { valid_end, .. } => LogEnd::TornTail {
                        valid_end,
                        torn_end: last.file_len,
                    },
                    _ => LogEnd::Clean,
                },
            },
        };
        Some(SegmentedRecovery {
            recovery,
            segments,
            checkpoint: self.checkpoint,
        })
    }
}

/// Replays the segments of `dir` in order, calling `visit` for each valid record (see
/// [`SegmentReader`] for what is checked). `first_seq_if_new` is the first seq when there is no
/// segment and no checkpoint. Nothing is modified.
pub fn replay_segments(
    vfs: &dyn Vfs,
    dir: &str,
    first_seq_if_new: LogSeq,
    mut visit: impl FnMut(RecordRef<'_>),
) -> Result<SegmentedRecovery, WalOpenError> {
    let mut reader = SegmentReader::start(vfs, dir, first_seq_if_new)?;
    while let Some(record) = reader.next_record(vfs)? {
        visit(record);
    }
    Ok(reader
        .recovery()
        .expect("a reader that returned None is done"))
}

/// Which leading segments `truncate_through(through)` may delete, given the first seqs of the
/// live segments in order: every segment whose records all lie at or below `through`, which is
/// every segment whose successor starts at or below `through + 1`. The last segment is never
/// among them: the writer appends to it.
pub fn segments_wholly_through(live: &[LogSeq], through: LogSeq) -> usize {
    live.windows(2)
        .take_while(|pair| pair[1].0 <= through.0.saturating_add(1))
        .count()
}

/// What [`SegmentRetention::truncate_through`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalTruncation {
    /// Segments deleted by this call.
    pub segments_removed: u64,
    /// The first seq of the first segment kept.
    pub first_kept_seq: LogSeq,
}

/// A segmented log's live segments and checkpoint, and the two operations on them. Every
/// driver keeps one (the thread driver behind a mutex, the component's async driver in a
/// cell) and calls these, so the rules are written once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRetention {
    /// First seqs of the live segments, in order; the one being appended to is last.
    pub live: Vec<LogSeq>,
    /// The durable checkpoint, if any.
    pub checkpoint: Option<LogSeq>,
}

impl SegmentRetention {
    /// Durably records `absorbed_through` as the checkpoint (see [`write_checkpoint`]), after
    /// checking it against `durable_end` and the current checkpoint. Equal to the current one:
    /// `Ok`, nothing written.
    pub fn checkpoint(
        &mut self,
        vfs: &dyn Vfs,
        dir: &str,
        absorbed_through: LogSeq,
        durable_end: LogSeq,
    ) -> Result<(), WalRetentionError> {
        if absorbed_through >= durable_end {
            return Err(WalRetentionError::BeyondDurable {
                requested: absorbed_through,
                durable_end,
            });
        }
        match self.checkpoint {
            Some(current) if current > absorbed_through => {
                return Err(WalRetentionError::Regressed {
                    requested: absorbed_through,
                    current,
                });
            }
            Some(current) if current == absorbed_through => return Ok(()),
            _ => {}
        }
        write_checkpoint(vfs, dir, absorbed_through)?;
        self.checkpoint = Some(absorbed_through);
        Ok(())
    }

    /// Deletes the segments wholly at or below `through` ([`segments_wholly_through`]), oldest
    /// first so that a crash midway leaves a suffix and never a gap, then syncs `dir` if it
    /// deleted any. A segment leaves `live` only once its file is gone, so a failed call can be
    /// repeated.
    pub fn truncate_through(
        &mut self,
        vfs: &dyn Vfs,
        dir: &str,
        through: LogSeq,
    ) -> Result<WalTruncation, WalRetentionError> {
        if self
            .checkpoint
            .is_none_or(|checkpoint| through > checkpoint)
        {
            return Err(WalRetentionError::BeyondCheckpoint {
                requested: through,
                checkpoint: self.checkpoint,
            });
        }
        let doomed = segments_wholly_through(&self.live, through);
        for _ in 0..doomed {
            vfs.remove(&join(dir, &segment_file_name(self.live[0])))?;
            self.live.remove(0);
        }
        if doomed > 0 {
            vfs.sync_dir(dir)?;
        }
        Ok(WalTruncation {
            segments_removed: doomed as u64,
            first_kept_seq: self.live[0],
        })
    }
}

/// Makes `file`, just opened (created or truncated) at the segment name of `first_seq`, a new
/// segment: writes its header and preallocates it (`set_len` to `segment_bytes`). It syncs
/// nothing: the caller's rule (see the module doc) is that no record in the segment is
/// acknowledged before a sync of the file that follows this and then a sync of its directory.
pub fn prepare_segment(
    file: &dyn VfsFile,
    first_seq: LogSeq,
    segment_bytes: u64,
) -> Result<(), VfsError> {
    let header = FileHeader {
        family: Family::Wal,
        version: WAL_VERSION,
        family_word: first_seq.0,
    };
    file.write_at(0, &header.encode())?;
    file.set_len(segment_bytes)
}

/// The root-relative path of the segment of `first_seq` in `dir`.
pub fn segment_path(dir: &str, first_seq: LogSeq) -> String {
    join(dir, &segment_file_name(first_seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::MemVfs;

    #[test]
    fn names_sort_as_seqs_and_round_trip() {
        assert_eq!(segment_file_name(LogSeq(4711)), "00000000000000004711.wal");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(LogSeq(u64::MAX))),
            Some(LogSeq(u64::MAX))
        );
        for bad in [
            "4711.wal",
            "0000000000000000471x.wal",
            "checkpoint",
            "x.wal",
        ] {
            assert_eq!(parse_segment_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn truncation_takes_only_wholly_covered_segments_and_never_the_last() {
        let live = [LogSeq(0), LogSeq(10), LogSeq(20)];
        assert_eq!(segments_wholly_through(&live, LogSeq(8)), 0);
        assert_eq!(segments_wholly_through(&live, LogSeq(9)), 1);
        assert_eq!(segments_wholly_through(&live, LogSeq(19)), 2);
        assert_eq!(segments_wholly_through(&live, LogSeq(1000)), 2);
        assert_eq!(segments_wholly_through(&[LogSeq(0)], LogSeq(1000)), 0);
    }

    #[test]
    fn checkpoint_round_trips_and_a_damaged_one_is_refused() {
        let vfs = MemVfs::new();
        assert_eq!(read_checkpoint(&vfs, "log").unwrap(), None);
        write_checkpoint(&vfs, "log", LogSeq(41)).unwrap();
        write_checkpoint(&vfs, "log", LogSeq(42)).unwrap();
        assert_eq!(read_checkpoint(&vfs, "log").unwrap(), Some(LogSeq(42)));
        assert!(!vfs.exists("log/checkpoint.staging").unwrap());
        let mut bytes = vfs.contents("log/checkpoint").unwrap();
        bytes[20] ^= 1;
        vfs.set_contents("log/checkpoint", bytes);
        assert!(matches!(
            read_checkpoint(&vfs, "log"),
            Err(WalOpenError::BadCheckpoint(_))
        ));
    }
}
