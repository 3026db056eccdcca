//! `stele inspect PATH` and `stele verify PATH`: any Stele file (or WAL segment directory),
//! recognised by its header rather than its name, read with the engine's own recovery code
//! (natively, read-only) and described: family, version, header word, records (ops, frames),
//! byte ranges and how the valid prefix ends (the engine's own `stele::recovery::LogEnd`).
//! `verify` turns that ending into its exit status.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use stele::header::{Family, FileHeader, HEADER_BYTES};
use stele::recovery::LogEnd;
use stele::vfs::{OpenMode, Vfs, VfsFile};
use stele::wal::{LogSeq, WalOpenError, WalReader};

use crate::common::root_and_name;
use crate::progress::{self, ProgressVfs};

/// What `inspect` reports and `verify` judges: how the engine's recovery says the valid prefix
/// ends, or why it refused the file.
#[derive(Debug)]
enum Status {
    /// Recovery read the file to the end of its valid prefix, and ended so. A torn tail is an
    /// unfinished write that the next writer cuts (no acknowledged record is lost); a
    /// corrupt end (the push log's streamed scan reports one) may hide acknowledged records.
    Recovered(LogEnd),
    /// Damage that recovery refuses to cut (a valid record follows it, a bad header, a wrong
    /// version, a gap): acknowledged records may be behind it.
    Refused { offset: Option<u64>, why: String },
}

impl Status {
    fn exit_code(&self) -> u8 {
        match self {
            Status::Recovered(LogEnd::Empty | LogEnd::Clean) => 0,
            Status::Recovered(LogEnd::TornTail { .. }) => 1,
            Status::Recovered(LogEnd::Corrupt { .. }) | Status::Refused { .. } => 2,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Status::Recovered(LogEnd::Empty | LogEnd::Clean) => "clean",
            Status::Recovered(LogEnd::TornTail { .. }) => "torn-tail",
            Status::Recovered(LogEnd::Corrupt { .. }) | Status::Refused { .. } => "corrupt",
        }
    }

    fn describe(&self) -> String {
        match self {
            Status::Recovered(LogEnd::Empty | LogEnd::Clean) => "clean".into(),
            Status::Recovered(LogEnd::TornTail {
                valid_end,
                torn_end,
            }) => format!(
                "torn tail at byte {valid_end}: {} bytes after it are an unfinished write, cut \
                 by the next writer; nothing acknowledged is lost",
                torn_end - valid_end
            ),
            Status::Recovered(LogEnd::Corrupt {
                offset,
                valid_frame_at,
            }) => format!(
                "corrupt at byte {offset}: a damaged frame, and a valid one follows at byte \
                 {valid_frame_at}"
            ),
            Status::Refused {
                offset: Some(offset),
                why,
            } => format!("corrupt at byte {offset}: {why}"),
            Status::Refused { offset: None, why } => format!("corrupt: {why}"),
        }
    }

    /// Where the damage or the torn tail starts, and where the valid prefix ends, for `--json`.
    fn offsets(&self) -> (Option<u64>, Option<u64>) {
        match self {
            Status::Recovered(LogEnd::Empty | LogEnd::Clean) => (None, None),
            Status::Recovered(LogEnd::TornTail { valid_end, .. }) => {
                (Some(*valid_end), Some(*valid_end))
            }
            Status::Recovered(LogEnd::Corrupt { offset, .. }) => (Some(*offset), None),
            Status::Refused { offset, .. } => (*offset, None),
        }
    }
}

/// A span of bytes and what it holds.
#[derive(Debug)]
struct Span {
    what: String,
    start: u64,
    end: u64,
}

/// What `inspect` prints and `verify` judges.
#[derive(Debug)]
struct Report {
    /// `wal`, `wal-segments`, `journal`, `push-log`, `wal-checkpoint`, or `empty`.
    kind: &'static str,
    version: Option<u16>,
    /// The header's family word and what it means for this family.
    header_word: Option<(&'static str, u64)>,
    /// What `count` counts: records, ops or frames.
    unit: &'static str,
    count: u64,
    bytes: u64,
    spans: Vec<Span>,
    status: Status,
}

impl Report {
    fn failed(kind: &'static str, bytes: u64, offset: Option<u64>, why: String) -> Report {
        Report {
            kind,
            version: None,
            header_word: None,
            unit: "records",
            count: 0,
            bytes,
            spans: Vec::new(),
            status: Status::Refused { offset, why },
        }
    }

