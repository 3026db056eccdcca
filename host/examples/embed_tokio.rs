//! Embedding Stele in a tokio application: 64 tasks commit durably through `AsyncWal`, in each
//! mode. Sandboxed, one component instance serves every task concurrently, and the tasks' commits
//! share fsyncs exactly as native threads do.
//!
//! ```sh
//! cargo run --release -p stele-host --example embed_tokio [DIR]
//! ```

use std::sync::Arc;

use anyhow::ensure;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, Wal, read_wal};

const TASKS: u64 = 64;
const COMMITS_PER_TASK: u64 = 20;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| temp.path().to_owned(), Into::into);
    let fs = Arc::new(RealFs::open_root(&dir)?);

    for mode in Mode::ALL {
        let path = format!("tasks-{}", mode.name());
        let options = WalOptions::new(DurabilityPolicy::FullSync);
        // Opening recovers the log; it blocks, so it runs on tokio's blocking pool.
        let open_fs = fs.clone();
        let open_path = path.clone();
        let (wal, _) =
            tokio::task::spawn_blocking(move || Wal::open(open_fs, &open_path, options, mode))
                .await??;
        let wal = wal.to_async();

        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..TASKS {
            let wal = wal.clone();
            tasks.spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..COMMITS_PER_TASK {
                    let event = format!("task {task} event {i}");
                    seqs.push(wal.commit_durable(1, event.as_bytes()).await?);
                }
                anyhow::Ok(seqs)
            });
        }
        let mut seqs: Vec<LogSeq> = Vec::new();
        while let Some(done) = tasks.join_next().await {
            seqs.extend(done??);
        }
        seqs.sort();
        seqs.dedup();
        ensure!(
            seqs.len() as u64 == TASKS * COMMITS_PER_TASK,
            "every seq distinct"
        );

        let stats = wal.stats().await?;
        drop(wal);
        let read_fs = fs.clone();
        let (records, _) =
            tokio::task::spawn_blocking(move || read_wal(read_fs, &path, Mode::Native)).await??;
        ensure!(
            records.len() as u64 >= TASKS * COMMITS_PER_TASK,
            "all recovered"
        );
        println!(
            "{:<16} {} durable commits from {TASKS} tasks in {} fsyncs ({:.1} records per fsync)",
            mode.name(),
            seqs.len(),
            stats.syncs,
            seqs.len() as f64 / stats.syncs.max(1) as f64
        );
    }
    Ok(())
}
