//! [`Tenants`]: the registry a platform holds to give every tenant a write-ahead log, a
//! journal and a push log of its own under one root, in any [`Mode`], with a budget of open
//! logs. Owns the root's lock, the tenants' slots and their hibernation. The layer above the
//! facets: may import `crate::wal`, `crate::journal`, `crate::push_log`, `crate::fs`,
//! `crate::mode` and `crate::sandbox` (the limits); nothing imports it but the crate root.
//! Files: `slot.rs` (what every facet's slot shares, and the budget's view of an open log),
//! then one file per facet (`wal.rs`, `journal.rs`, `push_log.rs`).
//!
//! - **Layout.** Tenant `t`'s logs are in its directory `t/` under the root: the segmented
//!   WAL `t/log` ([`TENANT_LOG_PATH`]), the journal `t/journal` ([`TENANT_JOURNAL_PATH`]) and
//!   the push log `t/push.log` ([`TENANT_PUSH_LOG_PATH`]). Each log sees `t/` as a root of its
//!   own ([`SubdirVfs`]), so one open directory serves every tenant and no tenant's instance
//!   can name another's files. An open log holds one file descriptor (the WAL's active
//!   segment, the journal, the push log); writer locks are held in the registry's table, not
//!   by lock files (see "Exclusion").
//! - **Exclusion.** Opening the registry takes an exclusive lock on [`ROOT_LOCK_NAME`] in the
//!   root, held for the registry's life: a second registry on the same root, in this process
//!   or another, is refused ([`TenantsError::RootLocked`]). Within the process, each of a
//!   tenant's logs has one slot, so one writer; an open log's writer lock (the WAL's `LOCK`,
//!   the journal's lock) is an entry in the registry's table, which the root's lock makes
//!   enough: no other process writes under the root. A hibernated log holds nothing of its
//!   own, so it is the root's lock that keeps other processes out meanwhile. Code that opens
//!   a tenant's directory directly (`Wal::open` on `root/t`, not through a registry), in
//!   another process or this one, is not held off: every writer of the root must go through
//!   [`Tenants`].
//! - **Budget.** At most [`TenantsOptions::open_logs_max`] logs are open at once, counting
//!   each tenant's WAL, journal and push log as one log each: resuming one past it first
//!   hibernates the least recently used open log (of any tenant and facet) that has no call
//!   in flight. If every open log has a call in flight the resume goes ahead over the budget,
//!   and the next resume hibernates the excess.
//! - **Hibernation.** A hibernated log has given back its instance and its files; its slot
//!   keeps only its tenant's name and counters. Hibernating a WAL flushes it first, so every
//!   record acknowledged (durable or not) is on disk before the files close; a WAL whose
//!   flush fails stays open and its handle reports the error. A journal's appends and
//!   compactions and a push log's pushes and compactions are durable when they return, so
//!   hibernating one waits only for the call in flight. The next call resumes the log: it is
//!   opened again (a new instance, its tail recovered) and the call goes on; the caller sees
//!   only the latency. [`Tenants::hibernate_idle`] hibernates the logs that have had no call
//!   for [`TenantsOptions::idle_after`]; the registry starts no thread to do it, so the
//!   embedder calls it from its own timer (each resume also calls it).
//! - **Durability.** A call through a [`TenantWal`], [`TenantJournal`] or [`TenantPushLog`]
//!   promises what the same call on a [`Wal`], [`crate::Journal`] or [`crate::PushLog`]
//!   promises, under the registry's options: hibernating and resuming add no window, since
//!   nothing acknowledged is left unsynced when the files close and the resume recovers
//!   exactly what is on disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;
use stele::vfs::{QuotaLimits, QuotaStats, Vfs, VfsError, VfsLock};
use stele::wal::{DurabilityPolicy, WalOptions};

use crate::fs::{LockTable, QuotaVfs, RealFs, SubdirVfs};
use crate::journal::JournalError;
use crate::mode::Mode;
use crate::push_log::{PushLog, PushLogCallError};
use crate::sandbox::SandboxLimits;
use crate::wal::{Wal, WalError};

