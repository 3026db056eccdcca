//! [`TenantJournal`]: a tenant's journal, `t/journal`, through the registry, with the tokio
//! API of [`Journal`].
//!
//! A journal's calls take its writer whole (`&mut`), so its slot is a tokio mutex held for
//! each call, not a shared handle: a call in flight is a held lock, and the budget passes over
//! a journal whose lock it cannot take. Every append and compaction is durable when it
//! returns, so hibernating drops the writer with nothing to flush.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use stele::journal::{JournalOp, JournalRecovery};
use stele::vfs::Vfs;

use super::metrics::Writes;
use super::slot::{Resident, Tenant};
use super::{Registry, TenantsError};
use crate::journal::{Journal, JournalError, replay_journal};

/// The journal's path in its tenant's directory.
pub const TENANT_JOURNAL_PATH: &str = "journal";

/// A tenant's journal slot.
pub(super) struct JournalSlot {
    pub(super) tenant: Arc<Tenant>,
    /// The open writer; `None` while hibernated. Held for each call.
    journal: tokio::sync::Mutex<Option<Journal>>,
    last_used_ms: AtomicU64,
}

impl JournalSlot {
    pub(super) fn new(tenant: Arc<Tenant>, now_ms: u64) -> JournalSlot {
        JournalSlot {
            tenant,
            journal: tokio::sync::Mutex::new(None),
            last_used_ms: AtomicU64::new(now_ms),
        }
    }

    /// Drops the open writer (every call it acknowledged is durable).
    fn hibernate_locked(&self, registry: &Registry, journal: &mut Option<Journal>) -> bool {
        if journal.take().is_none() {
            return false;
        }
        registry.evict(&self.tenant, self);
        true
    }
}

impl Resident for JournalSlot {
    fn in_flight(&self) -> bool {
        self.journal.try_lock().is_err()
    }

    fn last_used_ms(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }

    fn try_hibernate(&self, registry: &Registry) -> Result<bool, TenantsError> {
        Ok(match self.journal.try_lock() {
            Ok(mut journal) => self.hibernate_locked(registry, &mut journal),
            Err(_) => false,
        })
    }
}

/// A handle to one tenant's journal in a [`super::Tenants`] registry: [`Journal`]'s calls
/// (tokio), each resuming the journal first if it is hibernated. Cloning shares the journal;
/// its calls are serialized, as one [`Journal`]'s are.
#[derive(Clone)]
pub struct TenantJournal {
    pub(super) registry: Arc<Registry>,
    pub(super) slot: Arc<JournalSlot>,
}

impl std::fmt::Debug for TenantJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantJournal")
            .field("tenant", &self.slot.tenant.name)
            .finish_non_exhaustive()
    }
}

impl TenantJournal {
    /// The tenant's name.
    pub fn tenant(&self) -> &str {
        &self.slot.tenant.name
    }

    fn journal_error(&self, source: JournalError) -> TenantsError {
        TenantsError::Journal {
            tenant: self.tenant().to_owned(),
            source,
        }
    }

    /// The tenant's directory, made if it is not there yet; first, with `make_room`, the
    /// registry's room for one more open log. Blocking work (making room may flush other
    /// tenants' logs), so off the executor.
    async fn directory(&self, make_room: bool) -> Result<Arc<dyn Vfs>, TenantsError> {
        let registry = self.registry.clone();
        let tenant = self.slot.tenant.clone();
        tokio::task::spawn_blocking(move || {
            if make_room {
                registry.before_resume();
            }
            registry.tenant_vfs(&tenant)
        })
        .await
        .map_err(|_| {
            self.journal_error(JournalError::Journal(
                stele::journal::JournalError::NoHandle {
                    why: "opening the tenant's directory panicked".into(),
                },
            ))
        })?
    }

    /// Runs `f` on the open writer, resumed if hibernated, and counts the call.
    async fn call<T>(
        &self,
        writes: Writes,
        f: impl AsyncFnOnce(&mut Journal) -> Result<T, JournalError>,
    ) -> Result<T, TenantsError> {
        let started = std::time::Instant::now();
        let mut journal = self.slot.journal.lock().await;
        if journal.is_none() {
            let vfs = self.directory(true).await?;
            let options = &self.registry.options;
            let opened = Journal::open_with_limits(
                vfs,
                TENANT_JOURNAL_PATH,
                options.mode,
                options.log_limits(),
            )
            .await
            .map_err(|source| self.journal_error(source))?;
            *journal = Some(opened);
            self.registry.admit(&self.slot.tenant, self.slot.clone());
        }
        self.slot.tenant.calls.fetch_add(1, Ordering::Relaxed);
        let result = f(journal.as_mut().expect("opened above"))
            .await
            .map_err(|source| self.journal_error(source));
        (self.slot.tenant).count(result.is_ok(), writes, started.elapsed());
        self.slot
            .tenant
            .touch(&self.slot.last_used_ms, self.registry.now_ms());
        result
    }

    /// [`Journal::append`]: the frames in `buf` are durable when it returns; `buf` comes back
    /// with the same allocation and contents.
    pub async fn append(&self, buf: &mut Vec<u8>) -> Result<(), TenantsError> {
        let writes = Writes::commit(true, buf.len(), 1);
        self.call(writes, async |journal| journal.append(buf).await)
            .await
    }

    /// [`Journal::compact`]: the journal is `snapshot` when it returns, durably.
    pub async fn compact(&self, snapshot: Vec<u8>) -> Result<(), TenantsError> {
        self.call(Writes::none(true), async |journal| {
            journal.compact(snapshot).await
        })
        .await
    }

    /// [`Journal::clean_end`]: where the last whole op ends.
    pub async fn clean_end(&self) -> Result<u64, TenantsError> {
        self.call(Writes::none(false), async |journal| {
            journal.clean_end().await
        })
        .await
    }

    /// Every op of the tenant's journal and what recovery found ([`replay_journal`]), read
    /// while no call of this handle's runs. A hibernated journal stays hibernated (the replay
    /// runs in an instance of its own and cuts a torn tail); an open one is read as its
    /// writer left it.
    pub async fn replay(&self) -> Result<(Vec<JournalOp>, JournalRecovery), TenantsError> {
        let _calls_held_off = self.slot.journal.lock().await;
        let vfs = self.directory(false).await?;
        replay_journal(vfs, TENANT_JOURNAL_PATH, self.registry.options.mode)
            .await
            .map_err(|source| self.journal_error(source))
    }

    /// Hibernates the journal now if it is open, waiting for the call in flight; returns
    /// whether it did.
    pub async fn hibernate(&self) -> bool {
        let mut journal = self.slot.journal.lock().await;
        self.slot.hibernate_locked(&self.registry, &mut journal)
    }
}
