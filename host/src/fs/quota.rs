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
//!
//! What it costs: the ledger and the buckets sit behind one lock, which a write takes only when
//! it has to. A write that lands within its file's known length (every record write into a
//! preallocated segment) and whose bytes the write-rate credit covers ([`Fast`]) takes no lock,
//! and [`Vfs::throttle_wait`] answers "no wait" from one flag while the tenant owes nothing:
//! the quota's work on a commit far below its limits is a few atomic operations.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
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
    /// The figures kept under the lock; `write_bytes` counts the bytes of writes that took
    /// the lock, the others are [`Self::credit_granted`] less what is left of it.
    stats: QuotaStats,
    syncs: Option<TokenBucket>,
    write_bytes: Option<TokenBucket>,
    /// Bytes of [`Fast::write_credit`] granted so far, less what was taken back unspent.
    credit_granted: u64,
    fast: Arc<Fast>,
}

/// What a write or a `throttle_wait` reads without the lock. Every field that can let a call
/// skip the lock is set under it, by the slow path, so the fast path only ever sees a state
/// the ledger and the buckets agreed to.
#[derive(Debug, Default)]
struct Fast {
    /// Bumped under the lock by everything that can lower a path's length in the ledger (a
    /// `set_len`, a remove, a rename, an open's recount): a file's cached length
    /// ([`QuotaFile::known_end`]) is good only while this has not moved since it was cached.
    lengths_generation: AtomicU64,
    /// Whether a bucket was in debt when last brought up to date (under the lock): while not,
    /// no caller owes a wait, whatever the time.
    in_debt: AtomicBool,
    /// Bytes that writes may spend without the lock: counted as written when granted (and,
    /// under a write rate, charged to its bucket then), so that a write within them is one
    /// atomic subtraction. Under a rate, granted only while the bucket's balance covers a
    /// whole [`WRITE_CREDIT_SHARE`] of its burst, so near the limit every write is charged
    /// under the lock and the pacing is exact; far from it, at most that share is held ahead.
    /// A write that finds too little takes the rest back under the lock.
    write_credit: AtomicU64,
    /// Set by [`QuotaVfs::with_metrics`].
    metrics: OnceLock<QuotaMetrics>,
}

/// The share of the write bucket's burst ([`stele::vfs::quota::rate::BURST_WINDOW`] at its
/// rate) that [`Fast::write_credit`] takes ahead at a time: 1/16 of 100 ms, about 6 ms of the
/// rate, is the most the credit can run ahead of the bucket. Chosen, not tuned.
const WRITE_CREDIT_SHARE: u64 = 16;

/// The credit granted at a time with no write rate: only the count of bytes written waits on
/// it (`stats()` and the metric see it at once; the metric is set at each grant), so a size
/// that makes the lock rare: one grant per MiB written. Chosen, not tuned.
const WRITE_CREDIT_UNRATED_BYTES: u64 = 1 << 20;

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
    /// Bytes written, all paths: those counted under the lock and the credit spent.
    fn written(&self) -> u64 {
        self.stats.write_bytes + self.credit_granted
            - self.fast.write_credit.load(Ordering::Acquire)
    }

    /// After a charge or a refill: the flag `throttle_wait` reads.
    fn note_debt(&self) {
        let in_debt =
            |bucket: &Option<TokenBucket>| bucket.as_ref().is_some_and(TokenBucket::in_debt);
        let owes = in_debt(&self.syncs) || in_debt(&self.write_bytes);
        self.fast.in_debt.store(owes, Ordering::Release);
    }

    fn refused(&mut self, refusal: QuotaExceeded) -> VfsError {
        self.stats.disk_refusals += 1;
        if let Some(metrics) = self.fast.metrics.get() {
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
    fast: Arc<Fast>,
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
        let fast = Arc::new(Fast::default());
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
                credit_granted: 0,
                fast: fast.clone(),
            })),
            fast,
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
            let shared = lock(&self.ledger);
            metrics.disk_used.set(shared.ledger.used() as f64);
            if let Some(limit) = shared.stats.disk_limit {
                metrics.disk_limit.set(limit as f64);
            }
            metrics.write_bytes.absolute(shared.written());
            // A second call keeps the first one's handles.
            let _ = self.fast.metrics.set(metrics);
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
        if let Some(metrics) = self.fast.metrics.get() {
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
            write_bytes: shared.written(),
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
        grant: impl FnOnce(&mut Shared) -> Result<(), QuotaExceeded>,
        count: impl FnOnce(&mut QuotaStats),
        units: u64,
        rate: Rate,
    ) -> Result<Duration, VfsError> {
        let mut shared = lock(&self.ledger);
        if let Err(refusal) = grant(&mut shared) {
            return Err(shared.refused(refusal));
        }
        count(&mut shared.stats);
        if let Some(metrics) = self.fast.metrics.get() {
            metrics.disk_used.set(shared.ledger.used() as f64);
            metrics.syncs.absolute(shared.stats.syncs);
        }
        let bucket = match rate {
            Rate::None => None,
            Rate::Syncs => shared.syncs.as_mut(),
            Rate::WriteBytes => shared.write_bytes.as_mut(),
        };
        let mut overdue = Duration::ZERO;
        if let Some(bucket) = bucket
            && !bucket.charge_if_covered(units)
        {
            // Not covered: now the clock is needed.
            let now = self.now();
            overdue = bucket.wait(now).saturating_sub(self.throttle_delay_max);
            bucket.charge(units, now);
            shared.stats.throttled_time += overdue;
            shared.note_debt();
        }
        if rate == Rate::WriteBytes {
            Self::grant_write_credit(&mut shared);
        }
        Ok(overdue)
    }

    /// Spends `bytes` of the write credit if it covers them: the write is then counted and
    /// charged to the rate already. One atomic operation, no lock.
    fn spend_write_credit(&self, bytes: u64) -> bool {
        self.fast
            .write_credit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .is_ok()
    }

    /// Under the lock, before a write is charged there: takes back what is left of the
    /// credit (it was counted and charged when granted, and is not spent).
    fn take_back_write_credit(shared: &mut Shared) {
        let left = shared.fast.write_credit.swap(0, Ordering::AcqRel);
        shared.credit_granted -= left;
        if let Some(bucket) = shared.write_bytes.as_mut() {
            bucket.refund(left);
        }
    }

    /// Under the lock, after a write was charged there: grants the next credit (see
    /// [`Fast::write_credit`]), and sets the written-bytes metric.
    fn grant_write_credit(shared: &mut Shared) {
        let share = match shared.write_bytes.as_mut() {
            None => WRITE_CREDIT_UNRATED_BYTES,
            Some(bucket) => {
                let share = bucket.burst_units() / WRITE_CREDIT_SHARE;
                if share > 0 && bucket.charge_if_covered(share) {
                    share
                } else {
                    0
                }
            }
        };
        shared.credit_granted += share;
        shared.fast.write_credit.fetch_add(share, Ordering::AcqRel);
        if let Some(metrics) = shared.fast.metrics.get() {
            metrics.write_bytes.absolute(shared.written());
        }
    }

    fn sleep(overdue: Duration) {
        if !overdue.is_zero() {
            std::thread::sleep(overdue);
        }
    }

    fn charge_sync(&self) {
        let overdue = self.account(|_| Ok(()), |stats| stats.syncs += 1, 1, Rate::Syncs);
        Self::sleep(overdue.unwrap_or_default());
    }
}

