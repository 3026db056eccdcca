//! Length + checksum framing, shared by the WAL, the journal and the push log.
//!
//! ```text
//! offset  size  field
//!      0     4  body_len   u32 LE: bytes of body that follow this 8-byte frame header
//!      4     4  checksum   CRC32C (Castagnoli) of bytes 0..4 (body_len) followed by the body
//!      8     n  body       n = body_len bytes, owned by the family (a WAL record, a journal op,
//!                          an Arrow IPC stream)
//! ```
//!
//! A frame is valid when `body_len <= BODY_BYTES_MAX`, all `8 + body_len` bytes are present, and
//! the checksum matches. Eight zero bytes are never a valid frame (CRC32C of four zero bytes is
//! not zero), so zero-filled space reads as "no frame".
//!
//! Recovery reads frames from the first byte after the file header and keeps the longest valid
//! prefix. The first invalid or incomplete frame ends it, and is then classified:
//! - **torn tail**: no valid frame starts at any later byte. The bytes were an unfinished write;
//!   the writer truncates them before its next append.
//! - **corruption**: some later byte starts a valid frame. Bytes that were once acknowledged are
//!   damaged, and dropping them silently would lose data, so recovery refuses with the offset.
//!
//! [`FrameReader`] is the streaming driver: it holds at most one chunk or one frame in memory,
//! and every allocation is bounded by bytes actually present in the file, never by a length
//! field read from it.

use crate::vfs::{VfsError, VfsFile};

pub mod appender;

/// Bytes of the frame header (length + checksum).
pub const FRAME_HEADER_BYTES: usize = 8;

/// The largest body one frame may carry. It bounds the single allocation replay makes for one
/// frame; a larger value would let one corrupt length field ask for gigabytes before the
/// checksum can disprove it. 64 MiB leaves room for the 16 MiB full-sync group bound of the WAL
/// and for large Arrow batches; it was chosen, not measured.
pub const BODY_BYTES_MAX: usize = 64 << 20;

/// How many bytes [`FrameReader`] reads per call when frames are small. Large enough that a
/// replay is dominated by checksum work, not by calls across the Vfs (0.06 µs each inside the
/// component, so 16 calls per MiB cost about 1 µs); small, because the window is what a
/// replay leaves behind in a component instance, whose linear memory never shrinks: every
/// reopen of a preallocated segment reads its zeroed tail to the end, so a 1 MiB window would
/// leave every reopened log's instance 1 MiB larger.
pub const SCAN_CHUNK_BYTES: usize = 64 << 10;

const _: () = assert!(BODY_BYTES_MAX <= u32::MAX as usize, "body_len is a u32");

/// A CRC-32C faster than this build's own, for inputs of at least `bytes_min` bytes, installed
/// by the driver that has one ([`install_crc32c_accelerator`]). Inside the component that is
/// the host's CPU, through the `vfs` import `crc32c-append` (WebAssembly has no CRC
/// instruction); natively there is none, and `crc32c` uses the CPU's instruction itself. Frames
/// never name the driver: it hands this module a plain function.
#[derive(Clone, Copy, Debug)]
pub struct Crc32cAccelerator {
    /// The shortest input worth handing over (below it, the hand-over costs more than it saves).
    pub bytes_min: usize,
    /// The CRC of `bytes`, continuing from `crc`; must equal [`crc32c::crc32c_append`]'s.
    pub append: fn(u32, &[u8]) -> u32,
}

static CRC32C_ACCELERATOR: std::sync::OnceLock<Crc32cAccelerator> = std::sync::OnceLock::new();

/// Installs the process's CRC-32C accelerator; the first install wins, later ones are ignored.
/// Until one is installed every CRC is computed here, with the same result.
pub fn install_crc32c_accelerator(accelerator: Crc32cAccelerator) {
    let _ = CRC32C_ACCELERATOR.set(accelerator);
}

/// CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// CRC32C of `bytes`, continuing from `crc`, the CRC of the bytes before them.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    match CRC32C_ACCELERATOR.get() {
        Some(accelerator) if bytes.len() >= accelerator.bytes_min => {
            (accelerator.append)(crc, bytes)
        }
        _ => crc32c::crc32c_append(crc, bytes),
    }
}

