//! [`QuotaVfs`]: one tenant's [`QuotaLimits`] enforced over any [`Vfs`]: the bytes its files
//! hold, and the rate of its syncs and written bytes. The arithmetic is the engine's, plain
//! data ([`stele::vfs::quota::ledger`], [`stele::vfs::quota::rate`]); this file is its driver,
//! with the clock and the sleeps.
//!
//! What it promises:
//! - **Disk**: `used` never passes `disk_bytes_max` through this wrapper; a growth that would is
//!   refused with [`VfsError::QuotaExceeded`] **before the inner backend sees the call**, so a
//!   refused `write_at` or `set_len` changed no byte. Reservations ([`Vfs::reserve`],
//!   [`VfsFile::reserve`]) let an engine ask before it makes a record visible, and so refuse a
//!   commit whole instead of failing its write.
//! - **Rates**: every sync (file or directory) and every byte written is charged to its bucket
//!   when it happens, and is never refused for it. A caller about to write asks
//!   [`Vfs::throttle_wait`] first: it is told to wait while the tenant is in debt, or, past
//!   `throttle_delay_max`, refused with [`VfsError::Throttled`] before anything is staged (the
//!   typed handles do: `crate::quota::Pacer`). A caller that does not ask (an engine driven
//!   directly, a guest in an embedder's own store) is slowed down instead: a sync or write that
//!   finds the debt past `throttle_delay_max` sleeps until it is back there, on the calling
//!   thread, so the rate holds for it too.
//!
//! What it counts: each file's logical length (a preallocated segment counts in full), under
//! the paths this wrapper sees. Files already there when it is built are counted by a walk of
//! the root ([`QuotaVfs::new`]). Directories and the empty lock files count nothing.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Unit, counter, describe_counter, describe_gauge, gauge};
use stele::vfs::quota::ledger::{DiskLedger, ReservationId};
use stele::vfs::quota::rate::TokenBucket;
use stele::vfs::{
    OpenMode, QuotaExceeded, QuotaLimits, QuotaStats, SyncKind, Throttled, Vfs, VfsError, VfsFile,
    VfsLock, VfsReservation,
};

#[derive(Debug)]
struct Shared {
    ledger: DiskLedger,
    stats: QuotaStats,
    syncs: Option<TokenBucket>,
    write_bytes: Option<TokenBucket>,
    /// Set by [`QuotaVfs::with_metrics`].
    metrics: Option<QuotaMetrics>,
}

/// A quota's figures through the `metrics` facade, labelled with the tenant's name.
#[derive(Debug)]
struct QuotaMetrics {
    disk_used: Gauge,
    disk_limit: Gauge,
    disk_refusals: Counter,
    syncs: Counter,
    write_bytes: Counter,
    throttled: Counter,
    throttle_refusals: Counter,
}

type SharedLedger = Arc<Mutex<Shared>>;

fn lock(ledger: &SharedLedger) -> MutexGuard<'_, Shared> {
    // The ledger is updated in single assignments after each check, so a panic elsewhere
    // cannot leave it half-changed.
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn refused(&mut self, refusal: QuotaExceeded) -> VfsError {
        self.stats.disk_refusals += 1;
        if let Some(metrics) = &self.metrics {
            metrics.disk_refusals.increment(1);
        }
        tracing::debug!(
            limit = refusal.limit,
            used = refusal.used,
            requested = refusal.requested,
            "disk quota refused a growth"
        );
        VfsError::QuotaExceeded(refusal)
    }
}

/// A [`Vfs`] bounded by one tenant's [`QuotaLimits`]. See the module doc. Cloning shares the
/// quota: every log of a tenant opened through its clones counts against the same bounds.
#[derive(Clone)]
pub struct QuotaVfs {
    inner: Arc<dyn Vfs>,
    ledger: SharedLedger,
    /// The rates' clock: buckets take time since this.
    started: Instant,
    throttle_delay_max: Duration,
    /// Whether any rate is set (fixed at construction): without one, no clock is read.
    has_rates: bool,
}

impl fmt::Debug for QuotaVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaVfs")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// How deep [`QuotaVfs::new`] walks: a tenant's logs sit a few directories down at most, and a
/// bound keeps a directory loop (a bind mount) from walking forever.
const WALK_DEPTH_MAX: usize = 16;

impl QuotaVfs {
    /// `inner`, bounded by `limits`. Walks `inner` from its root first and charges every file
    /// found there, even past the disk bound (a tenant over it can then only shrink, remove or
    /// truncate until it fits again).
    ///
    /// # Errors
    /// A listing or opening error of the walk.
    pub fn new(inner: Arc<dyn Vfs>, limits: QuotaLimits) -> Result<QuotaVfs, VfsError> {
        Self::counting_under(inner, limits, "")
    }

