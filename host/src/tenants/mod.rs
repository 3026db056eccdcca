//! [`Tenants`]: the registry a platform holds to give every tenant a write-ahead log of its own
//! under one root, in any [`Mode`], with a budget of open logs. Owns the root's lock, the
//! tenants' slots and their hibernation; may import `crate::wal`, `crate::fs`, `crate::mode`
//! and `crate::sandbox` (the limits), and nothing of the other facets.
//!
//! - **Layout.** Tenant `t`'s log is the segmented WAL `t/log` under the root: its directory
//!   `t/`, seen by the log as a root of its own ([`SubdirVfs`]), so one open directory serves
//!   every tenant and no tenant's instance can name another's files. An open log holds one
//!   file descriptor (its active segment); its writer lock is held in the registry's table,
//!   not by a lock file (see "Exclusion").
//! - **Exclusion.** Opening the registry takes an exclusive lock on [`ROOT_LOCK_NAME`] in the
//!   root, held for the registry's life: a second registry on the same root, in this process
//!   or another, is refused ([`TenantsError::RootLocked`]). Within the process, a tenant has
//!   one slot, so one writer; an open log's writer lock (the engine's `LOCK`) is an entry in
//!   the registry's table, which the root's lock makes enough: no other process writes under
//!   the root. A hibernated log holds nothing of its own, so it is the root's lock that keeps
//!   other processes out meanwhile. Code that opens a tenant's directory directly (`Wal::open`
//!   on `root/t`, not through a registry), in another process or this one, is not held off:
//!   every writer of the root must go through [`Tenants`].
//! - **Budget.** At most [`TenantsOptions::open_logs_max`] logs are open at once: resuming
//!   one past it first hibernates the least recently used open log that has no call in
//!   flight. If every open log has a call in flight the resume goes ahead over the budget,
//!   and the next resume hibernates the excess.
//! - **Hibernation.** A hibernated log has given back its instance and its files; its slot
//!   keeps only its name and counters. Hibernating flushes the log first, so every record
//!   acknowledged (durable or not) is on disk before the files close; a log whose flush fails
//!   stays open and its handle reports the error. The next call resumes it: the log is opened
//!   again (a new instance, its tail recovered) and the call goes on; the caller sees only the
//!   latency. [`Tenants::hibernate_idle`] hibernates the logs that have had no call for
//!   [`TenantsOptions::idle_after`]; the registry starts no thread to do it, so the embedder
//!   calls it from its own timer (each resume also calls it).
//! - **Durability.** A call through a [`TenantWal`] promises what the same call on a
//!   [`Wal`] promises, under the registry's [`WalOptions`]: hibernating and resuming add no
//!   window, since the flush before hibernation makes every acknowledged record durable and
//!   the resume recovers exactly what is on disk.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use stele::vfs::{Vfs, VfsError, VfsLock};
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};

use crate::fs::{LockTable, RealFs, SubdirVfs};
use crate::mode::Mode;
use crate::sandbox::SandboxLimits;
use crate::wal::{Wal, WalError};

/// The lock file a registry holds in its root.
pub const ROOT_LOCK_NAME: &str = ".stele-tenants.lock";

/// The log's path in its tenant's directory.
pub const TENANT_LOG_PATH: &str = "log";

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
    /// Each sandboxed log's instance limits (ignored natively).
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
    /// The tenant's log refused the call, or could not be opened (resumed).
    #[error("tenant {tenant:?}: {source}")]
    Wal {
        /// Whose log.
        tenant: String,
        /// The log's error.
        #[source]
        source: WalError,
    },
}

/// Whether a tenant's log is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantState {
    /// Its instance and files are open.
    Open,
    /// It holds no instance and no file; its next call resumes it.
    Hibernated,
}

