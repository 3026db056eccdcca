//! Following a live WAL: the records a writer appends, as they become whole, reading only the
//! bytes not read before.
//!
//! A follower is not recovery. Recovery reads to the file's end to tell a torn tail from
//! corruption (for a preallocated segment, through its whole zeroed tail). A follower stops at
//! the first frame that is not whole and valid, because a writer may be writing it right now,
//! and remembers where that frame starts and the seq it expects there; the next
//! [`WalFollower::poll`] reads from that byte on. An idle poll therefore reads one small step
//! ([`FOLLOW_FIRST_READ_BYTES`]) and, in a segment directory that gained nothing, lists it.
//!
//! What it promises:
//! - Every record it returns is a whole frame with a valid checksum and the next seq: the same
//!   check recovery makes. Whole valid frames are never rewritten (a writer's recovery keeps
//!   them), so a returned record stays in the log until it is truncated.
//! - It never reports damage it cannot tell from a write in progress: a corrupt frame in the
//!   middle of the log looks like the end of the log to a follower. `WalReader` (or a writer's
//!   `open`) is what refuses it.
//! - It crosses into the segment named by the seq it expects once that segment appears: a
//!   writer rotates only after the segment before holds every record below that seq.
//! - It takes no lock and writes nothing.
//!
//! Memory is one read step (at most [`FOLLOW_READ_BYTES_MAX`], or one frame when a frame is
//! larger) plus the records a poll returns, which the caller bounds with `records_max`.

use std::sync::Arc;

use crate::frame::{self, Decoded, FRAME_HEADER_BYTES};
use crate::header::{Family, FileHeader, HEADER_BYTES};
use crate::vfs::{OpenMode, Vfs, VfsError, VfsFile};

use super::group_commit::VisibleRecord;
use super::record;
use super::segment::{self, list_segments};
use super::{LogSeq, WAL_VERSION, WalOpenError};

/// The first read of a poll: small, because an idle follower of a preallocated segment meets
/// zeroes here at every poll, and one page is enough to see them.
pub const FOLLOW_FIRST_READ_BYTES: usize = 4 << 10;

/// A poll doubles its read step while it finds only whole frames, up to this: large enough to
/// stream a busy log in few reads, small enough that the step is not the memory bound.
pub const FOLLOW_READ_BYTES_MAX: usize = 1 << 20;

/// Follows the WAL at a path (one file or a segment directory); see the module doc.
#[derive(Debug)]
pub struct WalFollower {
    vfs: Arc<dyn Vfs>,
    path: String,
    segmented: bool,
    /// The file being read: `None` while a segment directory holds no segment yet.
    current: Option<FollowedFile>,
    /// The seq the next record must carry; `None` until the first header is read.
    expected: Option<LogSeq>,
    /// Records below this seq are read and checked but not returned.
    from: LogSeq,
    /// Bytes read from files so far (headers included), for callers that account for I/O.
    bytes_read: u64,
}

#[derive(Debug)]
struct FollowedFile {
    file: Box<dyn VfsFile>,
    /// The segment's first seq, from its name (`None` for a single-file log).
    segment_first: Option<LogSeq>,
    /// Where the next frame starts; 0 while the header is not there yet.
    offset: u64,
}

/// How reading the current file ended within one poll.
enum Stop {
    /// `records_max` records are ready.
    Full,
    /// No whole, valid frame (or no header) at the current offset yet.
    Waiting,
}

