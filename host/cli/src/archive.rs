//! `stele archive`: an archive in object storage (`stele-archive`), read from anywhere: its
//! status, a full check, a restore to a local directory, a remote tail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Subcommand;
use indicatif::ProgressBar;
use stele::wal::{LogSeq, VisibleRecord};
use stele_archive::restore::Progress;
use stele_archive::{ArchiveLocation, ArchiveTail, RestoreOptions};

use crate::common::root_and_name;
use crate::wal::records::record_line;

/// How often `stele archive tail -f` lists new manifests. A list is one request; at 1 s a
/// follower costs 86,400 requests a day.
const TAIL_POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Subcommand)]
pub enum ArchiveCommand {
    /// What the archive's newest manifest says: its id, writer epoch, seq range, segments,
    /// checkpoint and archived files.
    ///
    /// URLs: `file:///path`, `memory://`, and `s3://bucket/prefix` with the endpoint, region
    /// and keys from the usual AWS_* environment variables (AWS_ENDPOINT_URL,
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP=true for a plain
    /// HTTP endpoint) when built with an S3 client.
    Status {
        /// The archive's URL.
        url: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Fetch every object the newest manifest names and check each: length, CRC32C, and a
    /// replay by the engine's own recovery (header, every record's checksum, contiguous seqs);
    /// every older manifest must decode. Exit status 0 when all check, 2 otherwise, naming
    /// the first bad object and the offset of its first bad record.
    Verify {
        /// The archive's URL.
        url: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restore the archive into a new local directory: segments fetched in parallel, each
    /// checked as `verify` does and written back padded to its size, then fsynced with the
    /// directory. `stele wal dump DIR`, or any writer, then recovers exactly the archived
    /// records (through --to-seq when given).
    Restore {
        /// The archive's URL.
        url: String,
        /// The directory to create (it must be missing or empty).
        dir: PathBuf,
        /// Restore only through this seq (inclusive).
        #[arg(long)]
        to_seq: Option<u64>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the archive's records, from the writer's machine or any other: the archived ones
    /// from --from (default: the first), then with -f each new one as its segment is
    /// archived, until interrupted.
    Tail {
        /// The archive's URL.
        url: String,
        /// The first seq to print.
        #[arg(long)]
        from: Option<u64>,
        /// Follow new manifests.
        #[arg(short = 'f', long)]
        follow: bool,
        /// One JSON object per record.
        #[arg(long)]
        json: bool,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the I/O runtime")
}

fn open(url: &str) -> Result<ArchiveLocation> {
    Ok(ArchiveLocation::open(url)?)
}

/// A bar fed by a restore's or verify's progress reports; hidden unless stdout is a terminal.
fn progress_bar(what: &str) -> (ProgressBar, Progress) {
    let bar = crate::progress::terminal_bar(0, what);
    let fed = bar.clone();
    let progress: Progress = Arc::new(move |done, total| {
        fed.set_length(total);
        fed.set_position(done);
    });
    (bar, progress)
}

/// Runs `stele archive ...`; the exit status is the command's own.
pub fn archive_command(command: ArchiveCommand) -> Result<std::process::ExitCode> {
    let rt = runtime()?;
    match command {
        ArchiveCommand::Status { url, json } => {
            let location = open(&url)?;
            let status = rt
                .block_on(stele_archive::status(&location))
                .with_context(|| url.clone())?;
            if json {
                println!("{}", serde_json::to_string(&status)?);
            } else {
                println!("archive {}  log {}", status.url, status.log_id);
                println!(
                    "manifest {}  epoch {}  published_at_ms {}",
                    status.manifest, status.epoch, status.published_at_ms
                );
                println!(
                    "seqs {}..{}  archived_through {}  checkpoint {}",
                    status.first_seq,
                    status.next_seq,
                    status
                        .archived_through
                        .map_or("-".to_owned(), |s| s.to_string()),
                    status.checkpoint.map_or("-".to_owned(), |s| s.to_string()),
                );
                println!(
                    "segments {}  bytes {}",
                    status.segments, status.segment_bytes
                );
                for (name, generation, bytes) in &status.files {
                    println!("file {name}  generation {generation}  bytes {bytes}");
                }
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        ArchiveCommand::Verify { url, json } => {
            let location = open(&url)?;
            let (bar, progress) = progress_bar("verifying");
            let started = Instant::now();
            let verified = rt.block_on(stele_archive::verify(
                &location,
                RestoreOptions::default().with_progress(Some(progress)),
            ));
            bar.finish_and_clear();
            match verified {
                Ok(report) if json => {
                    println!("{}", serde_json::json!({"ok": true, "report": report}));
                    Ok(std::process::ExitCode::SUCCESS)
                }
                Ok(report) => {
                    println!(
                        "{url}: ok: manifest {} ({} manifests), {} segments, {} records, {} \
                         files, {} bytes checked in {:.2?}",
                        report.manifest,
                        report.manifests,
                        report.segments,
                        report.records,
                        report.files,
                        report.bytes,
                        started.elapsed()
                    );
                    Ok(std::process::ExitCode::SUCCESS)
                }
                Err(error) if json => {
                    println!(
                        "{}",
                        serde_json::json!({"ok": false, "error": error.to_string()})
                    );
                    Ok(std::process::ExitCode::from(2))
                }
                Err(error) => {
                    println!("{url}: {error}");
                    Ok(std::process::ExitCode::from(2))
                }
            }
        }
        ArchiveCommand::Restore {
            url,
            dir,
            to_seq,
            json,
        } => {
            restore(&rt, &url, &dir, to_seq, json)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        ArchiveCommand::Tail {
            url,
            from,
            follow,
            json,
        } => {
            tail(&rt, &url, from, follow, json)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

fn restore(
    rt: &tokio::runtime::Runtime,
    url: &str,
    dir: &Path,
    to_seq: Option<u64>,
    json: bool,
) -> Result<()> {
    let location = open(url)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("{}", parent.display()))?;
    }
    let (fs, name) = root_and_name(dir)?;
    let (bar, progress) = progress_bar("restoring");
    let started = Instant::now();
    let restored = rt.block_on(stele_archive::restore(
        &location,
        fs,
        &name,
        RestoreOptions::default()
            .with_to_seq(to_seq.map(LogSeq))
            .with_progress(Some(progress)),
    ));
    bar.finish_and_clear();
    let report = restored.with_context(|| format!("restoring {url} into {}", dir.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            serde_json::json!({"report": report, "seconds": seconds})
        );
    } else {
        println!(
            "restored {} segments ({} bytes, seqs {}..{}) from manifest {} into {} in {:.2} s \
             ({:.0} MB/s)",
            report.segments,
            report.bytes,
            report.first_seq,
            report.next_seq,
            report.manifest,
            dir.display(),
            seconds,
            report.bytes as f64 / seconds.max(1e-9) / 1e6
        );
    }
    Ok(())
}

fn tail(
    rt: &tokio::runtime::Runtime,
    url: &str,
    from: Option<u64>,
    follow: bool,
    json: bool,
) -> Result<()> {
    let location = open(url)?;
    let mut tail = ArchiveTail::new(location, from.map(LogSeq));
    let mut out = std::io::stdout().lock();
    loop {
        let batch = rt.block_on(tail.poll()).with_context(|| url.to_owned())?;
        if batch.is_empty() {
            if !follow {
                return Ok(());
            }
            out.flush()?;
            std::thread::sleep(TAIL_POLL_INTERVAL);
            continue;
        }
        for record in batch {
            let record = VisibleRecord {
                seq: record.seq,
                op: record.op,
                payload: record.payload.into(),
            };
            writeln!(out, "{}", record_line(&record, json))?;
        }
    }
}
