//! The `stele:log/push-log-async` export: the same [`PushLogWriter`] as the native log,
//! driven by [`WitIo::Async`], whose writes and syncs await the `vfs-async` imports. While one
//! push waits on the host's fsync, the instance serves its other calls; pushes to one log wait
//! for each other ([`Baton`]), and scans and counts read without waiting for them.

use std::cell::RefCell;

use arrow_schema::SchemaRef;

use crate::push_log::{self, PushLogScan, PushLogWriter, ReservedSection, ipc};

use super::Component;
use super::baton::Baton;
use super::exports::stele::log::push_log as wit_types;
use super::exports::stele::log::push_log_async as wit;
use super::push_log::{compaction_policy, error, next_frames, report, scan_end, sealed};
use super::vfs::WitVfs;
use super::wit_io::WitIo;

pub struct AsyncLog {
    path: String,
    schema: SchemaRef,
    writer: Baton<PushLogWriter<WitIo>>,
}

/// `None` once closed: the file and the frame window are released before the handle is.
pub struct AsyncScan(RefCell<Option<PushLogScan>>);

impl wit::Guest for Component {
    type Log = AsyncLog;
    type Scan = AsyncScan;
}

impl wit::GuestScan for AsyncScan {
    async fn next_frames(
        &self,
        frames_max: u32,
    ) -> Result<Vec<wit_types::ScannedFrame>, wit_types::PushLogError> {
        match &mut *self.0.borrow_mut() {
            Some(scan) => next_frames(scan, frames_max),
            None => Ok(Vec::new()),
        }
    }

    async fn end(&self) -> Option<wit_types::ScanEnd> {
        self.0.borrow().as_ref().and_then(scan_end)
    }

    async fn close(&self) {
        self.0.take();
    }
}

impl wit::GuestLog for AsyncLog {
    async fn open(path: String, schema_ipc: Vec<u8>) -> Result<wit::Log, wit_types::PushLogError> {
        let schema = ipc::decode_schema(&schema_ipc).map_err(wit_types::PushLogError::Arrow)?;
        let writer = PushLogWriter::new(WitIo::Async, path.clone(), schema.clone());
        Ok(wit::Log::new(AsyncLog {
            path,
            schema,
            writer: Baton::new(writer),
        }))
    }

    async fn append(&self, batch_ipc: Vec<u8>) -> Result<u64, wit_types::PushLogError> {
        let mut writer = self.writer.take().await;
        writer.append_ipc(&batch_ipc).await.map_err(error)
    }

    async fn scan(&self) -> Result<wit::Scan, wit_types::PushLogError> {
        let scan = self.scan_log().map_err(error)?;
        Ok(wit::Scan::new(AsyncScan(RefCell::new(Some(scan)))))
    }

    async fn frame_count(&self) -> Result<u64, wit_types::PushLogError> {
        push_log::frame_count(&WitVfs, &self.path)
            .map(|n| n as u64)
            .map_err(error)
    }

    async fn compact(&self) -> Result<wit_types::CompactionReport, wit_types::PushLogError> {
        let mut writer = self.writer.take().await;
        writer
            .compact_with(push_log::Finish::Swap)
            .await
            .map(report)
            .map_err(error)
    }

    async fn maybe_compact(
        &self,
        policy: wit_types::CompactionPolicy,
    ) -> Result<Option<wit_types::CompactionReport>, wit_types::PushLogError> {
        let mut writer = self.writer.take().await;
        writer
            .maybe_compact(compaction_policy(policy))
            .await
            .map(|r| r.map(report))
            .map_err(error)
    }

    async fn seal_section(
        &self,
        module_name: String,
    ) -> Result<wit_types::SealedSection, wit_types::PushLogError> {
        let scan = self.scan_log().map_err(error)?;
        ReservedSection::seal(scan, &self.schema, &module_name)
            .map(sealed)
            .map_err(error)
    }
}

impl AsyncLog {
    fn scan_log(&self) -> Result<PushLogScan, push_log::PushLogError> {
        PushLogScan::open(&WitVfs, &self.path, self.schema.clone())
    }
}
