//! The registry's bookkeeping, shared by every facet: a tenant's counters ([`Tenant`]), what
//! the budget needs of an open log of any facet ([`Resident`]), and the slot of a facet whose
//! open handle is shared by concurrent calls ([`Slot`]: the WAL and the push log; the journal,
//! whose calls take the writer whole, has its own in `journal.rs`). Imports nothing of any
//! facet: each facet's file says how its handle settles ([`Facet`]) and opens.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::time::Duration;

use stele::vfs::Vfs;

use super::metrics::{TenantMetrics, WalGroupFigures, Writes};
use crate::fs::QuotaVfs;

use super::{Registry, TenantsError, TenantsOptions};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One registered tenant: its name and its figures, summed over its facets.
pub(super) struct Tenant {
    pub(super) name: String,
    pub(super) last_used_ms: AtomicU64,
    pub(super) calls: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) durable_calls: AtomicU64,
    /// Opens of any of its logs. Counted after an open succeeds, and `hibernations` after a
    /// hibernation dropped the log, so `opens > hibernations` exactly while one is open.
    pub(super) opens: AtomicU64,
    pub(super) hibernations: AtomicU64,
    /// Its `metrics` handles, made at its first call ([`super::metrics`]).
    metrics: OnceLock<Box<TenantMetrics>>,
    /// Its WAL's group figures, summed over the writers its log has had.
    pub(super) wal_groups: WalGroupFigures,
    /// Its quota, shared by all its logs, made at the first open when the registry's options
    /// bound one ([`super::TenantsOptions::limits`]) and kept across hibernations, so that its
    /// figures and its rates' debt outlive any one open log.
    pub(super) quota: OnceLock<QuotaVfs>,
}

impl Tenant {
    pub(super) fn new(name: &str, now_ms: u64) -> Tenant {
        Tenant {
            name: name.to_owned(),
            last_used_ms: AtomicU64::new(now_ms),
            calls: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            durable_calls: AtomicU64::new(0),
            opens: AtomicU64::new(0),
            hibernations: AtomicU64::new(0),
            quota: OnceLock::new(),
            metrics: OnceLock::new(),
            wal_groups: WalGroupFigures::default(),
        }
    }

