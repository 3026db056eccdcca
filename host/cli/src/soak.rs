//! `stele wal soak`: durable appends from several threads until killed, each acknowledged seq
//! printed once durable; made for crash tests (`host/cli/tests/sigkill.rs`). Optionally
//! archives beside the writer.

use anyhow::{Context, Result, bail};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::{Mode, Wal};

use crate::common::{demo_payload, root_and_name, wal_writer_error};

/// Where `stele wal soak --archive` archives, and its seal age.
pub(crate) struct SoakArchive<'a> {
    pub(crate) url: &'a str,
    pub(crate) seal_age_max: Option<std::time::Duration>,
}

pub(crate) fn wal_soak(
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
    let options = WalOptions::new(DurabilityPolicy::FullSync)
        .with_retained_bytes_max(0)
        .with_segment_bytes(segment_bytes);
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
                    stele_archive::ArchiveOptions::default().with_seal_age_max(seal_age_max),
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
        // A clean exit ships the active segment too: everything acknowledged is archived.
        let (archiver, shipped) = archiver.close();
        let status = archiver.status();
        println!("archived {}", status.archived_next.0);
        if let Err(error) = shipped {
            eprintln!("stele: the log's tail was not archived: {error}");
        }
        if let Some(reason) = status.stopped {
            eprintln!("stele: the archiver stopped: {reason}");
        }
    }
    written
}