impl WalFollower {
    /// Follows the log at `path` from seq `from` on: the first poll returns the records from
    /// `from` (or from the log's first record, if that is later). A segment directory is
    /// entered at the segment that holds `from`, found by name, as
    /// [`super::WalReader::open_at`] does; a single file is read from its start. A directory
    /// that holds no segment yet is followed from the first segment that appears.
    ///
    /// # Errors
    /// [`WalOpenError::Vfs`] when `path` is neither a file nor a directory that can be listed.
    pub fn open_at(vfs: Arc<dyn Vfs>, path: &str, from: LogSeq) -> Result<Self, WalOpenError> {
        let (segmented, current) = match vfs.open(path, OpenMode::Existing) {
            Ok(file) => (
                false,
                Some(FollowedFile {
                    file,
                    segment_first: None,
                    offset: 0,
                }),
            ),
            // A directory cannot be opened as a file (see `WalReader::open_at`).
            Err(open_error) => match list_segments(&*vfs, path) {
                Ok(starts) => {
                    // The last segment that starts at or below `from`; the first one when
                    // `from` is below the log's start (truncated, or never written).
                    let holding_from = starts
                        .iter()
                        .rposition(|&first| first <= from)
                        .or((!starts.is_empty()).then_some(0));
                    let current = holding_from
                        .map(|k| open_segment(&*vfs, path, starts[k]))
                        .transpose()?;
                    (true, current)
                }
                Err(_) => return Err(open_error.into()),
            },
        };
        Ok(WalFollower {
            vfs,
            path: path.to_owned(),
            segmented,
            current,
            expected: None,
            from,
            bytes_read: 0,
        })
    }

    /// The seq the next record returned will carry, once a header has been read.
    pub fn next_seq(&self) -> Option<LogSeq> {
        self.expected.map(|expected| expected.max(self.from))
    }

    /// Bytes this follower has read from the log's files so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The records appended since the last poll (at most `records_max`, at least one when
    /// `records_max` is 0), in seq order; empty when there is nothing new yet.
    ///
    /// # Errors
    /// [`WalOpenError::BadHeader`] for a file whose header is not a WAL header;
    /// [`WalOpenError::MalformedRecord`] for a valid frame too short to be a record;
    /// [`WalOpenError::SegmentGap`] when the log moved past the expected seq without a segment
    /// that starts there (the records the follower expected were truncated, or a segment is
    /// misnamed); [`WalOpenError::Vfs`] for a failed read or listing.
    pub fn poll(&mut self, records_max: usize) -> Result<Vec<VisibleRecord>, WalOpenError> {
        let records_max = records_max.max(1);
        let mut records = Vec::new();
        // The expected seq at which a later segment was seen without one named by it.
        let mut gap_suspected_at = None;
        loop {
            if let Stop::Full = self.read_current(&mut records, records_max)? {
                return Ok(records);
            }
            if !self.segmented {
                return Ok(records);
            }
            match self.look_for_next_segment()? {
                SegmentStep::Entered => {}
                SegmentStep::Wait => return Ok(records),
                SegmentStep::Later(later) => {
                    // The writer may have finished the current segment and rotated between
                    // the read and the listing: read it once more before calling the
                    // expected records gone.
                    let expected = self
                        .expected
                        .expect("only a follower past a header sees one");
                    if gap_suspected_at == Some(expected) {
                        return Err(WalOpenError::SegmentGap {
                            segment: segment::segment_file_name(later),
                            expected: expected.0,
                            found: later.0,
                        });
                    }
                    gap_suspected_at = Some(expected);
                }
            }
        }
    }