fn frame_checksum(len_bytes: &[u8], body: &[u8]) -> u32 {
    crc32c_append(crc32c::crc32c(len_bytes), body)
}

/// Appends one frame to `out`: reserves the frame header, lets `write_body` append the body,
/// then fills in length and checksum. Returns the frame's total size.
///
/// # Panics
/// If the body exceeds [`BODY_BYTES_MAX`]: callers check their payload limits first, so this is
/// a bug, not an input error.
pub fn push_frame(out: &mut Vec<u8>, write_body: impl FnOnce(&mut Vec<u8>)) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    write_body(out);
    let body_len = out.len() - start - FRAME_HEADER_BYTES;
    assert!(
        body_len <= BODY_BYTES_MAX,
        "frame body of {body_len} bytes exceeds BODY_BYTES_MAX"
    );
    let len_bytes = (body_len as u32).to_le_bytes();
    out[start..start + 4].copy_from_slice(&len_bytes);
    let crc = frame_checksum(&len_bytes, &out[start + FRAME_HEADER_BYTES..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.len() - start
}

/// The frame header (length and checksum) for `body`, for a writer that sends the header and
/// the body as two writes rather than copying the body behind it ([`appender`] does).
///
/// # Panics
/// If the body exceeds [`BODY_BYTES_MAX`], as [`push_frame`] does.
pub fn frame_header(body: &[u8]) -> [u8; FRAME_HEADER_BYTES] {
    assert!(
        body.len() <= BODY_BYTES_MAX,
        "frame body of {} bytes exceeds BODY_BYTES_MAX",
        body.len()
    );
    let len_bytes = (body.len() as u32).to_le_bytes();
    let mut header = [0u8; FRAME_HEADER_BYTES];
    header[..4].copy_from_slice(&len_bytes);
    header[4..].copy_from_slice(&frame_checksum(&len_bytes, body).to_le_bytes());
    header
}

/// What [`decode`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid frame; it occupies `FRAME_HEADER_BYTES + body.len()` bytes.
    Frame {
        /// The frame's body.
        body: &'a [u8],
    },
    /// The buffer ends before the frame does. `frame_bytes` is the frame's total size once the
    /// header is present.
    Incomplete {
        /// The whole frame's size, once the header is there.
        frame_bytes: Option<usize>,
    },
    /// The bytes present cannot be a valid frame.
    Invalid,
}

/// Decodes the frame at the start of `buf`. Pure: no I/O, no allocation.
pub fn decode(buf: &[u8]) -> Decoded<'_> {
    let Some(header) = buf.get(..FRAME_HEADER_BYTES) else {
        return Decoded::Incomplete { frame_bytes: None };
    };
    let body_len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    if body_len > BODY_BYTES_MAX {
        return Decoded::Invalid;
    }
    let frame_bytes = FRAME_HEADER_BYTES + body_len;
    let Some(body) = buf.get(FRAME_HEADER_BYTES..frame_bytes) else {
        return Decoded::Incomplete {
            frame_bytes: Some(frame_bytes),
        };
    };
    let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if frame_checksum(&header[..4], body) == stored {
        Decoded::Frame { body }
    } else {
        Decoded::Invalid
    }
}

/// How a frame scan ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to `end` (the file length) is whole frames.
    Clean {
        /// The file's length.
        end: u64,
    },
    /// Frames are valid up to `valid_end`; the bytes from there to `file_len` hold no valid frame.
    /// `nonzero_end` is the end of the last non-zero byte among them, or `valid_end` when all
    /// are zero: in a preallocated WAL segment an all-zero tail is unwritten space, a clean end,
    /// and anywhere else it is still an unfinished write.
    TornTail {
        /// Where the whole frames end.
        valid_end: u64,
        /// The file's length.
        file_len: u64,
        /// Where the last non-zero byte after `valid_end` ends.
        nonzero_end: u64,
    },
    /// The frame at `offset` is damaged, yet a valid frame starts at `valid_frame_at`.
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next valid frame starts.
        valid_frame_at: u64,
    },
}

/// One step of a [`FrameReader`].
#[derive(Debug)]
pub enum Next<'a> {
    /// A whole frame.
    Frame {
        /// Where it starts in the file.
        offset: u64,
        /// Its body.
        body: &'a [u8],
    },
    /// No more frames, and why.
    End(ScanEnd),
}

