//! [`TenantWal`]: a tenant's write-ahead log, `t/log` (segmented), through the registry.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use stele::wal::LogSeq;

use super::metrics::Writes;
use super::slot::{Facet, InFlight, Slot, Tenant};
use super::{Registry, TenantsError};
use crate::wal::{Wal, WalError};

/// The WAL's path in its tenant's directory.
pub const TENANT_LOG_PATH: &str = "log";

impl Facet for Wal {
    /// A commit may be acknowledged before it is durable (under the registry's policy), so the
    /// log is flushed before its files close.
    fn settle(&self, tenant: &Tenant) -> Result<(), TenantsError> {
        self.flush()
            .map_err(|source| wal_error(&tenant.name, source))?;
        // The writer's figures die with it: fold them into the tenant's sums first.
        let stats = self
            .stats()
            .map_err(|source| wal_error(&tenant.name, source))?;
        tenant.wal_groups.close(tenant.metrics(), &stats);
        Ok(())
    }
}

fn wal_error(tenant: &str, source: WalError) -> TenantsError {
    TenantsError::Wal {
        tenant: tenant.to_owned(),
        source,
    }
}

/// A handle to one tenant's log in a [`super::Tenants`] registry: [`Wal`]'s calls, each
/// resuming the log first if it is hibernated. Cloning shares the log.
#[derive(Clone)]
pub struct TenantWal {
    pub(super) registry: Arc<Registry>,
    pub(super) slot: Arc<Slot<Wal>>,
}

impl std::fmt::Debug for TenantWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantWal")
            .field("tenant", &self.slot.tenant.name)
            .finish_non_exhaustive()
    }
}

impl TenantWal {
    /// The tenant's name.
    pub fn tenant(&self) -> &str {
        &self.slot.tenant.name
    }

    fn call<T>(
        &self,
        writes: Writes,
        f: impl FnOnce(&Wal) -> Result<T, WalError>,
    ) -> Result<T, TenantsError> {
        let started = Instant::now();
        let guard: InFlight<'_, Wal> = self.slot.enter(&self.registry)?;
        let result = f(&guard.handle).map_err(|source| wal_error(self.tenant(), source));
        let tenant = &self.slot.tenant;
        tenant.count(result.is_ok(), writes, started.elapsed());
        // The call's start stands for now: no second clock read on the commit path.
        if tenant.wal_groups.due(self.registry.ms_at(started))
            && let Ok(stats) = guard.handle.stats()
        {
            tenant.wal_groups.publish(tenant.metrics(), &stats);
        }
        result
    }

    /// [`Wal::commit`]: acknowledged, durable at the next sync (under the registry's policy).
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, TenantsError> {
        let writes = Writes::commit(false, payload.len(), 1);
        self.call(writes, |wal| wal.commit(op, payload))
    }

    /// [`Wal::commit_durable`]: durable when it returns.
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, TenantsError> {
        let writes = Writes::commit(true, payload.len(), 1);
        self.call(writes, |wal| wal.commit_durable(op, payload))
    }

    /// [`Wal::commit_many`].
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, TenantsError> {
        let bytes = records.iter().map(|(_, p)| p.len()).sum();
        let writes = Writes::commit(false, bytes, records.len() as u64);
        self.call(writes, |wal| wal.commit_many(records))
    }

    /// [`Wal::commit_many_durable`]: every record durable when it returns.
    pub fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, TenantsError> {
        let bytes = records.iter().map(|(_, p)| p.len()).sum();
        let writes = Writes::commit(true, bytes, records.len() as u64);
        self.call(writes, |wal| wal.commit_many_durable(records))
    }

    /// [`Wal::flush`]: every record committed so far durable when it returns.
    pub fn flush(&self) -> Result<(), TenantsError> {
        self.call(Writes::none(true), |wal| wal.flush())
    }

    /// The log's writer stats ([`Wal::stats`]); resumes a hibernated log. Publishes the
    /// tenant's WAL group metrics too.
    pub fn stats(&self) -> Result<stele::wal::WalWriterStats, TenantsError> {
        let stats = self.call(Writes::none(false), |wal| wal.stats())?;
        let tenant = &self.slot.tenant;
        tenant.wal_groups.publish(tenant.metrics(), &stats);
        Ok(stats)
    }

    /// Hibernates the log now if it is open with no call in flight (flushing it first);
    /// returns whether it did.
    pub fn hibernate(&self) -> Result<bool, TenantsError> {
        self.slot.hibernate(&self.registry)
    }
}
