//! Conversions between the push log's Rust types and the WIT types of `stele:log/push-log`,
//! written once as a macro and instantiated for each component build's bindings.

/// Conversions for `stele:log/push-log`, instantiated for each component build as the WAL's
/// are.
macro_rules! push_log_conversions {
    ($wit:path, $header:path) => {
        use stele::push_log::{
            CompactionPolicy, CompactionReport, Finish, PushLogError, ReservedSection,
        };
        use stele::recovery::LogEnd;
        use $wit as wit;

        use crate::embed::imports::{from_wit, quota_from_wit};
        use crate::push_log::error::PushLogCallError;

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
                E::QuotaExceeded(refusal) => PushLogError::QuotaExceeded(quota_from_wit(refusal)),
                E::Other(message) => {
                    return crate::sandbox::SandboxError::EngineOther(message).into();
                }
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

/// For the plain build's bindings (`stele.wasm`).
pub(crate) mod plain {
    push_log_conversions!(
        crate::embed::bindings::exports::stele::log::push_log,
        crate::embed::convert::plain::from_wit_header
    );
}

/// For the async build's bindings (`stele-async.wasm`).
pub(crate) mod with_async {
    push_log_conversions!(
        crate::embed::bindings::engine_async::exports::stele::log::push_log,
        crate::embed::convert::with_async::from_wit_header
    );
}

#[cfg(test)]
mod tests {
    use crate::push_log::PushLogCallError;
    use crate::sandbox::SandboxError;

    #[test]
    fn an_engine_failure_with_no_case_of_its_own_comes_back_typed_with_its_message() {
        use crate::embed::bindings::engine_async::exports::stele::log::push_log::PushLogError as AsyncWit;
        use crate::embed::bindings::exports::stele::log::push_log::PushLogError as PlainWit;
        for err in [
            super::plain::from_wit_push_log_error(PlainWit::Other("new".into())),
            super::with_async::from_wit_push_log_error(AsyncWit::Other("new".into())),
        ] {
            assert!(
                matches!(&err, PushLogCallError::Sandbox(SandboxError::EngineOther(m)) if m == "new"),
                "{err:?}"
            );
        }
    }
}
