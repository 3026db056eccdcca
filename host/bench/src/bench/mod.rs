//! `stele bench`: Stele side by side with its peers (okaywal, SQLite, tokio::fs, a raw Arrow
//! IPC stream) and the disk's limit (raw write + fdatasync), in one run, so that they share the
//! machine's noise. Tables are markdown; `--json` writes one object per row.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use stele::wal::segment::SEGMENT_BYTES_DEFAULT;
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, Wal};

mod archive;
mod common;
mod guests;
mod quota;
mod sandbox;
mod tenants;

pub use tenants::{probe as tenants_probe, registered_probe as tenants_registered_probe};

pub use common::{BenchArgs, Workload};
use common::{
    Driver, EXAMPLE_PLUGIN_WASM, Row, limit, percentile, println, process_cpu_seconds, progress,
};

/// The run's progress line: which workload is running and for how long. A full run takes
/// minutes, so it shows; like every bar, it is hidden when stdout is not a terminal.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The original format: one file that grows.
    SingleFile,
    /// A directory of preallocated segments of this many bytes.
    Segments(u64),
}

impl Layout {
    fn label(self) -> String {
        match self {
            Layout::SingleFile => "single file".into(),
            Layout::Segments(bytes) if bytes % (1 << 20) == 0 => {
                format!("{} MiB segments", bytes >> 20)
            }
            Layout::Segments(bytes) => format!("{} KiB segments", bytes >> 10),
        }
    }
}

/// Removes what a previous row left at `path` (a file or a segment directory).
fn remove_log(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir_all(path);
}

