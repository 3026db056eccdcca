//! Conversions between the engine's Rust types and the WIT types of `stele:log/wal`, `journal`
//! and `push-log`. The two component builds have separate generated bindings with identical shapes,
//! so the conversions are written once, as a macro, and instantiated for each.

macro_rules! wal_conversions {
    ($wit:path) => {
        use std::ops::Range;

        use stele::header::HeaderError;
        use stele::wal::{
            DurabilityPolicy, LogEnd, LogSeq, Recovery, VisibleRecord, WalOpenError, WalOptions,
            WalRetentionError, WalRetireError, WalRetirement, WalTruncation, WalWriteError,
            WalWriterStats,
        };
        use $wit as wit;

        use crate::WalError;
        use crate::vfs_host::from_wit;

        pub(crate) fn wit_options(o: WalOptions) -> wit::WalOptions {
            wit::WalOptions {
                policy: match o.policy {
                    DurabilityPolicy::FullSync => wit::DurabilityPolicy::FullSync,
                    DurabilityPolicy::Barrier => wit::DurabilityPolicy::Barrier,
                    DurabilityPolicy::Skip => wit::DurabilityPolicy::Skip,
                },
                first_seq: o.first_seq.0,
                group_bytes_max: o.group_bytes_max.map(|b| b as u64),
                retained_bytes_max: o.retained_bytes_max as u64,
                segment_bytes: o.segment_bytes,
            }
        }

        pub(crate) fn from_wit_truncation(t: wit::Truncation) -> WalTruncation {
            WalTruncation {
                segments_removed: t.segments_removed,
                first_kept_seq: LogSeq(t.first_kept_seq),
            }
        }

        /// `beyond-durable` is shared by `retire-visible-through` and `checkpoint`; the
        /// retention calls re-type it as the native call would.
        pub(crate) fn as_retention_error(err: WalError) -> WalError {
            match err {
                WalError::Retire(WalRetireError::BeyondDurable {
                    requested,
                    durable_end,
                }) => WalRetentionError::BeyondDurable {
                    requested,
                    durable_end,
                }
                .into(),
                other => other,
            }
        }

        pub(crate) fn wit_batch(records: &[(u16, &[u8])]) -> Vec<wit::CommitRecord> {
            records
                .iter()
                .map(|(op, p)| wit::CommitRecord {
                    op: *op,
                    payload: p.to_vec(),
                })
                .collect()
        }

        pub(crate) fn from_wit_range(r: wit::SeqRange) -> Range<LogSeq> {
            LogSeq(r.start)..LogSeq(r.end)
        }

        pub(crate) fn from_wit_recovery(r: wit::Recovery) -> Recovery {
            Recovery {
                first_seq: LogSeq(r.first_seq),
                next_seq: LogSeq(r.next_seq),
                records: r.records,
                valid_end: r.valid_end,
                file_len: r.file_len,
                dirty_end: r.dirty_end,
                end: match r.end {
                    wit::RecoveryEnd::NewLog => LogEnd::Empty,
                    wit::RecoveryEnd::Clean => LogEnd::Clean,
                    wit::RecoveryEnd::TornTail => LogEnd::TornTail {
                        valid_end: r.valid_end,
                        torn_end: r.file_len,
                    },
                },
            }
        }

        pub(crate) fn usize_of(v: u64) -> usize {
            usize::try_from(v).unwrap_or(usize::MAX)
        }

        pub(crate) fn u16_of(v: u32) -> u16 {
            u16::try_from(v).unwrap_or(u16::MAX)
        }

        pub(crate) fn from_wit_header(h: wit::HeaderError) -> HeaderError {
            match h {
                wit::HeaderError::TooShort(len) => HeaderError::TooShort { len },
                wit::HeaderError::BadMagic => HeaderError::BadMagic,
                wit::HeaderError::Checksum => HeaderError::Checksum,
                wit::HeaderError::WrongFamily(m) => HeaderError::WrongFamily {
                    found: u16_of(m.found),
                    expected: u16_of(m.expected),
                },
                wit::HeaderError::UnsupportedVersion(m) => HeaderError::UnsupportedVersion {
                    found: u16_of(m.found),
                    supported: u16_of(m.expected),
                },
                wit::HeaderError::NonzeroReserved => HeaderError::NonzeroReserved,
            }
        }

        /// Maps the guest's error back onto the engine's typed errors: the WIT variants partition by
        /// operation, so each lands in the same Rust enum a native call would have returned.
        pub(crate) fn from_wit_error(err: wit::WalError) -> WalError {
            use wit::WalError as E;
            match err {
                E::Failed(cause) => WalWriteError::Failed {
                    cause: from_wit(cause),
                }
                .into(),
                E::Poisoned(cause) => WalWriteError::Poisoned {
                    cause: from_wit(cause),
                }
                .into(),
                E::GroupTooLarge(s) => WalWriteError::GroupTooLarge {
                    bytes: usize_of(s.bytes),
                    bytes_max: usize_of(s.bytes_max),
                }
                .into(),
                E::PayloadTooLarge(s) => WalWriteError::PayloadTooLarge {
                    bytes: usize_of(s.bytes),
                    bytes_max: usize_of(s.bytes_max),
                }
                .into(),
                E::RetentionFull(r) => WalWriteError::RetentionFull {
                    batch_bytes: usize_of(r.batch_bytes),
                    retained_bytes: usize_of(r.retained_bytes),
                    retained_bytes_max: usize_of(r.retained_bytes_max),
                }
                .into(),
                E::BeyondDurable(b) => WalRetireError::BeyondDurable {
                    requested: LogSeq(b.requested),
                    durable_end: LogSeq(b.durable_end),
                }
                .into(),
                E::Locked(lock_path) => WalOpenError::Locked { lock_path }.into(),
                E::NotEmpty(len) => WalOpenError::NotEmpty { len }.into(),
                E::BadHeader(h) => WalOpenError::BadHeader(from_wit_header(h)).into(),
                E::Corrupt(c) => WalOpenError::Corrupt {
                    offset: c.offset,
                    valid_record_at: c.valid_record_at,
                }
                .into(),
                E::MalformedRecord(offset) => WalOpenError::MalformedRecord { offset }.into(),
                E::SeqGap(g) => WalOpenError::SeqGap {
                    offset: g.offset,
                    expected: g.expected,
                    found: g.found,
                }
                .into(),
                E::Vfs(e) => WalOpenError::Vfs(from_wit(e)).into(),
                E::SegmentGap(g) => WalOpenError::SegmentGap {
                    segment: g.segment,
                    expected: g.expected,
                    found: g.found,
                }
                .into(),
                E::CheckpointGap(g) => WalOpenError::CheckpointGap {
                    checkpoint: g.checkpoint,
                    first_seq: g.first_seq,
                }
                .into(),
                E::SegmentMisnamed(m) => WalOpenError::SegmentMisnamed {
                    segment: m.segment,
                    header_first_seq: m.header_first_seq,
                }
                .into(),
                E::BadCheckpoint(h) => WalOpenError::BadCheckpoint(from_wit_header(h)).into(),
                E::SegmentTooSmall(s) => WalOpenError::SegmentTooSmall {
                    bytes: s.bytes,
                    bytes_min: s.bytes_min,
                }
                .into(),
                E::SingleFileLog(path) => WalOpenError::SingleFileLog { path }.into(),
                E::SegmentOptionsForSingleFile(segment_bytes) => {
                    WalOpenError::SegmentOptionsForSingleFile { segment_bytes }.into()
                }
                E::CheckpointRegressed(r) => WalRetentionError::Regressed {
                    requested: LogSeq(r.requested),
                    current: LogSeq(r.current),
                }
                .into(),
                E::BeyondCheckpoint(b) => WalRetentionError::BeyondCheckpoint {
                    requested: LogSeq(b.requested),
                    checkpoint: b.checkpoint.map(LogSeq),
                }
                .into(),
                E::NotSegmented => WalRetentionError::NotSegmented.into(),
                E::RetentionIo(e) => WalRetentionError::Io(from_wit(e)).into(),
            }
        }

        pub(crate) fn from_wit_visible(records: Vec<wit::VisibleRecord>) -> Vec<VisibleRecord> {
            records
                .into_iter()
                .map(|r| VisibleRecord {
                    seq: LogSeq(r.seq),
                    op: r.op,
                    payload: bytes::Bytes::from(r.payload),
                })
                .collect()
        }

        pub(crate) fn from_wit_retirement(r: wit::Retirement) -> WalRetirement {
            WalRetirement {
                records: r.records,
                bytes: r.bytes,
                retained_bytes: r.retained_bytes,
            }
        }

        pub(crate) fn from_wit_stats(st: wit::WalStats) -> WalWriterStats {
            let mut histogram = [0u64; stele::wal::group_commit::GROUP_HISTOGRAM_BUCKETS];
            for (slot, value) in histogram.iter_mut().zip(st.group_records_histogram) {
                *slot = value;
            }
            WalWriterStats {
                groups: st.groups,
                records: st.records,
                bytes: st.bytes,
                syncs: st.syncs,
                dir_syncs: st.dir_syncs,
                segments_started: st.segments_started,
                group_records_histogram: histogram,
                durable_end: LogSeq(st.durable_end),
                visible_end: LogSeq(st.visible_end),
                retained_bytes: st.retained_bytes,
                retained_records: st.retained_records,
            }
        }
    };
}

