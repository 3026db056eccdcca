//! [`LogEnd`]: how a log's valid prefix ends, the one outcome that every facet's recovery
//! reports (the WAL's [`crate::wal::Recovery`] and each segment's summary, the journal's
//! [`crate::journal::JournalRecovery`], the push log's [`crate::push_log::PushLogScan::end`]),
//! and that `stele inspect` and `stele verify` judge.
//!
//! The rules behind it are the frame layer's ([`crate::frame`]): the longest valid prefix is
//! kept; an invalid frame that no valid frame follows is a torn tail, an unfinished write that
//! held nothing acknowledged; one that a valid frame follows is corruption, which may hide
//! acknowledged data and is reported, never cut.

/// How a log's valid prefix ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogEnd {
    /// No header yet: the file is missing, zero bytes, or (a WAL, a WAL segment) holds only
    /// what a creation that crashed before its header was durable left. Nothing in it was ever
    /// acknowledged, and the next writer starts it afresh.
    Empty,
    /// Every byte after the header is whole records or frames, up to the end of the file or,
    /// in a preallocated WAL segment, up to zeros: its unwritten space.
    Clean,
    /// Whole records or frames up to `valid_end`, then bytes up to `torn_end` that hold none
    /// and that no valid frame follows: an unfinished write. Nothing acknowledged is lost; the
    /// next writer cuts (or, in a preallocated segment, zeroes) them before it appends.
    TornTail {
        /// Where the valid prefix ends.
        valid_end: u64,
        /// Where the bytes after the valid prefix end: the file's length; in one WAL
        /// segment's summary, the end of its last non-zero byte (the rest is preallocated
        /// space, which a writer keeps).
        torn_end: u64,
    },
    /// The frame at `offset` is damaged and a valid frame starts at `valid_frame_at`:
    /// acknowledged data may be behind the damage, so it is reported, never cut. Recovery
    /// that must go on (a writer's open, a replay) refuses it with its facet's `Corrupt`
    /// error; a streamed scan ends with it.
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next valid frame starts.
        valid_frame_at: u64,
    },
}

impl LogEnd {
    /// Bytes after the valid prefix that an unfinished write left (0 unless a torn tail).
    pub fn torn_bytes(&self) -> u64 {
        match *self {
            LogEnd::TornTail {
                valid_end,
                torn_end,
            } => torn_end - valid_end,
            _ => 0,
        }
    }

    /// Whether the prefix ends in a torn tail.
    pub fn is_torn(&self) -> bool {
        matches!(self, LogEnd::TornTail { .. })
    }
}

/// The end of a frame scan of a file that is not preallocated (a journal, a push log): any
/// bytes after the valid prefix, zeros included, are an unfinished write, and a file with no
/// frame scanned at all (zero bytes) is empty.
impl From<crate::frame::ScanEnd> for LogEnd {
    fn from(end: crate::frame::ScanEnd) -> Self {
        use crate::frame::ScanEnd;
        match end {
            ScanEnd::Clean { end: 0 } => LogEnd::Empty,
            ScanEnd::Clean { .. } => LogEnd::Clean,
            ScanEnd::TornTail {
                valid_end,
                file_len,
                ..
            } => LogEnd::TornTail {
                valid_end,
                torn_end: file_len,
            },
            ScanEnd::Corrupt {
                offset,
                valid_frame_at,
            } => LogEnd::Corrupt {
                offset,
                valid_frame_at,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ScanEnd;

    #[test]
    fn a_frame_scan_ends_as_the_log_end_of_an_unpreallocated_file() {
        assert_eq!(LogEnd::from(ScanEnd::Clean { end: 0 }), LogEnd::Empty);
        assert_eq!(LogEnd::from(ScanEnd::Clean { end: 32 }), LogEnd::Clean);
        let torn = LogEnd::from(ScanEnd::TornTail {
            valid_end: 40,
            file_len: 100,
            nonzero_end: 40,
        });
        assert_eq!(
            torn,
            LogEnd::TornTail {
                valid_end: 40,
                torn_end: 100
            },
            "zeros after the prefix are still an unfinished write here"
        );
        assert_eq!((torn.is_torn(), torn.torn_bytes()), (true, 60));
        assert_eq!(
            LogEnd::from(ScanEnd::Corrupt {
                offset: 32,
                valid_frame_at: 64
            }),
            LogEnd::Corrupt {
                offset: 32,
                valid_frame_at: 64
            }
        );
        assert_eq!(LogEnd::Clean.torn_bytes(), 0);
    }
}
