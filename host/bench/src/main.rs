//! `stele-bench`: Stele side by side with its peers and the disk's limit, in one run.
//!
//! A binary of its own so that the `stele` tool compiles none of what only measuring needs: the
//! peers (okaywal, a bundled SQLite), the S3 server on loopback, `stele-host`'s test tools.
//! `stele bench ARGS` runs this binary when it sits beside `stele` or on `PATH`.
//!
//! This file parses and starts the runtime; the tables are in `bench/`, which imports nothing
//! from here but [`CODE_CACHE_ENV`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use stele_host::Mode;

mod bench;

/// Stele's benchmarks: durable WAL commits, journal appends, push-log pushes and scans,
/// recovery, the components, cold starts, the composed plugin and the archive, each beside its
/// peers and the disk's limit (raw write + fdatasync), as markdown tables. Build with
/// --release.
#[derive(Parser)]
#[command(name = "stele-bench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    options: bench::BenchOptions,
    #[command(subcommand)]
    probe: Option<Probe>,
}

/// What the bench runs in a child process of its own.
#[derive(Subcommand)]
enum Probe {
    /// One cold start, timed by the cold-start table from outside: open a new single-file log
    /// at LOG in MODE and commit one record durably (what `stele wal append --single-file
    /// --mode MODE LOG first` does), then exit.
    #[command(hide = true)]
    ColdStartAppend {
        #[arg(value_parser = parse_mode)]
        mode: Mode,
        log: PathBuf,
    },
    /// One row of the tenants table, in a process of its own.
    #[command(hide = true, name = "tenants-probe")]
    Tenants {
        #[arg(value_parser = parse_mode)]
        mode: Mode,
        logs: usize,
        dir: PathBuf,
        /// Run on an engine with wasmtime's pooling allocator
        /// (`Runtime::pooling_config`), sized for the logs.
        #[arg(long)]
        pooled: bool,
    },
    /// One row of the registered tenants table, in a process of its own.
    #[command(hide = true, name = "tenants-registered-probe")]
    TenantsRegistered {
        #[arg(value_parser = parse_mode)]
        mode: Mode,
        registered: usize,
        dir: PathBuf,
    },
}

// The same reading of `STELE_CODE_CACHE`, `XDG_CACHE_HOME` and `HOME` as the `stele` tool's.
// The cold-start table sets `STELE_CODE_CACHE` for each child to time the cache warm and off.
#[path = "../../cli/src/code_cache_env.rs"]
mod code_cache_env;
pub(crate) use code_cache_env::CODE_CACHE_ENV;

fn parse_mode(name: &str) -> Result<Mode, String> {
    [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain]
        .into_iter()
        .find(|mode| mode.name() == name)
        .ok_or_else(|| format!("{name:?}: expected native, sandboxed or sandboxed-plain"))
}

/// The cold-start probe: what a short-lived process that keeps one record pays, start to end.
fn cold_start_append(mode: Mode, log: &Path) -> Result<()> {
    use stele::wal::{DurabilityPolicy, WalOptions};
    let root = log.parent().context("the log's directory")?;
    let name = log
        .file_name()
        .and_then(|name| name.to_str())
        .context("the log's file name")?;
    let fs = std::sync::Arc::new(stele_host::fs::RealFs::open_root(root)?);
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    let (wal, _) = stele_host::Wal::open(fs, name, options, mode)?;
    let seq = wal.commit_durable(1, b"first")?;
    println!("appended 1 records, seq {} (durable)", seq.0);
    Ok(())
}

/// The runtime every command runs on: Stele's own engine with the code cache the environment
/// names, or for a pooled tenants probe, an engine on `Runtime::pooling_config` with a slot for
/// every log (and the one that warms the runtime).
fn runtime_options(probe: &Option<Probe>) -> Result<stele_host::runtime::RuntimeOptions> {
    use stele_host::runtime::{Runtime, RuntimeOptions, SandboxLimits};
    let options = RuntimeOptions::default().with_code_cache_dir(code_cache_env::code_cache_dir());
    Ok(match probe {
        Some(Probe::Tenants {
            logs, pooled: true, ..
        }) => {
            let slots = u32::try_from(*logs + 1).context("too many logs for one pool")?;
            let config = Runtime::pooling_config(&SandboxLimits::default(), slots);
            options.with_engine(wasmtime::Engine::new(&config)?)
        }
        _ => options,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = runtime_options(&cli.probe)
        .and_then(|options| {
            stele_host::runtime::Runtime::init(options).context("starting the sandbox runtime")
        })
        .and_then(|_| match cli.probe {
            Some(Probe::ColdStartAppend { mode, log }) => cold_start_append(mode, &log),
            Some(Probe::Tenants {
                mode, logs, dir, ..
            }) => bench::tenants_probe(mode, logs, &dir),
            Some(Probe::TenantsRegistered {
                mode,
                registered,
                dir,
            }) => bench::tenants_registered_probe(mode, registered, &dir),
            None => cli.options.run(),
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stele-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
