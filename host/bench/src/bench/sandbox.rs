//! `stele bench --workloads cold-start,plugin`: what running sandboxed costs beyond the
//! commit itself.
//! - **Cold start**: a new process (this binary's hidden `cold-start-append`), exec to exit,
//!   whose one job is one durable commit to a new log, in every mode, with the compiled-code cache warm, and with it off (the
//!   process compiles its component first).
//! - **The composed plugin path**: a plugin component (the example plugin, composed with
//!   `stele.wasm` by `wac plug`) commits through `stele:log/wal` in its own loop, one call per
//!   record, against the same loop on the native engine.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::runtime::Runtime;
use stele_host::{Mode, Wal};

use super::common::{BenchArgs, percentile, println, process_cpu_seconds};

/// Processes timed per cold-start row; the table gives their median and slowest.
const COLD_STARTS: usize = 7;

/// Rounds of the plugin table, systems alternated within each; the table gives medians.
const PLUGIN_ROUNDS: usize = 3;

/// One row: `stele-bench cold-start-append M LOG` (what `stele wal append --single-file --mode
/// M LOG first` does: one record to a new single-file log), exec to exit.
/// `cache`: the code-cache directory to run with, or `None` for `STELE_CODE_CACHE=off`.
fn time_cold_starts(dir: &Path, mode: Mode, cache: Option<&Path>) -> Result<Vec<f64>> {
    let exe = std::env::current_exe().context("this stele-bench binary's path")?;
    let log = dir.join(format!("bench-cold-start-{}.wal", mode.name()));
    let run = || -> Result<f64> {
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new(&exe);
        command
            .args(["cold-start-append", mode.name()])
            .arg(&log)
            .env(
                crate::CODE_CACHE_ENV,
                cache.map_or("off".into(), |dir| dir.as_os_str().to_owned()),
            );
        let started = Instant::now();
        let output = command.output()?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(
            output.status.success() && output.stdout.starts_with(b"appended 1 records"),
            "stele-bench cold-start-append {}: {}, stdout {:?}, stderr {}",
            mode.name(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(ms)
    };
    // A warm cache is filled by a first, untimed process; so is the page cache, either way.
    run()?;
    let samples = (0..COLD_STARTS)
        .map(|_| run())
        .collect::<Result<Vec<_>>>()?;
    let _ = std::fs::remove_file(&log);
    Ok(samples)
}

pub(crate) fn cold_start_table(dir: &Path) -> Result<()> {
    let cache = dir.join("bench-code-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let mut rows = Vec::new();
    for (mode, cache) in [
        (Mode::Native, None),
        (Mode::Sandboxed, Some(cache.as_path())),
        (Mode::SandboxedPlain, Some(cache.as_path())),
        (Mode::Sandboxed, None),
        (Mode::SandboxedPlain, None),
    ] {
        let samples = time_cold_starts(dir, mode, cache)?;
        let code = match (mode, cache) {
            (Mode::Native, _) => "-",
            (_, Some(_)) => "cache warm",
            (_, None) => "compiled (STELE_CODE_CACHE=off)",
        };
        rows.push((mode, code, samples));
    }
    let _ = std::fs::remove_dir_all(&cache);
    let native = percentile(&rows[0].2, 0.5);
    println!(
        "\nCold start: a new process that opens a new single-file log in mode M and commits one \
         record (what `stele wal append --single-file --mode M LOG first` does), exec to exit, \
         the record durable (fsync) before exit; median and slowest of {COLD_STARTS} \
         processes after one untimed.\n"
    );
    println!("| mode | compiled code | p50 ms | max ms | p50 − native ms |");
    println!("|---|---|---:|---:|---:|");
    for (mode, code, samples) in &rows {
        let p50 = percentile(samples, 0.5);
        println!(
            "| {} | {code} | {p50:.1} | {:.1} | {:+.1} |",
            mode.name(),
            percentile(samples, 1.0),
            p50 - native,
        );
    }
    Ok(())
}

/// One plugin-table measurement: records/s and CPU µs per record.
#[derive(Clone, Copy)]
pub(super) struct Rate {
    pub(super) records_per_s: f64,
    pub(super) cpu_us_per_record: f64,
}

pub(super) fn rate(records: usize, started: Instant, cpu_started: f64) -> Rate {
    Rate {
        records_per_s: records as f64 / started.elapsed().as_secs_f64(),
        cpu_us_per_record: (process_cpu_seconds() - cpu_started) * 1e6 / records as f64,
    }
}

/// The native engine doing what the plugin's `commit-each` does: a new single-file log, one
/// call per record (durable: `commit_durable` under the barrier policy; else `commit` under
/// skip), then one flush.
fn native_loop(
    dir: &Path,
    fs: &Arc<RealFs>,
    name: &str,
    records: usize,
    durable: bool,
) -> Result<Rate> {
    let _ = std::fs::remove_file(dir.join(name));
    let policy = if durable {
        DurabilityPolicy::Barrier
    } else {
        DurabilityPolicy::Skip
    };
    let options = WalOptions::single_file(policy).with_retained_bytes_max(0);
    let body = vec![0x5Au8; 128];
    let cpu_started = process_cpu_seconds();
    let started = Instant::now();
    let wal = Wal::create(fs.clone(), name, options, Mode::Native)?;
    for _ in 0..records {
        if durable {
            wal.commit_durable(1, &body)?;
        } else {
            wal.commit(1, &body)?;
        }
    }
    wal.flush()?;
    Ok(rate(records, started, cpu_started))
}

pub(crate) fn plugin_table(dir: &Path, args: &BenchArgs) -> Result<()> {
    use wasmtime::component::Component;
    let wasmtime_err = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");

    let runtime = Runtime::get()?;
    let fs = Arc::new(RealFs::open_root(dir)?);
    let component = Component::new(runtime.engine(), super::common::EXAMPLE_PLUGIN_WASM)
        .map_err(wasmtime_err)?;
    let mut linker = runtime.vfs_linker()?;
    // The plugin's platform import; `commit-each` does not call it.
    linker
        .root()
        .func_wrap("note", |_, (_message,): (String,)| Ok(()))
        .map_err(wasmtime_err)?;
    let pre = linker.instantiate_pre(&component).map_err(wasmtime_err)?;
    let plugin_loop = |name: &str, records: usize, durable: bool| -> Result<Rate> {
        let _ = std::fs::remove_file(dir.join(name));
        let cpu_started = process_cpu_seconds();
        let started = Instant::now();
        let mut store = runtime.vfs_store(fs.clone(), stele_host::SandboxLimits::default());
        let instance = pre.instantiate(&mut store).map_err(wasmtime_err)?;
        let commit_each = instance
            .get_typed_func::<(&str, u32, u32, bool), (Result<u64, String>,)>(
                &mut store,
                "commit-each",
            )
            .map_err(wasmtime_err)?;
        let (last,) = commit_each
            .call(&mut store, (name, records as u32, 128, durable))
            .map_err(|e| anyhow::anyhow!("{:?}", Runtime::trap_error(e)))?;
        let last = last.map_err(|e| anyhow::anyhow!("commit-each: {e}"))?;
        anyhow::ensure!(last == records as u64, "last seq {last}, not {records}");
        Ok(rate(records, started, cpu_started))
    };

    let durable_records = args.records.min(2000);
    let non_durable_records = args.records * 25;
    // [durable native, durable plugin, non-durable native, non-durable plugin]
    let mut rounds: [Vec<Rate>; 4] = Default::default();
    for _ in 0..PLUGIN_ROUNDS {
        rounds[0].push(native_loop(
            dir,
            &fs,
            "bench-plugin-native.wal",
            durable_records,
            true,
        )?);
        rounds[1].push(plugin_loop("bench-plugin.wal", durable_records, true)?);
        rounds[2].push(native_loop(
            dir,
            &fs,
            "bench-plugin-native.wal",
            non_durable_records,
            false,
        )?);
        rounds[3].push(plugin_loop("bench-plugin.wal", non_durable_records, false)?);
    }
    for name in ["bench-plugin-native.wal", "bench-plugin.wal"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let median = |rates: &[Rate], pick: fn(&Rate) -> f64| {
        let values: Vec<f64> = rates.iter().map(pick).collect();
        percentile(&values, 0.5)
    };
    println!(
        "\nThe composed plugin path: the example plugin (composed with stele.wasm by wac plug) \
         commits 128 B records in its own loop, one `stele:log/wal` call each, to a new \
         single-file log (durable: commit-durable under the barrier policy, fdatasync; \
         non-durable: commit under skip), then flushes; against the native engine doing the \
         same. Durable: {durable_records} records; non-durable: \
         {non_durable_records}. One writer. Medians of {PLUGIN_ROUNDS} alternated rounds; the \
         plugin's rows include its instantiation.\n"
    );
    println!("| path | commits | records/s | CPU µs/record | × native | CPU × native |");
    println!("|---|---|---:|---:|---:|---:|");
    for (k, (path, commits)) in [
        ("native", "durable"),
        ("plugin, composed", "durable"),
        ("native", "non-durable"),
        ("plugin, composed", "non-durable"),
    ]
    .into_iter()
    .enumerate()
    {
        let native = k / 2 * 2;
        let rate = median(&rounds[k], |r| r.records_per_s);
        let cpu = median(&rounds[k], |r| r.cpu_us_per_record);
        println!(
            "| {path} | {commits} | {rate:.0} | {cpu:.2} | {:.2} | {:.2} |",
            rate / median(&rounds[native], |r| r.records_per_s),
            cpu / median(&rounds[native], |r| r.cpu_us_per_record),
        );
    }
    Ok(())
}
