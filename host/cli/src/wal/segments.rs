//! `stele wal segments` and `stele wal convert`: the segment directory, seen and made.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use stele::vfs::Vfs;
use stele::wal::segment::{SEGMENT_BYTES_DEFAULT, segment_file_name};
use stele::wal::{DurabilityPolicy, LogEnd, LogSeq, WalOptions, WalReader, WalWriter};

use stele_host::fs::RealFs;

use crate::common::{root_and_name, wal_writer_error};

/// Records per `commit_many_durable` while converting: one group per batch, so the batch must
/// fit a segment; the encoded-byte bound below is what keeps it there.
const CONVERT_BATCH_RECORDS_MAX: usize = 4096;
/// Encoded bytes per conversion batch: large enough that the fsync per batch is amortized over
/// a megabyte, and never more than a segment's record space (checked against it).
const CONVERT_BATCH_BYTES_MAX: usize = 1 << 20;

/// Prints each segment of the log in `dir`: its seq range, the bytes its records use, its size
/// on disk and its state, then the checkpoint and the whole log's end.
pub fn segments(dir: &Path, json: bool) -> Result<()> {
    let (fs, name) = root_and_name(dir)?;
    let vfs: Arc<dyn Vfs> = fs;
    let mut reader = WalReader::open(vfs, &name).with_context(|| format!("{}", dir.display()))?;
    while reader
        .next_record()
        .with_context(|| format!("{}", dir.display()))?
        .is_some()
    {}
    let Some(found) = reader.segmented_recovery() else {
        bail!(
            "{}: a single-file WAL, not a segment directory (convert it with `stele wal convert`)",
            dir.display()
        );
    };
    let covered = |next_seq: LogSeq| {
        found
            .checkpoint
            .is_some_and(|c| next_seq.0 <= c.0.saturating_add(1))
    };
    if json {
        let rows: Vec<String> = found
            .segments
            .iter()
            .map(|s| {
                format!(
                    "{{\"file\":\"{}\",\"first_seq\":{},\"next_seq\":{},\"records\":{},\
                     \"bytes_used\":{},\"file_len\":{},\"state\":\"{}\",\"checkpointed\":{}}}",
                    segment_file_name(s.first_seq),
                    s.first_seq,
                    s.next_seq,
                    s.records,
                    s.valid_end,
                    s.file_len,
                    state(s.end),
                    covered(s.next_seq)
                )
            })
            .collect();
        println!(
            "{{\"segments\":[{}],\"checkpoint\":{},\"next_seq\":{},\"end\":\"{:?}\"}}",
            rows.join(","),
            found
                .checkpoint
                .map_or_else(|| "null".to_owned(), |c| c.to_string()),
            found.recovery.next_seq,
            found.recovery.end
        );
        return Ok(());
    }
    println!(
        "| segment | seqs | records | bytes used | size | state | checkpointed |\n\
         |---|---|---|---:|---:|---|---|"
    );
    for s in &found.segments {
        let seqs = if s.records == 0 {
            "(none)".to_owned()
        } else {
            format!("{}..={}", s.first_seq, s.next_seq.0 - 1)
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            segment_file_name(s.first_seq),
            seqs,
            s.records,
            s.valid_end,
            s.file_len,
            state(s.end),
            if covered(s.next_seq) { "yes" } else { "no" }
        );
    }
    println!(
        "checkpoint: {}; next seq: {}; end: {:?}",
        found
            .checkpoint
            .map_or_else(|| "none".to_owned(), |c| format!("through seq {c}")),
        found.recovery.next_seq,
        found.recovery.end
    );
    Ok(())
}

fn state(end: LogEnd) -> String {
    match end {
        LogEnd::Clean => "clean".to_owned(),
        LogEnd::TornTail { torn_end, .. } => format!("torn tail (non-zero bytes to {torn_end})"),
        LogEnd::Empty => "unfinished rotation (no header)".to_owned(),
        LogEnd::Corrupt { offset, .. } => format!("corrupt at byte {offset}"),
    }
}