mod journal;
mod metrics;
mod push_log;
mod slot;
mod wal;

pub use journal::{TENANT_JOURNAL_PATH, TenantJournal};
pub use push_log::{TENANT_PUSH_LOG_PATH, TenantPushLog};
pub use wal::{TENANT_LOG_PATH, TenantWal};

use journal::JournalSlot;
use push_log::PushLogSlot;
use slot::{Resident, Slot, Tenant, address, lock};

/// The lock file a registry holds in its root.
pub const ROOT_LOCK_NAME: &str = ".stele-tenants.lock";

/// Default of [`TenantsOptions::open_logs_max`]: each open log holds one file descriptor (its
/// active segment; a rotation briefly holds the next one too), so 1,024 fit the common soft
/// limit of 4,096 with room for the embedder's own, the way RocksDB's `max_open_files` is
/// sized.
pub const OPEN_LOGS_MAX_DEFAULT: usize = 1024;

/// Longest tenant name, in bytes: a directory name on every filesystem Stele runs on.
pub const TENANT_NAME_BYTES_MAX: usize = 128;

/// How a registry opens its tenants' logs. `#[non_exhaustive]`: start from
/// `TenantsOptions::default()` and change what you need with the `with_*` setters.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct TenantsOptions {
    /// Where every log runs.
    pub mode: Mode,
    /// Each sandboxed log's instance limits (ignored natively), and each tenant's quota
    /// ([`SandboxLimits::quota`], in every mode): one bound over all of a tenant's logs, kept
    /// across hibernations.
    pub limits: SandboxLimits,
    /// Each log's options. Segmented: a tenant's log is a directory.
    pub wal: WalOptions,
    /// The most logs open at once (see the module doc, "Budget"). At least 1.
    pub open_logs_max: usize,
    /// A log with no call for this long is hibernated by [`Tenants::hibernate_idle`]; `None`:
    /// only the budget hibernates.
    pub idle_after: Option<Duration>,
}

impl Default for TenantsOptions {
    fn default() -> Self {
        TenantsOptions {
            mode: Mode::Sandboxed,
            limits: SandboxLimits::default(),
            wal: WalOptions::segmented(
                DurabilityPolicy::FullSync,
                stele::wal::segment::SEGMENT_BYTES_DEFAULT,
            ),
            open_logs_max: OPEN_LOGS_MAX_DEFAULT,
            idle_after: None,
        }
    }
}

impl TenantsOptions {
    /// These options in another mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// These options with other instance limits.
    pub fn with_limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits each log opens with: the instance limits, without the quota, which the
    /// registry applies once per tenant over all its logs.
    pub(crate) fn log_limits(&self) -> SandboxLimits {
        self.limits.with_quota(QuotaLimits::unbounded())
    }

    /// These options with other log options (a single-file layout is made segmented: a
    /// tenant's log is a directory).
    pub fn with_wal(mut self, wal: WalOptions) -> Self {
        self.wal = wal;
        self
    }

    /// These options with another budget of open logs.
    pub fn with_open_logs_max(mut self, open_logs_max: usize) -> Self {
        self.open_logs_max = open_logs_max;
        self
    }

    /// These options hibernating logs idle for `idle_after` (`None`: never for idleness).
    pub fn with_idle_after(mut self, idle_after: Option<Duration>) -> Self {
        self.idle_after = idle_after;
        self
    }
}

