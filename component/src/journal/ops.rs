//! Journal ops and their encoding. Each op is the body of one frame:
//!
//! ```text
//! body offset  size  field
//!           0     1  tag          1 = Set, 2 = Delete, 3 = Clear
//!   Set:      1     4  key_len      u32 LE
//!             5     k  key
//!         5 + k     4  value_len    u32 LE
//!         9 + k     v  value
//!   Delete:   1     4  key_len      u32 LE
//!             5     k  key
//!   Clear:    (nothing after the tag)
//! ```
//!
//! An op is well formed when its lengths account for every byte of the body, exactly.
//!
//! An append of several ops is one frame, so that a crash keeps all of them or none: recovery
//! never sees half an append. Its body is tag 4 (Batch) followed, for each op, by the op body's
//! length (u32 LE) and the op body. The ops carry no frame headers of their own inside it: a
//! torn batch must not hold anything that scans as a valid frame, or recovery would take the
//! tear for corruption. The writer builds batches; callers only ever make plain op frames
//! ([`encode_frames`]).

use std::collections::BTreeMap;

use crate::frame;

const TAG_SET: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_CLEAR: u8 = 3;
/// A frame that wraps the op frames of one multi-op append.
pub(crate) const TAG_BATCH: u8 = 4;

/// One change to the session state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JournalOp {
    /// `key` now maps to `value`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// `key` no longer maps to anything.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// No key maps to anything.
    Clear,
}

/// The state the ops fold into: keys in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// Every key and its value.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl SessionState {
    /// Applies one op.
    pub fn apply(&mut self, op: &JournalOp) {
        match op {
            JournalOp::Set { key, value } => {
                self.entries.insert(key.clone(), value.clone());
            }
            JournalOp::Delete { key } => {
                self.entries.remove(key);
            }
            JournalOp::Clear => self.entries.clear(),
        }
    }

    /// The state after `ops`, in order, from empty.
    pub fn fold<'a>(ops: impl IntoIterator<Item = &'a JournalOp>) -> SessionState {
        let mut state = SessionState::default();
        for op in ops {
            state.apply(op);
        }
        state
    }
}

impl JournalOp {
    /// Appends this op's frame body to `out`.
    fn encode_body(&self, out: &mut Vec<u8>) {
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        match self {
            JournalOp::Set { key, value } => {
                out.push(TAG_SET);
                bytes(out, key);
                bytes(out, value);
            }
            JournalOp::Delete { key } => {
                out.push(TAG_DELETE);
                bytes(out, key);
            }
            JournalOp::Clear => out.push(TAG_CLEAR),
        }
    }

    /// Decodes a frame body, or says why it is not a well-formed op.
    pub fn decode_body(body: &[u8]) -> Result<JournalOp, &'static str> {
        JournalOpRef::parse(body).map(JournalOpRef::to_owned)
    }
}

/// A [`JournalOp`] borrowed from a frame body: what validation needs, without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalOpRef<'a> {
    /// [`JournalOp::Set`].
    Set {
        /// The key.
        key: &'a [u8],
        /// Its new value.
        value: &'a [u8],
    },
    /// [`JournalOp::Delete`].
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// [`JournalOp::Clear`].
    Clear,
}

impl<'a> JournalOpRef<'a> {
    /// The op, owning its bytes.
    pub fn to_owned(self) -> JournalOp {
        match self {
            JournalOpRef::Set { key, value } => JournalOp::Set {
                key: key.to_vec(),
                value: value.to_vec(),
            },
            JournalOpRef::Delete { key } => JournalOp::Delete { key: key.to_vec() },
            JournalOpRef::Clear => JournalOp::Clear,
        }
    }

    /// Parses a frame body, or says why it is not a well-formed op.
    pub fn parse(body: &'a [u8]) -> Result<JournalOpRef<'a>, &'static str> {
        fn take<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], &'static str> {
            let len_bytes = rest.get(..4).ok_or("length field cut short")?;
            let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
            // Bounded by the bytes present: a length beyond them is refused, not allocated.
            let data = rest.get(4..4 + len).ok_or("length beyond the frame")?;
            *rest = &rest[4 + len..];
            Ok(data)
        }
        let (&tag, mut rest) = body.split_first().ok_or("empty op")?;
        let op = match tag {
            TAG_SET => {
                let key = take(&mut rest)?;
                let value = take(&mut rest)?;
                JournalOpRef::Set { key, value }
            }
            TAG_DELETE => JournalOpRef::Delete {
                key: take(&mut rest)?,
            },
            TAG_CLEAR => JournalOpRef::Clear,
            _ => return Err("unknown op tag"),
        };
        if rest.is_empty() {
            Ok(op)
        } else {
            Err("bytes after the op")
        }
    }
}

