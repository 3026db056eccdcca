//! The `stele:log/push-log` export: a thin shell over [`PushLog`]. Batches and schemas cross as
//! Arrow IPC stream bytes; a pushed batch is decoded here and checked against the log's schema
//! before anything is written.

use std::cell::RefCell;
use std::sync::Arc;

use crate::push_log::{
    CompactionPolicy, CompactionReport, PushLog, PushLogError, PushLogScan, ReservedSection, ipc,
};
use crate::recovery::LogEnd;

use super::Component;
use super::exports::stele::log::push_log as wit;
use super::vfs::{WitVfs, quota_to_wit, to_wit};
use super::wal::header_error;

pub struct GuestLog(PushLog);

/// Interior mutability because WIT methods take `&self`; the component is single-threaded.
pub struct GuestScan(RefCell<PushLogScan>);

pub(super) fn error(err: PushLogError) -> wit::PushLogError {
    use wit::PushLogError as E;
    match err {
        PushLogError::Vfs(e) => E::Vfs(to_wit(e)),
        PushLogError::BadHeader(h) => E::BadHeader(header_error(h)),
        PushLogError::SchemaMismatch { found } => E::SchemaMismatch(found),
        PushLogError::PushTooLarge { bytes, bytes_max } => E::PushTooLarge(wit::TooLarge {
            bytes: bytes as u64,
            bytes_max: bytes_max as u64,
        }),
        PushLogError::Corrupt {
            offset,
            valid_frame_at,
        } => E::Corrupt(wit::FrameDamage {
            offset,
            valid_frame_at,
        }),
        PushLogError::MalformedFrame { offset, why } => {
            E::MalformedFrame(wit::MalformedFrame { offset, why })
        }
        PushLogError::Locked { lock_path } => E::Locked(lock_path),
        PushLogError::AppendFailed { cause, rolled_back } => E::AppendFailed(wit::PushFailure {
            cause: to_wit(cause),
            rolled_back,
        }),
        PushLogError::Arrow(e) => E::Arrow(e.to_string()),
        PushLogError::BadPush(why) => E::Arrow(why),
        PushLogError::QuotaExceeded(refusal) => E::QuotaExceeded(quota_to_wit(refusal)),
    }
}

pub(super) fn report(r: CompactionReport) -> wit::CompactionReport {
    wit::CompactionReport {
        frames_before: r.frames_before as u64,
        frames_after: r.frames_after as u64,
        rows: r.rows as u64,
        bytes_before: r.bytes_before,
        bytes_after: r.bytes_after,
    }
}

/// The most frames one `next-frames` returns, whatever the caller asks: bounds the list the
/// host lifts in one call (each frame is at most one frame body, 64 MiB).
const SCAN_FRAMES_PER_CALL_MAX: u32 = 64;

/// A call stops adding frames once its list holds this many bytes, so a streamed scan of large
/// frames keeps one frame per call in flight, not 64 (the host holds the list while it decodes).
const SCAN_BYTES_PER_CALL_TARGET: usize = 4 << 20;

impl wit::Guest for Component {
    type Log = GuestLog;
    type Scan = GuestScan;
}

impl wit::GuestScan for GuestScan {
    fn next_frames(&self, frames_max: u32) -> Result<Vec<wit::ScannedFrame>, wit::PushLogError> {
        next_frames(&mut self.0.borrow_mut(), frames_max)
    }

    fn end(&self) -> Option<wit::ScanEnd> {
        scan_end(&self.0.borrow())
    }
}

/// Up to `frames_max` (at most [`SCAN_FRAMES_PER_CALL_MAX`]) next frames of `scan`, stopping
/// early past [`SCAN_BYTES_PER_CALL_TARGET`] bytes; an empty list once the scan has ended.
pub(super) fn next_frames(
    scan: &mut PushLogScan,
    frames_max: u32,
) -> Result<Vec<wit::ScannedFrame>, wit::PushLogError> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for _ in 0..frames_max.clamp(1, SCAN_FRAMES_PER_CALL_MAX) {
        if bytes >= SCAN_BYTES_PER_CALL_TARGET {
            break;
        }
        // The body goes over as stored: the host decodes it against the schema itself (it
        // must check whatever a guest hands it anyway), so decoding here too would only
        // double the work.
        let Some(frame) = scan.next_body() else { break };
        let (offset, body) = frame.map_err(error)?;
        bytes += body.len();
        out.push(wit::ScannedFrame {
            offset,
            ipc_stream: body.to_vec(),
        });
    }
    Ok(out)
}

/// How `scan` ended, once it has.
pub(super) fn scan_end(scan: &PushLogScan) -> Option<wit::ScanEnd> {
    scan.finished().then(|| match scan.end() {
        LogEnd::Empty => wit::ScanEnd::Empty,
        LogEnd::Clean => wit::ScanEnd::Clean,
        LogEnd::TornTail {
            valid_end,
            torn_end,
        } => wit::ScanEnd::TornTail(wit::TornTail {
            valid_end,
            file_len: torn_end,
        }),
        LogEnd::Corrupt {
            offset,
            valid_frame_at,
        } => wit::ScanEnd::Corrupt(wit::FrameDamage {
            offset,
            valid_frame_at,
        }),
    })
}

impl wit::GuestLog for GuestLog {
    fn open(path: String, schema_ipc: Vec<u8>) -> Result<wit::Log, wit::PushLogError> {
        let schema = ipc::decode_schema(&schema_ipc).map_err(wit::PushLogError::Arrow)?;
        Ok(wit::Log::new(GuestLog(PushLog::new(
            Arc::new(WitVfs),
            path,
            schema,
        ))))
    }

    fn append(&self, batch_ipc: Vec<u8>) -> Result<u64, wit::PushLogError> {
        self.0.append_ipc(&batch_ipc).map_err(error)
    }

    fn scan(&self) -> Result<wit::Scan, wit::PushLogError> {
        let scan = self.0.scan().map_err(error)?;
        Ok(wit::Scan::new(GuestScan(RefCell::new(scan))))
    }

    fn frame_count(&self) -> Result<u64, wit::PushLogError> {
        self.0.frame_count().map(|n| n as u64).map_err(error)
    }

    fn compact(&self) -> Result<wit::CompactionReport, wit::PushLogError> {
        self.0.compact().map(report).map_err(error)
    }

    fn maybe_compact(
        &self,
        policy: wit::CompactionPolicy,
    ) -> Result<Option<wit::CompactionReport>, wit::PushLogError> {
        self.0
            .maybe_compact(compaction_policy(policy))
            .map(|r| r.map(report))
            .map_err(error)
    }

    fn seal_section(&self, module_name: String) -> Result<wit::SealedSection, wit::PushLogError> {
        self.0.seal_section(&module_name).map(sealed).map_err(error)
    }
}

pub(super) fn compaction_policy(policy: wit::CompactionPolicy) -> CompactionPolicy {
    CompactionPolicy {
        frames: policy
            .frames
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        bytes: policy.bytes,
    }
}

pub(super) fn sealed(section: ReservedSection) -> wit::SealedSection {
    wit::SealedSection {
        name: section.name,
        payload: section.payload,
    }
}