#[allow(clippy::too_many_arguments)] // a benchmark row's full description
fn stele(
    dir: &Path,
    mode: Mode,
    driver: Driver,
    layout: Layout,
    writers: usize,
    records: usize,
    payload: usize,
) -> Result<Row> {
    let name = format!("bench-{}-{writers}.wal", mode.name());
    remove_log(&dir.join(&name));
    let fs = Arc::new(RealFs::open_root(dir)?);
    let options = WalOptions::new(DurabilityPolicy::Barrier)
        .with_retained_bytes_max(0)
        .with_segment_bytes(match layout {
            Layout::SingleFile => None,
            Layout::Segments(bytes) => Some(bytes),
        });
    let wal = Wal::create(fs, &name, options, mode)?;
    let per_writer = records.div_ceil(writers);
    let body = vec![0x5Au8; payload];
    let cpu_started = process_cpu_seconds();
    let (latencies, seconds) = match driver {
        Driver::Threads => run_threads(writers, per_writer, || {
            let (wal, body) = (wal.clone(), &body);
            Ok(move || -> Result<()> {
                wal.commit_durable(1, body)?;
                Ok(())
            })
        })?,
        Driver::Tasks => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let wal = wal.to_async();
            let started = Instant::now();
            let latencies = rt.block_on(async {
                let handles: Vec<_> = (0..writers)
                    .map(|_| {
                        let (wal, body) = (wal.clone(), body.clone());
                        tokio::spawn(async move {
                            let mut l = Vec::with_capacity(per_writer);
                            for _ in 0..per_writer {
                                let t = Instant::now();
                                wal.commit_durable(1, &body).await?;
                                l.push(t.elapsed().as_secs_f64() * 1e6);
                            }
                            Ok::<_, stele_host::WalError>(l)
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for h in handles {
                    all.extend(h.await??);
                }
                Ok::<_, anyhow::Error>(all)
            })?;
            (latencies, started.elapsed().as_secs_f64())
        }
    };
    let cpu_seconds = process_cpu_seconds() - cpu_started;
    let stats = wal.stats()?;
    let driver_name = if driver == Driver::Threads {
        "threads"
    } else {
        "tokio tasks"
    };
    let system = match layout {
        Layout::Segments(SEGMENT_BYTES_DEFAULT) => format!("stele {} ({driver_name})", mode.name()),
        other => format!("stele {} ({driver_name}, {})", mode.name(), other.label()),
    };
    remove_log(&dir.join(&name));
    Ok(Row {
        system,
        mode: mode.name(),
        writers,
        records: latencies.len(),
        seconds,
        cpu_seconds,
        syncs: stats.groups,
        latencies_us: latencies,
    })
}

/// Runs `writers` threads, each making `per_writer` durable commits with the commit function
/// `open` gives it (one per thread: a connection, a handle); returns every commit's latency
/// in µs and the wall time.
fn run_threads<C>(
    writers: usize,
    per_writer: usize,
    open: impl Fn() -> Result<C> + Sync,
) -> Result<(Vec<f64>, f64)>
where
    C: FnMut() -> Result<()> + Send,
{
    let commits: Vec<C> = (0..writers).map(|_| open()).collect::<Result<_>>()?;
    let started = Instant::now();
    let latencies = std::thread::scope(|s| -> Result<Vec<f64>> {
        let handles: Vec<_> = commits
            .into_iter()
            .map(|mut commit| {
                s.spawn(move || -> Result<Vec<f64>> {
                    let mut l = Vec::with_capacity(per_writer);
                    for _ in 0..per_writer {
                        let t = Instant::now();
                        commit()?;
                        l.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(l)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| anyhow::anyhow!("writer panicked"))??);
        }
        Ok(all)
    })?;
    Ok((latencies, started.elapsed().as_secs_f64()))
}

/// okaywal: one entry of one chunk per commit, `commit()` (durable; okaywal groups the fsyncs
/// of concurrent committers). Its segments are preallocated (1 MiB, its default); it does not
/// report its fsync count.
fn okaywal_row(dir: &Path, writers: usize, records: usize, payload: usize) -> Result<Row> {
    let path = dir.join(format!("bench-okaywal-{writers}"));
    let _ = std::fs::remove_dir_all(&path);
    let wal = okaywal::WriteAheadLog::recover(&path, okaywal::LogVoid)?;
    let body = vec![0x5Au8; payload];
    let cpu_started = process_cpu_seconds();
    let (latencies, seconds) = run_threads(writers, records.div_ceil(writers), || {
        let (wal, body) = (wal.clone(), &body);
        Ok(move || -> Result<()> {
            let mut entry = wal.begin_entry()?;
            entry.write_chunk(body)?;
            entry.commit()?;
            Ok(())
        })
    })?;
    let cpu_seconds = process_cpu_seconds() - cpu_started;
    drop(wal);
    let _ = std::fs::remove_dir_all(&path);
    Ok(Row {
        system: "okaywal".into(),
        mode: "peer",
        writers,
        records: latencies.len(),
        seconds,
        cpu_seconds,
        syncs: 0,
        latencies_us: latencies,
    })
}

/// SQLite, `journal_mode=WAL`, `synchronous=FULL`: one connection per writer, one INSERT of
/// a blob per transaction (autocommit). SQLite has no group commit: each commit syncs its WAL.
fn sqlite_row(dir: &Path, writers: usize, records: usize, payload: usize) -> Result<Row> {
    let path = dir.join(format!("bench-sqlite-{writers}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let open = || -> Result<rusqlite::Connection> {
        let conn = rusqlite::Connection::open(&path)?;
        conn.busy_timeout(std::time::Duration::from_secs(60))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(conn)
    };
    open()?.execute(
        "CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)",
        [],
    )?;
    let body = vec![0x5Au8; payload];
    let cpu_started = process_cpu_seconds();
    let (latencies, seconds) = run_threads(writers, records.div_ceil(writers), || {
        let (conn, body) = (open()?, &body);
        Ok(move || -> Result<()> {
            conn.execute("INSERT INTO log (body) VALUES (?1)", [body])?;
            Ok(())
        })
    })?;
    let cpu_seconds = process_cpu_seconds() - cpu_started;
    Ok(Row {
        system: "sqlite (WAL, synchronous=FULL)".into(),
        mode: "peer",
        writers,
        records: latencies.len(),
        seconds,
        cpu_seconds,
        syncs: latencies.len() as u64,
        latencies_us: latencies,
    })
}

/// `stele bench`'s options, as the command line gives them.
#[derive(clap::Args)]
pub struct BenchOptions {
    /// Directory on the disk to measure (default: a fresh temporary directory).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Durable commits per row.
    #[arg(long, default_value_t = 4000)]
    pub(crate) records: usize,
    /// Payload sizes in bytes: one durable-commit table per size (the journal uses the
    /// first).
    #[arg(long, value_delimiter = ',', default_value = "128,4096")]
    pub(crate) payload_bytes: Vec<usize>,
    /// Writer counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub(crate) writers: Vec<usize>,
    /// Also write one JSON object per row to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Which tables to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "wal,segments,non-durable,recovery,journal,push-log,components,cold-start,plugin,archive,tenants"
    )]
    pub(crate) workloads: Vec<Workload>,
    /// The counts of open logs the tenants table measures, each in a process of its own.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    pub(crate) tenants: Vec<usize>,
    /// The counts of registered tenants (none open) the tenants table's second part measures.
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    pub(crate) tenants_registered: Vec<usize>,
    /// Journal appends per system.
    #[arg(long, default_value_t = 2000)]
    pub(crate) journal_appends: usize,
    /// Push-log pushes (of 10,000 rows, about 1 MB) per system.
    #[arg(long, default_value_t = 64)]
    pub(crate) pushes: usize,
    /// A short run (under a minute on a 2-core machine): every table and system, with
    /// 800 commits per row, 400 journal appends, 16 pushes, at most 100 tenants open and 1,000
    /// registered. Noisier;
    /// for a smoke check.
    #[arg(long)]
    pub(crate) quick: bool,
}

impl BenchOptions {
    /// Runs the tables in `--dir`, or in a fresh temporary directory.
    pub fn run(self) -> Result<()> {
        let quick = self.quick;
        let args = BenchArgs {
            records: if quick {
                self.records.min(800)
            } else {
                self.records
            },
            payload_bytes: self.payload_bytes,
            writers: self.writers,
            json: self.json,
            workloads: self.workloads,
            journal_appends: if quick {
                self.journal_appends.min(400)
            } else {
                self.journal_appends
            },
            pushes: if quick {
                self.pushes.min(16)
            } else {
                self.pushes
            },
            tenants: if quick {
                self.tenants.into_iter().filter(|&n| n <= 100).collect()
            } else {
                self.tenants
            },
            tenants_registered: if quick {
                self.tenants_registered
                    .into_iter()
                    .map(|n| n.min(1000))
                    .collect()
            } else {
                self.tenants_registered
            },
        };
        match self.dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir)?;
                run(&dir, &args)
            }
            None => {
                let dir = tempfile::Builder::new().prefix("stele-bench-").tempdir()?;
                run(dir.path(), &args)
            }
        }
    }
}

pub fn run(dir: &Path, args: &BenchArgs) -> Result<()> {
    let mut json = match &args.json {
        Some(path) => {
            Some(std::fs::File::create(path).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    if args.workloads.contains(&Workload::Wal) {
        progress().set_message("wal");
        wal_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::Journal) {
        progress().set_message("journal");
        journal_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::NonDurable) {
        progress().set_message("non-durable");
        non_durable_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::Recovery) {
        progress().set_message("recovery");
        recovery_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::PushLog) {
        progress().set_message("push-log");
        push_log_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::Segments) {
        progress().set_message("segments");
        segments_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::Components) {
        progress().set_message("components");
        components_table(dir)?;
    }
    if args.workloads.contains(&Workload::ColdStart) {
        progress().set_message("cold start");
        sandbox::cold_start_table(dir)?;
    }
    if args.workloads.contains(&Workload::Plugin) {
        progress().set_message("plugin");
        sandbox::plugin_table(dir, args)?;
    }
    if args.workloads.contains(&Workload::Guests) {
        progress().set_message("guests");
        guests::guests_table(dir, args)?;
    }
    if args.workloads.contains(&Workload::Archive) {
        progress().set_message("archive");
        archive::archive_table(dir, args, json.as_mut())?;
    }
    if args.workloads.contains(&Workload::Quota) {
        progress().set_message("quota");
        quota::quota_tables(dir, args)?;
    }
    if args.workloads.contains(&Workload::Tenants) {
        progress().set_message("tenants");
        tenants::tenants_table(dir, &args.tenants)?;
        tenants::registered_table(dir, &args.tenants_registered)?;
        tenants::prometheus_sample(dir)?;
    }
    progress().finish_and_clear();
    Ok(())
}

/// Rounds of the one-writer comparison; each row's figure is the median over them, and the
/// systems run alternated within each round so that they share the machine's noise.
const SEGMENT_TABLE_ROUNDS: usize = 3;

/// Segments small enough that a short run rotates dozens of times (about 110 records of 128 B
/// each), for the rotation latency rows.
const ROTATION_SEGMENT_BYTES: u64 = 16 << 10;

/// One durable writer (128 B unless told): the limits, Stele single-file and segmented, each
/// the median of [`SEGMENT_TABLE_ROUNDS`] rounds; then, with small segments, the latency of the
/// commits that rotated to a new segment against the ones that did not.
fn segments_table(dir: &Path, args: &BenchArgs, json: Option<&mut std::fs::File>) -> Result<()> {
    let payload = journal_payload(args);
    let records = args.records.min(4000);
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    for _ in 0..SEGMENT_TABLE_ROUNDS {
        let mut round = vec![
            limit(dir, records, payload, true)?,
            limit(dir, records, payload, false)?,
        ];
        for (mode, layout) in [
            (Mode::Native, Layout::SingleFile),
            (Mode::Native, Layout::Segments(SEGMENT_BYTES_DEFAULT)),
            (Mode::Sandboxed, Layout::SingleFile),
            (Mode::Sandboxed, Layout::Segments(SEGMENT_BYTES_DEFAULT)),
        ] {
            let mut row = stele(dir, mode, Driver::Threads, layout, 1, records, payload)?;
            row.system = format!("stele {} ({})", mode.name(), layout.label());
            round.push(row);
        }
        rounds.push(round);
    }
    let median = |i: usize| {
        let mut rates: Vec<f64> = rounds.iter().map(|r| r[i].records_per_s()).collect();
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let limit_rps = median(0);
    let append_rps = median(1);
    println!(
        "\nOne durable writer, {payload} B records (policy Barrier = fdatasync on Linux): \
         records/s are medians of {SEGMENT_TABLE_ROUNDS} alternated rounds of {records} commits; \
         p50/p99 from the last round.\n"
    );
    println!(
        "| system | records/s (median) | each round | p50 µs | p99 µs | × limit prealloc | × limit append |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|");
    let last = rounds.last().expect("rounds ran");
    let mut json = json;
    for (i, row) in last.iter().enumerate() {
        let rate = median(i);
        let each: Vec<String> = rounds
            .iter()
            .map(|r| format!("{:.0}", r[i].records_per_s()))
            .collect();
        println!(
            "| {} | {rate:.0} | {} | {:.0} | {:.0} | {:.2} | {:.2} |",
            row.system,
            each.join(" / "),
            row.percentile(0.5),
            row.percentile(0.99),
            rate / limit_rps,
            rate / append_rps
        );
        if let Some(out) = json.as_deref_mut() {
            writeln!(
                out,
                "{{\"workload\":\"one-writer-segments\",\"system\":\"{}\",\"mode\":\"{}\",\"writers\":1,\"payload_bytes\":{payload},\"records_per_s\":{rate:.1},\"mb_per_s\":{:.3},\"fsyncs_per_record\":null,\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
                row.system,
                row.mode,
                rate * payload as f64 / 1e6,
                row.percentile(0.5),
                row.percentile(0.99),
            )?;
        }
    }

    // Rotation latency: one writer, so each commit is its own group, and the commit during
    // which `segments_started` grew is the one that created, preallocated and synced the next
    // segment (file sync and directory sync) before writing its record.
    let name = "bench-rotation.wal";
    remove_log(&dir.join(name));
    let fs: Arc<dyn stele::vfs::Vfs> = Arc::new(RealFs::open_root(dir)?);
    let options = WalOptions::segmented(DurabilityPolicy::Barrier, ROTATION_SEGMENT_BYTES)
        .with_retained_bytes_max(0);
    let wal = stele::wal::WalWriter::create_segmented(fs, name, options)?;
    let body = vec![0x5Au8; payload];
    let (mut rotating, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..records {
        let before = wal.stats().segments_started;
        let t = Instant::now();
        wal.commit_durable(1, &body)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        if wal.stats().segments_started > before {
            rotating.push(us);
        } else {
            plain.push(us);
        }
    }
    drop(wal);
    remove_log(&dir.join(name));
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v.get(((v.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "\nRotation latency, stele native, one writer, {} KiB segments, {records} durable \
         commits of {payload} B:\n",
        ROTATION_SEGMENT_BYTES >> 10
    );
    println!("| commits | count | p50 µs | p99 µs | max µs |");
    println!("|---|---:|---:|---:|---:|");
    for (label, v) in [("rotating", &mut rotating), ("not rotating", &mut plain)] {
        let (p50, p99, max) = (pct(v, 0.5), pct(v, 0.99), pct(v, 1.0));
        println!("| {label} | {} | {p50:.0} | {p99:.0} | {max:.0} |", v.len());
    }
    Ok(())
}

fn wal_table(dir: &Path, args: &BenchArgs, mut json: Option<&mut std::fs::File>) -> Result<()> {
    for &payload in &args.payload_bytes {
        durable_commit_table(dir, args, payload, json.as_deref_mut())?;
    }
    Ok(())
}

/// The rate of the row for `system` (a prefix of its name) at `writers`, if it ran.
fn rate_of(rows: &[Row], system: &str, writers: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.system.starts_with(system) && r.writers == writers)
        .map(Row::records_per_s)
}

/// The native row a Stele row is compared with: the one with the same driver, so that a
/// sandboxed task row's ratio is the sandbox's price, not tokio's.
fn native_peer(system: &str) -> &'static str {
    if system.contains("(tokio tasks") {
        "stele native (tokio tasks)"
    } else {
        "stele native (threads)"
    }
}

fn ratio(rate: f64, against: Option<f64>) -> String {
    against.map_or("-".into(), |a| format!("{:.2}", rate / a))
}

fn durable_commit_table(
    dir: &Path,
    args: &BenchArgs,
    payload: usize,
    json: Option<&mut std::fs::File>,
) -> Result<()> {
    let mut rows = Vec::new();
    // Systems that sync once per commit get fewer records, so their rows take comparable time.
    let one_sync_per_commit = args.records.min(2000);
    rows.push(limit(dir, one_sync_per_commit, payload, true)?);
    rows.push(limit(dir, one_sync_per_commit, payload, false)?);
    for &n in &args.writers {
        // Alternate the systems at each N so that they share the machine's noise.
        for (mode, driver, records) in [
            (Mode::Native, Driver::Threads, args.records),
            (Mode::Native, Driver::Tasks, args.records),
            (Mode::Sandboxed, Driver::Threads, args.records),
            (Mode::Sandboxed, Driver::Tasks, args.records),
            (Mode::SandboxedPlain, Driver::Threads, one_sync_per_commit),
        ] {
            let layout = Layout::Segments(SEGMENT_BYTES_DEFAULT);
            rows.push(stele(dir, mode, driver, layout, n, records, payload)?);
        }
        rows.push(okaywal_row(dir, n, args.records, payload)?);
        rows.push(sqlite_row(dir, n, one_sync_per_commit, payload)?);
    }
    let limit_rps = rows[0].records_per_s();
    println!(
        "\nDurable commits of {payload} B (Stele's policy Barrier = fdatasync on Linux), one run; \
         ratios against stele native with the same driver (threads or tokio tasks), okaywal and sqlite at the same N, and against the \
         preallocated limit (one writer).\n"
    );
    println!(
        "| system | writers | records/s | records/fsync | CPU µs/record | p50 µs | p99 µs | × native | × okaywal | × sqlite | × limit |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let rate = r.records_per_s();
        println!(
            "| {} | {} | {rate:.0} | {} | {:.1} | {:.0} | {:.0} | {} | {} | {} | {:.2} |",
            r.system,
            r.writers,
            if r.syncs == 0 {
                "-".into()
            } else {
                format!("{:.1}", r.records as f64 / r.syncs as f64)
            },
            r.cpu_us_per_record(),
            r.percentile(0.5),
            r.percentile(0.99),
            ratio(rate, rate_of(&rows, native_peer(&r.system), r.writers)),
            ratio(rate, rate_of(&rows, "okaywal", r.writers)),
            ratio(rate, rate_of(&rows, "sqlite", r.writers)),
            rate / limit_rps,
        );
    }
    if let Some(out) = json {
        for r in &rows {
            writeln!(
                out,
                "{{\"workload\":\"durable-commit\",\"system\":\"{}\",\"mode\":\"{}\",\"writers\":{},\"payload_bytes\":{payload},\"records_per_s\":{:.1},\"mb_per_s\":{:.3},\"fsyncs_per_record\":{},\"p50_us\":{:.1},\"p99_us\":{:.1},\"cpu_us_per_record\":{:.2}}}",
                r.system,
                r.mode,
                r.writers,
                r.records_per_s(),
                r.records_per_s() * payload as f64 / 1e6,
                if r.syncs == 0 {
                    "null".into()
                } else {
                    format!("{:.4}", r.syncs as f64 / r.records as f64)
                },
                r.percentile(0.5),
                r.percentile(0.99),
                r.cpu_us_per_record(),
            )?;
        }
    }
    Ok(())
}

/// The journal's value size: the first payload size asked for.
fn journal_payload(args: &BenchArgs) -> usize {
    args.payload_bytes.first().copied().unwrap_or(128)
}

/// One system's journal appends: each is one `Set` op of `payload` value bytes, appended and
/// made durable; the latency is the caller's, from the call to its return.
enum JournalSystem {
    TokioFs(tokio::fs::File),
    Stele(stele_host::Journal),
}

impl JournalSystem {
    fn name(&self) -> String {
        match self {
            JournalSystem::TokioFs(_) => "tokio::fs write_all + sync_data".into(),
            JournalSystem::Stele(j) => format!("stele journal {}", j.mode().name()),
        }
    }

    async fn append(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        match self {
            JournalSystem::TokioFs(file) => {
                file.write_all(buf).await?;
                file.sync_data().await?;
            }
            JournalSystem::Stele(journal) => journal.append(buf).await?,
        }
        Ok(())
    }
}

/// Journal append latency, one writer, the systems alternated in rounds so that they share
/// the machine's noise. The peer is what the reference's callers did before: an appending
/// `tokio::fs::File`, `write_all` then `sync_data`, the same bytes per append.
fn journal_table(dir: &Path, args: &BenchArgs, json: Option<&mut std::fs::File>) -> Result<()> {
    const ROUND: usize = 100;
    let appends = args.journal_appends.max(ROUND);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let op = stele::journal::JournalOp::Set {
        key: b"session/key".to_vec(),
        value: vec![0x5a; journal_payload(args)],
    };
    let frames = stele::journal::encode_frames(std::slice::from_ref(&op));
    let rows = rt.block_on(async {
        let fs = Arc::new(RealFs::open_root(dir)?);
        let mut systems = Vec::new();
        let peer = dir.join("bench-tokio-fs.journal");
        let _ = std::fs::remove_file(&peer);
        systems.push(JournalSystem::TokioFs(
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&peer)
                .await?,
        ));
        for mode in Mode::ALL {
            let name = format!("bench-{}.journal", mode.name());
            let _ = std::fs::remove_file(dir.join(&name));
            systems.push(JournalSystem::Stele(
                stele_host::Journal::open(fs.clone(), &name, mode).await?,
            ));
        }
        let mut latencies: Vec<Vec<f64>> = vec![Vec::with_capacity(appends); systems.len()];
        let mut seconds = vec![0f64; systems.len()];
        let mut cpu_seconds = vec![0f64; systems.len()];
        let mut buf = frames.clone();
        for _ in 0..appends / ROUND {
            for (k, system) in systems.iter_mut().enumerate() {
                let cpu_started = process_cpu_seconds();
                let started = Instant::now();
                for _ in 0..ROUND {
                    let t = Instant::now();
                    system.append(&mut buf).await?;
                    latencies[k].push(t.elapsed().as_secs_f64() * 1e6);
                }
                seconds[k] += started.elapsed().as_secs_f64();
                cpu_seconds[k] += process_cpu_seconds() - cpu_started;
            }
        }
        let rows: Vec<Row> = systems
            .iter()
            .zip(latencies)
            .zip(seconds.into_iter().zip(cpu_seconds))
            .map(|((system, latencies_us), (seconds, cpu_seconds))| Row {
                system: system.name(),
                mode: match system {
                    JournalSystem::TokioFs(_) => "raw",
                    JournalSystem::Stele(j) => j.mode().name(),
                },
                writers: 1,
                records: latencies_us.len(),
                seconds,
                cpu_seconds,
                syncs: latencies_us.len() as u64,
                latencies_us,
            })
            .collect();
        Ok::<_, anyhow::Error>(rows)
    })?;
    let peer_p50 = rows[0].percentile(0.5);
    let peer_rps = rows[0].records_per_s();
    println!(
        "\nJournal appends: one Set op of {} B value ({} B framed) per append, made durable, one \
         writer, {appends} appends per system in rounds of {ROUND}; ratios against tokio::fs.\n",
        journal_payload(args),
        frames.len()
    );
    println!(
        "| system | appends/s | CPU µs/append | p50 µs | p99 µs | p50 × tokio::fs | appends/s × tokio::fs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.1} | {:.0} | {:.0} | {:.2} | {:.2} |",
            r.system,
            r.records_per_s(),
            r.cpu_us_per_record(),
            r.percentile(0.5),
            r.percentile(0.99),
            r.percentile(0.5) / peer_p50,
            r.records_per_s() / peer_rps,
        );
    }
    if let Some(out) = json {
        for r in &rows {
            writeln!(
                out,
                "{{\"workload\":\"journal-append\",\"system\":\"{}\",\"mode\":\"{}\",\"writers\":1,\"payload_bytes\":{},\"records_per_s\":{:.1},\"mb_per_s\":{:.3},\"fsyncs_per_record\":1.0,\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
                r.system,
                r.mode,
                journal_payload(args),
                r.records_per_s(),
                r.records_per_s() * frames.len() as f64 / 1e6,
                r.percentile(0.5),
                r.percentile(0.99),
            )?;
        }
    }
    Ok(())
}

/// Rows per pushed batch in the push-log table: the size the issue quotes figures for.
const PUSH_ROWS: usize = 10_000;

/// One batch of the ref-table schema, about 1 MiB of Arrow data: 10,000 refs, each with a
/// 40-hex-digit target.
fn push_batch() -> Result<arrow_array::RecordBatch> {
    use arrow_array::{Int64Array, StringArray, UInt64Array};
    Ok(arrow_array::RecordBatch::try_new(
        stele::push_log::refs::schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..PUSH_ROWS).map(|i| format!("refs/heads/branch-{i:06}")),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..PUSH_ROWS).map(|i| format!("{:040x}", i * 7919)),
            )),
            Arc::new(UInt64Array::from(vec![1u64; PUSH_ROWS])),
            Arc::new(Int64Array::from(vec![1_700_000_000_000i64; PUSH_ROWS])),
        ],
    )?)
}

