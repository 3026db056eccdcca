//! [`TenantWal`]: a tenant's write-ahead log, `t/log` (segmented), through the registry.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use stele::wal::LogSeq;

use super::slot::{Facet, InFlight, Slot};
use super::{Registry, TenantsError};
use crate::wal::{Wal, WalError};

/// The WAL's path in its tenant's directory.
pub const TENANT_LOG_PATH: &str = "log";

impl Facet for Wal {
    /// A commit may be acknowledged before it is durable (under the registry's policy), so the
    /// log is flushed before its files close.
    fn settle(&self, tenant: &str) -> Result<(), TenantsError> {
        self.flush().map_err(|source| wal_error(tenant, source))
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
        durable: bool,
        bytes: usize,
        f: impl FnOnce(&Wal) -> Result<T, WalError>,
    ) -> Result<T, TenantsError> {
        let started = Instant::now();
        let guard: InFlight<'_, Wal> = self.slot.enter(&self.registry)?;
        let result = f(&guard.handle).map_err(|source| wal_error(self.tenant(), source));
        (self.slot.tenant).count(result.is_ok(), durable, bytes, started.elapsed());
        result
    }

    /// [`Wal::commit`]: acknowledged, durable at the next sync (under the registry's policy).
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, TenantsError> {
        self.call(false, payload.len(), |wal| wal.commit(op, payload))
    }

    /// [`Wal::commit_durable`]: durable when it returns.
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, TenantsError> {
        self.call(true, payload.len(), |wal| wal.commit_durable(op, payload))
    }

    /// [`Wal::commit_many`].
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, TenantsError> {
        let bytes = records.iter().map(|(_, p)| p.len()).sum();
        self.call(false, bytes, |wal| wal.commit_many(records))
    }

    /// [`Wal::commit_many_durable`]: every record durable when it returns.
    pub fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, TenantsError> {
        let bytes = records.iter().map(|(_, p)| p.len()).sum();
        self.call(true, bytes, |wal| wal.commit_many_durable(records))
    }

    /// [`Wal::flush`]: every record committed so far durable when it returns.
    pub fn flush(&self) -> Result<(), TenantsError> {
        self.call(true, 0, |wal| wal.flush())
    }

    /// The log's writer stats ([`Wal::stats`]); resumes a hibernated log.
    pub fn stats(&self) -> Result<stele::wal::WalWriterStats, TenantsError> {
        self.call(false, 0, |wal| wal.stats())
    }

    /// Hibernates the log now if it is open with no call in flight (flushing it first);
    /// returns whether it did.
    pub fn hibernate(&self) -> Result<bool, TenantsError> {
        self.slot.hibernate(&self.registry)
    }
}
