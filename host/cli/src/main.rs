//! `stele`: the command-line tool.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use stele::journal::{JournalOp, SessionState, encode_frames, snapshot_ops};
use stele::wal::{DurabilityPolicy, LogEnd, WalOpenError, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Journal, Mode, Wal, WalError, read_wal, replay_journal};

mod archive_cmd;
mod bench;
mod bench_archive;
mod bench_sandbox;
mod inspect_cmd;
mod progress;
mod push_log_cmd;
mod wal_cli_cmd;
mod wal_segments_cmd;

use push_log_cmd::{PushLogCommand, push_log_command};

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
    Demo(DemoArgs),
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
    Wal(WalCommand),
    /// Journal tools: a session state kept as key/value ops, compacted to a snapshot.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Push-log tools: Arrow record batches, one frame per push.
    #[command(subcommand, name = "push-log")]
    PushLog(PushLogCommand),
    /// A log's archive in object storage (`file://`, `memory://`, `s3://`): status, verify,
    /// restore, tail. `stele wal soak --archive URL` archives beside a running writer.
    #[command(subcommand)]
    Archive(archive_cmd::ArchiveCommand),
    /// Benchmarks, side by side with the peers and the disk's limit, in one run, as markdown
    /// tables: durable WAL commits (the limit = raw write + fdatasync; Stele native, sandboxed
    /// with threads and with tokio tasks, sandboxed-plain; okaywal; SQLite in WAL mode) at each
    /// writer count and payload size; journal append latency against tokio::fs; push-log
    /// appends and scans against a raw arrow-ipc stream. Build with --release.
    Bench {
        /// Directory on the disk to measure (default: a fresh temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Durable commits per row.
        #[arg(long, default_value_t = 4000)]
        records: usize,
        /// Payload sizes in bytes: one durable-commit table per size (the journal uses the
        /// first).
        #[arg(long, value_delimiter = ',', default_value = "128,4096")]
        payload_bytes: Vec<usize>,
        /// Writer counts.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        writers: Vec<usize>,
        /// Also write one JSON object per row to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Which tables to run.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "wal,segments,non-durable,recovery,journal,push-log,components,cold-start,plugin,archive"
        )]
        workloads: Vec<bench::Workload>,
        /// Journal appends per system.
        #[arg(long, default_value_t = 2000)]
        journal_appends: usize,
        /// Push-log pushes (of 10,000 rows, about 1 MB) per system.
        #[arg(long, default_value_t = 64)]
        pushes: usize,
        /// A short run (under a minute on a 2-core machine): every table and system, with
        /// 800 commits per row, 400 journal appends and 16 pushes. Noisier; for a smoke check.
        #[arg(long)]
        quick: bool,
    },
}

