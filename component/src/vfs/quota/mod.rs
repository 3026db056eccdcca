//! Per-tenant quotas, as plain data: the [`ledger`] of the bytes a tenant's files hold, the
//! [`rate`] buckets of its syncs and written bytes, and the types every layer shares
//! ([`QuotaLimits`], [`QuotaStats`], and the refusals [`QuotaExceeded`] and [`Throttled`]).
//! No I/O and no clock: the wrapper that enforces them over a real backend, with its clock and
//! its sleeps, is the host's (`stele_host::fs::QuotaVfs`), and the engine meets a quota only
//! through [`super::Vfs::reserve`], [`super::VfsFile::reserve`] and the errors above.
//!
//! It may import nothing of the facets.

pub mod ledger;
pub mod rate;

use std::time::Duration;

/// A growth or reservation refused by a disk quota: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("disk quota exceeded: {requested} more bytes requested, {used} of {limit} bytes in use")]
pub struct QuotaExceeded {
    /// The quota, in bytes.
    pub limit: u64,
    /// Bytes charged when the request came.
    pub used: u64,
    /// Bytes the request would have added.
    pub requested: u64,
}

/// A call refused by a rate limit before anything was staged: the tenant would have had to
/// wait longer than its `throttle_delay_max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("throttled: the tenant is over its rate limit; retry after {retry_after:?}")]
pub struct Throttled {
    /// How long until the tenant is back within its rate.
    pub retry_after: Duration,
}

/// How long a caller over its rate waits before it is refused, unless configured: Kafka's
/// clients and cgroup `io.max` delay rather than fail, and 100 ms is about one slow fsync on a
/// cloud disk, so a paced commit's latency stays within what the disk already costs.
pub const THROTTLE_DELAY_MAX_DEFAULT: Duration = Duration::from_millis(100);

/// What one tenant may use. `None` is unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaLimits {
    /// The bytes the tenant's files may hold on disk, preallocated space included.
    pub disk_bytes_max: Option<u64>,
    /// Syncs (file and directory) per second.
    pub syncs_per_second_max: Option<u64>,
    /// Bytes written per second.
    pub write_bytes_per_second_max: Option<u64>,
    /// The longest a caller over a rate waits ([`super::Vfs::throttle_wait`]) before it is refused
    /// with [`Throttled`].
    pub throttle_delay_max: Duration,
}

impl Default for QuotaLimits {
    fn default() -> Self {
        Self::unbounded()
    }
}

impl QuotaLimits {
    /// No bound at all.
    pub const fn unbounded() -> Self {
        QuotaLimits {
            disk_bytes_max: None,
            syncs_per_second_max: None,
            write_bytes_per_second_max: None,
            throttle_delay_max: THROTTLE_DELAY_MAX_DEFAULT,
        }
    }

    /// These limits with a disk bound.
    pub const fn with_disk_bytes_max(mut self, bytes: u64) -> Self {
        self.disk_bytes_max = Some(bytes);
        self
    }

    /// These limits with a sync rate.
    pub const fn with_syncs_per_second_max(mut self, syncs: u64) -> Self {
        self.syncs_per_second_max = Some(syncs);
        self
    }

    /// These limits with a write bandwidth.
    pub const fn with_write_bytes_per_second_max(mut self, bytes: u64) -> Self {
        self.write_bytes_per_second_max = Some(bytes);
        self
    }

    /// These limits with another throttle delay bound.
    pub const fn with_throttle_delay_max(mut self, delay: Duration) -> Self {
        self.throttle_delay_max = delay;
        self
    }

    /// Whether any bound is set.
    pub fn is_bounded(&self) -> bool {
        self.disk_bytes_max.is_some()
            || self.syncs_per_second_max.is_some()
            || self.write_bytes_per_second_max.is_some()
    }
}

/// A quota's figures, for `stats()` and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaStats {
    /// Bytes charged now: files' lengths and live reservations.
    pub disk_used: u64,
    /// The disk bound, if any.
    pub disk_limit: Option<u64>,
    /// Growths and reservations the disk bound refused.
    pub disk_refusals: u64,
    /// Syncs charged (file and directory).
    pub syncs: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Times a caller was told to wait by a rate ([`super::Vfs::throttle_wait`] answered a wait).
    pub throttled: u64,
    /// Times a caller was refused by a rate ([`Throttled`]).
    pub throttle_refusals: u64,
    /// Time callers were told to wait, and syncs and writes that found the debt past the
    /// delay bound slept, in all.
    pub throttled_time: Duration,
}
