//! Conversions between the journal's Rust types and the WIT types of `stele:log/journal`,
//! written once as a macro and instantiated for each component build's bindings.

/// Conversions for `stele:log/journal`, instantiated for each component build as the WAL's are.
macro_rules! journal_conversions {
    ($wit:path, $header:path) => {
        use stele::journal::{JournalError, JournalOp, JournalRecovery};
        use stele::recovery::LogEnd;
        use $wit as wit;

        use crate::embed::imports::{from_wit, quota_from_wit};

        pub(crate) fn from_wit_journal_error(
            err: wit::JournalError,
        ) -> crate::journal::JournalError {
            use wit::JournalError as E;
            let engine_error = match err {
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
                E::QuotaExceeded(refusal) => JournalError::QuotaExceeded(quota_from_wit(refusal)),
                E::Other(message) => {
                    return crate::sandbox::SandboxError::EngineOther(message).into();
                }
            };
            engine_error.into()
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

/// For the plain build's bindings (`stele.wasm`).
pub(crate) mod plain {
    journal_conversions!(
        crate::embed::bindings::exports::stele::log::journal,
        crate::embed::convert::plain::from_wit_header
    );
}

/// For the async build's bindings (`stele-async.wasm`).
pub(crate) mod with_async {
    journal_conversions!(
        crate::embed::bindings::engine_async::exports::stele::log::journal,
        crate::embed::convert::with_async::from_wit_header
    );
}

#[cfg(test)]
mod tests {
    use crate::journal::JournalError;
    use crate::sandbox::SandboxError;

    #[test]
    fn an_engine_failure_with_no_case_of_its_own_comes_back_typed_with_its_message() {
        use crate::embed::bindings::engine_async::exports::stele::log::journal::JournalError as AsyncWit;
        use crate::embed::bindings::exports::stele::log::journal::JournalError as PlainWit;
        for err in [
            super::plain::from_wit_journal_error(PlainWit::Other("new".into())),
            super::with_async::from_wit_journal_error(AsyncWit::Other("new".into())),
        ] {
            assert!(
                matches!(&err, JournalError::Sandbox(SandboxError::EngineOther(m)) if m == "new"),
                "{err:?}"
            );
        }
    }
}