/// Checks that `bytes` are whole, well-formed op frames (what [`encode_frames`] makes) and
/// counts them. The writer refuses anything else before it touches the file: bytes that did
/// not frame would read back as a torn tail or corruption, and hide every later append.
/// Pure: no allocation.
pub fn check_frames(bytes: &[u8]) -> Result<u64, (u64, &'static str)> {
    let mut ops = 0;
    for_each_op_frame(bytes, |_| {
        ops += 1;
        Ok(())
    })?;
    Ok(ops)
}

/// Calls `on_op` with each op in `bytes`, a run of whole op frames; stops at the first frame
/// that is not one, with its offset in `bytes`.
fn for_each_op_frame<'a>(
    bytes: &'a [u8],
    mut on_op: impl FnMut(JournalOpRef<'a>) -> Result<(), &'static str>,
) -> Result<(), (u64, &'static str)> {
    let mut at = 0;
    while at < bytes.len() {
        match frame::decode(&bytes[at..]) {
            frame::Decoded::Frame { body } => {
                JournalOpRef::parse(body)
                    .and_then(&mut on_op)
                    .map_err(|why| (at as u64, why))?;
                at += frame::FRAME_HEADER_BYTES + body.len();
            }
            frame::Decoded::Incomplete { .. } => return Err((at as u64, "frame cut short")),
            frame::Decoded::Invalid => return Err((at as u64, "bad frame length or checksum")),
        }
    }
    Ok(())
}

/// Calls `on_op` with each op a journal frame body holds: one op, or every op of a batch.
/// Errors with why the body is not well formed; a bad batch is refused before any of its ops
/// is reported, since it is all or nothing.
pub(crate) fn for_each_op_in_body<'a>(
    body: &'a [u8],
    mut on_op: impl FnMut(JournalOpRef<'a>),
) -> Result<(), &'static str> {
    match body.split_first() {
        Some((&TAG_BATCH, entries)) => {
            batch_entries(entries, |_| Ok(()))?;
            batch_entries(entries, |op| {
                on_op(op);
                Ok(())
            })
        }
        _ => {
            on_op(JournalOpRef::parse(body)?);
            Ok(())
        }
    }
}

/// Walks a batch's entries (u32 LE length, op body), parsing each op.
fn batch_entries<'a>(
    mut entries: &'a [u8],
    mut on_op: impl FnMut(JournalOpRef<'a>) -> Result<(), &'static str>,
) -> Result<(), &'static str> {
    if entries.is_empty() {
        return Err("empty batch");
    }
    while !entries.is_empty() {
        let len_bytes = entries.get(..4).ok_or("batch entry length cut short")?;
        let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        // Bounded by the bytes present: a length beyond them is refused, not allocated.
        let body = entries
            .get(4..4 + len)
            .ok_or("batch entry beyond the frame")?;
        // A batch inside a batch is not an op: `parse` refuses its tag.
        on_op(JournalOpRef::parse(body)?)?;
        entries = &entries[4 + len..];
    }
    Ok(())
}

/// The body length of the batch frame that carries the op frames `frames` (`ops` of them):
/// each frame's 8-byte header becomes a 4-byte length, plus the tag.
pub(crate) fn batch_body_bytes(frames: &[u8], ops: u64) -> usize {
    1 + frames.len() - (frame::FRAME_HEADER_BYTES - 4) * ops as usize
}

/// Appends to `out` the batch frame carrying the op frames `frames` (already checked by
/// [`check_frames`]).
pub(crate) fn push_batch_frame(out: &mut Vec<u8>, frames: &[u8]) {
    frame::push_frame(out, |body| {
        body.push(TAG_BATCH);
        let mut at = 0;
        while let frame::Decoded::Frame { body: op } = frame::decode(&frames[at..]) {
            body.extend_from_slice(&(op.len() as u32).to_le_bytes());
            body.extend_from_slice(op);
            at += frame::FRAME_HEADER_BYTES + op.len();
        }
    });
}