/// Streams the frames of a file from `start` to its length, reading through a bounded window.
/// It does not own the file: each call is handed it, so a reader can live beside the file it
/// reads (in a resource, say) without borrowing it.
#[derive(Debug)]
pub struct FrameReader {
    file_len: u64,
    /// File offset of `window[0]`.
    window_start: u64,
    window: Vec<u8>,
    /// Index in `window` of the next unread byte.
    pos: usize,
    ended: Option<ScanEnd>,
    /// Where in `window` the body of the frame last returned lies.
    last_body: std::ops::Range<usize>,
}

impl FrameReader {
    /// A reader of the frames from byte `start` of a file of `file_len` bytes.
    pub fn new(start: u64, file_len: u64) -> Self {
        FrameReader {
            file_len,
            window_start: start,
            window: Vec::new(),
            pos: 0,
            ended: None,
            last_body: 0..0,
        }
    }

    /// The body of the frame that [`Self::next_frame`] returned last (empty before the first).
    /// For callers that must first learn whether there is a frame and borrow it after.
    pub fn last_frame_body(&self) -> &[u8] {
        &self.window[self.last_body.clone()]
    }

    /// The length the scan stops at (smaller than given if the file shrank during the scan).
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    fn offset(&self) -> u64 {
        self.window_start + self.pos as u64
    }

    /// Makes at least `need` unread bytes available, or all that remain in the file if fewer.
    /// The caller has checked `need` against `BODY_BYTES_MAX` or the file length, so the window
    /// never exceeds what the file holds.
    fn fill(&mut self, file: &dyn VfsFile, need: usize) -> Result<(), VfsError> {
        let avail = self.window.len() - self.pos;
        if avail >= need {
            return Ok(());
        }
        self.window.drain(..self.pos);
        self.last_body = 0..0;
        self.window_start += self.pos as u64;
        self.pos = 0;
        let window_end = self.window_start + self.window.len() as u64;
        let remaining = self.file_len.saturating_sub(window_end);
        let want = (need - avail).max(SCAN_CHUNK_BYTES) as u64;
        let read_len = remaining.min(want) as usize;
        let old_len = self.window.len();
        // Exact, not doubling: the window must never hold more than the bytes the file has.
        self.window.reserve_exact(read_len);
        self.window.resize(old_len + read_len, 0);
        let mut filled = old_len;
        while filled < self.window.len() {
            let n = file.read_at(
                window_end + (filled - old_len) as u64,
                &mut self.window[filled..],
            )?;
            if n == 0 {
                // The file shrank under us: scan what we have.
                self.window.truncate(filled);
                self.file_len = self.window_start + filled as u64;
                break;
            }
            filled += n;
        }
        Ok(())
    }

