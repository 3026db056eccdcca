//! What every bench table shares: the arguments ([`BenchArgs`], [`Workload`]), one measured
//! row ([`Row`]), the disk's limit for one writer ([`limit`]), the process's CPU time, the
//! progress bar (and the `println!` that prints above it), percentiles. Imports no table.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Result;

static PROGRESS: OnceLock<indicatif::ProgressBar> = OnceLock::new();

pub(crate) fn progress() -> &'static indicatif::ProgressBar {
    PROGRESS.get_or_init(|| {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal() {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} bench: {msg} ({elapsed})")
                .expect("a valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    })
}

/// Every line of the tables goes out with the progress line lifted, so the two never mix.
/// The other bench modules import it in place of std's.
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::bench::common::progress().suspend(|| std::println!($($arg)*))
    };
}
pub(crate) use println;

pub struct BenchArgs {
    pub records: usize,
    pub payload_bytes: Vec<usize>,
    pub writers: Vec<usize>,
    pub json: Option<std::path::PathBuf>,
    pub workloads: Vec<Workload>,
    pub journal_appends: usize,
    pub pushes: usize,
    /// The counts of open logs the tenants table measures.
    pub tenants: Vec<usize>,
    /// The counts of registered tenants (none open) the tenants table's second part measures.
    pub tenants_registered: Vec<usize>,
}

/// Which tables `stele bench` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Durable WAL commits at each writer count.
    Wal,
    /// Journal append latency, one writer, against tokio::fs write_all + sync_data.
    Journal,
    /// Push-log appends (10,000-row batches, each fsynced) and scans, against a raw arrow-ipc
    /// StreamWriter + fdatasync and StreamReader.
    PushLog,
    /// Non-durable commits, one writer: the cost of the engine and the component boundary.
    NonDurable,
    /// Opening (recovering) a 256 MiB WAL: MB/s and peak RSS, in every mode.
    Recovery,
    /// One durable writer, single-file WAL against preallocated segments, medians of rounds;
    /// and the latency of a commit that rotates to a new segment against one that does not.
    Segments,
    /// Each built component: its size, the time to compile it, and the time to instantiate it.
    Components,
    /// A new process's first durable commit, exec to exit, in every mode, with the compiled-
    /// code cache warm and off.
    ColdStart,
    /// A plugin component composed with stele.wasm commits through `stele:log/wal`, durable
    /// and not, against native.
    Plugin,
    /// The archiver beside 16 durable writers: upload rate against the writer's, seal-to-
    /// archived lag, restore MB/s, commit p99 with and without it, requests per GiB.
    Archive,
    /// Many logs in one process (a process per row): open latency, RSS, threads, file
    /// descriptors and address space per log, and durable commits round-robin across them.
    Tenants,
    /// Per-tenant quotas: commits with every limit set far away against none (the
    /// accounting's cost), and a tenant capped at 500 syncs/s (the throttle's accuracy).
    Quota,
    /// Guests in other languages (Python, JavaScript) beside the Rust plugin: size, compile,
    /// cached start, commits through `stele:log/wal`. Not in the default set: it needs
    /// python3, node and npm, and builds the guests on its first run.
    Guests,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    Threads,
    Tasks,
}

/// The CPU time (user + system) every thread of this process has used so far, in seconds.
/// A row's CPU is the difference across it: the engine, wasmtime, the drivers' threads and
/// the kernel's work for the syscalls, however many threads share it.
pub(crate) fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

pub(crate) struct Row {
    pub(crate) system: String,
    pub(crate) mode: &'static str,
    pub(crate) writers: usize,
    pub(crate) records: usize,
    pub(crate) seconds: f64,
    /// Process CPU time over the row (see [`process_cpu_seconds`]).
    pub(crate) cpu_seconds: f64,
    pub(crate) syncs: u64,
    pub(crate) latencies_us: Vec<f64>,
}

impl Row {
    pub(crate) fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds
    }
    pub(crate) fn cpu_us_per_record(&self) -> f64 {
        self.cpu_seconds * 1e6 / self.records as f64
    }
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        percentile(&self.latencies_us, p)
    }
}

/// The physical limit for one writer: a raw write of the record plus fdatasync, in a loop.
/// `preallocated`: the file is sized up front and written in place, so fdatasync flushes no
/// metadata; otherwise each record is appended.
pub(crate) fn limit(dir: &Path, records: usize, payload: usize, preallocated: bool) -> Result<Row> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(if preallocated {
        "limit-prealloc"
    } else {
        "limit-append"
    });
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let record = vec![0xA5u8; payload + stele::wal::record::RECORD_OVERHEAD_BYTES];
    if preallocated {
        file.write_all_at(&vec![0u8; record.len() * records], 0)?;
        file.sync_all()?;
    }
    let mut latencies = Vec::with_capacity(records);
    let cpu_started = process_cpu_seconds();
    let started = Instant::now();
    for i in 0..records {
        let t = Instant::now();
        file.write_all_at(&record, (i * record.len()) as u64)?;
        file.sync_data()?;
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds() - cpu_started;
    std::fs::remove_file(&path)?;
    let system = if preallocated {
        "limit (pwrite prealloc + fdatasync)"
    } else {
        "limit (append + fdatasync)"
    };
    Ok(Row {
        system: system.into(),
        mode: "raw",
        writers: 1,
        records,
        seconds,
        cpu_seconds,
        syncs: records as u64,
        latencies_us: latencies,
    })
}

/// The log layout a Stele row measures.
/// The `p` quantile (0 to 1) of `samples`, by nearest rank; 0 when there are none.
pub(crate) fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

pub(crate) static EXAMPLE_PLUGIN_WASM: &[u8] = include_bytes!(env!("STELE_EXAMPLE_PLUGIN_WASM"));
