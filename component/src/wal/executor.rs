//! Carrying out a [`Group`]: the one implementation every driver runs.
//!
//! The core ([`super::group_commit`]) decides what a group holds; this module writes it. The
//! thread driver ([`super::WalWriter`]) runs it over [`ReadyIo`](crate::vfs::ReadyIo) through
//! [`complete_now`](crate::vfs::complete_now); the component's async driver awaits it over the
//! `vfs-async` imports, and runs it over the synchronous imports when its caller cannot
//! suspend. Drivers keep only their waiting and waking.
//!
//! What it promises, for a group that returns `Ok`: its records were written at its offset,
//! its zero fill after them, and then, per the group's `sync`, the file was synced; for a group
//! that started a segment under a syncing policy, the directory was synced after the file, so
//! the new segment's name is durable before any record in it is acknowledged. A step that fails
//! ends the group with that step's error, marked as before or at the sync ([`GroupError`]);
//! nothing after it runs.

use std::ops::DerefMut;

use crate::vfs::{
    DeviceIo, FileIo, OpenMode, Unbounded, Vfs, VfsError, VfsFile, VfsReservation, write_zeros,
};

use super::LogSeq;
use super::group_commit::{DiskClaim, Group, GroupError};
use super::segment::{self, SegmentRetention, segment_path};

/// A scratch buffer grown beyond this by a multi-batch group is released after the group, so
/// that one large group (up to 16 MiB under `FullSync`) does not pin its size for the writer's
/// life. Groups up to it reuse the allocation. Chosen, not tuned.
const GROUP_SCRATCH_KEEP_BYTES: usize = 4 << 20;

/// Where a segmented log's groups go.
#[derive(Clone, Copy, Debug)]
pub struct SegmentSite<'a> {
    /// The log's directory.
    pub dir: &'a str,
    /// Bytes of each segment file, header included.
    pub segment_bytes: u64,
}

/// What [`write_segmented_group`] did.
#[derive(Debug)]
#[must_use = "the result goes to GroupCommit::handle_group_done, a started segment becomes current"]
pub struct GroupWritten<F> {
    /// The group's outcome, for [`super::group_commit::GroupCommit::handle_group_done`].
    pub result: Result<(), GroupError>,
    /// The segment this group created. It is the log's newest segment from here on, even when a
    /// later step failed and poisoned the writer: the file exists, and the next open recovers
    /// or removes it. Not when the failure stalls the writer ([`GroupError::retriable`]): the
    /// retry creates the segment again (`Truncate`), and until then the old one stays current.
    pub started: Option<F>,
}

impl<F> GroupWritten<F> {
    /// The bookkeeping every driver does after a segmented group, written once: a segment the
    /// group started becomes the current one (`make_current`) and joins the live segments
    /// (`retention`, taken only then: a truncation may hold it while it deletes); then the
    /// group's outcome. The segment is adopted even when the group failed after creating it,
    /// unless the failure stalls the writer (see [`Self::started`]).
    pub fn adopt<R: DerefMut<Target = SegmentRetention>>(
        self,
        group_start: LogSeq,
        retention: impl FnOnce() -> R,
        make_current: impl FnOnce(F),
    ) -> Result<(), GroupError> {
        let retried = self.result.as_ref().is_err_and(GroupError::retriable);
        if let Some(started) = self.started.filter(|_| !retried) {
            retention().live.push(group_start);
            make_current(started);
        }
        self.result
    }
}

/// Where a log's [`DiskClaim`]s are reserved: the one file of a single-file log, or the
/// namespace and directory of a segmented one.
#[derive(Clone, Copy, Debug)]
pub enum ClaimSite<'a> {
    /// A single-file log's file.
    File(&'a dyn VfsFile),
    /// A segmented log: the new segment is reserved by its path in `dir`.
    Segments {
        /// The log's namespace.
        vfs: &'a dyn Vfs,
        /// The log's directory.
        dir: &'a str,
    },
}

impl ClaimSite<'_> {
    /// Reserves `claim` here, for [`super::group_commit::GroupCommit::stage_with`]: every driver
    /// passes this.
    pub fn reserve(self, claim: DiskClaim) -> Result<Box<dyn VfsReservation>, VfsError> {
        match (claim, self) {
            (DiskClaim::Segment { first_seq, bytes }, ClaimSite::Segments { vfs, dir }) => {
                vfs.reserve(&segment_path(dir, first_seq), bytes)
            }
            (DiskClaim::FileEnd { len }, ClaimSite::File(file)) => file.reserve(len),
            // The core claims segments only for a segmented log and file ends only for a
            // single file, so a mismatch is a driver passing the wrong site: hold nothing
            // rather than refuse a commit.
            _ => {
                debug_assert!(false, "{claim:?} claimed on the wrong site");
                Ok(Box::new(Unbounded))
            }
        }
    }
}

