//! `stele wal soak`: durable appends from several threads until killed, each acknowledged seq
//! printed once durable; made for crash tests (`host/cli/tests/sigkill.rs`). Optionally
//! archives beside the writer.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::{Mode, Wal};

use crate::common::{demo_payload, root_and_name, wal_writer_error};

/// Where `stele wal soak --archive` archives, and its seal age.
pub(crate) struct SoakArchive<'a> {
    pub(crate) url: &'a str,
    pub(crate) seal_age_max: Option<std::time::Duration>,
}

/// What `stele wal soak` runs: its options, as the command line gave them.
pub(crate) struct Soak<'a> {
    /// Segmented with segments of this size, or `None`: one file.
    pub segment_bytes: Option<u64>,
    pub threads: usize,
    pub payload_bytes: usize,
    /// Stop after this many records.
    pub count: Option<u64>,
    pub mode: Mode,
    pub archive: Option<SoakArchive<'a>>,
    /// The log's quota (unbounded unless `--disk-max` or a rate is given).
    pub quota: stele::vfs::QuotaLimits,
}

pub(crate) fn wal_soak(path: &std::path::Path, soak: Soak<'_>) -> Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};

    let Soak {
        segment_bytes,
        threads,
        payload_bytes,
        count,
        mode,
        archive,
        quota,
    } = soak;

    let (real_fs, name) = root_and_name(path)?;
    // Under a quota, the log alone is counted (not whatever else shares its directory).
    let quota_fs = if quota.is_bounded() {
        Some(Arc::new(
            stele_host::fs::QuotaVfs::counting_under(real_fs.clone(), quota, &name)
                .with_context(|| format!("{}: counting its bytes", path.display()))?,
        ))
    } else {
        None
    };
    let fs: Arc<dyn stele::vfs::Vfs> = match &quota_fs {
        Some(quota_fs) => quota_fs.clone(),
        None => real_fs.clone(),
    };
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
                        let payload = demo_payload(t, n as usize, payload_bytes.max(16));
                        let seq = loop {
                            match wal.commit_durable(1, &payload) {
                                Err(stele_host::WalError::Throttled(throttled)) => {
                                    std::thread::sleep(throttled.retry_after)
                                }
                                outcome => break outcome?,
                            }
                        };
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
    if let Some(quota_fs) = &quota_fs {
        let stats = quota_fs.stats();
        eprintln!(
            "quota: {} of {} bytes used, {} syncs, {} refused for disk, {} waits and {} refusals \
             for rate",
            stats.disk_used,
            stats
                .disk_limit
                .map_or_else(|| "unbounded".to_owned(), |limit| limit.to_string()),
            stats.syncs,
            stats.disk_refusals,
            stats.throttled,
            stats.throttle_refusals
        );
    }
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