#[derive(clap::Args)]
struct DemoArgs {
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

#[derive(Subcommand)]
enum WalCommand {
    /// Append durable records from several threads until killed, printing `ack <seq>` (flushed)
    /// after each durable commit returns.
    ///
    /// Made for crash testing: kill the process at any moment (SIGKILL included), then
    /// `stele wal dump PATH` must show every seq that was printed. Opens (and recovers) an
    /// existing log, so repeated runs append to it.
    Soak {
        /// The WAL (created if missing): a directory of segments, or with --single-file one file.
        path: PathBuf,
        /// Segment size in bytes (at least 4096).
        #[arg(long, default_value_t = stele::wal::segment::SEGMENT_BYTES_DEFAULT)]
        segment_bytes: u64,
        /// Write the original single-file format instead of segments.
        #[arg(long)]
        single_file: bool,
        /// Writer threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Payload size in bytes.
        #[arg(long, default_value_t = 128)]
        payload_bytes: usize,
        /// Stop after this many records (default: run until killed).
        #[arg(long)]
        count: Option<u64>,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
        /// Archive the log's sealed segments to this URL while it runs (see `stele archive`),
        /// truncating archived segments below the newest two; prints `archived <seq>` as the
        /// archive's end moves. Commits are refused once 1 GiB is written but not archived.
        #[arg(long)]
        archive: Option<String>,
        /// With --archive: seal the active segment once it has held a durable record this many
        /// milliseconds, so that a quiet log's records leave this disk (0: only full segments
        /// are archived).
        #[arg(long, default_value_t = stele_archive::SEAL_AGE_MAX_DEFAULT.as_millis() as u64)]
        seal_age_max_ms: u64,
    },
    /// Print every valid record of a WAL (a file or a segment directory), then how its valid
    /// prefix ended.
    Dump {
        /// The WAL file or segment directory.
        path: PathBuf,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
        /// JSON lines: one object per record (seq, op, len, text when UTF-8, hex), then one
        /// for how the log ended.
        #[arg(long)]
        json: bool,
    },
    /// Append records durably: each PAYLOAD argument is one record; with none, each line of
    /// stdin is one (committed in batches of up to 1,024, one fsync each). Prints the seqs once
    /// they are durable. A missing log is created: a segment directory, or with --single-file
    /// one file; an existing file is appended to as a single-file log.
    Append {
        /// The WAL file or segment directory.
        path: PathBuf,
        /// The records' payloads (default: stdin, one record per line).
        payloads: Vec<String>,
        /// The op code the records carry.
        #[arg(long, default_value_t = 1)]
        op: u16,
        /// Create a single-file log rather than a segment directory.
        #[arg(long)]
        single_file: bool,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Print the last records of a WAL; with -f, keep printing records as they are appended
    /// (by another process), once each is whole and checksummed, until interrupted.
    Tail {
        /// The WAL file or segment directory.
        path: PathBuf,
        /// How many of the last records to print first.
        #[arg(short = 'n', long, default_value_t = 10)]
        lines: usize,
        /// Follow: poll for new records every 200 ms.
        #[arg(short = 'f', long)]
        follow: bool,
        /// One JSON object per record.
        #[arg(long)]
        json: bool,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// List the segments of a segmented WAL: each file's seq range, the bytes its records use,
    /// its preallocated size and its state (clean; torn tail; unfinished rotation), whether the
    /// checkpoint covers it (so `truncate_through` may delete it), then the checkpoint and where
    /// the log ends. Reads every record, checking checksums and seq contiguity across segments.
    Segments {
        /// The segment directory.
        dir: PathBuf,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Convert a single-file WAL (the original format) into a segment directory: same records,
    /// same seqs, each batch fsynced; the copy is then read back and compared record by record.
    /// The source is left as it was. A torn tail in the source is not copied (and reported).
    Convert {
        /// The single-file WAL to read.
        from: PathBuf,
        /// The segment directory to create (it must not hold segments yet).
        to: PathBuf,
        /// Segment size in bytes (default 64 MiB).
        #[arg(long)]
        segment_bytes: Option<u64>,
    },
}

/// Where a command runs the engine.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ModeArg {
    /// The engine called directly.
    Native,
    /// Inside the async-ABI component.
    Sandboxed,
    /// Inside the plain WASI 0.2 component.
    SandboxedPlain,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Native => Mode::Native,
            ModeArg::Sandboxed => Mode::Sandboxed,
            ModeArg::SandboxedPlain => Mode::SandboxedPlain,
        }
    }
}

#[derive(Subcommand)]
enum JournalCommand {
    /// Print every op of a journal, the state they fold into, and how the valid prefix ends.
    /// Read-only: a torn tail is reported, not cut.
    Dump {
        /// The journal file.
        path: PathBuf,
        /// JSON lines: one object per op, then the state, then how the journal ends.
        #[arg(long)]
        json: bool,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Check a journal without changing it. Exit status: 0 clean, 1 torn tail (an append
    /// that a crash cut short; the writer cuts it on open), 2 corrupt or unreadable.
    Verify {
        /// The journal file.
        path: PathBuf,
        /// One JSON object, as `stele verify --json` prints it.
        #[arg(long)]
        json: bool,
    },
    /// Set KEY to VALUE durably: opens the journal as its writer (taking `PATH.lock`; fails
    /// if another writer holds it), appends one op and fsyncs.
    Set {
        path: PathBuf,
        key: String,
        value: String,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Delete KEY durably, as `set` does.
    Delete {
        path: PathBuf,
        key: String,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
    },
    /// Rewrite the journal as the fewest ops that rebuild its state, atomically (staged at
    /// `PATH.compacting`, fsynced, renamed over, directory fsynced). Takes the writer's lock.
    Compact {
        path: PathBuf,
        /// Where the engine runs: native, sandboxed (the async-ABI component) or
        /// sandboxed-plain (the plain WASI 0.2 component).
        #[arg(long, value_enum, default_value = "native")]
        mode: ModeArg,
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
    let result = match cli.command {
        Command::PushLog(command) => push_log_command(command),
        Command::Archive(command) => {
            return archive_cmd::archive_command(command).unwrap_or_else(|err| {
                eprintln!("stele: {err:#}");
                ExitCode::FAILURE
            });
        }
        Command::Journal(command) => return journal_command(command),
        Command::Inspect { path, json } => return exit(inspect_cmd::inspect(&path, json)),
        Command::Verify { path, json } => return exit(inspect_cmd::verify(&path, json)),
        Command::Demo(args) => demo(args),
        Command::Wal(WalCommand::Dump {
            path,
            mode,
            json: true,
        }) => wal_cli_cmd::dump_json(&path, mode.into()),
        Command::Wal(WalCommand::Dump { path, mode, .. }) => wal_dump(&path, mode.into()),
        Command::Wal(WalCommand::Append {
            path,
            payloads,
            op,
            single_file,
            mode,
        }) => wal_cli_cmd::append(&path, op, single_file, &payloads, mode.into()),
        Command::Wal(WalCommand::Tail {
            path,
            lines,
            follow,
            json,
            mode,
        }) => wal_cli_cmd::tail(&path, lines, follow, json, mode.into()),
        Command::Wal(WalCommand::Segments { dir, json }) => wal_segments_cmd::segments(&dir, json),
        Command::Wal(WalCommand::Convert {
            from,
            to,
            segment_bytes,
        }) => wal_segments_cmd::convert(&from, &to, segment_bytes),
        Command::Bench {
            dir,
            records,
            payload_bytes,
            writers,
            json,
            workloads,
            journal_appends,
            pushes,
            quick,
        } => {
            let args = bench::BenchArgs {
                records: if quick { records.min(800) } else { records },
                payload_bytes,
                writers,
                json,
                workloads,
                journal_appends: if quick {
                    journal_appends.min(400)
                } else {
                    journal_appends
                },
                pushes: if quick { pushes.min(16) } else { pushes },
            };
            match dir {
                Some(dir) => std::fs::create_dir_all(&dir)
                    .map_err(Into::into)
                    .and_then(|()| bench::run(&dir, &args)),
                None => tempfile::Builder::new()
                    .prefix("stele-bench-")
                    .tempdir()
                    .map_err(Into::into)
                    .and_then(|t| bench::run(t.path(), &args)),
            }
        }
        Command::Wal(WalCommand::Soak {
            path,
            segment_bytes,
            single_file,
            threads,
            payload_bytes,
            count,
            mode,
            archive,
            seal_age_max_ms,
        }) => wal_soak(
            &path,
            (!single_file).then_some(segment_bytes),
            threads,
            payload_bytes,
            count,
            mode.into(),
            archive.as_deref().map(|url| SoakArchive {
                url,
                seal_age_max: (seal_age_max_ms > 0)
                    .then(|| std::time::Duration::from_millis(seal_age_max_ms)),
            }),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stele: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn journal_command(command: JournalCommand) -> ExitCode {
    let outcome = match command {
        JournalCommand::Dump { path, json, mode } => {
            journal_dump(&path, json, mode.into()).map(|()| ExitCode::SUCCESS)
        }
        JournalCommand::Verify { path, json: true } => inspect_cmd::verify(&path, true),
        JournalCommand::Verify { path, .. } => Ok(journal_verify(&path)),
        JournalCommand::Set {
            path,
            key,
            value,
            mode,
        } => journal_write(
            &path,
            mode.into(),
            Some(JournalOp::Set {
                key: key.into_bytes(),
                value: value.into_bytes(),
            }),
        ),
        JournalCommand::Delete { path, key, mode } => journal_write(
            &path,
            mode.into(),
            Some(JournalOp::Delete {
                key: key.into_bytes(),
            }),
        ),
        JournalCommand::Compact { path, mode } => journal_write(&path, mode.into(), None),
    };
    outcome.unwrap_or_else(|err| {
        eprintln!("stele: {err:#}");
        ExitCode::FAILURE
    })
}

/// A command's own exit status, or one line with the path and the cause and status 2.
fn exit(outcome: Result<ExitCode>) -> ExitCode {
    outcome.unwrap_or_else(|err| {
        eprintln!("stele: {err:#}");
        ExitCode::from(2)
    })
}

fn open_read_only(path: &std::path::Path) -> Result<Box<dyn stele::vfs::VfsFile>> {
    let (fs, name) = root_and_name(path)?;
    stele::vfs::Vfs::open(&*fs, &name, stele::vfs::OpenMode::Existing)
        .with_context(|| format!("{}", path.display()))
}

fn journal_dump(path: &std::path::Path, json: bool, mode: Mode) -> Result<()> {
    let (fs, name) = root_and_name(path)?;
    let (vfs, progress) = progress::reading(fs, path, "reading");
    let replayed = stele_host::replay_journal_blocking(vfs, &name, mode);
    progress.finish_and_clear();
    let (ops, recovery) = replayed.with_context(|| format!("{}", path.display()))?;
    if json {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        for op in &ops {
            let line = match op {
                JournalOp::Set { key, value } => {
                    serde_json::json!({"op": "set", "key": text(key), "value": text(value)})
                }
                JournalOp::Delete { key } => serde_json::json!({"op": "delete", "key": text(key)}),
                JournalOp::Clear => serde_json::json!({"op": "clear"}),
            };
            println!("{line}");
        }
        let state: serde_json::Map<String, serde_json::Value> = SessionState::fold(&ops)
            .entries
            .iter()
            .map(|(k, v)| (text(k), text(v).into()))
            .collect();
        println!("{}", serde_json::json!({ "state": state }));
        println!(
            "{}",
            serde_json::json!({
                "ops": recovery.ops,
                "valid_end": recovery.valid_end,
                "file_len": recovery.file_len,
                "torn_tail": recovery.torn_tail(),
            })
        );
        return Ok(());
    }
    for op in &ops {
        match op {
            JournalOp::Set { key, value } => println!(
                "set {} = {} ({} B)",
                String::from_utf8_lossy(key),
                text_or_hex(value),
                value.len()
            ),
            JournalOp::Delete { key } => println!("delete {}", String::from_utf8_lossy(key)),
            JournalOp::Clear => println!("clear"),
        }
    }
    let state = SessionState::fold(&ops);
    println!("state: {} keys", state.entries.len());
    for (key, value) in &state.entries {
        println!(
            "  {} = {}",
            String::from_utf8_lossy(key),
            text_or_hex(value)
        );
    }
    println!(
        "ops={} valid_end={} file_len={} torn_tail={}",
        recovery.ops,
        recovery.valid_end,
        recovery.file_len,
        recovery.torn_tail()
    );
    Ok(())
}

fn journal_verify(path: &std::path::Path) -> ExitCode {
    let scanned = open_read_only(path).and_then(|file| {
        stele::journal::replay_file(&*file).with_context(|| format!("{}", path.display()))
    });
    match scanned {
        Ok((_, recovery)) if !recovery.torn_tail() => {
            println!(
                "{}: clean, {} ops, {} bytes",
                path.display(),
                recovery.ops,
                recovery.file_len
            );
            ExitCode::SUCCESS
        }
        Ok((_, recovery)) => {
            println!(
                "{}: torn tail at byte {} ({} ops before it; {} bytes after it are an unfinished append)",
                path.display(),
                recovery.valid_end,
                recovery.ops,
                recovery.file_len - recovery.valid_end
            );
            ExitCode::from(1)
        }
        Err(err) => {
            println!("{}: {err:#}", path.display());
            ExitCode::from(2)
        }
    }
}

/// Opens the journal as its writer, then appends `op`, or compacts when `op` is `None`.
fn journal_write(path: &std::path::Path, mode: Mode, op: Option<JournalOp>) -> Result<ExitCode> {
    let (fs, name) = root_and_name(path)?;
    // A compaction reads the journal once and writes the snapshot: a bar over both, drawn from
    // the bytes the engine moves.
    let progress = match op {
        None => progress::bar(2 * progress::bytes_at(path).unwrap_or(0), "compacting"),
        Some(_) => indicatif::ProgressBar::hidden(),
    };
    let fs: Arc<dyn stele::vfs::Vfs> = Arc::new(progress::ProgressVfs::new(fs, progress.clone()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start tokio")?;
    runtime.block_on(async {
        let shown = path.display();
        let mut journal = Journal::open(fs.clone(), &name, mode)
            .await
            .with_context(|| format!("{shown}"))?;
        match op {
            Some(op) => {
                journal
                    .append(&mut encode_frames(&[op]))
                    .await
                    .with_context(|| format!("{shown}"))?;
                println!("{shown}: appended, durable ({})", mode.name());
            }
            None => {
                let before = journal.clean_end().await?;
                // The writer holds the lock, so this replay sees no append in progress.
                let (ops, _) = replay_journal(fs.clone(), &name, mode)
                    .await
                    .with_context(|| format!("{shown}"))?;
                let state = SessionState::fold(&ops);
                journal
                    .compact(encode_frames(&snapshot_ops(&state)))
                    .await
                    .with_context(|| format!("{shown}"))?;
                let after = journal.clean_end().await?;
                println!(
                    "{shown}: compacted {} ops ({before} B) to {} keys ({after} B)",
                    ops.len(),
                    state.entries.len()
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The error a WAL writer command exits with when opening the log at `path` failed: the
/// refusal of a second writer becomes one line that names the lock file by its path on disk
/// (the engine names it relative to the root, `path`'s directory); anything else keeps its
/// chain under `path`.
pub(crate) fn wal_writer_error(
    path: &std::path::Path,
    err: impl Into<anyhow::Error>,
) -> anyhow::Error {
    let err = err.into();
    let lock_path = match (
        err.downcast_ref::<WalError>(),
        err.downcast_ref::<WalOpenError>(),
    ) {
        (Some(WalError::Open(WalOpenError::Locked { lock_path })), _)
        | (_, Some(WalOpenError::Locked { lock_path })) => lock_path.clone(),
        _ => return err.context(path.display().to_string()),
    };
    let root = path.parent().unwrap_or(std::path::Path::new(""));
    anyhow::anyhow!(
        "{}: another writer holds this WAL (lock {}); only one writer at a time",
        path.display(),
        root.join(lock_path).display()
    )
}

/// Splits a path into a Vfs root (its directory) and the file name inside it.
pub(crate) fn root_and_name(path: &std::path::Path) -> Result<(Arc<RealFs>, String)> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: not a UTF-8 file name", path.display()))?
        .to_owned();
    let fs = RealFs::open_root(&dir)
        .with_context(|| format!("{}: cannot open directory", dir.display()))?;
    Ok((Arc::new(fs), name))
}

fn wal_dump(path: &std::path::Path, mode: Mode) -> Result<()> {
    use std::io::Write;

    let mut out = std::io::stdout().lock();
    let recovery = wal_cli_cmd::for_each_record(path, mode, |r| {
        writeln!(
            out,
            "seq={} op={} len={} payload={}",
            r.seq,
            r.op,
            r.payload.len(),
            preview(&r.payload)
        )?;
        Ok(())
    })?;
    writeln!(
        out,
        "records={} first_seq={} next_seq={} valid_end={} file_len={} end={:?}",
        recovery.records,
        recovery.first_seq,
        recovery.next_seq,
        recovery.valid_end,
        recovery.file_len,
        recovery.end
    )?;
    Ok(())
}

/// Where `stele wal soak --archive` archives, and its seal age.
struct SoakArchive<'a> {
    url: &'a str,
    seal_age_max: Option<std::time::Duration>,
}

fn wal_soak(
    path: &std::path::Path,
    segment_bytes: Option<u64>,
    threads: usize,
    payload_bytes: usize,
    count: Option<u64>,
    mode: Mode,
    archive: Option<SoakArchive<'_>>,
) -> Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};

    let (fs, name) = root_and_name(path)?;
    let options = WalOptions {
        retained_bytes_max: 0,
        segment_bytes,
        ..WalOptions::new(DurabilityPolicy::FullSync)
    };
    let (wal, recovery) =
        Wal::open(fs.clone(), &name, options, mode).map_err(|e| wal_writer_error(path, e))?;
    eprintln!(
        "recovered {} records ({:?}); appending from seq {}",
        recovery.records, recovery.end, recovery.next_seq
    );
    let archiver = match archive {
        None => None,
        Some(_) if segment_bytes.is_none() => {
            bail!("--archive needs a segmented log: a single file never seals a segment")
        }
        Some(SoakArchive { url, seal_age_max }) => {
            let location = stele_archive::ArchiveLocation::open(url)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let archiver = rt
                .block_on(stele_archive::Archiver::attach(
                    location,
                    fs,
                    &name,
                    wal.clone(),
                    stele_archive::ArchiveOptions {
                        seal_age_max,
                        ..stele_archive::ArchiveOptions::default()
                    },
                ))
                .with_context(|| format!("attaching the archive {url}"))?;
            eprintln!(
                "archiving to {url} as writer epoch {}, from seq {}",
                archiver.manifest().epoch,
                archiver.manifest().next_seq
            );
            Some(archiver.spawn()?)
        }
    };
    let issued = AtomicU64::new(0);
    let writers_done = std::sync::atomic::AtomicBool::new(false);
    let stdout = std::sync::Mutex::new(std::io::stdout());
    let written = std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                let (wal, issued, stdout) = (&wal, &issued, &stdout);
                scope.spawn(move || -> Result<()> {
                    loop {
                        let n = issued.fetch_add(1, Ordering::Relaxed);
                        if count.is_some_and(|c| n >= c) {
                            return Ok(());
                        }
                        let seq = wal.commit_durable(
                            1,
                            &demo_payload(t, n as usize, payload_bytes.max(16)),
                        )?;
                        let mut out = stdout
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        writeln!(out, "ack {seq}")?;
                        out.flush()?;
                    }
                })
            })
            .collect();
        let archived_reporter = archiver.as_ref().map(|archiver| {
            let (stdout, writers_done) = (&stdout, &writers_done);
            scope.spawn(move || {
                let mut reported = archiver.status().archived_next;
                while !writers_done.load(Ordering::Relaxed) {
                    let status = archiver.status();
                    if status.archived_next > reported {
                        reported = status.archived_next;
                        let mut out = stdout
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        let _ = writeln!(out, "archived {reported}");
                        let _ = out.flush();
                    }
                    if status.stopped.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            })
        });
        let mut outcome = Ok(());
        for h in handles {
            let joined = h
                .join()
                .map_err(|_| anyhow::anyhow!("a writer thread panicked"))
                .and_then(|r| r);
            outcome = outcome.and(joined);
        }
        writers_done.store(true, Ordering::Relaxed);
        if let Some(reporter) = archived_reporter {
            let _ = reporter.join();
        }
        outcome
    });
    if let Some(archiver) = archiver {
        let status = archiver.stop().status();
        println!("archived {}", status.archived_next.0);
        if let Some(reason) = status.stopped {
            eprintln!("stele: the archiver stopped: {reason}");
        }
    }
    written
}

/// A value as quoted text when it is short printable UTF-8, else as a hex preview.
fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.len() <= 64 && !text.chars().any(char::is_control) => format!("{text:?}"),
        _ => preview(bytes),
    }
}

fn preview(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(24)];
    let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
    if bytes.len() > shown.len() {
        format!("{hex}…")
    } else {
        hex
    }
}

/// The demo's payload: thread and index in the first 16 bytes, then a pattern, so recovery can
/// check every record byte for byte.
fn demo_payload(thread: usize, index: usize, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&(thread as u64).to_le_bytes());
    p.extend_from_slice(&(index as u64).to_le_bytes());
    p.extend((16..len).map(|i| (i as u8) ^ (thread as u8) ^ (index as u8)));
    p
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

fn demo(args: DemoArgs) -> Result<()> {
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
    let options = WalOptions {
        retained_bytes_max: 0,
        ..WalOptions::new(DurabilityPolicy::FullSync)
    };
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