    /// A call on one of its logs (whose own time is `log_last_used_ms`) ended at `now_ms`.
    pub(super) fn touch(&self, log_last_used_ms: &AtomicU64, now_ms: u64) {
        log_last_used_ms.store(now_ms, Ordering::Relaxed);
        self.last_used_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Its `metrics` handles.
    pub(super) fn metrics(&self) -> &TenantMetrics {
        self.metrics
            .get_or_init(|| Box::new(TenantMetrics::new(&self.name)))
    }

    /// Counts one call that ended after `elapsed` (what it wrote, if it succeeded), in the
    /// tenant's figures and its metrics.
    pub(super) fn count(&self, ok: bool, writes: Writes, elapsed: Duration) {
        self.metrics().call(ok, writes, elapsed);
        if !ok {
            return;
        }
        self.bytes.fetch_add(writes.bytes as u64, Ordering::Relaxed);
        if writes.durable {
            self.durable_calls.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An open log of any facet, as the budget sees it.
pub(super) trait Resident: Send + Sync {
    /// Whether a call holds the log now (it is not hibernated while one does).
    fn in_flight(&self) -> bool;
    /// When its last call ended, in the registry's milliseconds.
    fn last_used_ms(&self) -> u64;
    /// Hibernates the log if it is open and no call holds it, without waiting for a caller;
    /// returns whether it did. An error leaves the log open.
    fn try_hibernate(&self, registry: &Registry) -> Result<bool, TenantsError>;
}

/// The identity of a resident in the registry's open set.
pub(super) fn address(resident: &dyn Resident) -> *const () {
    resident as *const dyn Resident as *const ()
}

/// A facet's open handle that concurrent calls share (a clone each).
pub(super) trait Facet: Clone + Send + Sync + 'static {
    /// Makes every call acknowledged so far durable, before the handle is dropped to
    /// hibernate, and hands the tenant what only the handle knows (its WAL's figures).
    fn settle(&self, tenant: &Tenant) -> Result<(), TenantsError>;
}

/// Opens a facet's handle over the tenant's directory, under the registry's options: (options,
/// tenant, the tenant's directory). Boxed per slot; a facet that needs nothing more than its
/// arguments (the WAL) boxes nothing, since its closure has no size.
pub(super) type Opener<H> =
    Box<dyn Fn(&TenantsOptions, &str, Arc<dyn Vfs>) -> Result<H, TenantsError> + Send + Sync>;

/// A tenant's slot for a facet whose handle concurrent calls share.
pub(super) struct Slot<H: Facet> {
    pub(super) tenant: Arc<Tenant>,
    /// The open handle; `None` while hibernated. Held while the log opens or hibernates, so
    /// that it is opened by one caller at a time.
    handle: Mutex<Option<H>>,
    /// Calls holding a clone of the open handle. Raised only under `handle`'s lock, so a
    /// hibernation that sees zero under it knows nobody uses the log.
    in_flight: AtomicUsize,
    last_used_ms: AtomicU64,
    open: Opener<H>,
}

/// A call in flight on an open log: lowers the slot's count when the call ends.
pub(super) struct InFlight<'a, H: Facet> {
    slot: &'a Slot<H>,
    registry: &'a Registry,
    pub(super) handle: H,
}

impl<H: Facet> Drop for InFlight<'_, H> {
    fn drop(&mut self) {
        self.slot
            .tenant
            .touch(&self.slot.last_used_ms, self.registry.now_ms());
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<H: Facet> Slot<H> {
    pub(super) fn new(tenant: Arc<Tenant>, now_ms: u64, open: Opener<H>) -> Slot<H> {
        Slot {
            tenant,
            handle: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            last_used_ms: AtomicU64::new(now_ms),
            open,
        }
    }

    /// The open handle, resumed if hibernated, counted as in flight until the guard drops.
    pub(super) fn enter<'a>(
        self: &'a Arc<Self>,
        registry: &'a Registry,
    ) -> Result<InFlight<'a, H>, TenantsError> {
        let mut handle = lock(&self.handle);
        if handle.is_none() {
            registry.before_resume();
            let vfs = registry.tenant_vfs(&self.tenant)?;
            *handle = Some((self.open)(&registry.options, &self.tenant.name, vfs)?);
            registry.admit(&self.tenant, self.clone());
        }
        let open = handle.as_ref().expect("opened above").clone();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.tenant.calls.fetch_add(1, Ordering::Relaxed);
        Ok(InFlight {
            slot: self,
            registry,
            handle: open,
        })
    }

    /// Hibernates now if open with no call in flight, waiting for a caller that is opening
    /// or hibernating it; returns whether it did.
    pub(super) fn hibernate(&self, registry: &Registry) -> Result<bool, TenantsError> {
        self.hibernate_locked(registry, &mut lock(&self.handle))
    }

    fn hibernate_locked(
        &self,
        registry: &Registry,
        handle: &mut Option<H>,
    ) -> Result<bool, TenantsError> {
        if self.in_flight.load(Ordering::SeqCst) != 0 {
            return Ok(false);
        }
        let Some(open) = handle.as_ref() else {
            return Ok(false);
        };
        open.settle(&self.tenant)?;
        drop(handle.take());
        registry.evict(&self.tenant, self);
        Ok(true)
    }
}

impl<H: Facet> Resident for Slot<H> {
    fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) != 0
    }

    fn last_used_ms(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }

    fn try_hibernate(&self, registry: &Registry) -> Result<bool, TenantsError> {
        match self.handle.try_lock() {
            Ok(mut handle) => self.hibernate_locked(registry, &mut handle),
            Err(TryLockError::Poisoned(poisoned)) => {
                self.hibernate_locked(registry, &mut poisoned.into_inner())
            }
            Err(TryLockError::WouldBlock) => Ok(false),
        }
    }
}
