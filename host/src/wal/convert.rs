//! Conversions between the WAL's Rust types and the WIT types of `stele:log/wal`. The two
//! component builds have separate generated bindings with identical shapes, so the conversions
//! are written once, as a macro, and instantiated for each.

macro_rules! wal_conversions {
    ($wit:path, $shared:path) => {
        use std::ops::Range;

        use stele::wal::{
            DurabilityPolicy, LogEnd, LogSeq, Recovery, VisibleRecord, WalOpenError, WalOptions,
            WalRetentionError, WalRetireError, WalRetirement, WalTruncation, WalWriteError,
            WalWriterStats,
        };
        use $wit as wit;

        use crate::embed::imports::{from_wit, quota_from_wit};
        use crate::wal::error::WalError;
        use $shared::{from_wit_header, usize_of};

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
                E::Stalled(cause) => WalWriteError::Stalled {
                    cause: from_wit(cause),
                }
                .into(),
                E::StalledRefused(cause) => WalWriteError::StalledRefused {
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
                E::QuotaExceeded(refusal) => {
                    WalWriteError::QuotaExceeded(quota_from_wit(refusal)).into()
                }
                E::Unreserved(cause) => WalWriteError::Unreserved {
                    cause: from_wit(cause),
                }
                .into(),
                E::Other(message) => crate::sandbox::SandboxError::EngineOther(message).into(),
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

/// For the plain build's bindings (`stele.wasm`).
pub(crate) mod plain {
    wal_conversions!(
        crate::embed::bindings::exports::stele::log::wal,
        crate::embed::convert::plain
    );
}

/// For the async build's bindings (`stele-async.wasm`).
pub(crate) mod with_async {
    wal_conversions!(
        crate::embed::bindings::engine_async::exports::stele::log::wal,
        crate::embed::convert::with_async
    );
}

#[cfg(test)]
mod tests {
    use crate::sandbox::SandboxError;
    use crate::wal::WalError;

    #[test]
    fn an_engine_failure_with_no_case_of_its_own_comes_back_typed_with_its_message() {
        use crate::embed::bindings::engine_async::exports::stele::log::wal::WalError as AsyncWit;
        use crate::embed::bindings::exports::stele::log::wal::WalError as PlainWit;
        let expected = WalError::Sandbox(SandboxError::EngineOther("a newer condition".into()));
        assert_eq!(
            super::plain::from_wit_error(PlainWit::Other("a newer condition".into())),
            expected
        );
        assert_eq!(
            super::with_async::from_wit_error(AsyncWit::Other("a newer condition".into())),
            expected
        );
        // A `vfs` host's `other` is a failed call with its message, as `io` is.
        use crate::embed::bindings::stele::log::vfs::VfsError as VfsWit;
        assert_eq!(
            crate::embed::imports::from_wit(VfsWit::Other("x".into())),
            stele::vfs::VfsError::Io("x".into())
        );
    }
}
