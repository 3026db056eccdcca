//! [`PlainWal`]: the WAL's engine in an instance of the plain component (`stele.wasm`, what a
//! host without the async ABI runs). Calls are serialized on the instance's lock, so each
//! durable commit syncs on its own; calls for tasks run on tokio's blocking pool (the
//! [`WalEngine`] defaults).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use stele::vfs::Vfs;
use stele::wal::{
    LogSeq, Recovery, VisibleRecord, WalOptions, WalRetirement, WalTruncation, WalWriterStats,
};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::plain::{
    as_retention_error, from_wit_error, from_wit_range, from_wit_recovery, from_wit_retirement,
    from_wit_stats, from_wit_truncation, from_wit_visible, wit_batch, wit_options,
};
use super::engine::{Batch, WalEngine};
use super::error::WalError;
use crate::Mode;
use crate::embed::bindings::{self, exports::stele::log::wal as wit};
use crate::sandbox::runtime::{GuestState, Runtime, SandboxLimits, trap_error};
use crate::sandbox::{PlainInstance, lock};

/// A WAL writer in a plain instance of its own.
pub(crate) struct PlainWal(Mutex<PlainInstance>);

/// A guest call's outcome as the caller's: a trap, or the guest's typed error.
pub(super) fn guest_call<R>(
    call: wasmtime::Result<Result<R, wit::WalError>>,
) -> Result<R, WalError> {
    call.map_err(trap_error)?.map_err(from_wit_error)
}

impl PlainWal {
    /// Instantiates the plain component over `vfs` and creates (`create`) or opens the log at
    /// `path` in it.
    pub(crate) fn start(
        vfs: Arc<dyn Vfs>,
        path: &str,
        options: WalOptions,
        limits: SandboxLimits,
        create: bool,
    ) -> Result<(PlainWal, Recovery), WalError> {
        let (mut store, bindings) = Runtime::get()?.instantiate(vfs, limits)?;
        let writer_api = bindings.stele_log_wal().writer();
        let (writer, recovery) = if create {
            let writer =
                guest_call(writer_api.call_create(&mut store, path, wit_options(options)))?;
            (writer, Recovery::new_log(options.first_seq, 0))
        } else {
            let (writer, recovery) =
                guest_call(writer_api.call_open(&mut store, path, wit_options(options)))?;
            (writer, from_wit_recovery(recovery))
        };
        let plain = PlainInstance::new(store, bindings, writer);
        Ok((PlainWal(Mutex::new(plain)), recovery))
    }

    /// Runs one call on the instance; see [`PlainInstance::call`].
    fn call<R>(
        &self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestWriter<'_>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::WalError>>,
    ) -> Result<R, WalError> {
        let result = lock(&self.0).call(|store, bindings: &bindings::SteleEngine, writer| {
            call(store, &bindings.stele_log_wal().writer(), writer)
        })?;
        result.map_err(from_wit_error)
    }
}

impl WalEngine for PlainWal {
    fn mode(&self) -> Mode {
        Mode::SandboxedPlain
    }

    fn commit_many(
        &self,
        records: Batch<'_>,
        _encoded_bytes: usize,
        durable: bool,
    ) -> Result<Range<LogSeq>, WalError> {
        let batch = wit_batch(records);
        self.call(|st, api, w| match durable {
            true => api.call_commit_many_durable(st, w, &batch),
            false => api.call_commit_many(st, w, &batch),
        })
        .map(from_wit_range)
    }
    fn flush(&self) -> Result<(), WalError> {
        self.call(|st, api, w| api.call_flush(st, w))
    }
    fn seal_active_segment(&self) -> Result<bool, WalError> {
        self.call(|st, api, w| api.call_seal_active_segment(st, w))
    }
    fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        self.call(|st, api, w| api.call_visible_records(st, w, first_seq.0, limit))
            .map(from_wit_visible)
    }
    fn retire_visible_through(&self, through: LogSeq) -> Result<WalRetirement, WalError> {
        self.call(|st, api, w| api.call_retire_visible_through(st, w, through.0))
            .map(from_wit_retirement)
    }
    fn stats(&self) -> Result<WalWriterStats, WalError> {
        self.call(|st, api, w| api.call_stats(st, w).map(Ok))
            .map(from_wit_stats)
    }
    fn checkpoint(&self, through: LogSeq) -> Result<(), WalError> {
        self.call(|st, api, w| api.call_checkpoint(st, w, through.0))
            .map_err(as_retention_error)
    }
    fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        self.call(|st, api, w| api.call_truncate_through(st, w, through.0))
            .map(from_wit_truncation)
    }
    fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        self.call(|st, api, w| api.call_segments(st, w).map(Ok))
            .map(|seqs| seqs.into_iter().map(LogSeq).collect())
    }
}