/// One tenant's figures, since the registry was opened.
#[derive(Clone, Debug)]
pub struct TenantStats {
    /// Open or hibernated.
    pub state: TenantState,
    /// Calls made through its handles.
    pub calls: u64,
    /// Payload bytes committed.
    pub bytes: u64,
    /// Durable calls (commits that waited for a sync, flushes): an upper bound on its syncs.
    pub durable_calls: u64,
    /// Times it was resumed from hibernation (or opened for the first time).
    pub opens: u64,
    /// Times it was hibernated.
    pub hibernations: u64,
    /// When its last call ended (or it was registered).
    pub last_used: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The registry: see the module doc. Cloning shares it; the root's lock is released when the
/// last clone and the last [`TenantWal`] are dropped.
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

struct Registry {
    root: Arc<dyn Vfs>,
    options: TenantsOptions,
    /// Every tenant that has been asked for, open or hibernated.
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// The open ones: the candidates for hibernation.
    open: Mutex<Vec<Arc<Slot>>>,
    /// The writer locks the tenants' logs hold, by path in the root. The root's lock keeps
    /// every other process out, so a tenant's lock only excludes this process's other
    /// writers: in memory, it saves the descriptor a lock file holds, one per open log.
    locks: LockTable,
    /// When the registry was made: `last_used` counts milliseconds from here.
    epoch: Instant,
    /// Held for the registry's life (see the module doc, "Exclusion").
    _root_lock: Box<dyn VfsLock>,
}

struct Slot {
    name: String,
    /// The open log; `None` while hibernated. Held while the log opens or hibernates, so that
    /// a tenant's log is opened by one caller at a time.
    wal: Mutex<Option<Wal>>,
    /// Calls holding a clone of the open log. Raised only under `wal`'s lock, so a
    /// hibernation that sees zero under it knows nobody uses the log.
    in_flight: AtomicUsize,
    last_used_ms: AtomicU64,
    calls: AtomicU64,
    bytes: AtomicU64,
    durable_calls: AtomicU64,
    opens: AtomicU64,
    hibernations: AtomicU64,
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
                slots: Mutex::default(),
                open: Mutex::default(),
                locks: LockTable::new(),
                epoch: Instant::now(),
                _root_lock: root_lock,
            }),
        })
    }

    /// The handle to `tenant`'s log: registered on first use (its directory is made when the
    /// log first opens), not opened until its first call. Every handle to one tenant shares
    /// one log.
    pub fn wal(&self, tenant: &str) -> Result<TenantWal, TenantsError> {
        check_name(tenant)?;
        let mut slots = lock(&self.registry.slots);
        let slot = slots
            .entry(tenant.to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    name: tenant.to_owned(),
                    wal: Mutex::new(None),
                    in_flight: AtomicUsize::new(0),
                    last_used_ms: AtomicU64::new(self.registry.now_ms()),
                    calls: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    durable_calls: AtomicU64::new(0),
                    opens: AtomicU64::new(0),
                    hibernations: AtomicU64::new(0),
                })
            })
            .clone();
        Ok(TenantWal {
            registry: self.registry.clone(),
            slot,
        })
    }

    /// Logs open now.
    pub fn open_logs(&self) -> usize {
        lock(&self.registry.open).len()
    }

    /// Tenants registered (open or hibernated).
    pub fn registered(&self) -> usize {
        lock(&self.registry.slots).len()
    }

    /// `tenant`'s figures, if it is registered.
    pub fn stats(&self, tenant: &str) -> Option<TenantStats> {
        let slot = lock(&self.registry.slots).get(tenant).cloned()?;
        Some(self.registry.stats_of(&slot))
    }

    /// Every registered tenant's figures, by name.
    pub fn all_stats(&self) -> Vec<(String, TenantStats)> {
        let slots: Vec<Arc<Slot>> = lock(&self.registry.slots).values().cloned().collect();
        let mut all: Vec<(String, TenantStats)> = slots
            .iter()
            .map(|slot| (slot.name.clone(), self.registry.stats_of(slot)))
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

    fn stats_of(&self, slot: &Slot) -> TenantStats {
        // Counted after an open succeeds and after a hibernation drops the log, so a slot
        // being opened or hibernated reads as it was.
        let state =
            if slot.opens.load(Ordering::Relaxed) > slot.hibernations.load(Ordering::Relaxed) {
                TenantState::Open
            } else {
                TenantState::Hibernated
            };
        TenantStats {
            state,
            calls: slot.calls.load(Ordering::Relaxed),
            bytes: slot.bytes.load(Ordering::Relaxed),
            durable_calls: slot.durable_calls.load(Ordering::Relaxed),
            opens: slot.opens.load(Ordering::Relaxed),
            hibernations: slot.hibernations.load(Ordering::Relaxed),
            last_used: self.epoch
                + Duration::from_millis(slot.last_used_ms.load(Ordering::Relaxed)),
        }
    }

    /// Opens `slot`'s log (its `wal` lock held by the caller), first making room within the
    /// budget.
    fn resume(&self, slot: &Arc<Slot>) -> Result<Wal, TenantsError> {
        let _ = self.hibernate_idle();
        self.make_room(slot);
        let wal_error = |source| TenantsError::Wal {
            tenant: slot.name.clone(),
            source,
        };
        match self.root.create_dir(&slot.name) {
            Ok(()) | Err(VfsError::AlreadyExists) => {}
            Err(e) => return Err(TenantsError::Root(e)),
        }
        let vfs = SubdirVfs::new(self.root.clone(), &slot.name)
            .map_err(TenantsError::Root)?
            .with_lock_table(self.locks.clone());
        let (wal, _recovery) = Wal::open_with_limits(
            Arc::new(vfs),
            TENANT_LOG_PATH,
            self.options.wal,
            self.options.mode,
            self.options.limits,
        )
        .map_err(wal_error)?;
        slot.opens.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).push(slot.clone());
        Ok(wal)
    }

    /// Hibernates least recently used open logs (other than `resuming`, with no call in
    /// flight) until one more fits the budget. A log that cannot be hibernated now (a call
    /// started meanwhile, another caller holds it, its flush failed) is passed over; with none
    /// left, the resume goes over the budget (see the module doc).
    fn make_room(&self, resuming: &Arc<Slot>) {
        let mut passed_over: Vec<Arc<Slot>> = Vec::new();
        loop {
            let victim = {
                let open = lock(&self.open);
                if open.len() < self.options.open_logs_max {
                    return;
                }
                open.iter()
                    .filter(|s| {
                        !Arc::ptr_eq(s, resuming)
                            && s.in_flight.load(Ordering::SeqCst) == 0
                            && !passed_over.iter().any(|p| Arc::ptr_eq(p, s))
                    })
                    .min_by_key(|s| s.last_used_ms.load(Ordering::Relaxed))
                    .cloned()
            };
            let Some(victim) = victim else {
                return;
            };
            let hibernated = match victim.wal.try_lock() {
                Ok(mut wal) => self
                    .hibernate_locked(&victim, &mut wal)
                    .unwrap_or_else(|error| {
                        tracing::warn!(%error, "a log could not be hibernated to make room");
                        false
                    }),
                Err(_) => false,
            };
            if !hibernated {
                passed_over.push(victim);
            }
        }
    }

    /// Hibernates `slot` if its log is open and idle (its `wal` lock held): flushes, drops
    /// the log, leaves the open set. Returns whether it did.
    fn hibernate_locked(
        &self,
        slot: &Arc<Slot>,
        wal: &mut Option<Wal>,
    ) -> Result<bool, TenantsError> {
        if slot.in_flight.load(Ordering::SeqCst) != 0 {
            return Ok(false);
        }
        let Some(open) = wal.as_ref() else {
            return Ok(false);
        };
        // Every acknowledged record durable before the files close.
        open.flush().map_err(|source| TenantsError::Wal {
            tenant: slot.name.clone(),
            source,
        })?;
        drop(wal.take());
        slot.hibernations.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).retain(|s| !Arc::ptr_eq(s, slot));
        Ok(true)
    }

    fn hibernate_idle(&self) -> Result<usize, TenantsError> {
        let Some(idle_after) = self.options.idle_after else {
            return Ok(0);
        };
        let now = self.now_ms();
        let idle_ms = idle_after.as_millis() as u64;
        let idle: Vec<Arc<Slot>> = lock(&self.open)
            .iter()
            .filter(|s| {
                s.in_flight.load(Ordering::SeqCst) == 0
                    && now.saturating_sub(s.last_used_ms.load(Ordering::Relaxed)) >= idle_ms
            })
            .cloned()
            .collect();
        let mut hibernated = 0;
        for slot in idle {
            if let Ok(mut wal) = slot.wal.try_lock()
                && self.hibernate_locked(&slot, &mut wal)?
            {
                hibernated += 1;
            }
        }
        Ok(hibernated)
    }
}