    /// Reads whole records from the current file into `records` until a frame is not whole
    /// and valid (or `records_max` are there).
    fn read_current(
        &mut self,
        records: &mut Vec<VisibleRecord>,
        records_max: usize,
    ) -> Result<Stop, WalOpenError> {
        let Some(current) = &mut self.current else {
            return Ok(Stop::Waiting);
        };
        if current.offset == 0 {
            let Some(first_seq) = read_header(&*current.file, &mut self.bytes_read)? else {
                return Ok(Stop::Waiting);
            };
            let named_or_expected = current.segment_first.or(self.expected);
            if let Some(expected) = named_or_expected
                && expected != first_seq
            {
                return Err(WalOpenError::SegmentGap {
                    segment: segment::segment_file_name(current.segment_first.unwrap_or(first_seq)),
                    expected: expected.0,
                    found: first_seq.0,
                });
            }
            self.expected = Some(first_seq);
            current.offset = HEADER_BYTES as u64;
        }
        let mut expected = self.expected.expect("a header was read");
        let file_len = current.file.len()?;
        let mut step = FOLLOW_FIRST_READ_BYTES;
        let mut window = Vec::new();
        loop {
            let available = file_len.saturating_sub(current.offset);
            if available < FRAME_HEADER_BYTES as u64 {
                return Ok(Stop::Waiting);
            }
            let requested = available.min(step as u64) as usize;
            window.resize(requested, 0);
            let read = read_fully(&*current.file, current.offset, &mut window)?;
            self.bytes_read += read as u64;
            window.truncate(read);
            // A short read means the file shrank under us (a writer cutting a torn tail):
            // take what is whole and look again at the next poll.
            let mut waiting = read < requested;
            let mut consumed = 0;
            while consumed < window.len() && records.len() < records_max {
                match frame::decode(&window[consumed..]) {
                    Decoded::Frame { body } => {
                        let offset = current.offset + consumed as u64;
                        let rec = record::decode_body(body)
                            .ok_or(WalOpenError::MalformedRecord { offset })?;
                        if rec.seq != expected {
                            // A whole frame with another seq: stale bytes a writer has not
                            // overwritten yet, or damage. Either way, not the next record.
                            waiting = true;
                            break;
                        }
                        if rec.seq >= self.from {
                            records.push(VisibleRecord {
                                seq: rec.seq,
                                op: rec.op,
                                payload: bytes::Bytes::copy_from_slice(rec.payload),
                            });
                        }
                        consumed += FRAME_HEADER_BYTES + body.len();
                        expected = expected.next();
                    }
                    Decoded::Incomplete {
                        frame_bytes: Some(frame_bytes),
                    } if consumed == 0
                        && !waiting
                        && current.offset + frame_bytes as u64 <= file_len =>
                    {
                        // One frame larger than the step, and all of it is there: read it whole
                        // next time round.
                        step = frame_bytes;
                        break;
                    }
                    // The window ends inside a frame: read on from it.
                    Decoded::Incomplete { .. } if consumed > 0 => break,
                    Decoded::Incomplete { .. } | Decoded::Invalid => {
                        waiting = true;
                        break;
                    }
                }
            }
            current.offset += consumed as u64;
            self.expected = Some(expected);
            if records.len() == records_max {
                return Ok(Stop::Full);
            }
            if waiting {
                return Ok(Stop::Waiting);
            }
            if consumed > 0 {
                step = (step * 2).min(FOLLOW_READ_BYTES_MAX);
            }
        }
    }

    /// At a stop in a segment directory: enters the segment named by the expected seq, if it
    /// exists and is not the current one.
    fn look_for_next_segment(&mut self) -> Result<SegmentStep, WalOpenError> {
        let starts = list_segments(&*self.vfs, &self.path)?;
        let Some(expected) = self.expected else {
            // No header read yet: wait for the first segment to appear, then for its header.
            if self.current.is_none()
                && let Some(&first) = starts.first()
            {
                self.current = Some(open_segment(&*self.vfs, &self.path, first)?);
                return Ok(SegmentStep::Entered);
            }
            return Ok(SegmentStep::Wait);
        };
        let current_first = self.current.as_ref().and_then(|c| c.segment_first);
        if starts.contains(&expected) && current_first != Some(expected) {
            self.current = Some(open_segment(&*self.vfs, &self.path, expected)?);
            return Ok(SegmentStep::Entered);
        }
        Ok(match starts.iter().find(|&&first| first > expected) {
            Some(&later) => SegmentStep::Later(later),
            None => SegmentStep::Wait,
        })
    }
}

/// What a listing at a stop found.
enum SegmentStep {
    /// A segment that holds the expected seq: reading goes on there.
    Entered,
    /// Nothing newer than the current segment.
    Wait,
    /// A segment that starts after the expected seq, and none that starts at it.
    Later(LogSeq),
}

fn open_segment(vfs: &dyn Vfs, dir: &str, first: LogSeq) -> Result<FollowedFile, WalOpenError> {
    Ok(FollowedFile {
        file: vfs.open(&segment::segment_path(dir, first), OpenMode::Existing)?,
        segment_first: Some(first),
        offset: 0,
    })
}

/// The header's first seq, or `None` while the header is not whole yet: a file shorter than a
/// header, or an all-zero one, is a creation or rotation that has not written it.
fn read_header(file: &dyn VfsFile, bytes_read: &mut u64) -> Result<Option<LogSeq>, WalOpenError> {
    if file.len()? < HEADER_BYTES as u64 {
        return Ok(None);
    }
    let mut bytes = [0u8; HEADER_BYTES];
    file.read_exact_at(0, &mut bytes)?;
    *bytes_read += HEADER_BYTES as u64;
    if bytes.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let header = FileHeader::decode_expecting(&bytes, Family::Wal, WAL_VERSION)?;
    Ok(Some(LogSeq(header.family_word)))
}

