//! `stele wal append`, `stele wal tail [-f]` and `stele wal dump --json`: the WAL from the
//! shell. Appends are durable when the command prints them; reads never change the log.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use stele::vfs::Vfs;
use stele::wal::segment::list_segments;
use stele::wal::{DurabilityPolicy, LogSeq, Recovery, VisibleRecord, WalOptions};
use stele_host::{Mode, Wal, WalScan, WalTail};

use crate::common::{preview, root_and_name, wal_writer_error};

/// Lines read from stdin are committed in batches of at most this many records (one group,
/// one fsync each): large enough to amortize the sync, small enough that a batch of long lines
/// stays far below the group bound, which would refuse it whole.
const APPEND_BATCH_RECORDS_MAX: usize = 1024;

/// `tail -n N` allocates room for at most this many records up front; a larger N grows as
/// records arrive, so a huge N on a short log costs only what the log holds.
const LAST_RECORDS_PREALLOCATED_MAX: usize = 4096;

/// How long `tail -f` waits after a poll that found nothing new. An idle poll reads one small
/// step past the last record (and lists a segment directory), so this trades latency only
/// against that.
const TAIL_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Records asked for per read or poll: large enough to amortize a sandboxed call, small enough
/// that a batch of large payloads stays a bounded allocation.
const READ_BATCH_RECORDS: usize = 1024;

/// The options for the log at `path`: an existing file is a single-file log, anything else
/// (a directory, or nothing yet) a segment directory, unless `single_file` says otherwise.
fn options_for(path: &Path, single_file: bool) -> WalOptions {
    if single_file || path.is_file() {
        WalOptions::single_file(DurabilityPolicy::FullSync)
    } else {
        WalOptions::new(DurabilityPolicy::FullSync)
    }
}

/// Appends `payloads` (or, when empty, each line of stdin) as records with op code `op`,
/// durably, and prints the seqs they got once they are durable.
pub fn append(
    path: &Path,
    op: u16,
    single_file: bool,
    payloads: &[String],
    mode: Mode,
) -> Result<()> {
    let (fs, name) = root_and_name(path)?;
    let shown = path.display();
    let (wal, _) = Wal::open(fs, &name, options_for(path, single_file), mode)
        .map_err(|e| wal_writer_error(path, e))?;
    let commit = |batch: &[Vec<u8>]| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let records: Vec<(u16, &[u8])> = batch.iter().map(|p| (op, &p[..])).collect();
        let seqs = wal
            .commit_many_durable(&records)
            .with_context(|| format!("{shown}"))?;
        println!(
            "appended {} records, seqs {}..={} (durable)",
            batch.len(),
            seqs.start,
            seqs.end.0 - 1
        );
        Ok(())
    };
    if !payloads.is_empty() {
        let batch: Vec<Vec<u8>> = payloads.iter().map(|p| p.clone().into_bytes()).collect();
        return commit(&batch);
    }
    let mut batch = Vec::new();
    for line in std::io::stdin().lock().lines() {
        batch.push(line.context("read stdin")?.into_bytes());
        if batch.len() == APPEND_BATCH_RECORDS_MAX {
            commit(&batch)?;
            batch.clear();
        }
    }
    commit(&batch)
}

/// One record as a line: text, or JSON.
pub(crate) fn record_line(r: &VisibleRecord, json: bool) -> String {
    if json {
        serde_json::json!({
            "seq": r.seq.0,
            "op": r.op,
            "len": r.payload.len(),
            "text": std::str::from_utf8(&r.payload).ok(),
            "hex": r.payload.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        })
        .to_string()
    } else {
        let text = match std::str::from_utf8(&r.payload) {
            Ok(text) if !text.contains(char::is_control) => format!("{text:?}"),
            _ => preview(&r.payload),
        };
        format!("seq={} op={} len={} {text}", r.seq, r.op, r.payload.len())
    }
}

