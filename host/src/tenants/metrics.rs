//! The registry's per-tenant figures through the `metrics` crate's facade, each labelled
//! `tenant`, so that an embedder scrapes them with the exporter it already runs (Prometheus,
//! OpenTelemetry). The registry records them whatever is installed; with no recorder the
//! handles are no-ops. The tenant's quota ([`crate::fs::QuotaVfs::with_metrics`]) adds its own
//! figures under the same label.

use std::time::Duration;

use metrics::{Counter, Histogram, Unit, counter, describe_counter, describe_histogram, histogram};

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
        }
    }

    /// A call ended after `elapsed`: counted, and its bytes if it succeeded.
    pub(super) fn call(&self, ok: bool, durable: bool, bytes: usize, elapsed: Duration) {
        self.calls.increment(1);
        self.call_seconds.record(elapsed.as_secs_f64());
        if !ok {
            self.failed_calls.increment(1);
            return;
        }
        self.bytes.increment(bytes as u64);
        if durable {
            self.durable_calls.increment(1);
        }
    }
}
