//! `stele bench --workloads tenants`: many logs in one process. For each count of logs and each
//! mode (native as the reference), a new process (this binary's hidden `tenants-probe`) opens
//! that many logs through one [`Tenants`] registry (a directory per tenant under one root, a
//! budget as large as the count, 1 MiB segments and full sync), makes one durable commit in
//! each, and reports what the logs cost it: open latency, resident memory,
//! threads, file descriptors and address space, from `/proc/self` (RSS counts a page shared
//! by many instances, a copy-on-write memory image's, once per instance; PSS divides it among
//! them, and is what the logs cost the machine); then [`COMMITTERS`] threads
//! commit durably round-robin across every log for [`ROUND_ROBIN`]. A process per row, so
//! that one row's memory and threads are not the next one's. The sandboxed modes run on
//! Stele's own engine (the on-demand allocator, small reservations) and, as "(pooled)", on
//! `Runtime::pooling_config` with a slot per log: the choice between the two is made here.
//!
//! Then every log is hibernated: what a hibernated log costs (memory, descriptors), and the
//! latency of the first call on a sample of them (a resume).
//!
//! A second table registers many more tenants than are ever open (100,000 by default): their
//! logs are made once, natively, by this process; then a probe process per mode registers
//! every one in a registry (none opened: each is hibernated) and reports what a registered
//! tenant costs, and the latency of resuming a sample of them from disk.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, TenantWal, Tenants, TenantsOptions, Wal};

use super::common::{percentile, println};

/// Threads committing round-robin across every open log.
pub(crate) const COMMITTERS: usize = 16;

/// How long the round-robin commits run in each process.
pub(crate) const ROUND_ROBIN: Duration = Duration::from_secs(3);

/// Segment size of every log: small, as a tenant's log is.
const SEGMENT_BYTES: u64 = 1 << 20;

/// Hibernated logs resumed per process, spread over all of them, for the resume latency.
const RESUMES_SAMPLED: usize = 200;

/// Rounds per row, modes alternated within each round; the table gives medians.
const ROUNDS: usize = 3;

/// Segment size of the registered table's logs: the smallest a segment may be, since 100,000
/// logs each preallocate one (at 1 MiB, 100 GB). What a hibernated log costs does not depend
/// on it.
const REGISTERED_SEGMENT_BYTES: u64 = stele::wal::segment::SEGMENT_BYTES_MIN;

/// What one probe process measured, printed as one JSON line.
#[derive(Default)]
struct Probe {
    open_us: Vec<f64>,
    rss_before: u64,
    rss_open: u64,
    pss_before: u64,
    pss_open: u64,
    vm_open: u64,
    threads_open: u64,
    threads_before: u64,
    fds_before: u64,
    fds_open: u64,
    commits: u64,
    seconds: f64,
}

/// `field` of `/proc/self/<file>` (`status`: `VmRSS`, `VmSize`, `Threads`; `smaps_rollup`:
/// `Pss`), in bytes for the sizes given in kB.
fn proc_field(file: &str, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/{file}"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .with_context(|| format!("{field} in /proc/self/{file}"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next().context("a value")?.parse()?;
    Ok(match words.next() {
        Some("kB") => value * 1024,
        _ => value,
    })
}

fn status(field: &str) -> Result<u64> {
    proc_field("status", field)
}

fn rollup(field: &str) -> Result<u64> {
    proc_field("smaps_rollup", field)
}

fn fds() -> Result<u64> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count() as u64)
}

