//! [`JournalFile`]: the journal writer's state and its I/O sequences, written once for every
//! driver.
//!
//! The methods are `async` over [`DeviceIo`], whose waiting calls (write, sync, directory
//! sync) are futures. Over a [`Vfs`] ([`ReadyIo`]) those futures are ready at once, so the
//! `*_blocking` methods run the same code synchronously: that is what tokio's blocking pool
//! runs ([`super::Writer`]) and what the plain component exports. The async component awaits
//! its `vfs-async` imports through the same methods.
//!
//! The invariants, whatever fails:
//! - the file ends at a whole op, `clean_end`, before and after every call that returns, and an
//!   append is acknowledged only after its bytes, the header before them and the directory
//!   entry that names the file are all durable (both kept by [`FramedAppender`], which the
//!   push log shares);
//! - a compaction either leaves the journal and the writer as they were, or replaces both.

use std::sync::Arc;

use crate::frame::{
    self,
    appender::{AppendError, FramedAppender},
};
use crate::header::HEADER_BYTES;
use crate::vfs::replace::{COMPACTING_SUFFIX, ReplaceError, ReplaceStage, replace_file};
use crate::vfs::{DeviceIo, ReadyIo, Vfs, VfsError, complete_now};

use super::ops::{batch_body_bytes, check_frames, for_each_op_in_body, push_batch_frame};
use super::{JOURNAL_FORMAT, JournalError};

/// The most bytes one multi-op append may carry (about; the exact bound is on the batch frame
/// it becomes, which holds each op with a 4-byte length instead of its 8-byte frame header):
/// its ops travel in one frame, so that a crash keeps all or none of them, and a frame body
/// holds at most [`frame::BODY_BYTES_MAX`], the bound recovery enforces on every length it
/// reads. A single op is bounded the same way by its own frame.
pub const APPEND_BYTES_MAX: usize = frame::BODY_BYTES_MAX - 1;

/// A batch scratch buffer grown beyond this is released after its append, so that one huge
/// append does not pin its size for the writer's life. Batches up to it reuse the allocation.
const BATCH_SCRATCH_KEEP_BYTES: usize = 4 << 20;

/// An open journal, held exclusively (its `<path>.lock`) until dropped. Its file's lifecycle
/// (lock, torn tail, lazy header, pending directory sync, rollback) is the
/// [`FramedAppender`]'s; this adds the ops: their checks, the batch frame, and compaction to a
/// snapshot.
#[derive(Debug)]
pub struct JournalFile<Io: DeviceIo> {
    file: FramedAppender<Io>,
    /// Where a multi-op append's batch frame is built; reused across appends.
    batch_scratch: Vec<u8>,
}

/// The refusals [`JournalFile::append`] makes before any I/O, as it makes them: bytes that are
/// not whole, well-formed op frames ([`JournalError::MalformedAppend`]), and several ops that
/// would not fit in one batch frame ([`JournalError::AppendTooLarge`]). Returns how many ops
/// `bytes` holds. Public so that a host can refuse an append before copying it into a
/// sandboxed writer's memory.
pub fn check_append(bytes: &[u8]) -> Result<u64, JournalError> {
    let ops = check_frames(bytes).map_err(|(offset, why)| JournalError::MalformedAppend {
        offset,
        why: why.into(),
    })?;
    if ops > 1 && batch_body_bytes(bytes, ops) > frame::BODY_BYTES_MAX {
        return Err(JournalError::AppendTooLarge {
            bytes: bytes.len(),
            bytes_max: APPEND_BYTES_MAX,
        });
    }
    Ok(ops)
}

impl<Io: DeviceIo> JournalFile<Io> {
    /// Opens (creating if missing) the journal at `path` for appending. Takes the advisory lock
    /// `<path>.lock` first ([`JournalError::Locked`] if another writer holds it), refuses a
    /// header of another family or version, and scans the ops: corruption followed by a valid
    /// op is refused ([`JournalError::Corrupt`]), and so is a frame that holds no well-formed op
    /// ([`JournalError::MalformedOp`]); a torn tail is cut, and the cut is synced, so appends
    /// start at a whole op.
    pub async fn open(io: Io, path: &str) -> Result<Self, JournalError> {
        let file = FramedAppender::open(io, path, JOURNAL_FORMAT, |offset, body| {
            for_each_op_in_body(body, |_| ()).map_err(|why| JournalError::MalformedOp {
                offset,
                why: why.into(),
            })
        })
        .await?;
        Ok(JournalFile {
            file,
            batch_scratch: Vec::new(),
        })
    }

