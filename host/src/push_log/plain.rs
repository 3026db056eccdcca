//! [`PlainPushLog`]: the push log's engine in an instance of the plain component, whose calls
//! are serialized on its lock; the first trap is sticky ([`PlainInstance::call`]).

use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{CompactionPolicy, CompactionReport, ReservedSection};
use stele::recovery::LogEnd;
use stele::vfs::Vfs;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::plain::{
    from_wit_frames, from_wit_push_log_error, from_wit_report, from_wit_scan_end, from_wit_section,
    wit_policy,
};
use super::engine::{PushLogEngine, push_ipc};
use super::error::PushLogCallError;
use super::scan::{FrameSource, GuestScan, GuestScanCalls};
use crate::embed::bindings::{self, exports::stele::log::push_log as wit};
use crate::sandbox::runtime::{GuestState, Runtime, SandboxLimits, trap_error};
use crate::sandbox::{PlainInstance, lock};

/// A push log in a plain instance of its own.
pub(crate) struct PlainPushLog(Mutex<PlainInstance>);

impl PlainPushLog {
    /// Instantiates the plain component over `vfs` and makes the log at `path` in it.
    pub(super) fn open(
        vfs: Arc<dyn Vfs>,
        path: &str,
        schema_ipc: &[u8],
        limits: SandboxLimits,
    ) -> Result<PlainPushLog, PushLogCallError> {
        let (mut store, engine) = Runtime::get()?.instantiate(vfs, limits)?;
        let log = engine
            .stele_log_push_log()
            .log()
            .call_open(&mut store, path, schema_ipc)
            .map_err(trap_error)?
            .map_err(from_wit_push_log_error)?;
        Ok(PlainPushLog(Mutex::new(PlainInstance::new(
            store, engine, log,
        ))))
    }

    /// One call on the instance's log.
    fn call<R>(
        &self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestLog<'_>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let result = lock(&self.0).call(|st, e: &bindings::SteleEngine, log| {
            call(st, &e.stele_log_push_log().log(), log)
        })?;
        result.map_err(from_wit_push_log_error)
    }

    /// [`Self::call`] for a call on a scan resource.
    fn call_scan<R>(
        &self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestScan<'_>,
        ) -> wasmtime::Result<Result<R, wit::PushLogError>>,
    ) -> Result<R, PushLogCallError> {
        let result = lock(&self.0)
            .call(|st, e: &bindings::SteleEngine, _| call(st, &e.stele_log_push_log().scan()))?;
        result.map_err(from_wit_push_log_error)
    }
}

impl PushLogEngine for PlainPushLog {
    fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogCallError> {
        let batch_ipc = push_ipc(batch)?;
        self.call(|st, api, log| api.call_append(st, log, &batch_ipc))
    }
    fn scan<'a>(
        &'a self,
        schema: &'a SchemaRef,
    ) -> Result<Box<dyn FrameSource + 'a>, PushLogCallError> {
        let handle = self.call(|st, api, log| api.call_scan(st, log))?;
        Ok(Box::new(GuestScan::new(self, handle, schema)))
    }
    fn frame_count(&self) -> Result<usize, PushLogCallError> {
        self.call(|st, api, log| api.call_frame_count(st, log))
            .map(|n| n as usize)
    }
    fn compact(&self) -> Result<CompactionReport, PushLogCallError> {
        self.call(|st, api, log| api.call_compact(st, log))
            .map(from_wit_report)
    }
    fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogCallError> {
        self.call(|st, api, log| api.call_maybe_compact(st, log, wit_policy(policy)))
            .map(|r| r.map(from_wit_report))
    }
    fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogCallError> {
        self.call(|st, api, log| api.call_seal_section(st, log, module_name))
            .map(from_wit_section)
    }
}

impl GuestScanCalls for PlainPushLog {
    fn next_frames(
        &self,
        scan: ResourceAny,
        frames_max: u32,
    ) -> Result<Vec<(u64, Vec<u8>)>, PushLogCallError> {
        self.call_scan(|st, api| api.call_next_frames(st, scan, frames_max))
            .map(from_wit_frames)
    }
    fn scan_end(&self, scan: ResourceAny) -> Result<LogEnd, PushLogCallError> {
        self.call_scan(|st, api| api.call_end(st, scan).map(Ok))
            .map(from_wit_scan_end)
    }
    fn close_scan(&self, scan: ResourceAny) {
        // A trap here is already sticky on the instance.
        let _ = self.call_scan(|st, _| scan.resource_drop(st).map(Ok));
    }
}
