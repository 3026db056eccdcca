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
use stele::wal::{DurabilityPolicy, LogSeq, RecordRef, VisibleRecord, WalOptions, WalReader};
use stele_host::{Mode, Wal, read_wal};

use crate::{preview, root_and_name, wal_writer_error};

/// Lines read from stdin are committed in batches of at most this many records (one group,
/// one fsync each): large enough to amortize the sync, small enough that a batch of long lines
/// stays far below the group bound, which would refuse it whole.
const APPEND_BATCH_RECORDS_MAX: usize = 1024;

/// `tail -n N` allocates room for at most this many records up front; a larger N grows as
/// records arrive, so a huge N on a short log costs only what the log holds.
const LAST_RECORDS_PREALLOCATED_MAX: usize = 4096;

/// How often `tail -f` looks for new records. Natively a poll reads from the segment that
/// holds the next seq (a single file from its start), so the interval trades latency against
/// reading about one segment per poll.
const TAIL_POLL_INTERVAL: Duration = Duration::from_millis(200);

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
fn record_line(r: &VisibleRecord, json: bool) -> String {
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

/// The valid records of the log from seq `from` on, read where `mode` says.
fn read_from(
    vfs: Arc<dyn Vfs>,
    name: &str,
    from: LogSeq,
    mode: Mode,
) -> Result<Vec<VisibleRecord>> {
    if mode != Mode::Native {
        let (mut records, _) = read_wal(vfs, name, mode)?;
        records.retain(|r| r.seq >= from);
        return Ok(records);
    }
    let mut reader = WalReader::open_at(vfs, name, from)?;
    let mut records = Vec::new();
    while let Some(r) = reader.next_record()? {
        records.push(owned(r));
    }
    Ok(records)
}

fn owned(r: RecordRef<'_>) -> VisibleRecord {
    VisibleRecord {
        seq: r.seq,
        op: r.op,
        payload: bytes::Bytes::copy_from_slice(r.payload),
    }
}

/// The last `count` records of the log, read natively without reading the whole log: a
/// segment directory is read from its newest segment, then one segment further back at a
/// time, each read once, until `count` records are found or the log's first segment is
/// reached. Memory holds `count` records. Also returns the seq after the log's last record,
/// where a follower goes on.
fn last_records(
    vfs: &Arc<dyn Vfs>,
    name: &str,
    count: usize,
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
        let mut reader = WalReader::open_at(vfs.clone(), name, from)?;
        while let Some(r) = reader.next_record()? {
            if until.is_some_and(|until| r.seq >= until) {
                break;
            }
            if needed == 0 {
                continue;
            }
            if segment.len() == needed {
                segment.pop_front();
            }
            segment.push_back(owned(r));
        }
        if until.is_none() {
            // The newest segment was read to the log's end.
            next = reader.recovery().map_or(LogSeq(0), |r| r.next_seq);
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
/// becomes readable, until killed.
pub fn tail(path: &Path, lines: usize, follow: bool, json: bool, mode: Mode) -> Result<()> {
    let (fs, name) = root_and_name(path)?;
    let vfs: Arc<dyn Vfs> = fs;
    let shown = path.display();
    let (records, mut next) = if mode == Mode::Native {
        last_records(&vfs, &name, lines)
    } else {
        read_wal(vfs.clone(), &name, mode)
            .map(|(records, recovery)| (records, recovery.next_seq))
            .map_err(Into::into)
    }
    .with_context(|| format!("{shown}"))?;
    let mut out = std::io::stdout().lock();
    for r in &records[records.len().saturating_sub(lines)..] {
        writeln!(out, "{}", record_line(r, json))?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(TAIL_POLL_INTERVAL);
        // A writer may be mid-append: a torn tail now is a group still being written, read
        // again at the next poll. Records are printed only once whole and checksummed.
        let records =
            read_from(vfs.clone(), &name, next, mode).with_context(|| format!("{shown}"))?;
        for r in &records {
            writeln!(out, "{}", record_line(r, json))?;
            next = r.seq.next();
        }
        out.flush()?;
    }
}

/// `stele wal dump --json`: one JSON object per record, then one for how the log ended.
pub fn dump_json(path: &Path, mode: Mode) -> Result<()> {
    let (fs, name) = root_and_name(path)?;
    let (vfs, progress) = crate::progress::reading(fs, path, "reading");
    let read = read_wal(vfs, &name, mode);
    progress.finish_and_clear();
    let (records, recovery) = read.with_context(|| format!("{}", path.display()))?;
    let mut out = std::io::stdout().lock();
    for r in &records {
        writeln!(out, "{}", record_line(r, true))?;
    }
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
