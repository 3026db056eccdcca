//! Journal recovery: the same rules as the WAL's (see [`crate::frame`]): the longest valid prefix
//! of frames, a torn tail is reported (the writer cuts it before appending), damage followed by a
//! valid frame is refused with its offset.

use crate::frame::ScanEnd;
use crate::frame::appender::scan_frames;
use crate::header::HEADER_BYTES;
use crate::recovery::LogEnd;
use crate::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile};

use super::ops::for_each_op_in_body;
use super::{JOURNAL_FORMAT, JournalError, JournalOp, lock_path};

/// What a journal's recovery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalRecovery {
    /// Ops recovered.
    pub ops: u64,
    /// Byte offset where the valid prefix ends (0 for a file without a header).
    pub valid_end: u64,
    /// The file's length as read.
    pub file_len: u64,
    /// How the valid prefix ends: [`LogEnd::Empty`] for a missing or zero-byte journal,
    /// [`LogEnd::TornTail`] when bytes after `valid_end` were an unfinished append (a file
    /// shorter than a header is one at byte 0), else [`LogEnd::Clean`]. Corruption is refused
    /// ([`JournalError::Corrupt`]), never reported here.
    pub end: LogEnd,
    /// Whether [`replay`] cut the torn tail off the file (it does unless a writer holds it).
    pub tail_truncated: bool,
}

impl JournalRecovery {
    /// What a missing or zero-byte journal recovers to.
    pub fn empty() -> Self {
        JournalRecovery {
            ops: 0,
            valid_end: 0,
            file_len: 0,
            end: LogEnd::Empty,
            tail_truncated: false,
        }
    }

    /// Whether bytes after `valid_end` were an unfinished append.
    pub fn torn_tail(&self) -> bool {
        self.end.is_torn()
    }

    /// Whether the file holds a header (one goes out with the first append).
    pub fn has_header(&self) -> bool {
        self.valid_end >= HEADER_BYTES as u64
    }
}

/// Reads every op of the journal in `file`, in order, and where its valid prefix ends.
/// Read-only: a torn tail is reported, not cut (see [`replay`] and the writer's open).
pub fn replay_file(file: &dyn VfsFile) -> Result<(Vec<JournalOp>, JournalRecovery), JournalError> {
    let mut ops = Vec::new();
    let end = scan_frames(file, JOURNAL_FORMAT, |offset, body| {
        for_each_op_in_body(body, |op| ops.push(op.to_owned())).map_err(|why| {
            JournalError::MalformedOp {
                offset,
                why: why.into(),
            }
        })
    })?;
    let (valid_end, file_len) = match end {
        ScanEnd::Clean { end } => (end, end),
        ScanEnd::TornTail {
            valid_end,
            file_len,
            ..
        } => (valid_end, file_len),
        ScanEnd::Corrupt {
            offset,
            valid_frame_at,
        } => {
            return Err(JournalError::Corrupt {
                offset,
                valid_frame_at,
            });
        }
    };
    let recovery = JournalRecovery {
        ops: ops.len() as u64,
        valid_end,
        file_len,
        end: LogEnd::from(end),
        tail_truncated: false,
    };
    Ok((ops, recovery))
}

/// Replays the journal at `path` (a missing file is an empty, clean journal) and cuts a torn
/// tail, so that the file ends at the last whole op. The cut is made only if no writer holds
/// the journal's lock (`<path>.lock`): a live writer's tail may be an append in progress, and
/// it is the writer's to cut. [`JournalRecovery::tail_truncated`] says whether it happened.
///
/// Corruption followed by a valid op is refused with its offset ([`JournalError::Corrupt`]),
/// and the file is left untouched.
pub fn replay(
    vfs: &dyn Vfs,
    path: &str,
) -> Result<(Vec<JournalOp>, JournalRecovery), JournalError> {
    let file = match vfs.open(path, OpenMode::Existing) {
        Ok(file) => file,
        Err(VfsError::NotFound) => return Ok((Vec::new(), JournalRecovery::empty())),
        Err(e) => return Err(e.into()),
    };
    let (ops, mut recovery) = replay_file(&*file)?;
    if recovery.torn_tail() {
        match vfs.lock_exclusive(&lock_path(path)) {
            Ok(_lock) => {
                file.set_len(recovery.valid_end)?;
                file.sync(SyncKind::Data)?;
                recovery.tail_truncated = true;
            }
            Err(VfsError::Locked(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((ops, recovery))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Family, FileHeader, HeaderError};
    use crate::journal::JOURNAL_VERSION;
    use crate::journal::encode_frames;
    use crate::vfs::MemVfs;

    fn journal(ops: &[JournalOp]) -> Vec<u8> {
        let mut bytes = FileHeader {
            family: Family::Journal,
            version: JOURNAL_VERSION,
            family_word: 0,
        }
        .encode()
        .to_vec();
        bytes.extend(encode_frames(ops));
        bytes
    }

    fn run(bytes: Vec<u8>) -> Result<(Vec<JournalOp>, JournalRecovery), JournalError> {
        let vfs = MemVfs::new();
        vfs.set_contents("j", bytes);
        replay_file(&*vfs.open("j", OpenMode::Existing).unwrap())
    }

    fn ops() -> Vec<JournalOp> {
        vec![
            JournalOp::Set {
                key: b"k1".to_vec(),
                value: b"v1".to_vec(),
            },
            JournalOp::Set {
                key: b"k2".to_vec(),
                value: vec![7; 40],
            },
            JournalOp::Delete {
                key: b"k1".to_vec(),
            },
        ]
    }

    #[test]
    fn empty_file_is_an_empty_journal_and_every_cut_of_the_last_op_is_torn() {
        let (got, rec) = run(Vec::new()).unwrap();
        assert!(got.is_empty() && !rec.has_header() && !rec.torn_tail());
        assert_eq!(rec.end, LogEnd::Empty);
        let full = journal(&ops());
        let last = encode_frames(&ops()[2..]).len();
        for cut in full.len() - last + 1..full.len() {
            let (got, rec) = run(full[..cut].to_vec()).unwrap();
            assert_eq!(got, ops()[..2], "cut {cut}");
            assert!(rec.torn_tail());
            assert_eq!(rec.valid_end as usize, full.len() - last);
        }
        for cut in 1..HEADER_BYTES {
            let (got, rec) = run(full[..cut].to_vec()).unwrap();
            assert!(
                got.is_empty() && rec.torn_tail() && !rec.has_header(),
                "a cut header is an unacknowledged append"
            );
        }
    }

    #[test]
    fn damage_before_a_valid_op_and_other_versions_are_refused() {
        let mut bad = journal(&ops());
        bad[HEADER_BYTES + 9] ^= 1;
        assert!(matches!(
            run(bad),
            Err(JournalError::Corrupt { offset: 32, .. })
        ));
        let mut newer = journal(&ops());
        newer[..HEADER_BYTES].copy_from_slice(
            &FileHeader {
                family: Family::Journal,
                version: 2,
                family_word: 0,
            }
            .encode(),
        );
        assert_eq!(
            run(newer).unwrap_err(),
            JournalError::BadHeader(HeaderError::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        );
    }
}