    /// Appends `bytes` (whole op frames, as [`super::encode_frames`] makes them) and makes them
    /// durable: when this returns `Ok`, the ops, the header before them (written with the first
    /// append) and the file's directory entry have all been synced (`fdatasync`, and the
    /// parent directory's fsync when the entry is not yet known durable). Empty `bytes` write
    /// nothing.
    ///
    /// Atomic: after a crash, recovery sees all of the append's ops or none of them (several
    /// ops are written as one batch frame; at most [`APPEND_BYTES_MAX`] bytes, else
    /// [`JournalError::AppendTooLarge`]).
    ///
    /// Refused before any I/O: bytes that are not whole, well-formed frames
    /// ([`JournalError::MalformedAppend`]). A write or sync failure is rolled back: the file is
    /// cut to its length before the call, and [`JournalError::AppendFailed`] says whether the
    /// cut succeeded (if not, the next append makes it first). None of the failed append's ops
    /// are acknowledged; a retry writes them again at the same offset.
    pub async fn append(&mut self, bytes: &[u8]) -> Result<(), JournalError> {
        self.refuse_if_lost()?;
        let ops = check_append(bytes)?;
        if bytes.is_empty() {
            return Ok(());
        }
        // Several ops go in one batch frame, so that a crash keeps all of them or none. It is
        // built in `batch_scratch`, which keeps its capacity: warm appends allocate nothing.
        let data: &[u8] = if ops > 1 {
            self.batch_scratch.clear();
            push_batch_frame(&mut self.batch_scratch, bytes);
            &self.batch_scratch
        } else {
            bytes
        };
        let result = self.file.append(&[data]).await;
        if self.batch_scratch.capacity() > BATCH_SCRATCH_KEEP_BYTES {
            self.batch_scratch = Vec::new();
        }
        result.map(drop).map_err(JournalError::from)
    }

    /// Atomically replaces the journal with `snapshot` (whole op frames, as
    /// `encode_frames(&snapshot_ops(&state))` makes them): writes the header (unless the
    /// snapshot is empty, which leaves a zero-byte journal) and the snapshot to
    /// `<path>.compacting`, fsyncs it, renames it over the journal, reopens it and fsyncs the
    /// directory. A crash at any point leaves either the old journal or the new one, whole.
    ///
    /// Failures:
    /// - before the rename ([`JournalError::CompactFailed`]): the old journal and this writer
    ///   are untouched and usable; the staged file is removed if it can be;
    /// - reopening after the rename ([`JournalError::NoHandle`]): the new journal is in place but
    ///   this writer has no handle, and every later call returns `NoHandle`;
    /// - the directory sync ([`JournalError::CompactNotDurable`]): the new journal is in place
    ///   and this writer appends to it, but a crash may still bring back the old one until a
    ///   directory sync succeeds; the next append retries it before writing.
    pub async fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.refuse_if_lost()?;
        check_frames(snapshot).map_err(|(offset, why)| JournalError::MalformedAppend {
            offset,
            why: why.into(),
        })?;
        let path = self.file.path().to_owned();
        let staged = format!("{path}{COMPACTING_SUFFIX}");
        let header = JOURNAL_FORMAT.header();
        // A snapshot of no ops is a zero-byte journal, like one never appended to.
        let parts: &[(u64, &[u8])] = if snapshot.is_empty() {
            &[]
        } else {
            &[(0, &header), (HEADER_BYTES as u64, snapshot)]
        };
        let len = parts.iter().map(|(_, part)| part.len() as u64).sum();
        let replaced = replace_file(self.file.io(), &staged, &path, parts).await;
        let not_durable = match replaced {
            Ok(()) => None,
            // The rename is refused as a whole on every backend this writer runs on, so a
            // failed one leaves the old journal, and this writer, as they were.
            Err(ReplaceError {
                cause: VfsError::QuotaExceeded(refusal),
                ..
            }) => return Err(JournalError::QuotaExceeded(refusal)),
            Err(error) if error.stage <= ReplaceStage::Rename => {
                return Err(JournalError::CompactFailed { cause: error.cause });
            }
            Err(error) => {
                debug_assert_eq!(error.stage, ReplaceStage::SyncDir);
                Some(error.cause)
            }
        };
        // The old handle names the replaced file: the appender drops it before anything can
        // use it. The journal's rule for a failed reopen: no handle, for good.
        if let Err(cause) = self.file.adopt_replacement(len, not_durable.is_none()) {
            let why = format!("reopening {path} after compaction failed: {cause}");
            self.file.lose_handle(why.clone());
            return Err(JournalError::NoHandle { why });
        }
        if let Some(cause) = not_durable {
            return Err(JournalError::CompactNotDurable { cause });
        }
        tracing::info!(path = %path, bytes = len, "journal compacted");
        Ok(())
    }

    fn refuse_if_lost(&self) -> Result<(), JournalError> {
        match self.file.lost() {
            None => Ok(()),
            Some(why) => Err(JournalError::NoHandle { why: why.into() }),
        }
    }

    /// The journal's path.
    pub fn path(&self) -> &str {
        self.file.path()
    }

    /// The file's length: where the last whole op ends.
    pub fn clean_end(&self) -> u64 {
        self.file.clean_end()
    }

    /// Whether the header has been written (false while the journal is zero bytes).
    pub fn header_written(&self) -> bool {
        self.file.header_written()
    }
}