    /// [`Self::new`], counting at first only what is under `under` (a file or a directory of
    /// `inner`; `""` is the root): for one log in a directory that holds other things (the
    /// CLI's `--disk-max`). Files created later anywhere are counted as they are opened.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn counting_under(
        inner: Arc<dyn Vfs>,
        limits: QuotaLimits,
        under: &str,
    ) -> Result<QuotaVfs, VfsError> {
        let mut ledger = DiskLedger::new(limits.disk_bytes_max.unwrap_or(u64::MAX));
        if under.is_empty() {
            walk(&*inner, "", 0, &mut ledger)?;
        } else {
            match inner.open(under, OpenMode::Existing) {
                Ok(file) => ledger.adopt(under, file.len()?),
                Err(VfsError::NotFound) => {}
                Err(_) => walk(&*inner, under, 1, &mut ledger)?,
            }
        }
        let bucket = |rate: Option<u64>| rate.map(|rate| TokenBucket::new(rate, Duration::ZERO));
        Ok(QuotaVfs {
            inner,
            ledger: Arc::new(Mutex::new(Shared {
                ledger,
                stats: QuotaStats {
                    disk_limit: limits.disk_bytes_max,
                    ..QuotaStats::default()
                },
                syncs: bucket(limits.syncs_per_second_max),
                write_bytes: bucket(limits.write_bytes_per_second_max),
                metrics: None,
            })),
            started: Instant::now(),
            throttle_delay_max: limits.throttle_delay_max,
            has_rates: limits.syncs_per_second_max.is_some()
                || limits.write_bytes_per_second_max.is_some(),
        })
    }

    /// `inner` bounded to `disk_bytes_max` bytes, with no rate limit.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_disk_bytes_max(
        inner: Arc<dyn Vfs>,
        disk_bytes_max: u64,
    ) -> Result<QuotaVfs, VfsError> {
        Self::new(
            inner,
            QuotaLimits::unbounded().with_disk_bytes_max(disk_bytes_max),
        )
    }

    /// This quota, its figures also sent through the `metrics` facade with the label
    /// `tenant = <tenant>`: `stele_tenant_disk_used_bytes` and `stele_tenant_disk_limit_bytes`
    /// (gauges), `stele_tenant_disk_refusals_total`, `stele_tenant_syncs_total`,
    /// `stele_tenant_write_bytes_total`, `stele_tenant_throttled_total` and
    /// `stele_tenant_throttle_refusals_total` (counters). With no recorder installed they cost
    /// a branch each.
    pub fn with_metrics(self, tenant: &str) -> QuotaVfs {
        let metrics = QuotaMetrics {
            disk_used: gauge!("stele_tenant_disk_used_bytes", "tenant" => tenant.to_owned()),
            disk_limit: gauge!("stele_tenant_disk_limit_bytes", "tenant" => tenant.to_owned()),
            disk_refusals: counter!("stele_tenant_disk_refusals_total", "tenant" => tenant.to_owned()),
            syncs: counter!("stele_tenant_syncs_total", "tenant" => tenant.to_owned()),
            write_bytes: counter!("stele_tenant_write_bytes_total", "tenant" => tenant.to_owned()),
            throttled: counter!("stele_tenant_throttled_total", "tenant" => tenant.to_owned()),
            throttle_refusals: counter!("stele_tenant_throttle_refusals_total", "tenant" => tenant.to_owned()),
        };
        {
            let mut shared = lock(&self.ledger);
            metrics.disk_used.set(shared.ledger.used() as f64);
            if let Some(limit) = shared.stats.disk_limit {
                metrics.disk_limit.set(limit as f64);
            }
            shared.metrics = Some(metrics);
        }
        self
    }

    /// Says once, for exporters that print help and units, what each quota metric means.
    pub fn describe_metrics() {
        describe_gauge!(
            "stele_tenant_disk_used_bytes",
            Unit::Bytes,
            "Bytes the tenant's files hold (logical lengths) and its live reservations."
        );
        describe_gauge!(
            "stele_tenant_disk_limit_bytes",
            Unit::Bytes,
            "The tenant's disk quota."
        );
        describe_counter!(
            "stele_tenant_disk_refusals_total",
            "Growths and reservations the disk quota refused."
        );
        describe_counter!("stele_tenant_syncs_total", "File and directory syncs.");
        describe_counter!(
            "stele_tenant_write_bytes_total",
            Unit::Bytes,
            "Bytes written."
        );
        describe_counter!(
            "stele_tenant_throttled_total",
            "Calls told to wait by a rate limit."
        );
        describe_counter!(
            "stele_tenant_throttle_refusals_total",
            "Calls refused by a rate limit."
        );
    }

    /// Moves the disk bound (a tenant's plan changed, say). Lowering it below what is used
    /// refuses every growth until enough is freed; nothing already written is taken away.
    pub fn set_disk_bytes_max(&self, disk_bytes_max: Option<u64>) {
        let mut shared = lock(&self.ledger);
        shared.ledger.set_limit(disk_bytes_max.unwrap_or(u64::MAX));
        shared.stats.disk_limit = disk_bytes_max;
        if let Some(metrics) = &shared.metrics {
            metrics
                .disk_limit
                .set(disk_bytes_max.map_or(f64::INFINITY, |limit| limit as f64));
        }
    }

    /// The quota's figures now.
    pub fn stats(&self) -> QuotaStats {
        let shared = lock(&self.ledger);
        QuotaStats {
            disk_used: shared.ledger.used(),
            ..shared.stats
        }
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Under the quota's one lock: `grant` (a growth's check, or nothing), then the counters,
    /// then `units` charged to the bucket `pick` chooses. Returns how long the caller must
    /// sleep (after the lock is released): while the tenant's debt there is past the delay
    /// bound, a caller that did not ask [`Vfs::throttle_wait`] is slowed down to the rate (see
    /// the module doc). The clock is read only when the balance does not cover the charge
    /// ([`TokenBucket::charge_if_covered`]). One lock per call, because this is on every write
    /// and sync of every tenant.
    fn account(
        &self,
        grant: impl FnOnce(&mut DiskLedger) -> Result<(), QuotaExceeded>,
        count: impl FnOnce(&mut QuotaStats),
        units: u64,
        pick: fn(&mut Shared) -> Option<&mut TokenBucket>,
    ) -> Result<Duration, VfsError> {
        let mut shared = lock(&self.ledger);
        if let Err(refusal) = grant(&mut shared.ledger) {
            return Err(shared.refused(refusal));
        }
        count(&mut shared.stats);
        if let Some(metrics) = &shared.metrics {
            metrics.disk_used.set(shared.ledger.used() as f64);
            metrics.syncs.absolute(shared.stats.syncs);
            metrics.write_bytes.absolute(shared.stats.write_bytes);
        }
        let Some(bucket) = pick(&mut shared) else {
            return Ok(Duration::ZERO);
        };
        if bucket.charge_if_covered(units) {
            return Ok(Duration::ZERO);
        }
        let now = self.now();
        let overdue = bucket.wait(now).saturating_sub(self.throttle_delay_max);
        bucket.charge(units, now);
        shared.stats.throttled_time += overdue;
        Ok(overdue)
    }

    fn sleep(overdue: Duration) {
        if !overdue.is_zero() {
            std::thread::sleep(overdue);
        }
    }

    fn charge_sync(&self) {
        let overdue = self.account(
            |_| Ok(()),
            |stats| stats.syncs += 1,
            1,
            |shared| shared.syncs.as_mut(),
        );
        Self::sleep(overdue.unwrap_or_default());
    }
}

