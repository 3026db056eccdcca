//! [`PushLogEngine`]: what a [`super::PushLog`] asks of the engine, wherever the engine runs.
//! There is one implementation per [`Mode`]: the engine's [`engine::PushLog`] itself (here),
//! the async instance ([`AsyncPushLog`], served by `super::session`) and the plain instance
//! ([`super::plain::PlainPushLog`]). The handle picks one when the log is made
//! (`super::handle`'s `open_engine`, the only match on the mode a push-log handle makes).
//!
//! A push reaches an engine with its schema checked ([`super::PushLog::append`]); a sandboxed
//! engine encodes it and checks the size before anything is copied into the guest.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{
    self as engine, CompactionPolicy, CompactionReport, ReservedSection, ScannedFrame, ipc,
};
use stele::recovery::LogEnd;
use wasmtime::component::ResourceAny;

use super::error::PushLogCallError;
use super::scan::{FrameSource, GuestScan, GuestScanCalls};
use super::session::{AsyncPushLog, PushLogRequest};

/// What a push-log handle asks of the engine.
pub(crate) trait PushLogEngine: Send + Sync + 'static {
    /// Appends one push whose schema the handle has checked, and makes it durable.
    fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError>;
    /// A streamed scan; `schema` decodes what a sandboxed guest hands over.
    fn scan<'a>(
        &'a self,
        schema: &'a SchemaRef,
    ) -> Result<Box<dyn FrameSource + 'a>, PushLogCallError>;
    fn frame_count(&self) -> Result<usize, PushLogCallError>;
    fn compact(&self) -> Result<CompactionReport, PushLogCallError>;
    fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError>;
    fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError>;
}

/// An Arrow encoding failure, as the caller's error.
pub(super) fn arrow(e: impl std::fmt::Display) -> PushLogCallError {
    PushLogCallError::Arrow(e.to_string())
}

/// A push as the IPC stream bytes a guest takes, refused here if it would not fit in a frame:
/// not after a copy into the guest's memory, which may be smaller.
pub(super) fn push_ipc(batch: &RecordBatch) -> Result<Vec<u8>, PushLogCallError> {
    let bytes = ipc::encode_stream(batch).map_err(arrow)?;
    engine::check_push_size(bytes.len())?;
    Ok(bytes)
}

impl PushLogEngine for engine::PushLog {
    fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        Ok(engine::PushLog::append(self, batch)?)
    }
    fn scan<'a>(
        &'a self,
        _schema: &'a SchemaRef,
    ) -> Result<Box<dyn FrameSource + 'a>, PushLogCallError> {
        Ok(Box::new(engine::PushLog::scan(self)?))
    }
    fn frame_count(&self) -> Result<usize, PushLogCallError> {
        Ok(engine::PushLog::frame_count(self)?)
    }
    fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        Ok(engine::PushLog::compact(self)?)
    }
    fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        Ok(engine::PushLog::maybe_compact(self, policy)?)
    }
    fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        Ok(engine::PushLog::seal_section(self, module_name)?)
    }
}

/// A native scan is already streamed.
impl FrameSource for engine::PushLogScan {
    fn next_frame(&mut self) -> Option<Result<ScannedFrame, PushLogCallError>> {
        self.next().map(|r| r.map_err(PushLogCallError::from))
    }
    fn end(&self) -> LogEnd {
        engine::PushLogScan::end(self)
    }
}

/// The async instance: every call is a request its store driver serves, so a scan or a count
/// from another thread runs while a push awaits its sync.
impl PushLogEngine for AsyncPushLog {
    fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        let batch_ipc = push_ipc(batch)?;
        self.request_blocking(|reply| PushLogRequest::Append { batch_ipc, reply })
    }
    fn scan<'a>(
        &'a self,
        schema: &'a SchemaRef,
    ) -> Result<Box<dyn FrameSource + 'a>, PushLogCallError> {
        let handle = self.request_blocking(|reply| PushLogRequest::Scan { reply })?;
        Ok(Box::new(GuestScan::new(self, handle, schema)))
    }
    fn frame_count(&self) -> Result<usize, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::FrameCount { reply })
            .map(|n| n as usize)
    }
    fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::Compact { reply })
    }
    fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::MaybeCompact { policy, reply })
    }
    fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::SealSection {
            module_name: module_name.to_owned(),
            reply,
        })
    }
}

impl GuestScanCalls for AsyncPushLog {
    fn next_frames(
        &self,
        scan: ResourceAny,
        frames_max: u32,
    ) -> Result<Vec<(u64, Vec<u8>)>, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::NextFrames {
            scan,
            frames_max,
            reply,
        })
    }
    fn scan_end(&self, scan: ResourceAny) -> Result<LogEnd, PushLogCallError> {
        self.request_blocking(|reply| PushLogRequest::ScanEnd { scan, reply })
    }
    fn close_scan(&self, scan: ResourceAny) {
        // A trap here is already sticky on the instance.
        let _ = self.request_blocking(|reply| PushLogRequest::CloseScan { scan, reply });
    }
}
