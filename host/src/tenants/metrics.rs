//! The registry's per-tenant figures through the `metrics` crate's facade, each labelled
//! `tenant`, so that an embedder scrapes them with the exporter it already runs (Prometheus,
//! OpenTelemetry). The registry records them whatever is installed; with no recorder the
//! handles are no-ops. The tenant's quota ([`crate::fs::QuotaVfs::with_metrics`]) adds its own
//! figures under the same label.
//!
//! Two kinds: what each call did (counted as it returns), and what the tenant's WAL writer did
//! (its groups, syncs and group sizes: [`WalGroupFigures`]), which only the writer knows, so
//! they are read from its stats at most once per [`WAL_FIGURES_PUBLISH_INTERVAL`] of calls, on
//! `stats()`, and before the log hibernates.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, Histogram, Unit, counter, describe_counter, describe_histogram, histogram};
use stele::wal::WalWriterStats;
use stele::wal::group_commit::GROUP_HISTOGRAM_BUCKETS;

/// How often a tenant's WAL group figures are read from its writer while calls come: a stats
/// call crosses into the sandbox (a few µs), so not per commit; a scrape interval is seconds,
/// so a second is fresh enough. Chosen, not tuned.
pub(super) const WAL_FIGURES_PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// Says once, for exporters that print help and units, what each of the registry's metrics
/// means. Idempotent: every registry calls it.
pub(super) fn describe() {
    describe_counter!(
        "stele_tenant_calls_total",
        "Calls made through a tenant's handles (WAL commits and flushes, journal appends and \
         compactions, pushes and push-log calls)."
    );
    describe_counter!(
        "stele_tenant_failed_calls_total",
        "Calls that returned an error (quota and rate refusals included)."
    );
    describe_counter!(
        "stele_tenant_durable_calls_total",
        "Calls that waited for a sync."
    );
    describe_counter!(
        "stele_tenant_bytes_total",
        Unit::Bytes,
        "Bytes committed: WAL payloads, journal frames, pushed batches' Arrow memory size."
    );
    describe_counter!(
        "stele_tenant_resumes_total",
        "Times one of the tenant's logs was opened or resumed from hibernation."
    );
    describe_counter!(
        "stele_tenant_hibernations_total",
        "Times one of the tenant's logs was hibernated."
    );
    describe_histogram!(
        "stele_tenant_call_seconds",
        Unit::Seconds,
        "Latency of a tenant's calls, a resume included when the call had to make one."
    );
    describe_counter!(
        "stele_tenant_records_total",
        "Records committed: WAL records, journal appends, pushed batches."
    );
    describe_histogram!(
        "stele_tenant_commit_seconds",
        Unit::Seconds,
        "Latency of a tenant's calls that committed records (WAL commits, journal appends, \
         pushes), durable or not, a resume included."
    );
    describe_counter!(
        "stele_tenant_wal_groups_total",
        "Groups the tenant's WAL writer wrote (each one write, and one sync under a syncing \
         policy)."
    );
    describe_counter!(
        "stele_tenant_wal_syncs_total",
        "File syncs the tenant's WAL writer issued."
    );
    describe_histogram!(
        "stele_tenant_wal_group_records",
        "Records per WAL group, recorded at the floor of their power-of-two bucket (1, 2, 4, \
         ...): the writer's own resolution."
    );
}

/// One tenant's handles, made at its first call (a registered tenant that never calls costs
/// none of them).
pub(super) struct TenantMetrics {
    calls: Counter,
    failed_calls: Counter,
    durable_calls: Counter,
    bytes: Counter,
    pub(super) resumes: Counter,
    pub(super) hibernations: Counter,
    call_seconds: Histogram,
    records: Counter,
    commit_seconds: Histogram,
    wal_groups: Counter,
    wal_syncs: Counter,
    wal_group_records: Histogram,
}

impl TenantMetrics {
    pub(super) fn new(tenant: &str) -> TenantMetrics {
        TenantMetrics {
            calls: counter!("stele_tenant_calls_total", "tenant" => tenant.to_owned()),
            failed_calls: counter!("stele_tenant_failed_calls_total", "tenant" => tenant.to_owned()),
            durable_calls: counter!("stele_tenant_durable_calls_total", "tenant" => tenant.to_owned()),
            bytes: counter!("stele_tenant_bytes_total", "tenant" => tenant.to_owned()),
            resumes: counter!("stele_tenant_resumes_total", "tenant" => tenant.to_owned()),
            hibernations: counter!("stele_tenant_hibernations_total", "tenant" => tenant.to_owned()),
            call_seconds: histogram!("stele_tenant_call_seconds", "tenant" => tenant.to_owned()),
            records: counter!("stele_tenant_records_total", "tenant" => tenant.to_owned()),
            commit_seconds: histogram!("stele_tenant_commit_seconds", "tenant" => tenant.to_owned()),
            wal_groups: counter!("stele_tenant_wal_groups_total", "tenant" => tenant.to_owned()),
            wal_syncs: counter!("stele_tenant_wal_syncs_total", "tenant" => tenant.to_owned()),
            wal_group_records: histogram!("stele_tenant_wal_group_records", "tenant" => tenant.to_owned()),
        }
    }

