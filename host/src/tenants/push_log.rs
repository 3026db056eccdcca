//! [`TenantPushLog`]: a tenant's push log, `t/push.log`, through the registry.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use stele::push_log::{CompactionPolicy, CompactionReport, ScannedFrame};
use stele::recovery::LogEnd;

use super::metrics::Writes;
use super::slot::{Facet, Slot, Tenant};
use super::{Registry, TenantsError};
use crate::push_log::{PushLog, PushLogCallError};

/// The push log's path in its tenant's directory.
pub const TENANT_PUSH_LOG_PATH: &str = "push.log";

impl Facet for Arc<PushLog> {
    /// Every push and compaction is durable when it returns, so there is nothing to settle:
    /// a hibernation only waits for the calls in flight.
    fn settle(&self, _tenant: &Tenant) -> Result<(), TenantsError> {
        Ok(())
    }
}

/// The tenant's push log slot, and the schema it was first asked for with.
pub(super) struct PushLogSlot {
    pub(super) schema: SchemaRef,
    pub(super) slot: Arc<Slot<Arc<PushLog>>>,
}

/// A handle to one tenant's push log in a [`super::Tenants`] registry: [`PushLog`]'s calls,
/// each resuming the log first if it is hibernated. Cloning shares the log.
#[derive(Clone)]
pub struct TenantPushLog {
    pub(super) registry: Arc<Registry>,
    pub(super) slot: Arc<Slot<Arc<PushLog>>>,
    pub(super) schema: SchemaRef,
}

impl std::fmt::Debug for TenantPushLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPushLog")
            .field("tenant", &self.slot.tenant.name)
            .finish_non_exhaustive()
    }
}

impl TenantPushLog {
    /// The tenant's name.
    pub fn tenant(&self) -> &str {
        &self.slot.tenant.name
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn call<T>(
        &self,
        writes: Writes,
        f: impl FnOnce(&PushLog) -> Result<T, PushLogCallError>,
    ) -> Result<T, TenantsError> {
        let started = Instant::now();
        let guard = self.slot.enter(&self.registry)?;
        let result = f(&guard.handle).map_err(|source| TenantsError::PushLog {
            tenant: self.tenant().to_owned(),
            source,
        });
        (self.slot.tenant).count(result.is_ok(), writes, started.elapsed());
        result
    }

    /// [`PushLog::append`]: durable when it returns; returns the frame's offset.
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, TenantsError> {
        let writes = Writes::commit(true, batch.get_array_memory_size(), 1);
        self.call(writes, |log| log.append(batch))
    }

    /// [`PushLog::scan_all`]: every frame, and where the log ends.
    pub fn scan_all(&self) -> Result<(Vec<ScannedFrame>, LogEnd), TenantsError> {
        self.call(Writes::none(false), |log| log.scan_all())
    }

    /// [`PushLog::frame_count`].
    pub fn frame_count(&self) -> Result<usize, TenantsError> {
        self.call(Writes::none(false), |log| log.frame_count())
    }

    /// [`PushLog::compact`]: durable when it returns.
    pub fn compact(&self) -> Result<CompactionReport, TenantsError> {
        self.call(Writes::none(true), |log| log.compact())
    }

    /// [`PushLog::maybe_compact`].
    pub fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, TenantsError> {
        self.call(Writes::none(true), |log| log.maybe_compact(policy))
    }

    /// Hibernates the log now if it is open with no call in flight; returns whether it did.
    pub fn hibernate(&self) -> Result<bool, TenantsError> {
        self.slot.hibernate(&self.registry)
    }
}
