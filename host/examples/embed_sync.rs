//! Embedding Stele with threads: one write-ahead log per mode, eight threads committing
//! durably at once (they share fsyncs: group commit), then a reopen that recovers every record.
//!
//! ```sh
//! cargo run --release -p stele-host --example embed_sync [DIR]
//! ```
//!
//! `DIR` (default: a fresh temporary directory) is the only directory the logs can reach:
//! `RealFs` confines every path to it, and in the sandboxed modes the engine has no other file
//! access at all.

use std::sync::Arc;

use anyhow::{Context, ensure};
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, SandboxLimits, Wal, read_wal};

const THREADS: u64 = 8;
const COMMITS_PER_THREAD: u64 = 100;

fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| temp.path().to_owned(), Into::into);
    let fs = Arc::new(RealFs::open_root(&dir).with_context(|| format!("{}", dir.display()))?);

    for mode in Mode::ALL {
        let path = format!("events-{}", mode.name());
        // FullSync: a durable commit returns once its group is fsynced. Segmented (the
        // default): 64 MiB preallocated segment files in the directory `path`.
        let options = WalOptions::new(DurabilityPolicy::FullSync);
        // Sandboxed, bound the instance: 64 MiB of memory, 8 open files, and interrupt the
        // guest if it ever runs a second without calling the host.
        let limits = SandboxLimits::default()
            .with_memory_bytes_max(64 << 20)
            .with_open_files_max(8)
            .with_busy_deadline(Some(std::time::Duration::from_secs(1)));
        let (wal, recovery) = Wal::open_with_limits(fs.clone(), &path, options, mode, limits)?;
        let before = recovery.next_seq.0 - recovery.first_seq.0;

        std::thread::scope(|scope| -> anyhow::Result<()> {
            let writers: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let wal = wal.clone();
                    scope.spawn(move || -> anyhow::Result<()> {
                        for i in 0..COMMITS_PER_THREAD {
                            let event = format!("thread {thread} event {i}");
                            // Durable once this returns: it survives power loss.
                            wal.commit_durable(1, event.as_bytes())?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for writer in writers {
                writer.join().expect("writer thread panicked")?;
            }
            Ok(())
        })?;

        let stats = wal.stats()?;
        drop(wal);
        let (records, recovery) = read_wal(fs.clone(), &path, Mode::Native)?;
        let committed = THREADS * COMMITS_PER_THREAD;
        ensure!(
            records.len() as u64 == before + committed,
            "{}: recovered {} records, expected {}",
            mode.name(),
            records.len(),
            before + committed
        );
        println!(
            "{:<16} {committed} durable commits from {THREADS} threads in {} fsyncs; \
             reopened: {} records, {:?}",
            mode.name(),
            stats.syncs,
            records.len(),
            recovery.end
        );
    }
    Ok(())
}
