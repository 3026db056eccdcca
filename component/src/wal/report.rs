//! What the WAL's core reports to its callers, as plain data: a record kept visible
//! ([`VisibleRecord`]), what a retirement released ([`WalRetirement`]) and the writer's
//! counters ([`WalWriterStats`]). No behaviour beyond arithmetic; may import only the WAL's
//! `LogSeq`.

use bytes::Bytes;

use super::LogSeq;

/// Buckets of [`WalWriterStats::group_records_histogram`]: bucket `i` counts groups of
/// `[2^i, 2^(i+1))` records, the last is open-ended. 18 buckets reach 131,072 records, above
/// the most 18-byte records a 1 MiB group can hold (58,254).
pub const GROUP_HISTOGRAM_BUCKETS: usize = 18;

/// A committed record kept in memory until retired. Clones share the encoded allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VisibleRecord {
    /// The record's seq.
    pub seq: LogSeq,
    /// The caller's op code.
    pub op: u16,
    /// The payload.
    pub payload: Bytes,
}

/// What `retire_visible_through` released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalRetirement {
    /// Records released by this call.
    pub records: u64,
    /// Encoded bytes released by this call.
    pub bytes: u64,
    /// Encoded bytes still retained after it.
    pub retained_bytes: u64,
}

/// Counters, plain data. Bytes are encoded record bytes, not payload bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalWriterStats {
    /// Groups written (each followed by one sync unless the policy is `Skip`).
    pub groups: u64,
    /// Records written in those groups.
    pub records: u64,
    /// Encoded bytes written in those groups.
    pub bytes: u64,
    /// File syncs issued by the writer, including the one at creation.
    pub syncs: u64,
    /// Directory syncs issued by the writer.
    pub dir_syncs: u64,
    /// Segments the writer started after the first one (rotations). Always 0 for a
    /// single-file log.
    pub segments_started: u64,
    /// Records per group, log2 buckets (see [`GROUP_HISTOGRAM_BUCKETS`]).
    pub group_records_histogram: [u64; GROUP_HISTOGRAM_BUCKETS],
    /// First seq not yet durable.
    pub durable_end: LogSeq,
    /// First seq not yet visible: the seq the next record gets.
    pub visible_end: LogSeq,
    /// Encoded bytes of records kept for `visible_records`.
    pub retained_bytes: u64,
    /// Records kept for `visible_records`.
    pub retained_records: u64,
}

impl WalWriterStats {
    /// Average records per group written, or 0 before the first group.
    pub fn records_per_group(&self) -> f64 {
        if self.groups == 0 {
            0.0
        } else {
            self.records as f64 / self.groups as f64
        }
    }
}
