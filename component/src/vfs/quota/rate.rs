//! Token buckets for a tenant's rates (syncs per second, bytes written per second), as plain
//! data: the caller passes the time, so the arithmetic is tested without a clock.
//!
//! The bucket runs on debt. Every sync or write is charged when it happens and may take the
//! balance below zero, so I/O is never refused or split by the bucket itself; what a debt
//! changes is the *next* caller: [`TokenBucket::wait`] says how long until the balance is back
//! at zero, which is how long a caller about to write should wait (and past a bound, be
//! refused) before it starts. Charging after the fact keeps group commit whole: one sync
//! shared by many commits costs one token.

use std::time::Duration;

/// How much a bucket holds when full, as time at its rate: an idle tenant may burst this much
/// before it is paced. 100 ms keeps the burst a small share of any measured second (the
/// accuracy a limit promises over seconds, not milliseconds) while letting a quiet tenant's
/// first commits through at once.
pub const BURST_WINDOW: Duration = Duration::from_millis(100);

/// A rate limit of `rate` units per second, with a burst of [`BURST_WINDOW`] worth (at least one
/// unit).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    balance: f64,
    /// When the balance was last brought up to date.
    at: Duration,
}

impl TokenBucket {
    /// A full bucket at time `now`, refilling at `per_second` units per second (at least one).
    pub fn new(per_second: u64, now: Duration) -> Self {
        let rate = per_second.max(1) as f64;
        let capacity = (rate * BURST_WINDOW.as_secs_f64()).max(1.0);
        TokenBucket {
            rate,
            capacity,
            balance: capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Duration) {
        if now > self.at {
            let earned = (now - self.at).as_secs_f64() * self.rate;
            self.balance = (self.balance + earned).min(self.capacity);
            self.at = now;
        }
    }

    /// What the bucket holds when full: its burst, in units.
    pub fn burst_units(&self) -> u64 {
        self.capacity as u64
    }

    /// Charges `units` without a clock when the balance covers them, and says whether it did.
    /// The time since the last refill is credited at the next one (capped at the capacity as
    /// always), so deferring it grants nothing a refill now would not have, except after an
    /// idle spell: the bucket was full, its idle time is still banked, and the refill that
    /// follows the burst fills it again, so an idle tenant's burst is at most two
    /// [`BURST_WINDOW`]s. This keeps the clock off the path of a tenant far below its rate,
    /// which is every write of a tenant whose limits are set high.
    pub fn charge_if_covered(&mut self, units: u64) -> bool {
        let units = units as f64;
        if self.balance >= units {
            self.balance -= units;
            true
        } else {
            false
        }
    }

    /// Gives back `units` charged ahead and not used (up to the capacity).
    pub fn refund(&mut self, units: u64) {
        self.balance = (self.balance + units as f64).min(self.capacity);
    }

    /// Charges `units` done at `now`; the balance may go below zero.
    pub fn charge(&mut self, units: u64, now: Duration) {
        self.refill(now);
        self.balance -= units as f64;
    }

    /// Whether the balance was below zero when last brought up to date. A bucket not in debt
    /// owes no wait whatever the time (time only adds to the balance), so a caller can answer
    /// "no wait" without reading a clock.
    pub fn in_debt(&self) -> bool {
        self.balance < 0.0
    }

    /// How long from `now` until the balance is back at zero: zero when it is not in debt.
    pub fn wait(&mut self, now: Duration) -> Duration {
        self.refill(now);
        if self.balance >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.balance / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Equal within a microsecond: the bucket's arithmetic is in floating point.
    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(1)
    }

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_asks_for_the_rate() {
        let mut syncs = TokenBucket::new(500, Duration::ZERO);
        // 500/s with a 100 ms burst: 50 syncs at once, no wait.
        syncs.charge(50, Duration::ZERO);
        assert_eq!(syncs.wait(Duration::ZERO), Duration::ZERO);
        syncs.charge(1, Duration::ZERO);
        assert!(
            close(syncs.wait(Duration::ZERO), 2 * MS),
            "one unit of debt at 500/s"
        );
        assert_eq!(
            syncs.wait(2 * MS),
            Duration::ZERO,
            "paid back by the refill"
        );
    }

    #[test]
    fn paced_callers_get_the_rate_over_a_second_within_the_burst() {
        // A caller that waits whenever it is told to and charges one sync per call.
        let mut bucket = TokenBucket::new(500, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut calls = 0u64;
        while now < Duration::from_secs(4) {
            now += bucket.wait(now);
            bucket.charge(1, now);
            calls += 1;
        }
        let rate = calls as f64 / 4.0;
        assert!((rate - 500.0).abs() <= 500.0 * 0.05, "{rate} per second");
    }

    #[test]
    fn charges_a_balance_covers_need_no_clock_and_the_rate_still_holds() {
        // A paced caller that charges without a clock whenever the balance covers it.
        let mut bucket = TokenBucket::new(500, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut calls = 0u64;
        while now < Duration::from_secs(4) {
            if !bucket.charge_if_covered(1) {
                now += bucket.wait(now);
                bucket.charge(1, now);
            }
            calls += 1;
        }
        let rate = calls as f64 / 4.0;
        assert!((rate - 500.0).abs() <= 500.0 * 0.05, "{rate} per second");
        // After an idle hour: at most two bursts (100 ms each) before the rate applies.
        let idle_end = now + Duration::from_secs(3_600);
        let mut burst = 0;
        loop {
            if bucket.charge_if_covered(1) {
                burst += 1;
            } else if bucket.wait(idle_end).is_zero() {
                bucket.charge(1, idle_end);
                burst += 1;
            } else {
                break;
            }
        }
        assert!(
            burst <= 2 * 50 + 1,
            "{burst} calls at once after an idle hour"
        );
    }

    #[test]
    fn a_refund_gives_back_what_was_charged_ahead_up_to_the_capacity() {
        let mut bytes = TokenBucket::new(1_000, Duration::ZERO);
        assert_eq!(bytes.burst_units(), 100);
        assert!(bytes.charge_if_covered(60));
        assert!(!bytes.charge_if_covered(60));
        bytes.refund(50);
        assert!(bytes.charge_if_covered(60), "40 + 50 left");
        bytes.refund(1_000);
        assert!(
            bytes.charge_if_covered(100) && !bytes.charge_if_covered(1),
            "capped"
        );
    }

    #[test]
    fn an_idle_bucket_refills_only_to_its_capacity() {
        let mut bytes = TokenBucket::new(1_000_000, Duration::ZERO);
        bytes.charge(1_000_000, Duration::ZERO);
        assert!(close(bytes.wait(Duration::ZERO), 900 * MS));
        // An hour idle earns one burst, not an hour's worth.
        let later = Duration::from_secs(3_600);
        bytes.charge(200_000, later);
        assert!(close(bytes.wait(later), 100 * MS));
    }
}
