//! `stele demo`: a tour on real files, the same durable workload natively and in both
//! components, every log reopened and checked record by record.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use stele::recovery::LogEnd;
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, Wal, read_wal};

use crate::common::demo_payload;

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Directory to work in (created if missing). Default: a fresh temporary directory,
    /// removed afterwards unless --keep is given.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the temporary directory and print its path.
    #[arg(long)]
    keep: bool,
    /// Writer threads per mode.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Durable commits per thread.
    #[arg(long, default_value_t = 250)]
    records_per_thread: usize,
    /// Payload size of each record, in bytes (at least 16).
    #[arg(long, default_value_t = 128)]
    payload_bytes: usize,
}

struct DemoRow {
    mode: Mode,
    records: u64,
    seconds: f64,
    groups: u64,
    histogram: Vec<u64>,
    recovered: u64,
    recovery_end: LogEnd,
}

pub(crate) fn demo(args: DemoArgs) -> Result<()> {
    if args.payload_bytes < 16 {
        bail!("--payload-bytes must be at least 16 (it carries the thread and record index)");
    }
    if args.threads == 0 || args.records_per_thread == 0 {
        bail!("--threads and --records-per-thread must be at least 1");
    }
    let mut temp = None;
    let dir = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            dir.clone()
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("stele-demo-")
                .tempdir()
                .context("create a temporary directory")?;
            let path = t.path().to_path_buf();
            temp = Some(t);
            path
        }
    };
    println!("Stele demo in {}", dir.display());
    println!(
        "{} threads x {} durable commits of {} B each, policy FullSync (each group ends with fsync)\n",
        args.threads, args.records_per_thread, args.payload_bytes
    );
    let fs: Arc<RealFs> = Arc::new(RealFs::open_root(&dir).context("open the demo directory")?);
    let mut rows = Vec::new();
    for mode in Mode::ALL {
        rows.push(demo_mode(&fs, mode, &args)?);
    }

    println!("| mode | threads | records | groups | records/fsync | records/s | recovered |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.0} | {} ({:?}) |",
            r.mode.name(),
            args.threads,
            r.records,
            r.groups,
            r.records as f64 / r.groups.max(1) as f64,
            r.records as f64 / r.seconds,
            r.recovered,
            r.recovery_end,
        );
    }
    println!("\nGroups by records per group (log2 buckets):");
    for r in &rows {
        let buckets: Vec<String> = r
            .histogram
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| format!("{}-{}: {n}", 1u64 << i, (1u64 << (i + 1)) - 1))
            .collect();
        println!("  {:<9} {}", r.mode.name(), buckets.join(", "));
    }
    println!(
        "\nnative: the engine called directly; threads share group commits.\n\
         sandboxed: the async-ABI component; one instance serves all threads, which share syncs.\n\
         sandboxed-plain: the plain WASI 0.2 component; calls are serialized, one sync each."
    );
    if let Some(temp) = temp
        && args.keep
    {
        println!("kept {}", temp.keep().display());
    }
    Ok(())
}

fn demo_mode(fs: &Arc<RealFs>, mode: Mode, args: &DemoArgs) -> Result<DemoRow> {
    let path = format!("demo-{}", mode.name());
    if stele::vfs::Vfs::exists(&**fs, &path)? {
        bail!("{path} already exists in the demo directory; pick an empty --dir");
    }
    let options = WalOptions::new(DurabilityPolicy::FullSync).with_retained_bytes_max(0);
    let wal = Arc::new(
        Wal::create(fs.clone(), &path, options, mode).with_context(|| format!("create {path}"))?,
    );
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let wal = wal.clone();
                scope.spawn(move || -> Result<()> {
                    for i in 0..args.records_per_thread {
                        wal.commit_durable(1, &demo_payload(t, i, args.payload_bytes))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a writer thread panicked"))??;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let stats = wal.stats()?;
    drop(wal);

    // Reopen (recovery), then read every record back and check it byte for byte.
    let (reopened, recovery) = Wal::open(fs.clone(), &path, options, mode)?;
    drop(reopened);
    let (records, _) = read_wal(fs.clone(), &path, mode)?;
    let expected = (args.threads * args.records_per_thread) as u64;
    if records.len() as u64 != expected || recovery.records != expected {
        bail!(
            "{path}: recovered {} records, expected {expected}",
            records.len()
        );
    }
    let mut seen = vec![false; expected as usize];
    for r in &records {
        let t = u64::from_le_bytes(r.payload[0..8].try_into()?) as usize;
        let i = u64::from_le_bytes(r.payload[8..16].try_into()?) as usize;
        if t >= args.threads
            || i >= args.records_per_thread
            || r.payload[..] != demo_payload(t, i, args.payload_bytes)[..]
        {
            bail!("{path}: record {} does not match what was committed", r.seq);
        }
        let slot = &mut seen[t * args.records_per_thread + i];
        if std::mem::replace(slot, true) {
            bail!("{path}: record ({t}, {i}) recovered twice");
        }
    }
    Ok(DemoRow {
        mode,
        records: stats.records,
        seconds,
        groups: stats.groups,
        histogram: stats.group_records_histogram.to_vec(),
        recovered: records.len() as u64,
        recovery_end: recovery.end,
    })
}
