//! The `stele:log/journal` export (and, in the async build, `journal-async`): thin shells over
//! [`JournalFile`] that convert WIT values and errors. The plain export runs the blocking
//! driver over [`WitVfs`]; the async one awaits the `vfs-async` imports through the same
//! `JournalFile` code.

use std::cell::RefCell;
use std::sync::Arc;

use crate::frame::BODY_BYTES_MAX;
use crate::journal::{
    APPEND_BYTES_MAX, JournalError, JournalFile, JournalOp, JournalRecovery, encode_frames, replay,
};
use crate::vfs::ReadyIo;

use super::Component;
use super::exports::stele::log::journal as wit;
use super::vfs::{WitVfs, quota_to_wit, to_wit};
use super::wal::header_error;

pub struct GuestJournal(RefCell<JournalFile<ReadyIo>>);

pub(crate) fn journal_error(err: JournalError) -> wit::JournalError {
    use wit::JournalError as E;
    match err {
        JournalError::Vfs(e) => E::Vfs(to_wit(e)),
        JournalError::BadHeader(h) => E::BadHeader(header_error(h)),
        JournalError::Corrupt {
            offset,
            valid_frame_at,
        } => E::Corrupt(wit::JournalCorruption {
            offset,
            valid_frame_at,
        }),
        JournalError::MalformedOp { offset, why } => E::MalformedOp(wit::Malformed { offset, why }),
        JournalError::Locked { lock_path } => E::Locked(lock_path),
        JournalError::MalformedAppend { offset, why } => {
            E::MalformedAppend(wit::Malformed { offset, why })
        }
        JournalError::AppendFailed { cause, rolled_back } => E::AppendFailed(wit::AppendFailure {
            cause: to_wit(cause),
            rolled_back,
        }),
        JournalError::AppendTooLarge { bytes, bytes_max } => E::AppendTooLarge(wit::TooLarge {
            bytes: bytes as u64,
            bytes_max: bytes_max as u64,
        }),
        JournalError::CompactFailed { cause } => E::CompactFailed(to_wit(cause)),
        JournalError::CompactNotDurable { cause } => E::CompactNotDurable(to_wit(cause)),
        JournalError::NoHandle { why } => E::NoHandle(why),
        JournalError::QuotaExceeded(refusal) => E::QuotaExceeded(quota_to_wit(refusal)),
    }
}

pub(crate) fn wit_recovery(r: JournalRecovery) -> wit::JournalRecovery {
    wit::JournalRecovery {
        ops: r.ops,
        valid_end: r.valid_end,
        file_len: r.file_len,
        torn_tail: r.torn_tail(),
        has_header: r.has_header(),
        tail_truncated: r.tail_truncated,
    }
}

pub(crate) fn wit_op(op: JournalOp) -> wit::JournalOp {
    match op {
        JournalOp::Set { key, value } => wit::JournalOp::Set(wit::SetOp { key, value }),
        JournalOp::Delete { key } => wit::JournalOp::Delete(key),
        JournalOp::Clear => wit::JournalOp::Clear,
    }
}

/// Ops a guest passed as data, framed as the engine frames its own (`append-ops`,
/// `compact-ops`): the one place a foreign guest's ops become frame bytes. An op whose body
/// would pass a frame's bound is refused here, typed, before framing (which would not hold it);
/// every other bound is the framed call's own (`check_append`).
pub(crate) fn framed(ops: Vec<wit::JournalOp>) -> Result<Vec<u8>, wit::JournalError> {
    // Tag, then each byte string with its 4-byte length (`JournalOp::encode_body`).
    let body_bytes = |op: &wit::JournalOp| match op {
        wit::JournalOp::Set(set) => 9 + set.key.len() + set.value.len(),
        wit::JournalOp::Delete(key) => 5 + key.len(),
        wit::JournalOp::Clear => 1,
    };
    if let Some(bytes) = ops
        .iter()
        .map(body_bytes)
        .find(|&bytes| bytes > BODY_BYTES_MAX)
    {
        return Err(journal_error(JournalError::AppendTooLarge {
            bytes,
            bytes_max: APPEND_BYTES_MAX,
        }));
    }
    let ops: Vec<JournalOp> = ops
        .into_iter()
        .map(|op| match op {
            wit::JournalOp::Set(wit::SetOp { key, value }) => JournalOp::Set { key, value },
            wit::JournalOp::Delete(key) => JournalOp::Delete { key },
            wit::JournalOp::Clear => JournalOp::Clear,
        })
        .collect();
    Ok(encode_frames(&ops))
}

pub(crate) fn replay_export(
    path: &str,
) -> Result<(Vec<wit::JournalOp>, wit::JournalRecovery), wit::JournalError> {
    let (ops, recovery) = replay(&WitVfs, path).map_err(journal_error)?;
    Ok((
        ops.into_iter().map(wit_op).collect(),
        wit_recovery(recovery),
    ))
}

impl wit::Guest for Component {
    type Writer = GuestJournal;

    fn replay(
        path: String,
    ) -> Result<(Vec<wit::JournalOp>, wit::JournalRecovery), wit::JournalError> {
        replay_export(&path)
    }
}

impl wit::GuestWriter for GuestJournal {
    fn open(path: String) -> Result<wit::Writer, wit::JournalError> {
        let file = JournalFile::open_blocking(Arc::new(WitVfs), &path).map_err(journal_error)?;
        Ok(wit::Writer::new(GuestJournal(RefCell::new(file))))
    }

    fn append(&self, frames: Vec<u8>) -> Result<(), wit::JournalError> {
        self.0
            .borrow_mut()
            .append_blocking(&frames)
            .map_err(journal_error)
    }

    fn append_ops(&self, ops: Vec<wit::JournalOp>) -> Result<(), wit::JournalError> {
        self.append(framed(ops)?)
    }

    fn compact_ops(&self, ops: Vec<wit::JournalOp>) -> Result<(), wit::JournalError> {
        self.compact(framed(ops)?)
    }

    fn compact(&self, snapshot: Vec<u8>) -> Result<(), wit::JournalError> {
        self.0
            .borrow_mut()
            .compact_blocking(&snapshot)
            .map_err(journal_error)
    }

    fn clean_end(&self) -> u64 {
        self.0.borrow().clean_end()
    }
}