pub(crate) mod plain {
    wal_conversions!(crate::bindings::exports::stele::log::wal);
}

pub(crate) mod with_async {
    wal_conversions!(crate::bindings::engine_async::exports::stele::log::wal);
}

/// Conversions for `stele:log/journal`, instantiated for each component build as the WAL's are.
macro_rules! journal_conversions {
    ($wit:path, $header:path) => {
        use stele::journal::{JournalError, JournalOp, JournalRecovery};
        use stele::recovery::LogEnd;
        use $wit as wit;

        use crate::vfs_host::from_wit;

        pub(crate) fn from_wit_journal_error(err: wit::JournalError) -> JournalError {
            use wit::JournalError as E;
            match err {
                E::Vfs(e) => JournalError::Vfs(from_wit(e)),
                E::BadHeader(h) => JournalError::BadHeader($header(h)),
                E::Corrupt(c) => JournalError::Corrupt {
                    offset: c.offset,
                    valid_frame_at: c.valid_frame_at,
                },
                E::MalformedOp(m) => JournalError::MalformedOp {
                    offset: m.offset,
                    why: m.why,
                },
                E::Locked(lock_path) => JournalError::Locked { lock_path },
                E::MalformedAppend(m) => JournalError::MalformedAppend {
                    offset: m.offset,
                    why: m.why,
                },
                E::AppendFailed(f) => JournalError::AppendFailed {
                    cause: from_wit(f.cause),
                    rolled_back: f.rolled_back,
                },
                E::AppendTooLarge(s) => JournalError::AppendTooLarge {
                    bytes: usize::try_from(s.bytes).unwrap_or(usize::MAX),
                    bytes_max: usize::try_from(s.bytes_max).unwrap_or(usize::MAX),
                },
                E::CompactFailed(cause) => JournalError::CompactFailed {
                    cause: from_wit(cause),
                },
                E::CompactNotDurable(cause) => JournalError::CompactNotDurable {
                    cause: from_wit(cause),
                },
                E::NoHandle(why) => JournalError::NoHandle { why },
            }
        }

        pub(crate) fn from_wit_journal_recovery(r: wit::JournalRecovery) -> JournalRecovery {
            JournalRecovery {
                ops: r.ops,
                valid_end: r.valid_end,
                file_len: r.file_len,
                // The record's two flags are the engine's `LogEnd`, which a zero-byte or
                // missing journal (no header, nothing torn) recovers to as `Empty`.
                end: if r.torn_tail {
                    LogEnd::TornTail {
                        valid_end: r.valid_end,
                        torn_end: r.file_len,
                    }
                } else if r.has_header {
                    LogEnd::Clean
                } else {
                    LogEnd::Empty
                },
                tail_truncated: r.tail_truncated,
            }
        }

        pub(crate) fn from_wit_ops(ops: Vec<wit::JournalOp>) -> Vec<JournalOp> {
            ops.into_iter()
                .map(|op| match op {
                    wit::JournalOp::Set(s) => JournalOp::Set {
                        key: s.key,
                        value: s.value,
                    },
                    wit::JournalOp::Delete(key) => JournalOp::Delete { key },
                    wit::JournalOp::Clear => JournalOp::Clear,
                })
                .collect()
        }
    };
}