/// Frames `ops` for appending (no file header: the writer adds it to an empty file).
pub fn encode_frames(ops: &[JournalOp]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        frame::push_frame(&mut out, |body| op.encode_body(body));
    }
    out
}

/// The fewest ops that rebuild `state` from an empty journal: one `Set` per key, in key order.
/// (A snapshot replaces the whole file, so it needs no `Clear`.)
pub fn snapshot_ops(state: &SessionState) -> Vec<JournalOp> {
    state
        .entries
        .iter()
        .map(|(key, value)| JournalOp::Set {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `Set { k: v }`, for the journal's unit tests.
    pub(crate) fn set(k: &str, v: &str) -> JournalOp {
        JournalOp::Set {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn ops_round_trip_and_layout_is_pinned() {
        let ops = vec![
            set("a", "1"),
            JournalOp::Delete { key: b"b".to_vec() },
            JournalOp::Clear,
        ];
        let bytes = encode_frames(&ops);
        // Set "a"="1": tag + 4 + 1 + 4 + 1 = 11 bytes of body after the 8-byte frame header.
        assert_eq!(&bytes[..4], &11u32.to_le_bytes());
        assert_eq!(&bytes[8..19], &[1, 1, 0, 0, 0, b'a', 1, 0, 0, 0, b'1']);
        let mut at = 0;
        let mut decoded = Vec::new();
        while at < bytes.len() {
            let frame::Decoded::Frame { body } = frame::decode(&bytes[at..]) else {
                panic!()
            };
            decoded.push(JournalOp::decode_body(body).unwrap());
            at += frame::FRAME_HEADER_BYTES + body.len();
        }
        assert_eq!(decoded, ops);
    }

    #[test]
    fn malformed_bodies_are_refused_not_allocated() {
        assert_eq!(JournalOp::decode_body(&[]), Err("empty op"));
        assert_eq!(JournalOp::decode_body(&[9]), Err("unknown op tag"));
        assert_eq!(
            JournalOp::decode_body(&[1, 0xff, 0xff, 0xff, 0xff]),
            Err("length beyond the frame")
        );
        assert_eq!(JournalOp::decode_body(&[3, 0]), Err("bytes after the op"));
        assert_eq!(
            JournalOp::decode_body(&[2, 1, 0]),
            Err("length field cut short")
        );
    }

    #[test]
    fn batches_are_whole_or_refused_and_never_nest() {
        let frames = encode_frames(&[set("a", "1"), JournalOp::Clear]);
        let mut out = Vec::new();
        push_batch_frame(&mut out, &frames);
        assert_eq!(
            out.len() - frame::FRAME_HEADER_BYTES,
            batch_body_bytes(&frames, 2)
        );
        let frame::Decoded::Frame { body } = frame::decode(&out) else {
            panic!()
        };
        let mut ops = Vec::new();
        for_each_op_in_body(body, |op| ops.push(op.to_owned())).unwrap();
        assert_eq!(ops, vec![set("a", "1"), JournalOp::Clear]);

        let mut seen = 0;
        let cut = &body[..body.len() - 1];
        assert!(for_each_op_in_body(cut, |_| seen += 1).is_err());
        assert_eq!(seen, 0, "nothing of a bad batch is reported");
        assert_eq!(
            for_each_op_in_body(&[TAG_BATCH], |_| ()),
            Err("empty batch")
        );
        let mut nested = vec![TAG_BATCH];
        nested.extend(&(body.len() as u32).to_le_bytes());
        nested.extend(body);
        assert_eq!(for_each_op_in_body(&nested, |_| ()), Err("unknown op tag"));
        assert!(check_frames(&out).is_err(), "callers cannot append a batch");
    }

    #[test]
    fn snapshot_is_minimal_and_rebuilds_the_state() {
        let ops = vec![
            set("b", "1"),
            set("a", "2"),
            set("b", "3"),
            JournalOp::Delete { key: b"a".to_vec() },
            set("c", "4"),
        ];
        let state = SessionState::fold(&ops);
        let snap = snapshot_ops(&state);
        assert_eq!(snap, vec![set("b", "3"), set("c", "4")]);
        assert_eq!(SessionState::fold(&snap), state);
        let cleared = SessionState::fold(&[set("x", "1"), JournalOp::Clear, set("y", "2")]);
        assert_eq!(snapshot_ops(&cleared), vec![set("y", "2")]);
    }
}