/// Charges every file under `dir` to `ledger`. A path that opens is a file; one that does not
/// but lists is a directory (a directory does not open read-write on a real filesystem, and an
/// in-memory namespace lists nothing under a file).
fn walk(vfs: &dyn Vfs, dir: &str, depth: usize, ledger: &mut DiskLedger) -> Result<(), VfsError> {
    for name in vfs.list(dir)? {
        let path = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        match vfs.open(&path, OpenMode::Existing) {
            Ok(file) => ledger.adopt(&path, file.len()?),
            Err(open_error) => {
                if depth + 1 >= WALK_DEPTH_MAX {
                    return Err(VfsError::InvalidInput(format!(
                        "{path}: deeper than {WALK_DEPTH_MAX} directories"
                    )));
                }
                walk(vfs, &path, depth + 1, ledger).map_err(|_| open_error)?;
            }
        }
    }
    Ok(())
}

impl Vfs for QuotaVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        let inner = self.inner.open(path, mode)?;
        // The file's length now is the truth: `Truncate` cut it, and a file the walk did not
        // see (another writer's) is charged from here on.
        lock(&self.ledger).ledger.adopt(path, inner.len()?);
        Ok(Box::new(QuotaFile {
            inner,
            path: path.to_owned(),
            quota: self.clone(),
        }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        // Checked and applied under one lock around the rename itself (a metadata call), so no
        // growth can take the room between the check and the rename.
        let mut shared = lock(&self.ledger);
        if let Err(refusal) = shared.ledger.rename_allowed(from, to) {
            return Err(shared.refused(refusal));
        }
        self.inner.rename(from, to)?;
        shared
            .ledger
            .rename(from, to)
            .expect("allowed under the same lock");
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.charge_sync();
        self.inner.sync_dir(dir)
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.inner.remove(path)?;
        lock(&self.ledger).ledger.remove(path);
        Ok(())
    }

    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.create_dir(dir)
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        self.inner.exists(path)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        self.inner.list(dir)
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        self.inner.lock_exclusive(path)
    }

    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        stele::vfs::path::check_relative_path(path, false)
            .map_err(|why| VfsError::InvalidPath(format!("{path:?}: {why}")))?;
        reserve(&self.ledger, path, len)
    }

    fn quota_stats(&self) -> Option<QuotaStats> {
        Some(self.stats())
    }

    fn throttle_wait(&self) -> Result<Duration, VfsError> {
        if !self.has_rates {
            return Ok(Duration::ZERO);
        }
        let mut shared = lock(&self.ledger);
        let shared = &mut *shared;
        let in_debt =
            |bucket: &Option<TokenBucket>| bucket.as_ref().is_some_and(TokenBucket::in_debt);
        if !in_debt(&shared.syncs) && !in_debt(&shared.write_bytes) {
            // Time only adds to a balance: no debt now means no wait, without a clock.
            return Ok(Duration::ZERO);
        }
        let now = self.now();
        let wait = [shared.syncs.as_mut(), shared.write_bytes.as_mut()]
            .into_iter()
            .flatten()
            .map(|bucket| bucket.wait(now))
            .max()
            .unwrap_or_default();
        if wait > self.throttle_delay_max {
            shared.stats.throttle_refusals += 1;
            if let Some(metrics) = &shared.metrics {
                metrics.throttle_refusals.increment(1);
            }
            return Err(VfsError::Throttled(Throttled { retry_after: wait }));
        }
        if !wait.is_zero() {
            shared.stats.throttled += 1;
            if let Some(metrics) = &shared.metrics {
                metrics.throttled.increment(1);
            }
            shared.stats.throttled_time += wait;
        }
        Ok(wait)
    }
}