/// Creates the segment whose first record will be `first_seq` ([`segment::prepare_segment`]),
/// unsynced: its caller syncs the file and then the directory before acknowledging anything in
/// it.
///
/// `Truncate`, not `CreateNew`: a file already at this name can only be the residue of a
/// rotation that crashed before its syncs returned.
pub fn start_segment<Io: DeviceIo>(
    io: &Io,
    dir: &str,
    first_seq: LogSeq,
    segment_bytes: u64,
) -> Result<Io::File, VfsError> {
    let file = io.open(&segment_path(dir, first_seq), OpenMode::Truncate)?;
    segment::prepare_segment(&file, first_seq, segment_bytes)?;
    Ok(file)
}

/// Writes `group` to `file`: its chunks back to back at its offset (one write; a multi-chunk
/// group is assembled in `scratch`; a seal group of no record writes none), then its zero fill,
/// then its sync if it has one.
pub async fn write_group<Io: FileIo>(
    io: &Io,
    file: &Io::File,
    group: &Group,
    scratch: &mut Vec<u8>,
) -> Result<(), GroupError> {
    write_records(io, file, group, scratch)
        .await
        .map_err(GroupError::before_sync)?;
    match group.sync {
        Some(kind) => io.sync(file, kind).await.map_err(GroupError::at_sync),
        None => Ok(()),
    }
}

/// The unsynced part of [`write_group`]: the records, then the zero fill.
async fn write_records<Io: FileIo>(
    io: &Io,
    file: &Io::File,
    group: &Group,
    scratch: &mut Vec<u8>,
) -> Result<(), VfsError> {
    if let [only] = group.chunks.as_slice() {
        io.write_at(file, group.offset, only).await?;
    } else if !group.chunks.is_empty() {
        scratch.clear();
        for chunk in &group.chunks {
            scratch.extend_from_slice(chunk);
        }
        let written = io.write_at(file, group.offset, scratch).await;
        if scratch.capacity() > GROUP_SCRATCH_KEEP_BYTES {
            *scratch = Vec::new();
        }
        written?;
    }
    write_zeros(io, file, group.zero_fill.start, group.zero_fill.end).await
}