/// A handle to one tenant's log in a [`Tenants`] registry: [`Wal`]'s calls, each resuming the
/// log first if it is hibernated. Cloning shares the log.
#[derive(Clone)]
pub struct TenantWal {
    registry: Arc<Registry>,
    slot: Arc<Slot>,
}

impl std::fmt::Debug for TenantWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantWal")
            .field("tenant", &self.slot.name)
            .finish_non_exhaustive()
    }
}

/// A call in flight on an open log: lowers the slot's count when the call ends.
struct InFlight<'a> {
    slot: &'a Slot,
    wal: Wal,
    registry: &'a Registry,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.slot
            .last_used_ms
            .store(self.registry.now_ms(), Ordering::Relaxed);
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TenantWal {
    /// The tenant's name.
    pub fn tenant(&self) -> &str {
        &self.slot.name
    }

    /// The open log, resumed if hibernated, counted as in flight until the guard drops.
    fn enter(&self) -> Result<InFlight<'_>, TenantsError> {
        let mut wal = lock(&self.slot.wal);
        if wal.is_none() {
            *wal = Some(self.registry.resume(&self.slot)?);
        }
        let open = wal.as_ref().expect("opened above").clone();
        self.slot.in_flight.fetch_add(1, Ordering::SeqCst);
        self.slot.calls.fetch_add(1, Ordering::Relaxed);
        Ok(InFlight {
            slot: &self.slot,
            wal: open,
            registry: &self.registry,
        })
    }

    fn call<T>(
        &self,
        durable: bool,
        bytes: usize,
        f: impl FnOnce(&Wal) -> Result<T, WalError>,
    ) -> Result<T, TenantsError> {
        let guard = self.enter()?;
        let result = f(&guard.wal).map_err(|source| TenantsError::Wal {
            tenant: self.slot.name.clone(),
            source,
        });
        if result.is_ok() {
            self.slot.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            if durable {
                self.slot.durable_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
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
        let mut wal = lock(&self.slot.wal);
        self.registry.hibernate_locked(&self.slot, &mut wal)
    }
}