/// Raises this process's soft limit on open files to its hard limit: the bench measures what
/// logs cost, not the shell's default soft limit.
fn raise_open_files_limit() {
    // SAFETY: getrlimit and setrlimit read and write the one struct they are given.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Returns free heap pages to the kernel, so that RSS shows what the logs hold rather than
/// what glibc's allocator keeps of what they freed.
fn trim_heap() {
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The latency, in µs, of the first call (`stats`) on [`RESUMES_SAMPLED`] of `wals`, spread
/// over all of them: each is hibernated, so the call resumes it (a new instance, the log's
/// tail recovered from disk).
fn resume_sample(wals: &[TenantWal]) -> Result<Vec<f64>> {
    let mut resume_us = Vec::new();
    for wal in wals.iter().step_by((wals.len() / RESUMES_SAMPLED).max(1)) {
        let started = Instant::now();
        wal.stats()?;
        resume_us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(resume_us)
}

/// The hidden `tenants-probe` subcommand: opens `logs` logs under `dir` in `mode`, measures,
/// commits round-robin, and prints one JSON line.
pub fn probe(mode: Mode, logs: usize, dir: &Path) -> Result<()> {
    raise_open_files_limit();
    let options = WalOptions::new(DurabilityPolicy::FullSync)
        .with_retained_bytes_max(0)
        .with_segment_bytes(Some(SEGMENT_BYTES));
    // The runtime (and the compiled components) first: their cost is the process's, not the
    // logs'. One log opened and dropped does that.
    {
        let warm = dir.join("warm");
        std::fs::create_dir_all(&warm)?;
        let wal = Wal::create(Arc::new(RealFs::open_root(&warm)?), "log", options, mode)?;
        wal.commit_durable(1, b"warm")?;
    }
    let mut probe = Probe {
        rss_before: status("VmRSS")?,
        pss_before: rollup("Pss")?,
        threads_before: status("Threads")?,
        fds_before: fds()?,
        ..Probe::default()
    };
    // One registry over the probe's directory, with room for every log open at once.
    let root = dir.join("tenants");
    std::fs::create_dir_all(&root)?;
    let tenants = Tenants::open(
        &root,
        TenantsOptions::default()
            .with_mode(mode)
            .with_wal(options)
            .with_open_logs_max(logs),
    )?;
    let mut wals = Vec::with_capacity(logs);
    for i in 0..logs {
        let wal = tenants.wal(&format!("t{i}"))?;
        // The first call opens the log: its time is the open's, with the log's creation.
        let started = Instant::now();
        wal.stats()
            .with_context(|| format!("opening log {i} of {logs}"))?;
        probe.open_us.push(started.elapsed().as_secs_f64() * 1e6);
        wal.commit_durable(1, b"first")?;
        wals.push(wal);
    }
    probe.rss_open = status("VmRSS")?;
    probe.pss_open = rollup("Pss")?;
    probe.vm_open = status("VmSize")?;
    probe.threads_open = status("Threads")?;
    probe.fds_open = fds()?;

    let wals = Arc::new(wals);
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|c| {
            let (wals, stop, commits) = (wals.clone(), stop.clone(), commits.clone());
            std::thread::spawn(move || -> Result<()> {
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    wals[i % wals.len()].commit_durable(1, &[0xA5; 128])?;
                    commits.fetch_add(1, Ordering::Relaxed);
                    i += COMMITTERS;
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(ROUND_ROBIN);
    stop.store(true, Ordering::Relaxed);
    for committer in committers {
        committer.join().expect("a committer panicked")?;
    }
    probe.seconds = started.elapsed().as_secs_f64();
    probe.commits = commits.load(Ordering::Relaxed);

    // Every log hibernated: what a hibernated log costs, then the first call's latency on a
    // sample of them (a resume: a new instance, the log's tail recovered, and `stats`).
    let wals = Arc::into_inner(wals).context("the committers are done")?;
    for wal in &wals {
        wal.hibernate()?;
    }
    anyhow::ensure!(tenants.open_logs() == 0, "a log stayed open");
    // What the hibernated logs hold, not what glibc's allocator keeps of what they freed.
    trim_heap();
    let rss_hibernated = status("VmRSS")?;
    let pss_hibernated = rollup("Pss")?;
    let fds_hibernated = fds()?;
    let resume_us = resume_sample(&wals)?;
    let line = serde_json::json!({
        "open_p50_us": percentile(&probe.open_us, 0.5),
        "open_p99_us": percentile(&probe.open_us, 0.99),
        "rss_per_log": (probe.rss_open.saturating_sub(probe.rss_before)) as f64 / logs as f64,
        "pss_per_log": (probe.pss_open.saturating_sub(probe.pss_before)) as f64 / logs as f64,
        // The whole process's: a pool reserves its slots before the first log opens.
        "vm_in_all": probe.vm_open,
        "threads_before": probe.threads_before,
        "threads_open": probe.threads_open,
        "fds_per_log": (probe.fds_open.saturating_sub(probe.fds_before)) as f64 / logs as f64,
        "durable_per_s": probe.commits as f64 / probe.seconds,
        "hibernated_rss_per_log": rss_hibernated.saturating_sub(probe.rss_before) as f64 / logs as f64,
        "hibernated_pss_per_log": pss_hibernated.saturating_sub(probe.pss_before) as f64 / logs as f64,
        "hibernated_fds": fds_hibernated.saturating_sub(probe.fds_before),
        "resume_p50_us": percentile(&resume_us, 0.5),
        "resume_p99_us": percentile(&resume_us, 0.99),
    });
    std::println!("{line}");
    Ok(())
}

fn registered_options(mode: Mode) -> TenantsOptions {
    TenantsOptions::default().with_mode(mode).with_wal(
        WalOptions::new(DurabilityPolicy::FullSync)
            .with_retained_bytes_max(0)
            .with_segment_bytes(Some(REGISTERED_SEGMENT_BYTES)),
    )
}

/// The hidden `tenants-registered-probe` subcommand: registers the `registered` tenants whose
/// logs are under `dir/tenants` (made by [`registered_table`]) in one registry in `mode`, none
/// opened, measures what they cost, then resumes a sample of them; prints one JSON line.
pub fn registered_probe(mode: Mode, registered: usize, dir: &Path) -> Result<()> {
    raise_open_files_limit();
    let root = dir.join("tenants");
    let tenants = Tenants::open(&root, registered_options(mode))?;
    // The runtime (and the compiled components) first, with a log of its own that is left
    // open: their cost is the process's, not the registered tenants'.
    tenants.wal("warm")?.commit_durable(1, b"warm")?;
    trim_heap();
    let (rss_before, pss_before, fds_before) = (status("VmRSS")?, rollup("Pss")?, fds()?);
    let started = Instant::now();
    let mut wals = Vec::with_capacity(registered);
    for i in 0..registered {
        wals.push(tenants.wal(&format!("t{i}"))?);
    }
    let register_seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(tenants.open_logs() == 1, "registering opened a log");
    trim_heap();
    let (rss_registered, pss_registered) = (status("VmRSS")?, rollup("Pss")?);
    let fds_registered = fds()?;
    let resume_us = resume_sample(&wals)?;
    let line = serde_json::json!({
        "register_us_per_tenant": register_seconds * 1e6 / registered as f64,
        "registered_rss_per_tenant": rss_registered.saturating_sub(rss_before) as f64 / registered as f64,
        "registered_pss_per_tenant": pss_registered.saturating_sub(pss_before) as f64 / registered as f64,
        "registered_fds": fds_registered.saturating_sub(fds_before),
        "rss_peak": status("VmHWM")?,
        "resume_p50_us": percentile(&resume_us, 0.5),
        "resume_p99_us": percentile(&resume_us, 0.99),
    });
    std::println!("{line}");
    Ok(())
}

/// Makes `registered` tenants' logs under `root`, natively, each with one record: what the
/// registered table's probes register.
fn make_registered_logs(root: &Path, registered: usize) -> Result<()> {
    std::fs::create_dir_all(root)?;
    let tenants = Tenants::open(
        root,
        registered_options(Mode::Native).with_open_logs_max(256),
    )?;
    for i in 0..registered {
        if i % 1000 == 0 {
            super::common::progress()
                .set_message(format!("tenants: making {registered} logs ({i})"));
        }
        let wal = tenants.wal(&format!("t{i}"))?;
        wal.commit(1, b"registered")?;
        wal.hibernate()?;
    }
    Ok(())
}

/// The registered table: for each count in `counts`, the logs made once, then a probe per
/// mode, [`ROUNDS`] rounds with the modes alternated; medians.
pub(crate) fn registered_table(dir: &Path, counts: &[usize]) -> Result<()> {
    println!(
        "\n## Many tenants registered, none open: a probe process registers N tenants whose logs are on disk (each hibernated), then resumes {RESUMES_SAMPLED} of them (medians of {ROUNDS} processes)\n"
    );
    println!(
        "| N registered | mode | register µs per tenant | RSS / PSS per registered tenant (after malloc_trim) | fds of their own | resume p50 / p99 ms | peak RSS of the process |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    let exe = std::env::current_exe().context("this stele-bench binary's path")?;
    for &registered in counts {
        let probe_dir = dir.join(format!("tenants-registered-{registered}"));
        let _ = std::fs::remove_dir_all(&probe_dir);
        make_registered_logs(&probe_dir.join("tenants"), registered)?;
        let modes = [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain];
        let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); modes.len()];
        for _ in 0..ROUNDS {
            for (m, mode) in modes.iter().enumerate() {
                super::common::progress()
                    .set_message(format!("tenants: {registered} registered, {}", mode.name()));
                let mut command = Command::new(&exe);
                command
                    .args([
                        "tenants-registered-probe",
                        mode.name(),
                        &registered.to_string(),
                    ])
                    .arg(&probe_dir);
                outcomes[m].push(probe_outcome(&mut command)?);
            }
        }
        std::fs::remove_dir_all(&probe_dir)?;
        for (m, mode) in modes.iter().enumerate() {
            let ok = match succeeded(&outcomes[m]) {
                Ok(ok) => ok,
                Err(why) => {
                    println!("| {registered} | {} | fails: `{why}` ||||| ", mode.name());
                    continue;
                }
            };
            let field = |name: &str| median_of(&ok, name);
            println!(
                "| {registered} | {} | {:.1} | {:.2} / {:.2} KiB | {:.0} | {:.1} / {:.1} | {:.0} MiB |",
                mode.name(),
                field("register_us_per_tenant"),
                field("registered_rss_per_tenant") / 1024.0,
                field("registered_pss_per_tenant") / 1024.0,
                field("registered_fds"),
                field("resume_p50_us") / 1e3,
                field("resume_p99_us") / 1e3,
                field("rss_peak") / (1024.0 * 1024.0),
            );
        }
    }
    Ok(())
}

/// A row's system: a mode, on Stele's own engine or on the pooling allocator.
#[derive(Clone, Copy)]
struct System {
    mode: Mode,
    pooled: bool,
}

impl System {
    fn name(&self) -> String {
        match self.pooled {
            true => format!("{} (pooled)", self.mode.name()),
            false => self.mode.name().to_owned(),
        }
    }
}

/// The systems of each count, in the table's order; native first, as the reference.
const SYSTEMS: [System; 5] = [
    System {
        mode: Mode::Native,
        pooled: false,
    },
    System {
        mode: Mode::Sandboxed,
        pooled: false,
    },
    System {
        mode: Mode::Sandboxed,
        pooled: true,
    },
    System {
        mode: Mode::SandboxedPlain,
        pooled: false,
    },
    System {
        mode: Mode::SandboxedPlain,
        pooled: true,
    },
];

/// One row's figures (a probe's JSON line), or why the probe failed.
type Outcome = Result<serde_json::Value, String>;

fn run_probe(dir: &Path, system: System, logs: usize) -> Result<Outcome> {
    let exe = std::env::current_exe().context("this stele-bench binary's path")?;
    let probe_dir = dir.join(format!("tenants-{}-{logs}", system.mode.name()));
    let _ = std::fs::remove_dir_all(&probe_dir);
    std::fs::create_dir_all(&probe_dir)?;
    let mut command = Command::new(&exe);
    command
        .args(["tenants-probe", system.mode.name(), &logs.to_string()])
        .arg(&probe_dir);
    if system.pooled {
        command.arg("--pooled");
    }
    let outcome = probe_outcome(&mut command)?;
    std::fs::remove_dir_all(&probe_dir)?;
    Ok(outcome)
}

/// Runs a probe process: its JSON line, or the last line of its error.
fn probe_outcome(command: &mut Command) -> Result<Outcome> {
    let output = command.output()?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Ok(Err(stderr
            .lines()
            .last()
            .unwrap_or("no message")
            .to_owned()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().context("the probe printed nothing")?;
    Ok(Ok(serde_json::from_str(line)?))
}

/// A row's successful probes, or why one failed.
fn succeeded(outcomes: &[Outcome]) -> Result<Vec<&serde_json::Value>, &str> {
    outcomes
        .iter()
        .map(|o| o.as_ref().map_err(String::as_str))
        .collect()
}

/// The median over `probes` of their figure `name`.
fn median_of(probes: &[&serde_json::Value], name: &str) -> f64 {
    let mut values: Vec<f64> = probes
        .iter()
        .map(|v| v[name].as_f64().unwrap_or(0.0))
        .collect();
    median(&mut values)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The table: every count of logs in `counts`, each mode, [`ROUNDS`] rounds with the modes
/// alternated; medians.
pub(crate) fn tenants_table(dir: &Path, counts: &[usize]) -> Result<()> {
    println!(
        "\n## Many logs in one process: N open logs, one durable commit each, then {COMMITTERS} threads committing durably round-robin for {} s (medians of {ROUNDS} processes)\n",
        ROUND_ROBIN.as_secs()
    );
    println!(
        "| N | mode | open p50 / p99 ms | RSS per log | PSS per log | threads (before → open) | fds per log | address space of the process | round-robin durable/s | vs native | hibernated: RSS / PSS per log (after malloc_trim), fds | resume p50 / p99 ms |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &logs in counts {
        let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); SYSTEMS.len()];
        for _ in 0..ROUNDS {
            for (m, system) in SYSTEMS.iter().enumerate() {
                super::common::progress().set_message(format!(
                    "tenants: {} logs, {}",
                    logs,
                    system.name()
                ));
                outcomes[m].push(run_probe(dir, *system, logs)?);
            }
        }
        let mut native_rate = None;
        for (m, system) in SYSTEMS.iter().enumerate() {
            let ok = match succeeded(&outcomes[m]) {
                Ok(ok) => ok,
                Err(why) => {
                    println!("| {logs} | {} | fails: `{why}` |||||||||| ", system.name());
                    continue;
                }
            };
            let field = |name: &str| median_of(&ok, name);
            let rate = field("durable_per_s");
            if system.mode == Mode::Native {
                native_rate = Some(rate);
            }
            println!(
                "| {logs} | {} | {:.1} / {:.1} | {:.1} KiB | {:.1} KiB | {:.0} → {:.0} | {:.1} | {:.0} MiB | {:.0} | {} | {:.1} / {:.1} KiB, {:.0} | {:.1} / {:.1} |",
                system.name(),
                field("open_p50_us") / 1e3,
                field("open_p99_us") / 1e3,
                field("rss_per_log") / 1024.0,
                field("pss_per_log") / 1024.0,
                field("threads_before"),
                field("threads_open"),
                field("fds_per_log"),
                field("vm_in_all") / (1024.0 * 1024.0),
                rate,
                native_rate.map_or("-".into(), |n| format!("{:.2}x", rate / n)),
                field("hibernated_rss_per_log") / 1024.0,
                field("hibernated_pss_per_log") / 1024.0,
                field("hibernated_fds"),
                field("resume_p50_us") / 1e3,
                field("resume_p99_us") / 1e3,
            );
        }
    }
    Ok(())
}

/// A Prometheus text sample of one short run: three tenants in one registry (a budget of two
/// open logs, so the third's first call hibernates one) commit durably, one of them under a
/// disk quota it reaches and a sync rate it passes; the registry's and the quota's figures go
/// out through the `metrics` facade to a Prometheus recorder installed for it, rendered here
/// (the `stele_` lines).
pub(crate) fn prometheus_sample(dir: &Path) -> Result<()> {
    use stele::vfs::QuotaLimits;
    use stele_host::SandboxLimits;

    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("installing the Prometheus recorder: {e}"))?;
    let root = dir.join("bench-tenants-metrics");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    let quota = QuotaLimits::unbounded()
        .with_disk_bytes_max(3 << 20)
        .with_syncs_per_second_max(200);
    let options = TenantsOptions::default()
        .with_mode(Mode::Sandboxed)
        .with_open_logs_max(2)
        .with_limits(SandboxLimits::default().with_quota(quota))
        .with_wal(WalOptions::segmented(DurabilityPolicy::FullSync, 1 << 20));
    let tenants = Tenants::open(&root, options)?;
    for round in 0..3u64 {
        for name in ["acme", "globex", "initech"] {
            let wal = tenants.wal(name)?;
            for i in 0..50u64 {
                let payload =
                    vec![(round * 50 + i) as u8; if name == "acme" { 32 << 10 } else { 64 }];
                // Refusals are part of the sample: the quota's and the rate's.
                let _ = wal.commit_durable(1, &payload);
            }
        }
    }
    drop(tenants);
    println!(
        "\nPrometheus text of one run (three tenants, a budget of two open logs, each tenant under \
         a 3 MiB quota and 200 syncs/s; `acme` commits 32 KiB records, past its quota), the `stele_` lines:\n"
    );
    println!("```text");
    for line in handle.render().lines() {
        if line.contains("stele_") && !line.starts_with("# ") {
            println!("{line}");
        }
    }
    println!("```");
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