pub(crate) mod plain_journal {
    journal_conversions!(
        crate::bindings::exports::stele::log::journal,
        crate::convert::plain::from_wit_header
    );
}

pub(crate) mod async_journal {
    journal_conversions!(
        crate::bindings::engine_async::exports::stele::log::journal,
        crate::convert::with_async::from_wit_header
    );
}

/// Conversions for `stele:log/push-log`, instantiated for each component build as the WAL's
/// are.
macro_rules! push_log_conversions {
    ($wit:path, $header:path) => {
        use stele::push_log::{
            CompactionPolicy, CompactionReport, Finish, PushLogError, ReservedSection,
        };
        use stele::recovery::LogEnd;
        use $wit as wit;

        use crate::push_log::PushLogCallError;
        use crate::vfs_host::from_wit;

        pub(crate) fn from_wit_push_log_error(err: wit::PushLogError) -> PushLogCallError {
            use wit::PushLogError as E;
            let engine_error = match err {
                E::Vfs(e) => PushLogError::Vfs(from_wit(e)),
                E::BadHeader(h) => PushLogError::BadHeader($header(h)),
                E::SchemaMismatch(found) => PushLogError::SchemaMismatch { found },
                E::PushTooLarge(s) => PushLogError::PushTooLarge {
                    bytes: usize::try_from(s.bytes).unwrap_or(usize::MAX),
                    bytes_max: usize::try_from(s.bytes_max).unwrap_or(usize::MAX),
                },
                E::Corrupt(d) => PushLogError::Corrupt {
                    offset: d.offset,
                    valid_frame_at: d.valid_frame_at,
                },
                E::MalformedFrame(m) => PushLogError::MalformedFrame {
                    offset: m.offset,
                    why: m.why,
                },
                E::Locked(lock_path) => PushLogError::Locked { lock_path },
                E::AppendFailed(f) => PushLogError::AppendFailed {
                    cause: from_wit(f.cause),
                    rolled_back: f.rolled_back,
                },
                E::Arrow(message) => return PushLogCallError::Arrow(message),
            };
            engine_error.into()
        }

        pub(crate) fn from_wit_report(r: wit::CompactionReport) -> CompactionReport {
            CompactionReport {
                frames_before: r.frames_before as usize,
                frames_after: r.frames_after as usize,
                rows: r.rows as usize,
                bytes_before: r.bytes_before,
                bytes_after: r.bytes_after,
                // The component exports whole compactions only (the crash points are native
                // test hooks, `stele::push_log::PushLog::compact_with`).
                finished: Finish::Swap,
            }
        }

        pub(crate) fn wit_policy(policy: CompactionPolicy) -> wit::CompactionPolicy {
            wit::CompactionPolicy {
                frames: policy.frames.map(|n| n as u64),
                bytes: policy.bytes,
            }
        }

        pub(crate) fn from_wit_section(s: wit::SealedSection) -> ReservedSection {
            ReservedSection {
                name: s.name,
                payload: s.payload,
            }
        }

        /// A scan's end as the guest reported it: `None` (a scan that ended without an end,
        /// which only a closed scan does) reads as clean, as a native scan's `end` does before
        /// it has ended.
        pub(crate) fn from_wit_scan_end(end: Option<wit::ScanEnd>) -> LogEnd {
            match end {
                Some(wit::ScanEnd::Empty) => LogEnd::Empty,
                None | Some(wit::ScanEnd::Clean) => LogEnd::Clean,
                Some(wit::ScanEnd::TornTail(t)) => LogEnd::TornTail {
                    valid_end: t.valid_end,
                    torn_end: t.file_len,
                },
                Some(wit::ScanEnd::Corrupt(d)) => LogEnd::Corrupt {
                    offset: d.offset,
                    valid_frame_at: d.valid_frame_at,
                },
            }
        }

        /// The frames of one `next-frames` call: offset and IPC stream bytes, undecoded.
        pub(crate) fn from_wit_frames(frames: Vec<wit::ScannedFrame>) -> Vec<(u64, Vec<u8>)> {
            frames
                .into_iter()
                .map(|f| (f.offset, f.ipc_stream))
                .collect()
        }
    };
}

pub(crate) mod plain_push_log {
    push_log_conversions!(
        crate::bindings::exports::stele::log::push_log,
        crate::convert::plain::from_wit_header
    );
}

pub(crate) mod async_push_log {
    push_log_conversions!(
        crate::bindings::engine_async::exports::stele::log::push_log,
        crate::convert::with_async::from_wit_header
    );
}