/// The last `count` records of the log, read where `mode` says, without reading the whole
/// log: a segment directory is read from its newest segment, then one segment further back at
/// a time, each read once (opened at its first seq, so the segments before it are skipped by
/// name), until `count` records are found or the log's first segment is reached. A single file
/// has no index and is read whole. Memory holds `count` records and one read batch. Also
/// returns the seq after the log's last record, where a follower goes on.
fn last_records(
    vfs: &Arc<dyn Vfs>,
    name: &str,
    count: usize,
    mode: Mode,
) -> Result<(Vec<VisibleRecord>, LogSeq)> {
    let starts = match list_segments(&**vfs, name) {
        Ok(starts) if !starts.is_empty() => starts,
        // A single file (or an empty directory): no names to skip by.
        _ => vec![LogSeq(0)],
    };
    let mut last: VecDeque<VisibleRecord> = VecDeque::new();
    let mut next = LogSeq(0);
    for k in (0..starts.len()).rev() {
        let from = if k == 0 { LogSeq(0) } else { starts[k] };
        // The later segments were read already: stop where the next one starts.
        let until = starts.get(k + 1).copied();
        let needed = count - last.len();
        let mut segment = VecDeque::with_capacity(needed.min(LAST_RECORDS_PREALLOCATED_MAX));
        let mut scan = WalScan::open_at(vfs.clone(), name, from, mode)?;
        'segment: loop {
            let batch = scan.next_batch(READ_BATCH_RECORDS)?;
            if batch.is_empty() {
                break;
            }
            for r in batch {
                if until.is_some_and(|until| r.seq >= until) {
                    break 'segment;
                }
                if needed == 0 {
                    continue;
                }
                if segment.len() == needed {
                    segment.pop_front();
                }
                segment.push_back(r);
            }
        }
        if until.is_none() {
            // The newest segment was read to the log's end.
            next = scan.recovery()?.map_or(LogSeq(0), |r| r.next_seq);
        }
        for r in segment.into_iter().rev() {
            last.push_front(r);
        }
        if last.len() >= count {
            break;
        }
    }
    Ok((last.into(), next))
}

/// Prints the last `lines` records; with `follow`, then every record appended later, as it
/// becomes whole, until killed. The follower starts where the last records ended and reads
/// only bytes it has not read (see `stele::wal::WalFollower`).
pub fn tail(path: &Path, lines: usize, follow: bool, json: bool, mode: Mode) -> Result<()> {
    let (fs, name) = root_and_name(path)?;
    let vfs: Arc<dyn Vfs> = fs;
    let shown = path.display();
    let (records, next) =
        last_records(&vfs, &name, lines, mode).with_context(|| format!("{shown}"))?;
    let mut out = std::io::stdout().lock();
    for r in &records {
        writeln!(out, "{}", record_line(r, json))?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    let mut tail = WalTail::open_at(vfs, &name, next, mode).with_context(|| format!("{shown}"))?;
    loop {
        // A writer may be mid-append: a frame that is not whole yet is read again at the next
        // poll. Records are printed only once whole and checksummed.
        let records = tail
            .poll(READ_BATCH_RECORDS)
            .with_context(|| format!("{shown}"))?;
        for r in &records {
            writeln!(out, "{}", record_line(r, json))?;
        }
        out.flush()?;
        if records.is_empty() {
            std::thread::sleep(TAIL_POLL_INTERVAL);
        }
    }
}

/// Calls `print` on each valid record of the log, in order, as it is read where `mode` says
/// ([`WalScan`]: one batch in memory, not the log), and returns how the valid prefix ended.
pub fn for_each_record(
    path: &Path,
    mode: Mode,
    mut print: impl FnMut(&VisibleRecord) -> Result<()>,
) -> Result<Recovery> {
    let (fs, name) = root_and_name(path)?;
    let shown = path.display();
    let mut scan =
        WalScan::open_at(fs, &name, LogSeq(0), mode).with_context(|| format!("{shown}"))?;
    loop {
        let batch = scan
            .next_batch(READ_BATCH_RECORDS)
            .with_context(|| format!("{shown}"))?;
        if batch.is_empty() {
            break;
        }
        for r in &batch {
            print(r)?;
        }
    }
    scan.recovery()
        .with_context(|| format!("{shown}"))?
        .with_context(|| format!("{shown}: the reader ended without saying how"))
}

/// `stele wal dump --json`: one JSON object per record, then one for how the log ended.
pub fn dump_json(path: &Path, mode: Mode) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let recovery = for_each_record(path, mode, |r| {
        writeln!(out, "{}", record_line(r, true))?;
        Ok(())
    })?;
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "records": recovery.records,
            "first_seq": recovery.first_seq.0,
            "next_seq": recovery.next_seq.0,
            "valid_end": recovery.valid_end,
            "file_len": recovery.file_len,
            "end": format!("{:?}", recovery.end),
        })
    )?;
    Ok(())
}