    /// The next frame, or how the scan ended. After an `End`, keeps returning the same `End`.
    pub fn next_frame(&mut self, file: &dyn VfsFile) -> Result<Next<'_>, VfsError> {
        if let Some(end) = self.ended {
            return Ok(Next::End(end));
        }
        loop {
            let offset = self.offset();
            match decode(&self.window[self.pos..]) {
                Decoded::Frame { body } => {
                    let body_start = self.pos + FRAME_HEADER_BYTES;
                    let body_end = body_start + body.len();
                    self.pos = body_end;
                    self.last_body = body_start..body_end;
                    return Ok(Next::Frame {
                        offset,
                        body: &self.window[body_start..body_end],
                    });
                }
                Decoded::Incomplete { frame_bytes } => {
                    let need = frame_bytes.unwrap_or(FRAME_HEADER_BYTES);
                    let in_window = self.window.len() - self.pos;
                    if offset + need as u64 <= self.file_len && in_window < need {
                        self.fill(file, need)?;
                        continue;
                    }
                    if offset >= self.file_len {
                        return Ok(self.end(ScanEnd::Clean { end: offset }));
                    }
                    let end = self.classify_bad_frame(file, offset)?;
                    return Ok(self.end(end));
                }
                Decoded::Invalid => {
                    let end = self.classify_bad_frame(file, offset)?;
                    return Ok(self.end(end));
                }
            }
        }
    }

    fn end(&mut self, end: ScanEnd) -> Next<'static> {
        self.ended = Some(end);
        Next::End(end)
    }

    /// Decides between torn tail and corruption for the bad frame at `bad_offset`: is there a
    /// valid frame at any later byte? Worst case this is quadratic in the bytes after the bad
    /// frame (every byte may claim a plausible length), but it runs only on a damaged file and
    /// reads only bytes that are present. Zero runs are skipped in one step, so the zeroed tail
    /// of a preallocated segment, which every clean reopen meets, costs one linear read.
    fn classify_bad_frame(
        &mut self,
        file: &dyn VfsFile,
        bad_offset: u64,
    ) -> Result<ScanEnd, VfsError> {
        let mut nonzero_end = bad_offset;
        let mut candidate = bad_offset;
        while candidate < self.file_len {
            self.seek_within(candidate)?;
            self.fill(file, FRAME_HEADER_BYTES)?;
            let avail = &self.window[self.pos..];
            if avail.is_empty() {
                break; // the file shrank under us
            }
            // Every non-zero byte is visited as a candidate (zero runs are skipped only up to
            // seven bytes before the next non-zero byte), so this finds the last one.
            if avail[0] != 0 {
                nonzero_end = candidate + 1;
            }
            let zeros = leading_zeros(avail);
            // A frame whose eight header bytes are all zero is never valid (see the module doc),
            // so no frame starts in a zero run except in its last seven bytes.
            if zeros >= FRAME_HEADER_BYTES || zeros == avail.len() {
                candidate += zeros.saturating_sub(FRAME_HEADER_BYTES - 1).max(1) as u64;
                continue;
            }
            if candidate > bad_offset && candidate + (FRAME_HEADER_BYTES as u64) <= self.file_len {
                match decode(avail) {
                    Decoded::Frame { .. } => {
                        return Ok(ScanEnd::Corrupt {
                            offset: bad_offset,
                            valid_frame_at: candidate,
                        });
                    }
                    Decoded::Incomplete {
                        frame_bytes: Some(need),
                    } if candidate + need as u64 <= self.file_len => {
                        self.fill(file, need)?;
                        if let Decoded::Frame { .. } = decode(&self.window[self.pos..]) {
                            return Ok(ScanEnd::Corrupt {
                                offset: bad_offset,
                                valid_frame_at: candidate,
                            });
                        }
                    }
                    _ => {}
                }
            }
            candidate += 1;
        }
        Ok(ScanEnd::TornTail {
            valid_end: bad_offset,
            file_len: self.file_len,
            nonzero_end,
        })
    }

    /// Moves the read position to `offset`, at or after the window start.
    fn seek_within(&mut self, offset: u64) -> Result<(), VfsError> {
        debug_assert!(offset >= self.window_start);
        let rel = offset - self.window_start;
        if rel <= self.window.len() as u64 {
            self.pos = rel as usize;
        } else {
            self.window.clear();
            self.window_start = offset;
            self.pos = 0;
        }
        Ok(())
    }
}