fn reserve(
    ledger: &SharedLedger,
    path: &str,
    len: u64,
) -> Result<Box<dyn VfsReservation>, VfsError> {
    let mut shared = lock(ledger);
    match shared.ledger.reserve(path, len) {
        Ok(id) => Ok(Box::new(LedgerReservation {
            ledger: Arc::clone(ledger),
            path: path.to_owned(),
            id,
        })),
        Err(refusal) => Err(shared.refused(refusal)),
    }
}

/// A file of a [`QuotaVfs`]: growths are asked of the ledger first, syncs and writes charged
/// to the rates.
#[derive(Debug)]
struct QuotaFile {
    inner: Box<dyn VfsFile>,
    path: String,
    quota: QuotaVfs,
}

impl QuotaFile {
    /// After a failed write or `set_len` the file may have changed length anyway (a short
    /// write): charge what is there.
    fn recount(&self) {
        if let Ok(len) = self.inner.len() {
            lock(&self.quota.ledger).ledger.adopt(&self.path, len);
        }
    }
}

impl VfsFile for QuotaFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        let end = offset.saturating_add(data.len() as u64);
        let bytes = data.len() as u64;
        let overdue = self.quota.account(
            |ledger| ledger.extend_to(&self.path, end),
            |stats| stats.write_bytes += bytes,
            bytes,
            |shared| shared.write_bytes.as_mut(),
        )?;
        QuotaVfs::sleep(overdue);
        self.inner
            .write_at(offset, data)
            .inspect_err(|_| self.recount())
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        // A shrink or growth of the length alone: nothing written, no rate charged.
        self.quota.account(
            |ledger| ledger.set_len(&self.path, len),
            |_| {},
            0,
            |_| None,
        )?;
        self.inner.set_len(len).inspect_err(|_| self.recount())
    }

    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        self.quota.charge_sync();
        self.inner.sync(kind)
    }

    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        reserve(&self.quota.ledger, &self.path, len)
    }
}

/// Room held in a [`QuotaVfs`]'s ledger until dropped.
struct LedgerReservation {
    ledger: SharedLedger,
    path: String,
    id: ReservationId,
}

impl fmt::Debug for LedgerReservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerReservation")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl VfsReservation for LedgerReservation {}

impl Drop for LedgerReservation {
    fn drop(&mut self) {
        lock(&self.ledger).ledger.release(&self.path, self.id);
    }
}