/// What a registry call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TenantsError {
    /// Another registry holds the root (in this process or another).
    #[error("the tenants' root is held by another registry: {0}")]
    RootLocked(String),
    /// A tenant name that is not one directory name of at most [`TENANT_NAME_BYTES_MAX`]
    /// bytes of ASCII letters, digits, `-`, `_` and `.` (not starting with `.`).
    #[error("bad tenant name {name:?}: {why}")]
    BadName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// The root could not be opened or read.
    #[error("the tenants' root: {0}")]
    Root(VfsError),
    /// The tenant's WAL refused the call, or could not be opened (resumed).
    #[error("tenant {tenant:?}: {source}")]
    Wal {
        /// Whose log.
        tenant: String,
        /// The log's error.
        #[source]
        source: WalError,
    },
    /// The tenant's journal refused the call, or could not be opened (resumed).
    #[error("tenant {tenant:?}: journal: {source}")]
    Journal {
        /// Whose journal.
        tenant: String,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
    /// The tenant's push log refused the call, or could not be opened (resumed).
    #[error("tenant {tenant:?}: push log: {source}")]
    PushLog {
        /// Whose push log.
        tenant: String,
        /// The push log's error.
        #[source]
        source: PushLogCallError,
    },
    /// [`Tenants::push_log`] was given another schema than the one this registry first opened
    /// the tenant's push log with.
    #[error("tenant {tenant:?}: its push log is open with another schema")]
    PushLogSchema {
        /// Whose push log.
        tenant: String,
    },
}

/// Whether any of a tenant's logs is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantState {
    /// One of its logs (or more) has its instance and files open.
    Open,
    /// It holds no instance and no file; its next call resumes the log it names.
    Hibernated,
}

/// One tenant's figures, since the registry was opened, summed over its logs.
#[derive(Clone, Debug)]
pub struct TenantStats {
    /// Open or hibernated.
    pub state: TenantState,
    /// Calls made through its handles.
    pub calls: u64,
    /// Bytes committed: WAL payloads, journal frames, and pushed batches' Arrow memory size.
    pub bytes: u64,
    /// Durable calls (WAL commits that waited for a sync and flushes, journal appends and
    /// compactions, pushes and push log compactions): an upper bound on its syncs.
    pub durable_calls: u64,
    /// Times one of its logs was resumed from hibernation (or opened for the first time).
    pub opens: u64,
    /// Times one of its logs was hibernated.
    pub hibernations: u64,
    /// When its last call ended (or it was registered).
    pub last_used: Instant,
    /// Its quota's figures (disk used against the bound, syncs, throttles, refusals), once one
    /// of its logs has opened under a bounded quota.
    pub quota: Option<QuotaStats>,
}

/// The registry: see the module doc. Cloning shares it; the root's lock is released when the
/// last clone and the last handle are dropped.
#[derive(Clone)]
pub struct Tenants {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("options", &self.registry.options)
            .field("open_logs", &self.open_logs())
            .finish_non_exhaustive()
    }
}

/// A registered tenant: its figures and the slots of the logs it has asked for.
struct Registered {
    tenant: Arc<Tenant>,
    wal: Option<Arc<Slot<Wal>>>,
    journal: Option<Arc<JournalSlot>>,
    push_log: Option<PushLogSlot>,
}

pub(crate) struct Registry {
    root: Arc<dyn Vfs>,
    options: TenantsOptions,
    /// Every tenant that has been asked for, open or hibernated.
    tenants: Mutex<HashMap<String, Registered>>,
    /// The open logs, of every tenant and facet: the candidates for hibernation.
    open: Mutex<Vec<Arc<dyn Resident>>>,
    /// The writer locks the tenants' logs hold, by path in the root. The root's lock keeps
    /// every other process out, so a tenant's lock only excludes this process's other
    /// writers: in memory, it saves the descriptor a lock file holds, one per open log.
    locks: LockTable,
    /// When the registry was made: `last_used` counts milliseconds from here.
    epoch: Instant,
    /// Held for the registry's life (see the module doc, "Exclusion").
    _root_lock: Box<dyn VfsLock>,
}

