//! [`Request`]: the WAL's calls as the async instance's session receives them. Single-record
//! commits travel as one-record batches, so there is one request kind per behaviour.

use std::ops::Range;

use stele::wal::{LogSeq, VisibleRecord, WalRetirement, WalTruncation, WalWriterStats};

use super::error::WalError;
use crate::embed::bindings::engine_async::exports::stele::log::wal as wit;
use crate::sandbox::instance::Reply;

/// Where a WAL call's answer goes.
pub(crate) type WalReply<T> = Reply<T, WalError>;

pub(crate) enum Request {
    CommitManyDurable {
        records: Vec<wit::CommitRecord>,
        /// The batch's size, encoded, as checked before it was sent.
        encoded_bytes: usize,
        reply: WalReply<Range<LogSeq>>,
    },
    Flush {
        reply: WalReply<()>,
    },
    SealActiveSegment {
        reply: WalReply<bool>,
    },
    CommitMany {
        records: Vec<wit::CommitRecord>,
        reply: WalReply<Range<LogSeq>>,
    },
    VisibleRecords {
        first_seq: u64,
        limit: u32,
        reply: WalReply<Vec<VisibleRecord>>,
    },
    Retire {
        through: u64,
        reply: WalReply<WalRetirement>,
    },
    Stats {
        reply: WalReply<WalWriterStats>,
    },
    Checkpoint {
        through: u64,
        reply: WalReply<()>,
    },
    TruncateThrough {
        through: u64,
        reply: WalReply<WalTruncation>,
    },
    Segments {
        reply: WalReply<Vec<LogSeq>>,
    },
}
