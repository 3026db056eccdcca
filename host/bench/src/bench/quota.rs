//! The quota's two tables: what the accounting costs (commits with every limit set far away
//! against no quota, same run, alternated) and how exactly a rate holds (a tenant capped at 500
//! syncs per second, paced through the typed API).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use stele::vfs::{QuotaLimits, Vfs};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::{QuotaVfs, RealFs};
use stele_host::{Mode, Wal, WalError};

use super::common::{BenchArgs, println, process_cpu_seconds};

/// Rounds of the cost table; each figure is the median, and within a round the two systems
/// run alternated (which goes first alternates too), so that they share the machine's noise.
const COST_ROUNDS: usize = 5;

/// Every bound set, none reachable: a TiB of disk, a billion syncs and a PB of writes a second.
/// The accounting runs in full; nothing is ever refused or paced.
const FAR_AWAY: QuotaLimits = QuotaLimits::unbounded()
    .with_disk_bytes_max(1 << 40)
    .with_syncs_per_second_max(1_000_000_000)
    .with_write_bytes_per_second_max(1 << 50);

/// The sync rate the accuracy table caps a tenant at (the figure).
const SYNCS_PER_SECOND_CAP: u64 = 500;

/// How long each accuracy row commits. Longer than the bucket's burst (100 ms) by far, so the
/// burst is a small share of the rate.
const ACCURACY_RUN: Duration = Duration::from_secs(4);

fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One timed run: `records` commits of 128 B by one writer on a fresh segmented log at
/// `dir/name`, durable or not; returns (records/s, CPU µs per record).
fn commit_run(
    vfs: Arc<dyn Vfs>,
    dir: &Path,
    name: &str,
    mode: Mode,
    durable: bool,
    records: usize,
) -> Result<(f64, f64)> {
    let _ = std::fs::remove_dir_all(dir.join(name));
    let policy = if durable {
        DurabilityPolicy::FullSync
    } else {
        DurabilityPolicy::Skip
    };
    let options = WalOptions::new(policy)
        .with_retained_bytes_max(0)
        .with_segment_bytes(Some(16 << 20));
    let wal = Wal::create(vfs, name, options, mode)?;
    let body = [0x5Au8; 128];
    let cpu_started = process_cpu_seconds();
    let started = Instant::now();
    for _ in 0..records {
        if durable {
            wal.commit_durable(1, &body)?;
        } else {
            wal.commit(1, &body)?;
        }
    }
    wal.flush()?;
    let rate = records as f64 / started.elapsed().as_secs_f64();
    let cpu_us = (process_cpu_seconds() - cpu_started) * 1e6 / records as f64;
    drop(wal);
    let _ = std::fs::remove_dir_all(dir.join(name));
    Ok((rate, cpu_us))
}

/// The cost of the accounting, then the throttle's accuracy.
pub(crate) fn quota_tables(dir: &Path, args: &BenchArgs) -> Result<()> {
    cost_table(dir, args)?;
    accuracy_table(dir)
}

fn cost_table(dir: &Path, args: &BenchArgs) -> Result<()> {
    let real: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir)?);
    println!(
        "\nThe quota's cost: one writer, 128 B commits to a segmented log (16 MiB segments), \
         without a quota and under a `QuotaVfs` with every limit set far away (1 TiB, 10^9 \
         syncs/s, 1 PB/s: the accounting runs in full, nothing is refused or paced). Median of \
         {COST_ROUNDS} rounds, the two alternated within each; the target is within 1%.\n"
    );
    println!(
        "| mode | commits | no quota records/s | quota records/s | × | no quota CPU µs/record | \
         quota CPU µs/record | × |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for mode in [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain] {
        for durable in [false, true] {
            let records = if durable {
                args.records.max(500)
            } else {
                args.records * 25
            };
            let (mut none, mut quota) = (Vec::new(), Vec::new());
            for round in 0..COST_ROUNDS {
                for quota_first in [round % 2 == 0, round % 2 != 0] {
                    if quota_first {
                        let vfs: Arc<dyn Vfs> = Arc::new(QuotaVfs::new(real.clone(), FAR_AWAY)?);
                        quota.push(commit_run(vfs, dir, "bench-quota", mode, durable, records)?);
                    } else {
                        none.push(commit_run(
                            real.clone(),
                            dir,
                            "bench-quota",
                            mode,
                            durable,
                            records,
                        )?);
                    }
                }
            }
            let rate = |runs: &[(f64, f64)]| median(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
            let cpu = |runs: &[(f64, f64)]| median(&runs.iter().map(|r| r.1).collect::<Vec<_>>());
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.3} | {:.2} | {:.2} | {:.3} |",
                mode.name(),
                if durable { "durable" } else { "non-durable" },
                rate(&none),
                rate(&quota),
                rate(&quota) / rate(&none),
                cpu(&none),
                cpu(&quota),
                cpu(&quota) / cpu(&none),
            );
        }
    }
    Ok(())
}

fn accuracy_table(dir: &Path) -> Result<()> {
    println!(
        "\nThe throttle's accuracy: a tenant capped at {SYNCS_PER_SECOND_CAP} syncs/s commits \
         durably for {} s through the typed API (paced: a commit over the rate waits, up to \
         100 ms, on its own thread; a refused one sleeps `retry_after` and retries); syncs \
         counted by its `QuotaVfs`, whose bucket holds a 100 ms burst. Target: {} ± 5%.\n",
        ACCURACY_RUN.as_secs(),
        SYNCS_PER_SECOND_CAP
    );
    println!("| mode | writers | syncs/s | × cap | commits/s | waits | refusals |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let real: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir)?);
    for mode in [Mode::Native, Mode::Sandboxed] {
        for writers in [1usize, 8] {
            let name = "bench-quota-rate";
            let _ = std::fs::remove_dir_all(dir.join(name));
            let limits = QuotaLimits::unbounded().with_syncs_per_second_max(SYNCS_PER_SECOND_CAP);
            let quota = Arc::new(QuotaVfs::counting_under(real.clone(), limits, name)?);
            let options = WalOptions::new(DurabilityPolicy::FullSync)
                .with_retained_bytes_max(0)
                .with_segment_bytes(Some(16 << 20));
            let wal = Wal::create(quota.clone(), name, options, mode)?;
            let syncs_before = quota.stats().syncs;
            let started = Instant::now();
            let commits = std::thread::scope(|scope| -> Result<u64> {
                let handles: Vec<_> = (0..writers)
                    .map(|_| {
                        let wal = &wal;
                        scope.spawn(move || -> Result<u64> {
                            let mut commits = 0;
                            while started.elapsed() < ACCURACY_RUN {
                                match wal.commit_durable(1, &[0x5A; 128]) {
                                    Ok(_) => commits += 1,
                                    Err(WalError::Throttled(t)) => {
                                        std::thread::sleep(t.retry_after)
                                    }
                                    Err(other) => return Err(other.into()),
                                }
                            }
                            Ok(commits)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("writer thread"))
                    .sum()
            })?;
            let elapsed = started.elapsed().as_secs_f64();
            let stats = quota.stats();
            let syncs = (stats.syncs - syncs_before) as f64 / elapsed;
            println!(
                "| {} | {writers} | {syncs:.0} | {:.3} | {:.0} | {} | {} |",
                mode.name(),
                syncs / SYNCS_PER_SECOND_CAP as f64,
                commits as f64 / elapsed,
                stats.throttled,
                stats.throttle_refusals,
            );
            drop(wal);
            let _ = std::fs::remove_dir_all(dir.join(name));
        }
    }
    Ok(())
}