/// How many bytes at the start of `bytes` are zero. Eight at a time: every clean reopen of a
/// preallocated segment runs this over the segment's zeroed tail, and inside the component
/// (no SIMD) a byte-at-a-time count took about 1 ms per MiB.
fn leading_zeros(bytes: &[u8]) -> usize {
    let mut words = bytes.chunks_exact(8);
    let mut zeros = 0;
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("chunks of eight"));
        if word != 0 {
            // Little-endian: the first byte in memory is the word's lowest.
            return zeros + (word.trailing_zeros() / 8) as usize;
        }
        zeros += 8;
    }
    zeros + words.remainder().iter().take_while(|&&b| b == 0).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::{MemVfs, OpenMode, Vfs};

    fn frames(bodies: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in bodies {
            push_frame(&mut out, |o| o.extend_from_slice(b));
        }
        out
    }

    fn scan(bytes: Vec<u8>) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let vfs = MemVfs::new();
        vfs.set_contents("f", bytes);
        let file = vfs.open("f", OpenMode::Existing).unwrap();
        let len = file.len().unwrap();
        let mut reader = FrameReader::new(0, len);
        let mut out = Vec::new();
        loop {
            match reader.next_frame(&*file).unwrap() {
                Next::Frame { offset, body } => out.push((offset, body.to_vec())),
                Next::End(end) => return (out, end),
            }
        }
    }

    #[test]
    fn zero_bytes_are_not_a_frame() {
        assert_eq!(decode(&[0u8; 8]), Decoded::Invalid);
    }

    #[test]
    fn clean_scan_returns_every_frame_with_offsets() {
        let (got, end) = scan(frames(&[b"one", b"", b"three"]));
        assert_eq!(
            got,
            vec![(0, b"one".to_vec()), (11, vec![]), (19, b"three".to_vec())]
        );
        assert_eq!(end, ScanEnd::Clean { end: 32 });
    }

    #[test]
    fn every_cut_inside_the_last_frame_is_a_torn_tail() {
        let full = frames(&[b"alpha", b"beta-beta"]);
        let first_end = 13;
        for cut in first_end + 1..full.len() {
            let (got, end) = scan(full[..cut].to_vec());
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert_eq!(
                end,
                ScanEnd::TornTail {
                    valid_end: 13,
                    file_len: cut as u64,
                    nonzero_end: 13
                        + full[13..cut].iter().rposition(|&b| b != 0).unwrap() as u64
                        + 1,
                }
            );
        }
    }

    #[test]
    fn damage_before_a_valid_frame_is_corruption() {
        let mut bytes = frames(&[b"alpha", b"beta", b"gamma"]);
        bytes[9] ^= 0x40;
        let (got, end) = scan(bytes);
        assert!(got.is_empty());
        assert_eq!(
            end,
            ScanEnd::Corrupt {
                offset: 0,
                valid_frame_at: 13
            }
        );
    }

    #[test]
    fn huge_length_field_does_not_allocate_it() {
        let mut bytes = frames(&[b"alpha"]);
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&[7; 20]);
        let (got, end) = scan(bytes);
        assert_eq!(got.len(), 1);
        assert_eq!(
            end,
            ScanEnd::TornTail {
                valid_end: 13,
                file_len: 37,
                nonzero_end: 37,
            }
        );
    }

    #[test]
    fn leading_zeros_counts_as_a_byte_at_a_time_count_does() {
        for len in 0..40 {
            for first_nonzero in 0..=len {
                let mut bytes = vec![0u8; len];
                if first_nonzero < len {
                    bytes[first_nonzero] = 0x80;
                    bytes[len - 1] |= 1;
                }
                assert_eq!(
                    leading_zeros(&bytes),
                    bytes.iter().take_while(|&&b| b == 0).count(),
                    "len {len}, first non-zero byte at {first_nonzero}"
                );
            }
        }
    }

    #[test]
    fn a_zero_tail_is_a_torn_tail_without_nonzero_bytes_and_a_frame_after_zeros_is_corruption() {
        let mut bytes = frames(&[b"alpha"]);
        bytes.resize(13 + 3 * SCAN_CHUNK_BYTES + 5, 0);
        let (got, end) = scan(bytes.clone());
        assert_eq!(got.len(), 1);
        assert_eq!(
            end,
            ScanEnd::TornTail {
                valid_end: 13,
                file_len: bytes.len() as u64,
                nonzero_end: 13,
            }
        );
        // A valid frame far into the zeros, across chunk boundaries, is still found.
        let at = 13 + 2 * SCAN_CHUNK_BYTES + 3;
        let late = frames(&[b"late"]);
        bytes[at..at + late.len()].copy_from_slice(&late);
        let (_, end) = scan(bytes.clone());
        assert_eq!(
            end,
            ScanEnd::Corrupt {
                offset: 13,
                valid_frame_at: at as u64
            }
        );
        // One stray byte in the zeros makes it an ordinary torn tail.
        let mut stray = frames(&[b"alpha"]);
        stray.resize(13 + 100, 0);
        stray[13 + 99] = 1;
        let (_, end) = scan(stray);
        assert_eq!(
            end,
            ScanEnd::TornTail {
                valid_end: 13,
                file_len: 113,
                nonzero_end: 113,
            }
        );
    }

    #[test]
    fn frames_larger_than_a_chunk_stream_through() {
        let big = vec![0xAB; SCAN_CHUNK_BYTES + 100];
        let (got, end) = scan(frames(&[b"x", &big, b"y"]));
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].1, big);
        assert!(matches!(end, ScanEnd::Clean { .. }));
    }
}