/// Reads up to `buf.len()` bytes at `offset`, fewer only if the file ends first.
fn read_fully(file: &dyn VfsFile, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read_at(offset + filled as u64, &mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::MemVfs;
    use crate::wal::{DurabilityPolicy, WalOptions, WalWriter};

    fn payload(seq: u64) -> Vec<u8> {
        format!("record {seq:05} {}", "x".repeat(80)).into_bytes()
    }

    fn seqs(records: &[VisibleRecord]) -> Vec<u64> {
        records.iter().map(|r| r.seq.0).collect()
    }

    fn commit(wal: &WalWriter, count: u64) {
        for _ in 0..count {
            let seq = wal.stats().visible_end;
            assert_eq!(wal.commit_durable(7, &payload(seq.0)).unwrap(), seq);
            wal.retire_visible_through(seq).unwrap();
        }
    }

    #[test]
    fn a_single_file_follower_reads_each_new_byte_once() {
        let vfs = Arc::new(MemVfs::new());
        let wal =
            WalWriter::create(&*vfs, "log.wal", LogSeq(0), DurabilityPolicy::FullSync).unwrap();
        commit(&wal, 3);
        let mut follower = WalFollower::open_at(vfs.clone(), "log.wal", LogSeq(0)).unwrap();
        let first = follower.poll(100).unwrap();
        assert_eq!(seqs(&first), [0, 1, 2]);
        assert_eq!(first[1].payload, payload(1));
        assert_eq!(follower.next_seq(), Some(LogSeq(3)));

        let before = follower.bytes_read();
        assert!(follower.poll(100).unwrap().is_empty());
        assert_eq!(
            follower.bytes_read(),
            before,
            "an idle poll of a file that did not grow"
        );

        commit(&wal, 2);
        let before = follower.bytes_read();
        assert_eq!(seqs(&follower.poll(100).unwrap()), [3, 4]);
        let new_bytes = 2 * record::encoded_len(payload(3).len()) as u64;
        assert_eq!(
            follower.bytes_read() - before,
            new_bytes,
            "only the new records' bytes"
        );
    }

    #[test]
    fn records_max_splits_a_poll_and_from_skips_earlier_records() {
        let vfs = Arc::new(MemVfs::new());
        let wal =
            WalWriter::create(&*vfs, "log.wal", LogSeq(0), DurabilityPolicy::FullSync).unwrap();
        commit(&wal, 10);
        let mut follower = WalFollower::open_at(vfs.clone(), "log.wal", LogSeq(4)).unwrap();
        assert_eq!(seqs(&follower.poll(4).unwrap()), [4, 5, 6, 7]);
        assert_eq!(seqs(&follower.poll(4).unwrap()), [8, 9]);
        assert!(follower.poll(4).unwrap().is_empty());
    }

    #[test]
    fn a_frame_being_written_is_returned_once_it_is_whole() {
        let vfs = Arc::new(MemVfs::new());
        let wal =
            WalWriter::create(&*vfs, "log.wal", LogSeq(0), DurabilityPolicy::FullSync).unwrap();
        commit(&wal, 1);
        let mut follower = WalFollower::open_at(vfs.clone(), "log.wal", LogSeq(0)).unwrap();
        assert_eq!(seqs(&follower.poll(10).unwrap()), [0]);

        // A writer's group arriving a few bytes at a time, through a handle as a writer's
        // would (the follower holds the file open).
        let file = vfs.open("log.wal", OpenMode::Existing).unwrap();
        let end = file.len().unwrap();
        let mut next = Vec::new();
        record::encode_into(&mut next, LogSeq(1), 7, &payload(1));
        let mut written = 0;
        for cut in [3, FRAME_HEADER_BYTES, next.len() - 1] {
            file.write_at(end + written as u64, &next[written..cut])
                .unwrap();
            written = cut;
            assert!(follower.poll(10).unwrap().is_empty(), "cut at {cut}");
        }
        file.write_at(end + written as u64, &next[written..])
            .unwrap();
        let records = follower.poll(10).unwrap();
        assert_eq!(seqs(&records), [1]);
        assert_eq!(records[0].payload, payload(1));
    }

    #[test]
    fn a_segmented_follower_crosses_rotations_and_an_idle_poll_reads_one_step() {
        let vfs = Arc::new(MemVfs::new());
        let segment_bytes = 64 << 10;
        let options = WalOptions::segmented(DurabilityPolicy::FullSync, segment_bytes);
        let wal = WalWriter::create_segmented(vfs.clone(), "log", options).unwrap();
        let mut follower = WalFollower::open_at(vfs.clone(), "log", LogSeq(0)).unwrap();
        let mut seen = Vec::new();
        for round in 0..6 {
            commit(&wal, 400);
            seen.extend(seqs(&follower.poll(usize::MAX).unwrap()));
            assert_eq!(seen.len() as u64, 400 * (round + 1));
        }
        assert_eq!(seen, (0..2400).collect::<Vec<_>>());
        assert!(
            list_segments(&*vfs, "log").unwrap().len() > 3,
            "the log rotated"
        );

        let before = follower.bytes_read();
        assert!(follower.poll(usize::MAX).unwrap().is_empty());
        let idle = follower.bytes_read() - before;
        assert!(
            idle <= FOLLOW_FIRST_READ_BYTES as u64,
            "an idle poll read {idle} bytes of a {segment_bytes}-byte segment"
        );
    }

    #[test]
    fn opening_at_the_last_seq_reads_about_one_segment() {
        let vfs = Arc::new(MemVfs::new());
        let segment_bytes = 16 << 10;
        let options = WalOptions::segmented(DurabilityPolicy::FullSync, segment_bytes);
        let wal = WalWriter::create_segmented(vfs.clone(), "log", options).unwrap();
        commit(&wal, 3000);
        assert!(list_segments(&*vfs, "log").unwrap().len() > 20);
        let mut follower = WalFollower::open_at(vfs.clone(), "log", LogSeq(2999)).unwrap();
        assert_eq!(seqs(&follower.poll(usize::MAX).unwrap()), [2999]);
        assert!(
            follower.bytes_read() <= segment_bytes,
            "read {} bytes",
            follower.bytes_read()
        );
    }

    #[test]
    fn a_directory_without_segments_is_followed_from_its_first_segment() {
        let vfs = Arc::new(MemVfs::new());
        let mut follower = WalFollower::open_at(vfs.clone(), "log", LogSeq(0)).unwrap();
        assert!(follower.poll(10).unwrap().is_empty());
        let options = WalOptions::segmented(DurabilityPolicy::FullSync, 4096);
        let wal = WalWriter::create_segmented(vfs.clone(), "log", options).unwrap();
        commit(&wal, 100);
        assert_eq!(
            seqs(&follower.poll(usize::MAX).unwrap()),
            (0..100).collect::<Vec<_>>()
        );
    }

    #[test]
    fn records_truncated_before_the_follower_read_them_are_a_gap() {
        let vfs = Arc::new(MemVfs::new());
        let options = WalOptions::segmented(DurabilityPolicy::FullSync, 4096);
        let wal = WalWriter::create_segmented(vfs.clone(), "log", options).unwrap();
        commit(&wal, 10);
        let mut follower = WalFollower::open_at(vfs.clone(), "log", LogSeq(0)).unwrap();
        assert_eq!(follower.poll(5).unwrap().len(), 5);
        commit(&wal, 200);
        // The follower holds the first segment open; delete the ones after it up to the end.
        let starts = list_segments(&*vfs, "log").unwrap();
        assert!(starts.len() > 3);
        for first in &starts[1..starts.len() - 1] {
            vfs.remove(&segment::segment_path("log", *first)).unwrap();
        }
        let err = loop {
            match follower.poll(usize::MAX) {
                Ok(records) => assert!(!records.is_empty(), "stopped without an error"),
                Err(err) => break err,
            }
        };
        assert!(
            matches!(err, WalOpenError::SegmentGap { found, .. } if found == starts[starts.len() - 1].0),
            "{err}"
        );
    }
}