impl JournalFile<ReadyIo> {
    /// [`JournalFile::open`] on the calling thread.
    pub fn open_blocking(vfs: Arc<dyn Vfs>, path: &str) -> Result<Self, JournalError> {
        complete_now(JournalFile::open(ReadyIo(vfs), path))
    }

    /// [`JournalFile::append`] on the calling thread.
    pub fn append_blocking(&mut self, bytes: &[u8]) -> Result<(), JournalError> {
        complete_now(self.append(bytes))
    }

    /// [`JournalFile::compact`] on the calling thread.
    pub fn compact_blocking(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        complete_now(self.compact(snapshot))
    }
}

/// An append that failed, in the journal's terms.
impl From<AppendError> for JournalError {
    fn from(error: AppendError) -> Self {
        match error {
            AppendError::Reopen(error) => error.into(),
            AppendError::QuotaExceeded(refusal) => JournalError::QuotaExceeded(refusal),
            AppendError::Failed { cause, rolled_back } => {
                JournalError::AppendFailed { cause, rolled_back }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::ops::tests::set;
    use crate::journal::{JournalOp, SessionState, encode_frames, replay, snapshot_ops};
    use crate::vfs::MemVfs;

    #[test]
    fn lazy_header_append_compact_and_replay() {
        let vfs = MemVfs::new();
        let shared: Arc<dyn Vfs> = Arc::new(vfs.clone());
        let mut journal = JournalFile::open_blocking(shared.clone(), "j").unwrap();
        assert_eq!(
            vfs.contents("j"),
            Some(vec![]),
            "opened, unused: zero bytes"
        );
        journal.append_blocking(&[]).unwrap();
        assert_eq!(
            vfs.contents("j"),
            Some(vec![]),
            "an empty append writes nothing"
        );

        let first = encode_frames(&[set("a", "1"), set("b", "2")]);
        journal.append_blocking(&first).unwrap();
        let second = encode_frames(&[JournalOp::Delete { key: b"a".to_vec() }]);
        journal.append_blocking(&second).unwrap();
        let bytes = vfs.contents("j").unwrap();
        assert_eq!(&bytes[..8], b"STELElog");
        assert_eq!(
            bytes.len(),
            HEADER_BYTES + 8 + 1 + (first.len() - 8) + second.len(),
            "two ops in one batch frame, one op in its own frame"
        );
        assert_eq!(journal.clean_end(), bytes.len() as u64);

        let (ops, recovery) = replay(&*shared, "j").unwrap();
        assert_eq!(recovery.ops, 3);
        let state = SessionState::fold(&ops);
        assert_eq!(snapshot_ops(&state), vec![set("b", "2")]);

        journal
            .compact_blocking(&encode_frames(&snapshot_ops(&state)))
            .unwrap();
        assert!(!vfs.exists("j.compacting").unwrap());
        let (ops, _) = replay(&*shared, "j").unwrap();
        assert_eq!(ops, vec![set("b", "2")]);
        journal.append_blocking(&first).unwrap();
        let (ops, _) = replay(&*shared, "j").unwrap();
        assert_eq!(ops.len(), 3, "appends continue after the snapshot");

        journal.compact_blocking(&[]).unwrap();
        assert_eq!(
            vfs.contents("j"),
            Some(vec![]),
            "an empty snapshot is a zero-byte journal"
        );
    }

    #[test]
    fn a_multi_op_append_is_recovered_whole_or_not_at_all() {
        let vfs = MemVfs::new();
        let shared: Arc<dyn Vfs> = Arc::new(vfs.clone());
        let mut journal = JournalFile::open_blocking(shared.clone(), "j").unwrap();
        journal
            .append_blocking(&encode_frames(&[set("a", "1")]))
            .unwrap();
        let before = journal.clean_end() as usize;
        let batch = [set("b", "2"), set("c", "3"), JournalOp::Clear];
        journal.append_blocking(&encode_frames(&batch)).unwrap();
        drop(journal);
        let whole = vfs.contents("j").unwrap();
        for cut in before..whole.len() {
            vfs.set_contents("j", whole[..cut].to_vec());
            let (ops, _) = replay(&*shared, "j").unwrap();
            assert_eq!(ops, vec![set("a", "1")], "cut at {cut}: none of the batch");
        }
        vfs.set_contents("j", whole);
        let (ops, recovery) = replay(&*shared, "j").unwrap();
        assert_eq!(ops.len(), 4);
        assert_eq!(recovery.ops, 4, "ops, not frames");
    }

    #[test]
    fn second_writer_is_refused_until_the_first_drops() {
        let shared: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let first = JournalFile::open_blocking(shared.clone(), "j").unwrap();
        let err = JournalFile::open_blocking(shared.clone(), "j").unwrap_err();
        assert_eq!(
            err,
            JournalError::Locked {
                lock_path: "j.lock".into()
            }
        );
        drop(first);
        JournalFile::open_blocking(shared, "j").unwrap();
    }

    #[test]
    fn bytes_that_are_not_whole_frames_are_refused_before_any_write() {
        let vfs = MemVfs::new();
        let mut journal = JournalFile::open_blocking(Arc::new(vfs.clone()), "j").unwrap();
        let good = encode_frames(&[set("a", "1")]);
        let cut = &good[..good.len() - 1];
        assert!(matches!(
            journal.append_blocking(cut),
            Err(JournalError::MalformedAppend { offset: 0, .. })
        ));
        assert!(matches!(
            journal.append_blocking(b"garbage!garbage!"),
            Err(JournalError::MalformedAppend { .. })
        ));
        assert!(matches!(
            journal.compact_blocking(cut),
            Err(JournalError::MalformedAppend { .. })
        ));
        assert_eq!(vfs.contents("j"), Some(vec![]));
    }

    #[test]
    fn open_cuts_a_torn_tail_so_appends_start_at_a_whole_op() {
        let vfs = MemVfs::new();
        let shared: Arc<dyn Vfs> = Arc::new(vfs.clone());
        let mut journal = JournalFile::open_blocking(shared.clone(), "j").unwrap();
        journal
            .append_blocking(&encode_frames(&[set("a", "1")]))
            .unwrap();
        drop(journal);
        let mut bytes = vfs.contents("j").unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(&encode_frames(&[set("b", "2")])[..5]);
        vfs.set_contents("j", bytes);
        let mut journal = JournalFile::open_blocking(shared.clone(), "j").unwrap();
        assert_eq!(journal.clean_end(), whole as u64);
        assert_eq!(vfs.contents("j").unwrap().len(), whole);
        journal
            .append_blocking(&encode_frames(&[set("c", "3")]))
            .unwrap();
        let (ops, recovery) = replay(&*shared, "j").unwrap();
        assert_eq!(ops, vec![set("a", "1"), set("c", "3")]);
        assert_eq!(recovery.end, crate::recovery::LogEnd::Clean);
    }
}