    fn print(&self, path: &Path) {
        println!("{}: {}", path.display(), self.kind);
        if let Some(version) = self.version {
            println!("  version      {version}");
        }
        if let Some((name, word)) = self.header_word {
            println!("  {name:<12} {word}");
        }
        println!("  {:<12} {}", self.unit, self.count);
        println!("  bytes        {}", self.bytes);
        for span in &self.spans {
            println!("  {:>12}..{:<12} {}", span.start, span.end, span.what);
        }
        println!("  status       {}", self.status.describe());
    }

    fn json(&self, path: &Path) -> String {
        let (offset, valid_end) = self.status.offsets();
        serde_json::json!({
            "path": path.display().to_string(),
            "kind": self.kind,
            "version": self.version,
            "header_word": self.header_word.map(|(name, word)| serde_json::json!({name: word})),
            "unit": self.unit,
            "count": self.count,
            "bytes": self.bytes,
            "spans": self.spans.iter().map(|s| serde_json::json!({
                "what": s.what, "start": s.start, "end": s.end,
            })).collect::<Vec<_>>(),
            "status": self.status.name(),
            "offset": offset,
            "valid_end": valid_end,
            "detail": self.status.describe(),
        })
        .to_string()
    }
}

/// `stele inspect`: prints the report; exit 0 once the path could be read at all, whatever
/// its state (use `verify` to judge).
pub fn inspect(path: &Path, json: bool, disk_max: Option<u64>) -> Result<ExitCode> {
    let report = examine(path)?;
    let disk_bytes = disk_bytes(path)?;
    if json {
        let mut value: serde_json::Value = serde_json::from_str(&report.json(path))?;
        value["disk_bytes"] = disk_bytes.into();
        value["disk_bytes_max"] = disk_max.into();
        println!("{value}");
    } else {
        report.print(path);
        println!("  disk         {disk_bytes} bytes");
        if let Some(limit) = disk_max {
            let verdict = if disk_bytes > limit {
                "over the quota: only truncation, compaction or removal is granted"
            } else {
                "within the quota"
            };
            println!(
                "  quota        {disk_bytes} of {limit} bytes ({:.1}%), {verdict}",
                disk_bytes as f64 * 100.0 / limit.max(1) as f64
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a disk quota counts for `path`: the logical length of the file, or of every file under
/// the directory (`stele_host::fs::QuotaVfs` counts the same).
fn disk_bytes(path: &Path) -> Result<u64> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if !meta.is_dir() {
        return Ok(if meta.is_file() { meta.len() } else { 0 });
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path).with_context(|| format!("{}", path.display()))? {
        total += disk_bytes(&entry?.path())?;
    }
    Ok(total)
}

/// `stele verify`: exit 0 clean, 1 torn tail, 2 corrupt (or not a Stele log).
pub fn verify(path: &Path, json: bool) -> Result<ExitCode> {
    let report = examine(path)?;
    if json {
        println!("{}", report.json(path));
    } else {
        println!(
            "{}: {} ({} {}, {} bytes)",
            path.display(),
            report.status.describe(),
            report.count,
            report.unit,
            report.bytes
        );
    }
    Ok(ExitCode::from(report.status.exit_code()))
}

/// Reads `path` with the engine's recovery for its family. `Err` only when the path cannot be
/// read at all (missing, permissions); damage is a [`Status::Refused`] report.
fn examine(path: &Path) -> Result<Report> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    let (fs, name) = root_and_name(path)?;
    let total = progress::bytes_at(path)?;
    let progress = progress::bar(total, "reading");
    let vfs: Arc<dyn Vfs> = Arc::new(ProgressVfs::read_only(fs, progress.clone()));
    let report = if meta.is_dir() {
        wal_segments(vfs, &name, total)
    } else {
        file(vfs, &name, path)
    };
    progress.finish_and_clear();
    report
}

fn file(vfs: Arc<dyn Vfs>, name: &str, path: &Path) -> Result<Report> {
    let file = vfs
        .open(name, OpenMode::Existing)
        .with_context(|| format!("{}", path.display()))?;
    let len = file.len().with_context(|| format!("{}", path.display()))?;
    if len == 0 {
        return Ok(Report {
            kind: "empty",
            version: None,
            header_word: None,
            unit: "records",
            count: 0,
            bytes: 0,
            spans: Vec::new(),
            status: Status::Recovered(LogEnd::Empty),
        });
    }
    let mut head = vec![0u8; (len as usize).min(HEADER_BYTES)];
    file.read_exact_at(0, &mut head)
        .with_context(|| format!("{}", path.display()))?;
    let header = match FileHeader::decode(&head) {
        Ok(header) => header,
        Err(e) => {
            return Ok(Report::failed(
                "unknown",
                len,
                Some(0),
                format!("not a Stele log header: {e}"),
            ));
        }
    };
    let header_span = Span {
        what: "header".into(),
        start: 0,
        end: HEADER_BYTES as u64,
    };
    let mut report = match header.family {
        Family::Wal => wal_file(&*file, len),
        Family::Journal => journal(&*file, len),
        Family::PushLog => push_log(vfs, name, len),
        Family::WalCheckpoint => Report {
            kind: "wal-checkpoint",
            version: None,
            header_word: Some(("through_seq", header.family_word)),
            unit: "records",
            count: 0,
            bytes: len,
            spans: Vec::new(),
            status: if len == HEADER_BYTES as u64 {
                Status::Recovered(LogEnd::Clean)
            } else {
                Status::Refused {
                    offset: Some(HEADER_BYTES as u64),
                    why: "a checkpoint is exactly one header".into(),
                }
            },
        },
    };
    report.version = Some(header.version);
    if report.header_word.is_none() && header.family == Family::Wal {
        report.header_word = Some(("first_seq", header.family_word));
    }
    report.spans.insert(0, header_span);
    Ok(report)
}

/// The spans after the header: the valid prefix (`contents`), then, when bytes follow it, the
/// torn tail (`tail`).
fn body_spans(contents: String, valid_end: u64, file_len: u64, tail: &str) -> Vec<Span> {
    let mut spans = vec![Span {
        what: contents,
        start: HEADER_BYTES as u64,
        end: valid_end,
    }];
    if file_len > valid_end {
        spans.push(Span {
            what: tail.into(),
            start: valid_end,
            end: file_len,
        });
    }
    spans
}

fn wal_file(file: &dyn VfsFile, len: u64) -> Report {
    match stele::wal::replay(file, LogSeq(0), |_| {}) {
        Ok(recovery) => {
            let spans = body_spans(
                format!("{} records", recovery.records),
                recovery.valid_end,
                recovery.file_len,
                "torn tail (an unfinished write)",
            );
            Report {
                kind: "wal",
                version: None,
                header_word: None,
                unit: "records",
                count: recovery.records,
                bytes: len,
                spans,
                status: Status::Recovered(recovery.end),
            }
        }
        Err(e) => Report::failed("wal", len, wal_error_offset(&e), error_chain(&e)),
    }
}

fn wal_error_offset(e: &WalOpenError) -> Option<u64> {
    match e {
        WalOpenError::Corrupt { offset, .. } => Some(*offset),
        WalOpenError::BadHeader(_) => Some(0),
        _ => None,
    }
}

fn wal_segments(vfs: Arc<dyn Vfs>, name: &str, total: u64) -> Result<Report> {
    let mut reader = match WalReader::open(vfs, name) {
        Ok(reader) => reader,
        Err(WalOpenError::Vfs(e)) => return Err(e).context(name.to_owned()),
        Err(e) => {
            return Ok(Report::failed(
                "wal-segments",
                total,
                wal_error_offset(&e),
                error_chain(&e),
            ));
        }
    };
    loop {
        match reader.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                return Ok(Report::failed(
                    "wal-segments",
                    total,
                    wal_error_offset(&e),
                    error_chain(&e),
                ));
            }
        }
    }
    let Some(found) = reader.segmented_recovery() else {
        return Ok(Report::failed(
            "wal-segments",
            total,
            None,
            "a directory that holds no WAL segments".into(),
        ));
    };
    let mut spans = Vec::new();
    let mut status = Status::Recovered(LogEnd::Clean);
    for segment in &found.segments {
        let file_name = stele::wal::segment::segment_file_name(segment.first_seq);
        spans.push(Span {
            what: format!("{file_name}: {} records", segment.records),
            start: HEADER_BYTES as u64,
            end: segment.valid_end,
        });
        match segment.end {
            // Recovery refuses corruption in a segment with an error, handled above.
            LogEnd::Clean | LogEnd::Corrupt { .. } => {}
            torn @ LogEnd::TornTail { torn_end, .. } => {
                spans.push(Span {
                    what: format!("{file_name}: torn tail (an unfinished write)"),
                    start: segment.valid_end,
                    end: torn_end,
                });
                // The segment's own end: its torn bytes stop at its last non-zero byte.
                status = Status::Recovered(torn);
            }
            LogEnd::Empty => {
                spans.push(Span {
                    what: format!("{file_name}: unfinished rotation (no header yet)"),
                    start: 0,
                    end: segment.file_len,
                });
            }
        }
    }
    Ok(Report {
        kind: "wal-segments",
        version: None,
        header_word: found.checkpoint.map(|c| ("checkpoint", c.0)),
        unit: "records",
        count: found.recovery.records,
        bytes: total,
        spans,
        status,
    })
}

fn journal(file: &dyn VfsFile, len: u64) -> Report {
    match stele::journal::replay_file(file) {
        Ok((_, recovery)) => {
            let spans = body_spans(
                format!("{} ops", recovery.ops),
                recovery.valid_end,
                recovery.file_len,
                "torn tail (an unfinished append)",
            );
            Report {
                kind: "journal",
                version: None,
                header_word: None,
                unit: "ops",
                count: recovery.ops,
                bytes: len,
                spans,
                status: Status::Recovered(recovery.end),
            }
        }
        Err(e) => {
            let offset = match &e {
                stele::journal::JournalError::Corrupt { offset, .. }
                | stele::journal::JournalError::MalformedOp { offset, .. } => Some(*offset),
                stele::journal::JournalError::BadHeader(_) => Some(0),
                _ => None,
            };
            Report::failed("journal", len, offset, error_chain(&e))
        }
    }
}

fn push_log(vfs: Arc<dyn Vfs>, name: &str, len: u64) -> Report {
    use stele::push_log::{PushLog, PushLogError};
    let offset_of = |e: &PushLogError| match e {
        PushLogError::Corrupt { offset, .. } | PushLogError::MalformedFrame { offset, .. } => {
            Some(*offset)
        }
        PushLogError::BadHeader(_) => Some(0),
        _ => None,
    };
    let schema = match PushLog::detect_schema(&*vfs, name) {
        Ok(Some(schema)) => schema,
        Ok(None) => Arc::new(arrow_schema::Schema::empty()),
        Err(e) => return Report::failed("push-log", len, offset_of(&e), error_chain(&e)),
    };
    let log = PushLog::new(vfs, name, schema);
    let mut scan = match log.scan() {
        Ok(scan) => scan,
        Err(e) => return Report::failed("push-log", len, offset_of(&e), error_chain(&e)),
    };
    let (mut frames, mut rows) = (0u64, 0u64);
    for frame in scan.by_ref() {
        match frame {
            Ok(frame) => {
                frames += 1;
                rows += frame.batch.num_rows() as u64;
            }
            Err(e) => return Report::failed("push-log", len, offset_of(&e), error_chain(&e)),
        }
    }
    let end = scan.end();
    let (valid_end, file_len) = match end {
        LogEnd::TornTail {
            valid_end,
            torn_end,
        } => (valid_end, torn_end),
        LogEnd::Corrupt { offset, .. } => (offset, offset),
        LogEnd::Empty | LogEnd::Clean => (len, len),
    };
    let status = Status::Recovered(end);
    let spans = body_spans(
        format!("{frames} frames, {rows} rows"),
        valid_end,
        file_len,
        "torn tail (an unfinished push)",
    );
    Report {
        kind: "push-log",
        version: None,
        header_word: None,
        unit: "frames",
        count: frames,
        bytes: len,
        spans,
        status,
    }
}

/// An error and its causes on one line, each once (`bad WAL header: header checksum
/// mismatch`): the engine's errors name their own failure and leave the cause to `source()`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}