/// The bucket a call is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rate {
    None,
    Syncs,
    WriteBytes,
}

/// Under the lock: a path's length in the ledger may have gone down (or changed hands), so
/// every file's cached length ([`QuotaFile::known_end`]) is stale.
fn lengths_changed(shared: &Shared) {
    shared
        .fast
        .lengths_generation
        .fetch_add(1, Ordering::Release);
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
        let len = inner.len()?;
        {
            let mut shared = lock(&self.ledger);
            shared.ledger.adopt(path, len);
            lengths_changed(&shared);
        }
        Ok(Box::new(QuotaFile {
            inner,
            path: path.to_owned(),
            quota: self.clone(),
            known_end: AtomicU64::new(0),
            known_generation: AtomicU64::new(u64::MAX),
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
        lengths_changed(&shared);
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.charge_sync();
        self.inner.sync_dir(dir)
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.inner.remove(path)?;
        let mut shared = lock(&self.ledger);
        shared.ledger.remove(path);
        lengths_changed(&shared);
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
        // Time only adds to a balance: no debt when last brought up to date means no wait,
        // without a clock or the lock. Debt is only made under the lock, which sets the flag
        // before it lets go.
        if !self.fast.in_debt.load(Ordering::Acquire) {
            return Ok(Duration::ZERO);
        }
        let mut shared = lock(&self.ledger);
        let shared = &mut *shared;
        let now = self.now();
        let wait = [shared.syncs.as_mut(), shared.write_bytes.as_mut()]
            .into_iter()
            .flatten()
            .map(|bucket| bucket.wait(now))
            .max()
            .unwrap_or_default();
        shared.note_debt();
        if wait > self.throttle_delay_max {
            shared.stats.throttle_refusals += 1;
            if let Some(metrics) = self.fast.metrics.get() {
                metrics.throttle_refusals.increment(1);
            }
            return Err(VfsError::Throttled(Throttled { retry_after: wait }));
        }
        if !wait.is_zero() {
            shared.stats.throttled += 1;
            if let Some(metrics) = self.fast.metrics.get() {
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
    /// A length the ledger held for this path when [`Fast::lengths_generation`] was
    /// `known_generation`: while it still is, a write that ends within it grows nothing and
    /// needs no grant (the fast path of [`VfsFile::write_at`]).
    known_end: AtomicU64,
    known_generation: AtomicU64,
}

impl QuotaFile {
    /// After a failed write or `set_len` the file may have changed length anyway (a short
    /// write): charge what is there.
    fn recount(&self) {
        if let Ok(len) = self.inner.len() {
            let mut shared = lock(&self.quota.ledger);
            shared.ledger.adopt(&self.path, len);
            lengths_changed(&shared);
        }
    }

    /// Whether a write ending at `end` lands within the length cached for this file, with no
    /// length changed anywhere since it was cached.
    fn within_known_end(&self, end: u64) -> bool {
        let generation = self.quota.fast.lengths_generation.load(Ordering::Acquire);
        self.known_generation.load(Ordering::Acquire) == generation
            && end <= self.known_end.load(Ordering::Acquire)
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
        let quota = &self.quota;
        if !(self.within_known_end(end) && quota.spend_write_credit(bytes)) {
            let overdue = quota.account(
                |shared| {
                    shared.ledger.extend_to(&self.path, end)?;
                    // Cached under the lock, with the generation it belongs to.
                    let generation = shared.fast.lengths_generation.load(Ordering::Acquire);
                    self.known_end
                        .store(shared.ledger.len(&self.path), Ordering::Release);
                    self.known_generation.store(generation, Ordering::Release);
                    QuotaVfs::take_back_write_credit(shared);
                    Ok(())
                },
                |stats| stats.write_bytes += bytes,
                bytes,
                Rate::WriteBytes,
            )?;
            QuotaVfs::sleep(overdue);
        }
        self.inner
            .write_at(offset, data)
            .inspect_err(|_| self.recount())
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        // A shrink or growth of the length alone: nothing written, no rate charged.
        self.quota.account(
            |shared| {
                shared.ledger.set_len(&self.path, len)?;
                lengths_changed(shared);
                Ok(())
            },
            |_| {},
            0,
            Rate::None,
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

#[cfg(test)]
mod tests {
    use stele::vfs::MemVfs;

    use super::*;

    fn quota(limits: QuotaLimits) -> QuotaVfs {
        QuotaVfs::new(Arc::new(MemVfs::new()), limits).unwrap()
    }

    #[test]
    fn a_write_within_a_cached_length_is_checked_again_once_any_length_went_down() {
        let vfs = quota(QuotaLimits::unbounded().with_disk_bytes_max(1_000));
        let writer = vfs.open("a", OpenMode::Create).unwrap();
        writer.write_at(0, &[1; 600]).unwrap();
        assert_eq!(vfs.stats().disk_used, 600);
        // Another handle cuts the file: the writer's cached 600 no longer holds.
        vfs.open("a", OpenMode::Existing)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert_eq!(vfs.stats().disk_used, 0);
        writer.write_at(0, &[2; 600]).unwrap();
        assert_eq!(vfs.stats().disk_used, 600, "charged again, not skipped");
        let other = vfs.open("b", OpenMode::Create).unwrap();
        assert!(matches!(
            other.write_at(0, &[3; 500]),
            Err(VfsError::QuotaExceeded(QuotaExceeded { used: 600, .. }))
        ));
        // Within its own length, no lock, no refusal, nothing more charged.
        writer.write_at(100, &[4; 400]).unwrap();
        assert_eq!(vfs.stats().disk_used, 600);
        assert_eq!(vfs.stats().write_bytes, 1_600);
    }

    #[test]
    fn writes_paid_from_the_credit_count_in_full_and_debt_still_reaches_throttle_wait() {
        // 64 KiB/s: a burst of 6,553 bytes, a credit of 409 at a time.
        let vfs = quota(
            QuotaLimits::unbounded()
                .with_write_bytes_per_second_max(64 << 10)
                .with_throttle_delay_max(Duration::from_secs(3_600)),
        );
        let file = vfs.open("a", OpenMode::Create).unwrap();
        file.set_len(1 << 20).unwrap();
        assert_eq!(vfs.throttle_wait().unwrap(), Duration::ZERO);
        let mut written = 0u64;
        for i in 0..64u64 {
            file.write_at(i * 100, &[0; 100]).unwrap();
            written += 100;
        }
        assert_eq!(vfs.stats().write_bytes, written, "every byte counted once");
        // 6,400 bytes is within the burst: no debt yet.
        assert_eq!(vfs.throttle_wait().unwrap(), Duration::ZERO);
        file.write_at(0, &[0; 8 << 10]).unwrap();
        let wait = vfs.throttle_wait().unwrap();
        // About (6,400 + 8,192 - 6,553) bytes of debt at 64 KiB/s: ~120 ms, less what time
        // has refilled since; the credit held ahead adds at most one share.
        assert!(
            wait > Duration::from_millis(50) && wait < Duration::from_millis(200),
            "{wait:?}"
        );
        assert_eq!(vfs.stats().throttled, 1);
    }

    #[test]
    fn with_no_rate_throttle_wait_never_waits() {
        let vfs = quota(QuotaLimits::unbounded().with_disk_bytes_max(1 << 30));
        let file = vfs.open("a", OpenMode::Create).unwrap();
        for i in 0..100u64 {
            file.write_at(i * 8192, &[0; 4096]).unwrap();
            file.sync(SyncKind::Data).unwrap();
        }
        assert_eq!(vfs.throttle_wait().unwrap(), Duration::ZERO);
        assert_eq!(vfs.stats().syncs, 100);
    }
}
