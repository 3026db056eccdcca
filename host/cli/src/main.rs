//! `stele`: the command-line tool.
//!
//! This file only parses and dispatches: each verb group is a module of its own (`wal`,
//! `journal`, `push_log`, `archive`, `inspect`, `demo`, `soak`), and what they share is in
//! `common` and `progress`, which import no command. `bench` runs the `stele-bench` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod archive;
mod bench;
mod code_cache_env;
mod common;
mod demo;
mod inspect;
mod journal;
mod progress;
mod push_log;
mod soak;
mod wal;

use common::exit;
use push_log::{PushLogCommand, push_log_command};

/// Stele: durable append-only logs, native or sandboxed in a WebAssembly component.
#[derive(Parser)]
#[command(version, about, long_about = None, after_help = EXIT_STATUSES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A tour on real files: many threads commit durably, natively, then inside the async-ABI
    /// component, then inside the plain WASI 0.2 component; each log is reopened and every
    /// record checked; a table sums it up.
    Demo(demo::DemoArgs),
    /// Describe any Stele file, or a WAL segment directory: the family (read from the header,
    /// not the name), version, header word (a WAL's first seq, a checkpoint's seq), how many
    /// records, ops or frames it holds, its byte ranges, and how its valid prefix ends.
    /// Read-only: a torn tail is reported, never cut. Exit status 0 once the path could be
    /// read, whatever its state (`stele verify` judges it).
    Inspect {
        /// A WAL file or segment directory, a journal, a push log or a WAL checkpoint.
        path: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// A disk quota to hold the path against: prints the bytes its files hold (what a
        /// quota counts: logical lengths, preallocated space included) against it. Bytes, or
        /// with a suffix: 64K, 3M, 2G.
        #[arg(long, value_parser = common::parse_bytes)]
        disk_max: Option<u64>,
    },
    /// Check any Stele file, or a WAL segment directory, with the engine's own recovery,
    /// without changing it. Exit status: 0 clean; 1 torn tail (a crash cut the last write
    /// short; the next writer cuts it and no acknowledged record is lost); 2 corrupt (damage
    /// with a valid record after it, a bad header or version, a gap between segments), or not
    /// a Stele log. Prints the offset.
    Verify {
        path: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write-ahead log tools.
    #[command(subcommand)]
    Wal(wal::WalCommand),
    /// Journal tools: a session state kept as key/value ops, compacted to a snapshot.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Push-log tools: Arrow record batches, one frame per push.
    #[command(subcommand, name = "push-log")]
    PushLog(PushLogCommand),
    /// A log's archive in object storage (`file://`, `memory://`, `s3://`): status, verify,
    /// restore, tail. `stele wal soak --archive URL` archives beside a running writer.
    #[command(subcommand)]
    Archive(archive::ArchiveCommand),
    /// Benchmarks, side by side with the peers and the disk's limit, in one run, as markdown
    /// tables: runs the `stele-bench` binary (beside this one, else on PATH) with these
    /// arguments; `stele bench --help` lists them. Build with --release.
    #[command(disable_help_flag = true)]
    Bench {
        /// Arguments for `stele-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// What `stele --help` lists after the commands.
const EXIT_STATUSES: &str = "\
Exit status:
  0  success (for inspect: the path could be read, whatever its state)
  1  an error, printed as one line on stderr (`stele: PATH: what failed: why`);
     for verify and journal verify: a torn tail (the next writer cuts it; no
     acknowledged record is lost)
  2  verify, journal verify: corrupt, or not a Stele file; inspect, verify: the
     path could not be read
  A closed stdout (`stele inspect FILE | head -3`) ends the command quietly, by
  SIGPIPE, as it ends `cat`.";

/// Restores the default action of SIGPIPE, which Rust's runtime sets to "ignore" so that a
/// write to a closed pipe returns an error, and `println!` turns that error into a panic. With
/// the default action, `stele ... | head` ends the way `cat ... | head` does: quietly.
#[cfg(unix)]
fn end_quietly_on_closed_pipe() {
    // SAFETY: called first thing in main, before any thread exists; resetting a signal's
    // action to its default installs no handler and touches no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    #[cfg(unix)]
    end_quietly_on_closed_pipe();
    let cli = Cli::parse();
    if let Err(err) = common::init_runtime() {
        eprintln!("stele: {err:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::PushLog(command) => push_log_command(command),
        Command::Archive(command) => {
            return archive::archive_command(command).unwrap_or_else(|err| {
                eprintln!("stele: {err:#}");
                ExitCode::FAILURE
            });
        }
        Command::Journal(command) => return journal::journal_command(command),
        Command::Inspect {
            path,
            json,
            disk_max,
        } => return exit(inspect::inspect(&path, json, disk_max)),
        Command::Verify { path, json } => return exit(inspect::verify(&path, json)),
        Command::Demo(args) => demo::demo(args),
        Command::Wal(command) => wal::wal_command(command),
        Command::Bench { args } => {
            return bench::bench(args).unwrap_or_else(|err| {
                eprintln!("stele: {err:#}");
                ExitCode::FAILURE
            });
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stele: {err:#}");
            ExitCode::FAILURE
        }
    }
}
