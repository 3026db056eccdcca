//! `stele journal`: dump, verify, set, delete, compact.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use stele::journal::{JournalOp, SessionState, encode_frames, snapshot_ops};
use stele_host::{Journal, Mode, replay_journal};

use crate::common::{ModeArg, open_read_only, root_and_name, text_or_hex};
use crate::{inspect, progress};

#[derive(Subcommand)]
pub(crate) enum JournalCommand {
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

pub(crate) fn journal_command(command: JournalCommand) -> ExitCode {
    let outcome = match command {
        JournalCommand::Dump { path, json, mode } => {
            journal_dump(&path, json, mode.into()).map(|()| ExitCode::SUCCESS)
        }
        JournalCommand::Verify { path, json: true } => inspect::verify(&path, true),
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
