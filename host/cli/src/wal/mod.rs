//! `stele wal`: the verbs' arguments and their dispatch; `dump` as text here. The other verbs
//! live in `records` (append, tail, JSON dump), `segments` (segments, convert) and the
//! crate's `soak`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use stele_host::Mode;

use crate::common::{ModeArg, preview};
use crate::soak::{Soak, SoakArchive, wal_soak};

pub(crate) mod records;
mod segments;

#[derive(Subcommand)]
pub(crate) enum WalCommand {
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
        /// Bound the bytes the log's files hold (preallocated segments count in full): a
        /// commit that would pass it is refused, typed, before anything of it is written, and
        /// the soak stops there. Bytes, or with a suffix: 64K, 3M, 2G.
        #[arg(long, value_parser = crate::common::parse_bytes)]
        disk_max: Option<u64>,
        /// Bound the log's syncs per second: commits past it wait (up to 100 ms), then are
        /// refused with how long to wait, and the soak retries them after that.
        #[arg(long)]
        syncs_per_second_max: Option<u64>,
        /// Bound the bytes written per second, as --syncs-per-second-max does syncs.
        #[arg(long, value_parser = crate::common::parse_bytes)]
        write_bytes_per_second_max: Option<u64>,
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

/// Runs one `stele wal` verb.
pub(crate) fn wal_command(command: WalCommand) -> Result<()> {
    match command {
        WalCommand::Dump {
            path,
            mode,
            json: true,
        } => records::dump_json(&path, mode.into()),
        WalCommand::Dump { path, mode, .. } => wal_dump(&path, mode.into()),
        WalCommand::Append {
            path,
            payloads,
            op,
            single_file,
            mode,
        } => records::append(&path, op, single_file, &payloads, mode.into()),
        WalCommand::Tail {
            path,
            lines,
            follow,
            json,
            mode,
        } => records::tail(&path, lines, follow, json, mode.into()),
        WalCommand::Segments { dir, json } => segments::segments(&dir, json),
        WalCommand::Convert {
            from,
            to,
            segment_bytes,
        } => segments::convert(&from, &to, segment_bytes),
        WalCommand::Soak {
            path,
            segment_bytes,
            single_file,
            threads,
            payload_bytes,
            count,
            mode,
            archive,
            seal_age_max_ms,
            disk_max,
            syncs_per_second_max,
            write_bytes_per_second_max,
        } => wal_soak(
            &path,
            Soak {
                segment_bytes: (!single_file).then_some(segment_bytes),
                threads,
                payload_bytes,
                count,
                mode: mode.into(),
                archive: archive.as_deref().map(|url| SoakArchive {
                    url,
                    seal_age_max: (seal_age_max_ms > 0)
                        .then(|| std::time::Duration::from_millis(seal_age_max_ms)),
                }),
                quota: stele::vfs::QuotaLimits {
                    disk_bytes_max: disk_max,
                    syncs_per_second_max,
                    write_bytes_per_second_max,
                    ..stele::vfs::QuotaLimits::unbounded()
                },
            },
        ),
    }
}

fn wal_dump(path: &std::path::Path, mode: Mode) -> Result<()> {
    use std::io::Write;

    let mut out = std::io::stdout().lock();
    let recovery = records::for_each_record(path, mode, |r| {
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
