//! The WAL record: one frame (see [`crate::frame`]) whose body is
//!
//! ```text
//! body offset  size  field
//!           0     8  seq      u64 LE: the record's sequence number
//!           8     2  op       u16 LE: caller-defined operation code
//!          10     n  payload  caller bytes
//! ```
//!
//! A record is valid when its frame is valid and the body holds at least the 10 header bytes.
//! Replay additionally requires each seq to be one more than the previous (contiguity).

use crate::frame::{self, FRAME_HEADER_BYTES};

use super::{LogSeq, WalWriteError};

const SEQ_OFFSET: usize = 0;
const OP_OFFSET: usize = SEQ_OFFSET + size_of::<u64>();
const PAYLOAD_OFFSET: usize = OP_OFFSET + size_of::<u16>();

/// Bytes a record adds around its payload: frame header plus seq and op.
pub const RECORD_OVERHEAD_BYTES: usize = FRAME_HEADER_BYTES + PAYLOAD_OFFSET;

/// The largest payload one record may carry: what fits in one frame body.
pub const PAYLOAD_BYTES_MAX: usize = frame::BODY_BYTES_MAX - PAYLOAD_OFFSET;

const _: () = assert!(
    RECORD_OVERHEAD_BYTES == 18,
    "docs/FORMAT.md documents 18 bytes"
);

/// The encoded size of a record with `payload_len` bytes of payload.
pub const fn encoded_len(payload_len: usize) -> usize {
    RECORD_OVERHEAD_BYTES + payload_len
}

/// Appends one encoded record to `out`. The caller has checked `payload.len()` against
/// [`PAYLOAD_BYTES_MAX`].
pub fn encode_into(out: &mut Vec<u8>, seq: LogSeq, op: u16, payload: &[u8]) {
    frame::push_frame(out, |body| {
        body.extend_from_slice(&seq.0.to_le_bytes());
        body.extend_from_slice(&op.to_le_bytes());
        body.extend_from_slice(payload);
    });
}

/// A record decoded from a frame body, borrowing its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The record's seq.
    pub seq: LogSeq,
    /// The caller's op code.
    pub op: u16,
    /// The payload.
    pub payload: &'a [u8],
}

/// Decodes a frame body as a record, or `None` if it is too short to be one.
pub fn decode_body(body: &[u8]) -> Option<RecordRef<'_>> {
    if body.len() < PAYLOAD_OFFSET {
        return None;
    }
    Some(RecordRef {
        seq: LogSeq(u64::from_le_bytes(
            body[SEQ_OFFSET..OP_OFFSET].try_into().ok()?,
        )),
        op: u16::from_le_bytes(body[OP_OFFSET..PAYLOAD_OFFSET].try_into().ok()?),
        payload: &body[PAYLOAD_OFFSET..],
    })
}

/// The byte range of the payload within an encoded record.
pub const fn payload_range(payload_len: usize) -> std::ops::Range<usize> {
    RECORD_OVERHEAD_BYTES..RECORD_OVERHEAD_BYTES + payload_len
}

/// Checks one batch against the size bounds every writer enforces: each payload at most
/// [`PAYLOAD_BYTES_MAX`], and the batch, encoded, at most `group_bytes_max` (a batch is never
/// split across groups). Returns the encoded size. Public so that a host can refuse an
/// oversized batch before copying it into a sandboxed writer's memory, with the same error the
/// writer would give.
pub fn check_batch_bytes(
    records: &[(u16, &[u8])],
    group_bytes_max: usize,
) -> Result<usize, WalWriteError> {
    let mut encoded_bytes = 0usize;
    for (_, payload) in records {
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(WalWriteError::PayloadTooLarge {
                bytes: payload.len(),
                bytes_max: PAYLOAD_BYTES_MAX,
            });
        }
        encoded_bytes = encoded_bytes.saturating_add(encoded_len(payload.len()));
    }
    if encoded_bytes > group_bytes_max {
        return Err(WalWriteError::GroupTooLarge {
            bytes: encoded_bytes,
            bytes_max: group_bytes_max,
        });
    }
    Ok(encoded_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_is_pinned() {
        let mut out = Vec::new();
        encode_into(&mut out, LogSeq(0x0102), 7, b"hi");
        assert_eq!(out.len(), encoded_len(2));
        assert_eq!(&out[0..4], &12u32.to_le_bytes());
        assert_eq!(&out[8..16], &0x0102u64.to_le_bytes());
        assert_eq!(&out[16..18], &7u16.to_le_bytes());
        assert_eq!(&out[payload_range(2)], b"hi");
        let frame::Decoded::Frame { body } = frame::decode(&out) else {
            panic!("valid frame")
        };
        assert_eq!(
            decode_body(body),
            Some(RecordRef {
                seq: LogSeq(0x0102),
                op: 7,
                payload: b"hi"
            })
        );
    }
}