/// [`write_group`] for a segmented log. When the group starts a segment, it first creates it
/// in `site` ([`start_segment`]; the old segment needs no sync, because under a syncing policy
/// its last group was synced before this group was polled), writes the group there instead of
/// `current`, and after the group's sync syncs the directory: the sync made the header, the
/// size and the records durable, the directory sync makes the new name durable, before any of
/// them is acknowledged.
pub async fn write_segmented_group<Io: DeviceIo>(
    io: &Io,
    current: &Io::File,
    site: SegmentSite<'_>,
    group: &Group,
    scratch: &mut Vec<u8>,
) -> GroupWritten<Io::File> {
    if !group.starts_segment {
        return GroupWritten {
            result: write_group(io, current, group, scratch).await,
            started: None,
        };
    }
    tracing::debug!(
        dir = site.dir,
        first_seq = group.seqs.start.0,
        "wal segment started"
    );
    let started = match start_segment(io, site.dir, group.seqs.start, site.segment_bytes) {
        Ok(file) => file,
        Err(cause) => {
            return GroupWritten {
                result: Err(GroupError::before_sync(cause)),
                started: None,
            };
        }
    };
    let mut result = write_group(io, &started, group, scratch).await;
    if result.is_ok() && group.sync.is_some() {
        result = io.sync_dir(site.dir).await.map_err(GroupError::at_sync);
    }
    GroupWritten {
        result,
        started: Some(started),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::header::HEADER_BYTES;
    use crate::vfs::{MemVfs, ReadyIo, SyncKind, Vfs, VfsFile, complete_now};
    use crate::wal::group_commit::GroupCommit;
    use crate::wal::{DurabilityPolicy, WalOptions};

    fn group(core: &mut GroupCommit, payloads: &[&[u8]]) -> Group {
        for payload in payloads {
            core.stage(&[(1, payload)]).expect("stage");
        }
        assert!(core.claim_leadership(0).is_some());
        core.poll_group().expect("a group")
    }

    #[test]
    fn a_multi_chunk_group_lands_in_one_piece_with_its_zero_fill() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let io = ReadyIo(Arc::clone(&vfs));
        let segment_bytes = 4 << 20;
        let options = WalOptions {
            segment_bytes: Some(segment_bytes),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        let file = start_segment(&io, "", LogSeq(0), segment_bytes).expect("segment");
        let mut core = GroupCommit::new(&options, LogSeq(0), HEADER_BYTES as u64);
        let g = group(&mut core, &[b"one", b"two", b"three"]);
        assert_eq!(g.chunks.len(), 3);
        assert!(
            !g.zero_fill.is_empty(),
            "a fresh segment is zero-filled ahead"
        );
        // Dirty the zero-fill range: the fill must overwrite it.
        file.write_at(g.zero_fill.end - 8, &[0xAA; 8]).unwrap();
        let mut scratch = Vec::new();
        let written = complete_now(write_segmented_group(
            &io,
            &file,
            SegmentSite {
                dir: "",
                segment_bytes,
            },
            &g,
            &mut scratch,
        ));
        written.result.expect("written");
        assert!(written.started.is_none());
        let mut bytes = vec![0u8; g.bytes];
        file.read_at(g.offset, &mut bytes).unwrap();
        let expected: Vec<u8> = g.chunks.concat();
        assert_eq!(bytes, expected);
        let mut tail = [1u8; 8];
        file.read_at(g.zero_fill.end - 8, &mut tail).unwrap();
        assert_eq!(tail, [0; 8], "the zero fill reached the end of its range");
        assert_eq!(g.sync, Some(SyncKind::Full));
    }

    /// Records the size of every write, over [`ReadyIo`].
    struct WriteSizes(std::cell::RefCell<Vec<usize>>);

    impl FileIo for WriteSizes {
        type File = Box<dyn VfsFile>;
        async fn write_at(
            &self,
            file: &Self::File,
            offset: u64,
            data: &[u8],
        ) -> Result<(), VfsError> {
            self.0.borrow_mut().push(data.len());
            file.write_at(offset, data)
        }
        async fn sync(&self, file: &Self::File, kind: SyncKind) -> Result<(), VfsError> {
            file.sync(kind)
        }
    }

    #[test]
    fn a_zero_fill_is_written_from_the_one_zero_block_never_a_buffer_of_its_size() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let segment_bytes = 4 << 20;
        let options = WalOptions {
            segment_bytes: Some(segment_bytes),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        let file = start_segment(&ReadyIo(vfs), "", LogSeq(0), segment_bytes).expect("segment");
        let mut core = GroupCommit::new(&options, LogSeq(0), HEADER_BYTES as u64);
        let g = group(&mut core, &[b"record"]);
        let fill = g.zero_fill.end - g.zero_fill.start;
        assert!(fill > crate::vfs::ZERO_BLOCK_BYTES as u64);
        let io = WriteSizes(Default::default());
        complete_now(write_group(&io, &file, &g, &mut Vec::new())).expect("written");
        let sizes = io.0.into_inner();
        assert_eq!(sizes[0], g.bytes, "the records first, in one write");
        assert!(
            sizes[1..]
                .iter()
                .all(|&n| n <= crate::vfs::ZERO_BLOCK_BYTES)
        );
        assert_eq!(sizes[1..].iter().sum::<usize>() as u64, fill);
    }

    #[test]
    fn a_rotation_creates_the_segment_and_writes_the_group_there() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let io = ReadyIo(Arc::clone(&vfs));
        let segment_bytes = 64 << 10;
        let options = WalOptions {
            segment_bytes: Some(segment_bytes),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        vfs.create_dir("log").unwrap();
        let first = start_segment(&io, "log", LogSeq(0), segment_bytes).expect("segment");
        // The core believes the current segment is full, so the next group rotates.
        let mut core = GroupCommit::new(&options, LogSeq(7), segment_bytes - 4);
        let g = group(&mut core, &[b"rotated"]);
        assert!(g.starts_segment);
        let mut scratch = Vec::new();
        let site = SegmentSite {
            dir: "log",
            segment_bytes,
        };
        let written = complete_now(write_segmented_group(&io, &first, site, &g, &mut scratch));
        written.result.expect("written");
        let started = written.started.expect("a new segment");
        assert_eq!(started.len().unwrap(), segment_bytes, "preallocated");
        let mut bytes = vec![0u8; g.bytes];
        started.read_at(g.offset, &mut bytes).unwrap();
        assert_eq!(bytes, g.chunks.concat());
        assert!(vfs.exists(&segment_path("log", LogSeq(7))).unwrap());
    }
}