/// Copies the valid records of the single-file WAL `from` into a new segmented WAL at `to`,
/// with the same seqs, every batch synced, then reads `to` back and checks it record for record.
/// `from` is not modified.
pub fn convert(from: &Path, to: &Path, segment_bytes: Option<u64>) -> Result<()> {
    let (from_fs, from_name) = root_and_name(from)?;
    let mut source = WalReader::open(from_fs.clone(), &from_name)
        .with_context(|| format!("{}", from.display()))?;
    let (to_fs, to_name) = root_and_name(to)?;
    let segment_bytes = segment_bytes.unwrap_or(SEGMENT_BYTES_DEFAULT);
    let room = usize::try_from(segment_bytes)
        .unwrap_or(usize::MAX)
        .saturating_sub(stele::header::HEADER_BYTES);
    let mut copy = Copy {
        vfs: to_fs,
        name: to_name.clone(),
        segment_bytes,
        writer: None,
        batch: Vec::new(),
        batch_bytes: 0,
        batch_bytes_max: CONVERT_BATCH_BYTES_MAX.min(room),
        copied: 0,
    };
    let in_to = |e: anyhow::Error| wal_writer_error(to, e);
    while let Some(record) = source
        .next_record()
        .with_context(|| format!("{}", from.display()))?
    {
        let encoded = stele::wal::record::encoded_len(record.payload.len());
        if encoded > room {
            bail!(
                "{}: record {} encodes to {encoded} bytes, more than a segment of {segment_bytes} \
                 bytes holds; convert with a larger --segment-bytes",
                from.display(),
                record.seq
            );
        }
        copy.push(record.seq, record.op, record.payload, encoded)
            .map_err(in_to)?;
    }
    let recovery = source.recovery().expect("a finished reader has a recovery");
    copy.flush().map_err(in_to)?;
    // An empty source still becomes a log, at its first seq.
    copy.writer(recovery.first_seq).map_err(in_to)?;
    let Copy {
        vfs,
        copied,
        writer,
        ..
    } = copy;
    drop(writer);

    // Read the copy back: same seqs, same ops, same payloads.
    let mut again = WalReader::open(from_fs, &from_name)?;
    let mut copied_log = WalReader::open(vfs, &to_name)?;
    let mut checked = 0u64;
    while let Some(original) = again.next_record()? {
        let (seq, op, payload) = (original.seq, original.op, original.payload.to_vec());
        match copied_log.next_record()? {
            Some(c) if c.seq == seq && c.op == op && c.payload == payload.as_slice() => {}
            _ => bail!("{}: the copy differs at seq {seq}", to.display()),
        }
        checked += 1;
    }
    if copied_log.next_record()?.is_some() {
        bail!(
            "{}: the copy holds more records than the source",
            to.display()
        );
    }
    let dropped = match recovery.end {
        LogEnd::TornTail { .. } => format!(
            "; the source's torn tail ({} bytes) was not copied",
            recovery.torn_bytes()
        ),
        _ => String::new(),
    };
    println!(
        "converted {copied} records (seqs {}..{}) into {} with {segment_bytes}-byte segments; \
         read back and checked {checked}{dropped}",
        recovery.first_seq,
        recovery.next_seq,
        to.display()
    );
    Ok(())
}

/// The segmented copy being written: created at the first record's seq, filled in durable
/// batches of whole records.
struct Copy {
    vfs: Arc<RealFs>,
    name: String,
    segment_bytes: u64,
    writer: Option<WalWriter>,
    batch: Vec<(u16, Vec<u8>)>,
    batch_bytes: usize,
    batch_bytes_max: usize,
    copied: u64,
}

impl Copy {
    /// The writer, created (over a directory that must hold no segments) on first use.
    fn writer(&mut self, first_seq: LogSeq) -> Result<&WalWriter> {
        if self.writer.is_none() {
            let options = WalOptions::segmented(DurabilityPolicy::FullSync, self.segment_bytes)
                .with_first_seq(first_seq)
                .with_retained_bytes_max(0);
            let vfs: Arc<dyn Vfs> = self.vfs.clone();
            self.writer = Some(WalWriter::create_segmented(vfs, &self.name, options)?);
        }
        Ok(self.writer.as_ref().expect("created above"))
    }

    fn push(&mut self, seq: LogSeq, op: u16, payload: &[u8], encoded: usize) -> Result<()> {
        if self.batch.len() == CONVERT_BATCH_RECORDS_MAX
            || self.batch_bytes + encoded > self.batch_bytes_max
        {
            self.flush()?;
        }
        // The log is created at the seq of the first record it will hold; later records
        // follow contiguously, as they did in the source.
        self.writer(seq)?;
        self.batch.push((op, payload.to_vec()));
        self.batch_bytes += encoded;
        Ok(())
    }

    /// Commits the batch durably.
    fn flush(&mut self) -> Result<()> {
        if let Some(writer) = &self.writer
            && !self.batch.is_empty()
        {
            let records: Vec<(u16, &[u8])> =
                self.batch.iter().map(|(op, p)| (*op, &p[..])).collect();
            writer.commit_many_durable(&records)?;
            self.copied += self.batch.len() as u64;
        }
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }
}