    /// A call ended after `elapsed`: counted, and what it wrote if it succeeded.
    pub(super) fn call(&self, ok: bool, writes: Writes, elapsed: Duration) {
        self.calls.increment(1);
        self.call_seconds.record(elapsed.as_secs_f64());
        if !ok {
            self.failed_calls.increment(1);
            return;
        }
        self.bytes.increment(writes.bytes as u64);
        if writes.durable {
            self.durable_calls.increment(1);
        }
        if writes.records > 0 {
            self.records.increment(writes.records);
            self.commit_seconds.record(elapsed.as_secs_f64());
        }
    }
}

/// What one call writes, for its tenant's figures.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Writes {
    /// The call waits for a sync (a durable commit, a flush, a journal append, a push).
    pub(super) durable: bool,
    /// Bytes it commits.
    pub(super) bytes: usize,
    /// Records it commits (see `stele_tenant_records_total`).
    pub(super) records: u64,
}

impl Writes {
    /// A call that commits nothing: `durable` if it waits for a sync.
    pub(super) fn none(durable: bool) -> Writes {
        Writes {
            durable,
            ..Writes::default()
        }
    }

    /// A commit of `records` records, `bytes` in all.
    pub(super) fn commit(durable: bool, bytes: usize, records: u64) -> Writes {
        Writes {
            durable,
            bytes,
            records,
        }
    }
}

/// A tenant's WAL group figures, summed over every writer its log has had (each hibernation
/// closes one, each resume opens a new one whose stats start at zero), published through the
/// facade as counters set to the sum and a histogram fed what it has not seen yet.
#[derive(Default)]
pub(super) struct WalGroupFigures {
    /// When the figures are due again, in the registry's milliseconds (`Registry::now_ms`).
    due_ms: AtomicU64,
    sums: Mutex<GroupSums>,
}

#[derive(Default)]
struct GroupSums {
    /// The writers already closed.
    closed: GroupTotals,
    /// The histogram's buckets already recorded.
    recorded: [u64; GROUP_HISTOGRAM_BUCKETS],
}

#[derive(Clone, Copy, Default)]
struct GroupTotals {
    groups: u64,
    syncs: u64,
    histogram: [u64; GROUP_HISTOGRAM_BUCKETS],
}

impl GroupTotals {
    fn of(stats: &WalWriterStats) -> GroupTotals {
        GroupTotals {
            groups: stats.groups,
            syncs: stats.syncs,
            histogram: stats.group_records_histogram,
        }
    }

    fn plus(mut self, other: GroupTotals) -> GroupTotals {
        self.groups += other.groups;
        self.syncs += other.syncs;
        for (sum, more) in self.histogram.iter_mut().zip(other.histogram) {
            *sum += more;
        }
        self
    }
}

impl WalGroupFigures {
    /// Whether a call that started at `now_ms` should publish: once per
    /// [`WAL_FIGURES_PUBLISH_INTERVAL`], claimed by one caller. An atomic load on every other
    /// call.
    pub(super) fn due(&self, now_ms: u64) -> bool {
        let due_ms = self.due_ms.load(Ordering::Relaxed);
        now_ms >= due_ms
            && self
                .due_ms
                .compare_exchange(
                    due_ms,
                    now_ms + WAL_FIGURES_PUBLISH_INTERVAL.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Publishes the closed writers' figures plus the open writer's `stats`.
    pub(super) fn publish(&self, metrics: &TenantMetrics, stats: &WalWriterStats) {
        let mut sums = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        let total = sums.closed.plus(GroupTotals::of(stats));
        Self::record(&mut sums, metrics, total);
    }

    /// The open writer is about to be dropped (the log hibernates) with these final `stats`:
    /// they join the closed writers' figures, and are published.
    pub(super) fn close(&self, metrics: &TenantMetrics, stats: &WalWriterStats) {
        let mut sums = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        sums.closed = sums.closed.plus(GroupTotals::of(stats));
        let total = sums.closed;
        Self::record(&mut sums, metrics, total);
    }

    fn record(sums: &mut GroupSums, metrics: &TenantMetrics, total: GroupTotals) {
        metrics.wal_groups.absolute(total.groups);
        metrics.wal_syncs.absolute(total.syncs);
        for (bucket, (count, recorded)) in
            total.histogram.iter().zip(&mut sums.recorded).enumerate()
        {
            // Never negative: a writer's counts only grow, and a closed one's are kept.
            let new = count.saturating_sub(*recorded);
            if new > 0 {
                let floor = 1u64 << bucket;
                metrics
                    .wal_group_records
                    .record_many(floor as f64, usize::try_from(new).unwrap_or(usize::MAX));
                *recorded = *count;
            }
        }
    }
}