enum PushSystem {
    /// The peer: one arrow-ipc `StreamWriter` on an appending file; each push is
    /// `write` + `flush` + `fdatasync`. No framing, no checksum, no recovery.
    ArrowIpc(arrow_ipc::writer::StreamWriter<std::fs::File>),
    Stele(stele_host::PushLog),
}

/// Push-log throughput, one writer: appends of `PUSH_ROWS`-row batches made durable, then a
/// full scan of what was written, the systems alternated in rounds. MB/s counts the batch's
/// Arrow IPC bytes (the same for every system), so the ratios are throughput ratios.
fn push_log_table(dir: &Path, args: &BenchArgs, json: Option<&mut std::fs::File>) -> Result<()> {
    const ROUND: usize = 4;
    let pushes = args.pushes.max(ROUND) / ROUND * ROUND;
    let batch = push_batch()?;
    let ipc_bytes = stele::push_log::ipc::encode_stream(&batch)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .len();
    let fs: Arc<RealFs> = Arc::new(RealFs::open_root(dir)?);
    let names = [
        "bench-arrow-ipc.stream",
        "bench-native.pushlog",
        "bench-sandboxed.pushlog",
    ];
    for name in names {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let mut systems = [
        (
            "arrow-ipc StreamWriter + fdatasync",
            "raw",
            PushSystem::ArrowIpc(arrow_ipc::writer::StreamWriter::try_new(
                std::fs::File::create(dir.join(names[0]))?,
                &batch.schema(),
            )?),
        ),
        (
            "stele",
            "native",
            PushSystem::Stele(stele_host::PushLog::new(
                fs.clone(),
                names[1],
                batch.schema(),
                Mode::Native,
            )?),
        ),
        (
            "stele",
            "sandboxed",
            PushSystem::Stele(stele_host::PushLog::new(
                fs.clone(),
                names[2],
                batch.schema(),
                Mode::Sandboxed,
            )?),
        ),
    ];
    let mut latencies: Vec<Vec<f64>> = vec![Vec::with_capacity(pushes); systems.len()];
    let mut append_s = vec![0f64; systems.len()];
    let mut append_cpu_s = vec![0f64; systems.len()];
    for _ in 0..pushes / ROUND {
        for (k, (_, _, system)) in systems.iter_mut().enumerate() {
            let cpu_started = process_cpu_seconds();
            let started = Instant::now();
            for _ in 0..ROUND {
                let t = Instant::now();
                match system {
                    PushSystem::ArrowIpc(w) => {
                        w.write(&batch)?;
                        w.flush()?;
                        w.get_ref().sync_data()?;
                    }
                    PushSystem::Stele(log) => {
                        log.append(&batch)?;
                    }
                }
                latencies[k].push(t.elapsed().as_secs_f64() * 1e6);
            }
            append_s[k] += started.elapsed().as_secs_f64();
            append_cpu_s[k] += process_cpu_seconds() - cpu_started;
        }
    }
    // Scans read from the page cache (the files were just written): they measure decoding
    // and checking, not the disk. Each scan is timed three times; the median counts.
    let mut scan_s = vec![Vec::new(); systems.len()];
    for _ in 0..3 {
        for (k, (_, _, system)) in systems.iter().enumerate() {
            let started = Instant::now();
            let rows = match system {
                PushSystem::ArrowIpc(_) => {
                    let file = std::io::BufReader::new(std::fs::File::open(dir.join(names[0]))?);
                    let mut rows = 0;
                    for b in arrow_ipc::reader::StreamReader::try_new(file, None)? {
                        rows += b?.num_rows();
                    }
                    rows
                }
                PushSystem::Stele(log) => {
                    let mut rows = 0;
                    for frame in log.scan()? {
                        rows += frame?.batch.num_rows();
                    }
                    rows
                }
            };
            anyhow::ensure!(rows == pushes * PUSH_ROWS, "scan found {rows} rows");
            scan_s[k].push(started.elapsed().as_secs_f64());
        }
    }
    let mb = (pushes * ipc_bytes) as f64 / 1e6;
    let stats: Vec<(f64, f64, f64, f64)> = (0..systems.len())
        .map(|k| {
            let mut lat = latencies[k].clone();
            lat.sort_by(f64::total_cmp);
            let mut scans = scan_s[k].clone();
            scans.sort_by(f64::total_cmp);
            let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
            (
                mb / append_s[k],
                mb / scans[scans.len() / 2],
                pct(0.5),
                pct(0.99),
            )
        })
        .collect();
    println!(
        "\nPush log: {pushes} pushes of {PUSH_ROWS} rows ({:.2} MB of Arrow IPC each), one \
         writer, each push durable, in rounds of {ROUND}; then a full scan (page cache, median \
         of 3). Ratios against the raw arrow-ipc StreamWriter + fdatasync.\n",
        ipc_bytes as f64 / 1e6
    );
    println!(
        "| system | mode | append MB/s | pushes/s | CPU ms/push | p50 ms | p99 ms | scan MB/s | append × raw | scan × raw |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (k, (system, mode, _)) in systems.iter().enumerate() {
        let (append, scan, p50, p99) = stats[k];
        println!(
            "| {system} | {mode} | {append:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {scan:.0} | {:.2} | {:.2} |",
            append * 1e6 / ipc_bytes as f64,
            append_cpu_s[k] * 1e3 / pushes as f64,
            p50 / 1e3,
            p99 / 1e3,
            append / stats[0].0,
            scan / stats[0].1,
        );
    }
    if let Some(out) = json {
        for (k, (system, mode, _)) in systems.iter().enumerate() {
            let (append, scan, p50, p99) = stats[k];
            writeln!(
                out,
                "{{\"workload\":\"push-log-append\",\"system\":\"{system}\",\"mode\":\"{mode}\",\"writers\":1,\"payload_bytes\":{ipc_bytes},\"records_per_s\":{:.1},\"mb_per_s\":{append:.3},\"fsyncs_per_record\":1.0,\"p50_us\":{p50:.1},\"p99_us\":{p99:.1}}}",
                append * 1e6 / ipc_bytes as f64,
            )?;
            writeln!(
                out,
                "{{\"workload\":\"push-log-scan\",\"system\":\"{system}\",\"mode\":\"{mode}\",\"writers\":1,\"payload_bytes\":{ipc_bytes},\"records_per_s\":{:.1},\"mb_per_s\":{scan:.3},\"fsyncs_per_record\":0.0,\"p50_us\":null,\"p99_us\":null}}",
                scan * 1e6 / ipc_bytes as f64,
            )?;
        }
    }
    Ok(())
}

/// Non-durable commits of 128 B, one writer, in every mode, under `DurabilityPolicy::Skip`
/// (groups are written, never synced; each row ends with one `flush`): what the engine and the
/// component boundary cost without a sync in the way. (Under a syncing policy, a lone
/// writer's `commit` leads a group and waits for its sync like a durable one.) Three rounds,
/// alternated; the median round counts.
fn non_durable_table(dir: &Path, args: &BenchArgs, json: Option<&mut std::fs::File>) -> Result<()> {
    const PAYLOAD: usize = 128;
    let records = args.records * 25;
    let body = vec![0x5Au8; PAYLOAD];
    let fs = Arc::new(RealFs::open_root(dir)?);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Mode::ALL.len()];
    let mut cpu_us: Vec<Vec<f64>> = vec![Vec::new(); Mode::ALL.len()];
    for _ in 0..3 {
        for (k, mode) in Mode::ALL.into_iter().enumerate() {
            let name = format!("bench-nondurable-{}.wal", mode.name());
            let _ = std::fs::remove_file(dir.join(&name));
            let options =
                WalOptions::single_file(DurabilityPolicy::Skip).with_retained_bytes_max(0);
            let wal = Wal::create(fs.clone(), &name, options, mode)?;
            let cpu_started = process_cpu_seconds();
            let started = Instant::now();
            for _ in 0..records {
                wal.commit(1, &body)?;
            }
            wal.flush()?;
            rates[k].push(records as f64 / started.elapsed().as_secs_f64());
            cpu_us[k].push((process_cpu_seconds() - cpu_started) * 1e6 / records as f64);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let native = median(&rates[0]);
    let native_cpu = median(&cpu_us[0]);
    println!(
        "\nNon-durable commits of {PAYLOAD} B (policy Skip: written, not synced), one writer, \
         {records} per row then one flush; median of 3 alternated rounds; ratios against native.\n"
    );
    println!("| mode | records/s | MB/s | CPU µs/record | × native | CPU × native |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (k, mode) in Mode::ALL.into_iter().enumerate() {
        let rate = median(&rates[k]);
        let cpu = median(&cpu_us[k]);
        println!(
            "| stele {} | {rate:.0} | {:.1} | {cpu:.2} | {:.2} | {:.2} |",
            mode.name(),
            rate * PAYLOAD as f64 / 1e6,
            rate / native,
            cpu / native_cpu,
        );
    }
    if let Some(out) = json {
        for (k, mode) in Mode::ALL.into_iter().enumerate() {
            let rate = median(&rates[k]);
            writeln!(
                out,
                "{{\"workload\":\"non-durable-commit\",\"system\":\"stele\",\"mode\":\"{}\",\"writers\":1,\"payload_bytes\":{PAYLOAD},\"records_per_s\":{rate:.1},\"mb_per_s\":{:.3},\"fsyncs_per_record\":null,\"p50_us\":null,\"p99_us\":null}}",
                mode.name(),
                rate * PAYLOAD as f64 / 1e6,
            )?;
        }
    }
    Ok(())
}

/// The size of the WAL the recovery table opens.
const RECOVERY_LOG_BYTES: usize = 256 << 20;

/// Recovery: a 256 MiB WAL of 4 KiB records is written once, then opened (recovered, every
/// record checked) in every mode, with the peak resident set reset before each open
/// (`/proc/self/clear_refs`). The file is in the page cache: this measures replay, not the
/// disk. Sandboxed, the component is compiled before the clock starts.
fn recovery_table(dir: &Path, _args: &BenchArgs, json: Option<&mut std::fs::File>) -> Result<()> {
    const PAYLOAD: usize = 4096;
    // 200 records of 4 KiB: one group, under the 1 MiB group bound.
    const BATCH: usize = 200;
    let fs = Arc::new(RealFs::open_root(dir)?);
    let name = "bench-recovery.wal";
    let _ = std::fs::remove_file(dir.join(name));
    let options = WalOptions::single_file(DurabilityPolicy::Skip).with_retained_bytes_max(0);
    let wal = Wal::create(fs.clone(), name, options, Mode::Native)?;
    let body = vec![0x5Au8; PAYLOAD];
    let batch: Vec<(u16, &[u8])> = (0..BATCH).map(|_| (1u16, &body[..])).collect();
    for _ in 0..RECOVERY_LOG_BYTES.div_ceil(PAYLOAD * BATCH) {
        wal.commit_many(&batch)?;
    }
    wal.flush()?;
    drop(wal);
    let bytes = std::fs::metadata(dir.join(name))?.len();
    // Compiles the components (once per process) before any clock starts.
    let warmup = "bench-recovery-warmup.wal";
    let _ = std::fs::remove_file(dir.join(warmup));
    drop(Wal::create(fs.clone(), warmup, options, Mode::Sandboxed)?);
    let mut rows = Vec::new();
    for mode in Mode::ALL {
        let rss_reset = stele_host::peak_rss::reset();
        let started = Instant::now();
        let (wal, recovery) = Wal::open(fs.clone(), name, options, mode)?;
        let seconds = started.elapsed().as_secs_f64();
        let rss = stele_host::peak_rss::peak_bytes().filter(|_| rss_reset);
        anyhow::ensure!(
            recovery.records as usize == RECOVERY_LOG_BYTES.div_ceil(PAYLOAD * BATCH) * BATCH,
            "{} recovered {} records",
            mode.name(),
            recovery.records
        );
        drop(wal);
        rows.push((mode, bytes as f64 / seconds / 1e6, rss));
    }
    println!(
        "\nRecovery: opening a {} MiB single-file WAL of {PAYLOAD} B records (page cache), \
         every record checked; peak RSS of the whole process during the open.\n",
        bytes >> 20
    );
    println!("| mode | MB/s | peak RSS MiB | × native |");
    println!("|---|---:|---:|---:|");
    for (mode, mbps, rss) in &rows {
        println!(
            "| stele {} | {mbps:.0} | {} | {:.2} |",
            mode.name(),
            rss.map_or("-".into(), |b| (b >> 20).to_string()),
            mbps / rows[0].1
        );
    }
    if let Some(out) = json {
        for (mode, mbps, _) in &rows {
            writeln!(
                out,
                "{{\"workload\":\"recovery-256mib\",\"system\":\"stele\",\"mode\":\"{}\",\"writers\":1,\"payload_bytes\":{PAYLOAD},\"records_per_s\":{:.1},\"mb_per_s\":{mbps:.3},\"fsyncs_per_record\":null,\"p50_us\":null,\"p99_us\":null}}",
                mode.name(),
                mbps * 1e6 / (PAYLOAD + stele::wal::record::RECORD_OVERHEAD_BYTES) as f64,
            )?;
        }
    }
    Ok(())
}

/// Instantiations timed per component; the table gives their median and p99.
const INSTANTIATIONS: usize = 200;

/// The composed components `build.rs` made: the engine with the WASI-filesystem adapter, and
/// the example plugin with the engine.
static STELE_WASI_WASM: &[u8] = include_bytes!(env!("STELE_WASI_WASM"));

/// What a `stele-wasi.wasm` store holds: WASI alone, as a foreign host would give it.
struct WasiOnly {
    ctx: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for WasiOnly {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// One row of the components table: component, host, bytes, compile ms, (p50, p99) µs.
type ComponentRow = (&'static str, &'static str, usize, f64, (f64, f64));

/// Times `instantiate` [`INSTANTIATIONS`] times, after one untimed run.
fn time_instantiations(mut instantiate: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    instantiate()?;
    let mut samples = Vec::with_capacity(INSTANTIATIONS);
    for _ in 0..INSTANTIATIONS {
        let started = Instant::now();
        instantiate()?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
}

/// Each component's size, compile time (once, with the engine's configuration: Cranelift,
/// parallel compilation) and instantiation time, each instance in a fresh store, from a
/// pre-linked `InstancePre` as a host that runs many instances would.
fn components_table(dir: &Path) -> Result<()> {
    use stele_host::runtime::{COMPONENT_ASYNC_WASM, COMPONENT_WASM, Runtime};
    use wasmtime::component::{Component, Linker, ResourceTable};

    let runtime = Runtime::get()?;
    let engine = runtime.engine();
    let fs: Arc<dyn stele::vfs::Vfs> = Arc::new(RealFs::open_root(dir)?);
    let compile = |bytes: &[u8]| -> Result<(Component, f64)> {
        let started = Instant::now();
        let component = Component::new(engine, bytes).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        Ok((component, started.elapsed().as_secs_f64() * 1e3))
    };
    let wasmtime_err = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
    let mut rows: Vec<ComponentRow> = Vec::new();

    // The engine and the plugin import `stele:log/vfs`: Stele's own linker serves it. The
    // plugin also imports its platform's `note`, which this bench drops.
    let mut vfs_linker = runtime.vfs_linker()?;
    vfs_linker
        .root()
        .func_wrap("note", |_, (_message,): (String,)| Ok(()))
        .map_err(wasmtime_err)?;
    for (name, host, bytes) in [
        ("stele.wasm", "stele-host (vfs_linker)", COMPONENT_WASM),
        (
            "example-plugin.wasm",
            "stele-host (vfs_linker)",
            EXAMPLE_PLUGIN_WASM,
        ),
    ] {
        let (component, compile_ms) = compile(bytes)?;
        let pre = vfs_linker
            .instantiate_pre(&component)
            .map_err(wasmtime_err)?;
        let timing = time_instantiations(|| {
            let mut store = runtime.vfs_store(fs.clone(), stele_host::SandboxLimits::default());
            pre.instantiate(&mut store).map_err(wasmtime_err)?;
            Ok(())
        })?;
        rows.push((name, host, bytes.len(), compile_ms, timing));
    }

    // The async build also imports `vfs-async`, which only Stele's sandboxed WAL links: time
    // what a user does, a sandboxed `Wal::create` (instantiation plus a new log's header, file
    // sync and directory sync), against the same for the plain build.
    let (_, async_compile_ms) = compile(COMPONENT_ASYNC_WASM)?;
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    for (name, mode, bytes, compile_ms) in [
        (
            "stele-async.wasm",
            Mode::Sandboxed,
            COMPONENT_ASYNC_WASM,
            async_compile_ms,
        ),
        (
            "stele.wasm",
            Mode::SandboxedPlain,
            COMPONENT_WASM,
            rows[0].3,
        ),
    ] {
        let log = format!("bench-instantiate-{}.wal", mode.name());
        let timing = time_instantiations(|| {
            let _ = std::fs::remove_file(dir.join(&log));
            drop(Wal::create(fs.clone(), &log, options, mode)?);
            Ok(())
        })?;
        let _ = std::fs::remove_file(dir.join(&log));
        let host = if mode == Mode::Sandboxed {
            "Wal::create, sandboxed (+ new log, 2 syncs)"
        } else {
            "Wal::create, sandboxed-plain (+ new log, 2 syncs)"
        };
        rows.push((name, host, bytes.len(), compile_ms, timing));
    }

    // The composed engine under wasmtime-wasi alone, with one preopened directory.
    let (component, compile_ms) = compile(STELE_WASI_WASM)?;
    let mut linker = Linker::<WasiOnly>::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(wasmtime_err)?;
    let pre = linker.instantiate_pre(&component).map_err(wasmtime_err)?;
    let timing = time_instantiations(|| {
        let mut ctx = wasmtime_wasi::WasiCtx::builder();
        ctx.preopened_dir(dir, "/", wasmtime_wasi::FsPerms::ReadWrite)
            .map_err(wasmtime_err)?;
        let mut store = wasmtime::Store::new(
            engine,
            WasiOnly {
                ctx: ctx.build(),
                table: ResourceTable::new(),
            },
        );
        // The runtime's engine checks epochs; put this store's deadline out of reach.
        store.set_epoch_deadline(u64::MAX / 2);
        pre.instantiate(&mut store).map_err(wasmtime_err)?;
        Ok(())
    })?;
    rows.push((
        "stele-wasi.wasm",
        "wasmtime-wasi alone, 1 preopen",
        STELE_WASI_WASM.len(),
        compile_ms,
        timing,
    ));

    println!(
        "\nComponents: size, compile time (once) and instantiation (fresh store each time, from \
         a pre-linked InstancePre; median and p99 of {INSTANTIATIONS}).\n"
    );
    println!("| component | host | bytes | compile ms | instantiate p50 µs | p99 µs |");
    println!("|---|---|---:|---:|---:|---:|");
    for (name, host, bytes, compile_ms, (p50, p99)) in &rows {
        println!("| {name} | {host} | {bytes} | {compile_ms:.0} | {p50:.0} | {p99:.0} |");
    }
    Ok(())
}