/// Checks a tenant name (see [`TenantsError::BadName`]).
fn check_name(name: &str) -> Result<(), TenantsError> {
    let bad = |why| TenantsError::BadName {
        name: name.to_owned(),
        why,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > TENANT_NAME_BYTES_MAX {
        return Err(bad("longer than TENANT_NAME_BYTES_MAX"));
    }
    if name.starts_with('.') {
        return Err(bad("starts with `.`"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(bad(
            "only ASCII letters, digits, `-`, `_` and `.` are allowed",
        ));
    }
    Ok(())
}

impl Tenants {
    /// A registry over the directory `root` (which must exist), confined to it
    /// ([`RealFs::open_root`]), holding its lock.
    ///
    /// # Errors
    /// [`TenantsError::RootLocked`] if another registry holds it; [`TenantsError::Root`] if it
    /// cannot be opened.
    pub fn open(
        root: impl AsRef<std::path::Path>,
        options: TenantsOptions,
    ) -> Result<Tenants, TenantsError> {
        let root = RealFs::open_root(root).map_err(TenantsError::Root)?;
        Tenants::on_vfs(Arc::new(root), options)
    }

    /// A registry over the root of `vfs` (a [`crate::fs::FaultFs`] in tests).
    pub fn on_vfs(vfs: Arc<dyn Vfs>, options: TenantsOptions) -> Result<Tenants, TenantsError> {
        metrics::describe();
        crate::fs::QuotaVfs::describe_metrics();
        let root_lock = vfs.lock_exclusive(ROOT_LOCK_NAME).map_err(|e| match e {
            VfsError::Locked(why) => TenantsError::RootLocked(why),
            other => TenantsError::Root(other),
        })?;
        let mut options = options;
        options.open_logs_max = options.open_logs_max.max(1);
        if options.wal.segment_bytes.is_none() {
            options.wal.segment_bytes = Some(stele::wal::segment::SEGMENT_BYTES_DEFAULT);
        }
        Ok(Tenants {
            registry: Arc::new(Registry {
                root: vfs,
                options,
                tenants: Mutex::default(),
                open: Mutex::default(),
                locks: LockTable::new(),
                epoch: Instant::now(),
                _root_lock: root_lock,
            }),
        })
    }

    /// `tenant`'s entry, registered on first use (its directory is made when one of its logs
    /// first opens).
    fn with_registered<T>(
        &self,
        tenant: &str,
        f: impl FnOnce(&mut Registered, u64) -> Result<T, TenantsError>,
    ) -> Result<T, TenantsError> {
        check_name(tenant)?;
        let now_ms = self.registry.now_ms();
        let mut tenants = lock(&self.registry.tenants);
        let registered = tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| Registered {
                tenant: Arc::new(Tenant::new(tenant, now_ms)),
                wal: None,
                journal: None,
                push_log: None,
            });
        f(registered, now_ms)
    }

    /// The handle to `tenant`'s WAL: registered on first use, not opened until its first
    /// call. Every handle to one tenant's WAL shares one log.
    pub fn wal(&self, tenant: &str) -> Result<TenantWal, TenantsError> {
        let slot = self.with_registered(tenant, |registered, now_ms| {
            let tenant = registered.tenant.clone();
            Ok(registered
                .wal
                .get_or_insert_with(|| {
                    Arc::new(Slot::new(
                        tenant,
                        now_ms,
                        Box::new(|options, name, vfs| {
                            Wal::open_with_limits(
                                vfs,
                                TENANT_LOG_PATH,
                                options.wal,
                                options.mode,
                                options.log_limits(),
                            )
                            .map(|(wal, _recovery)| wal)
                            .map_err(|source| TenantsError::Wal {
                                tenant: name.to_owned(),
                                source,
                            })
                        }),
                    ))
                })
                .clone())
        })?;
        Ok(TenantWal {
            registry: self.registry.clone(),
            slot,
        })
    }

    /// The handle to `tenant`'s journal (the tokio API): registered on first use, not opened
    /// until its first call. Every handle to one tenant's journal shares one writer.
    pub fn journal(&self, tenant: &str) -> Result<TenantJournal, TenantsError> {
        let slot = self.with_registered(tenant, |registered, now_ms| {
            let tenant = registered.tenant.clone();
            Ok(registered
                .journal
                .get_or_insert_with(|| Arc::new(JournalSlot::new(tenant, now_ms)))
                .clone())
        })?;
        Ok(TenantJournal {
            registry: self.registry.clone(),
            slot,
        })
    }

    /// The handle to `tenant`'s push log, whose batches have `schema`: registered on first
    /// use, not opened until its first call. Every handle to one tenant's push log shares one
    /// log.
    ///
    /// # Errors
    /// [`TenantsError::PushLogSchema`] if this registry gave out the tenant's push log with
    /// another schema. (A log on disk written with another schema refuses the first push, as
    /// [`PushLog::append`] says.)
    pub fn push_log(&self, tenant: &str, schema: SchemaRef) -> Result<TenantPushLog, TenantsError> {
        let (slot, schema) = self.with_registered(tenant, |registered, now_ms| {
            let tenant = registered.tenant.clone();
            let entry = registered.push_log.get_or_insert_with(|| {
                let opened_schema = schema.clone();
                PushLogSlot {
                    schema: schema.clone(),
                    slot: Arc::new(Slot::new(
                        tenant,
                        now_ms,
                        Box::new(move |options, name, vfs| {
                            PushLog::new_with_limits(
                                vfs,
                                TENANT_PUSH_LOG_PATH,
                                opened_schema.clone(),
                                options.mode,
                                options.log_limits(),
                            )
                            .map(Arc::new)
                            .map_err(|source| TenantsError::PushLog {
                                tenant: name.to_owned(),
                                source,
                            })
                        }),
                    )),
                }
            });
            if entry.schema != schema {
                return Err(TenantsError::PushLogSchema {
                    tenant: registered.tenant.name.clone(),
                });
            }
            Ok((entry.slot.clone(), entry.schema.clone()))
        })?;
        Ok(TenantPushLog {
            registry: self.registry.clone(),
            slot,
            schema,
        })
    }

    /// Logs open now, of every tenant and facet.
    pub fn open_logs(&self) -> usize {
        lock(&self.registry.open).len()
    }

    /// Tenants registered (open or hibernated).
    pub fn registered(&self) -> usize {
        lock(&self.registry.tenants).len()
    }

    /// `tenant`'s figures, if it is registered.
    pub fn stats(&self, tenant: &str) -> Option<TenantStats> {
        let tenant = lock(&self.registry.tenants).get(tenant)?.tenant.clone();
        Some(self.registry.stats_of(&tenant))
    }

    /// Every registered tenant's figures, by name.
    pub fn all_stats(&self) -> Vec<(String, TenantStats)> {
        let tenants: Vec<Arc<Tenant>> = lock(&self.registry.tenants)
            .values()
            .map(|registered| registered.tenant.clone())
            .collect();
        let mut all: Vec<(String, TenantStats)> = tenants
            .iter()
            .map(|tenant| (tenant.name.clone(), self.registry.stats_of(tenant)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Hibernates every open log that has had no call for [`TenantsOptions::idle_after`]
    /// (none if it is `None`) and has none in flight; returns how many it hibernated. The
    /// registry has no thread: call it from your own timer.
    pub fn hibernate_idle(&self) -> Result<usize, TenantsError> {
        self.registry.hibernate_idle()
    }

    /// The registry's options.
    pub fn options(&self) -> &TenantsOptions {
        &self.registry.options
    }
}

impl Registry {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// `at` in the registry's milliseconds, without reading the clock.
    fn ms_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn stats_of(&self, tenant: &Tenant) -> TenantStats {
        use std::sync::atomic::Ordering::Relaxed;
        let (opens, hibernations) = (
            tenant.opens.load(Relaxed),
            tenant.hibernations.load(Relaxed),
        );
        TenantStats {
            state: if opens > hibernations {
                TenantState::Open
            } else {
                TenantState::Hibernated
            },
            calls: tenant.calls.load(Relaxed),
            bytes: tenant.bytes.load(Relaxed),
            durable_calls: tenant.durable_calls.load(Relaxed),
            opens,
            hibernations,
            last_used: self.epoch + Duration::from_millis(tenant.last_used_ms.load(Relaxed)),
            quota: tenant.quota.get().map(QuotaVfs::stats),
        }
    }

    /// `tenant`'s directory, made if it is not there yet, as the root its logs see: under the
    /// tenant's quota when the options bound one.
    fn tenant_vfs(&self, tenant: &Tenant) -> Result<Arc<dyn Vfs>, TenantsError> {
        if let Some(quota) = tenant.quota.get() {
            return Ok(Arc::new(quota.clone()));
        }
        let name = tenant.name.as_str();
        match self.root.create_dir(name) {
            Ok(()) | Err(VfsError::AlreadyExists) => {}
            Err(e) => return Err(TenantsError::Root(e)),
        }
        let vfs: Arc<dyn Vfs> = Arc::new(
            SubdirVfs::new(self.root.clone(), name)
                .map_err(TenantsError::Root)?
                .with_lock_table(self.locks.clone()),
        );
        if !self.options.limits.quota.is_bounded() {
            return Ok(vfs);
        }
        // Two first opens of one tenant's logs may race here: one quota wins, and both use it.
        let made = QuotaVfs::new(vfs, self.options.limits.quota)
            .map_err(TenantsError::Root)?
            .with_metrics(name);
        Ok(Arc::new(tenant.quota.get_or_init(|| made).clone()))
    }

    /// Before a log opens: hibernates the idle ones, then makes room within the budget.
    fn before_resume(&self) {
        if let Err(error) = self.hibernate_idle() {
            tracing::warn!(%error, "an idle log could not be hibernated");
        }
        self.make_room();
    }

    /// A log of `tenant` was opened: it joins the open set.
    fn admit(&self, tenant: &Tenant, resident: Arc<dyn Resident>) {
        tenant
            .opens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tenant.metrics().resumes.increment(1);
        lock(&self.open).push(resident);
    }

    /// A log of `tenant` was hibernated: it leaves the open set.
    fn evict(&self, tenant: &Tenant, resident: &dyn Resident) {
        tenant
            .hibernations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tenant.metrics().hibernations.increment(1);
        let gone = address(resident);
        lock(&self.open).retain(|open| address(&**open) != gone);
    }

    /// Hibernates least recently used open logs with no call in flight until one more fits
    /// the budget. A log that cannot be hibernated now (a call started meanwhile, another
    /// caller holds it, its flush failed) is passed over; with none left, the resume goes over
    /// the budget (see the module doc).
    fn make_room(&self) {
        let mut passed_over: Vec<*const ()> = Vec::new();
        loop {
            let victim = {
                let open = lock(&self.open);
                if open.len() < self.options.open_logs_max {
                    return;
                }
                open.iter()
                    .filter(|r| !r.in_flight() && !passed_over.contains(&address(&***r)))
                    .min_by_key(|r| r.last_used_ms())
                    .cloned()
            };
            let Some(victim) = victim else {
                return;
            };
            let hibernated = victim.try_hibernate(self).unwrap_or_else(|error| {
                tracing::warn!(%error, "a log could not be hibernated to make room");
                false
            });
            if !hibernated {
                passed_over.push(address(&*victim));
            }
        }
    }

    fn hibernate_idle(&self) -> Result<usize, TenantsError> {
        let Some(idle_after) = self.options.idle_after else {
            return Ok(0);
        };
        let now = self.now_ms();
        let idle_ms = idle_after.as_millis() as u64;
        let idle: Vec<Arc<dyn Resident>> = lock(&self.open)
            .iter()
            .filter(|r| !r.in_flight() && now.saturating_sub(r.last_used_ms()) >= idle_ms)
            .cloned()
            .collect();
        let mut hibernated = 0;
        for resident in idle {
            if resident.try_hibernate(self)? {
                hibernated += 1;
            }
        }
        Ok(hibernated)
    }
}
