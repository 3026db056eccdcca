//! Many logs in one process (issue 45): sandboxed logs share the process's worker threads, so
//! the threads do not grow with the logs, and nothing acknowledged is lost while few threads
//! serve many logs. One test per file section; this binary makes its runtime with a small
//! worker bound, which every test here shares.

use std::sync::Arc;

use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::runtime::{Runtime, RuntimeOptions};
use stele_host::{Mode, Wal, read_wal};
use stele_tests::{TEST_CODE_CACHE_DIR, payload, payload_id};

/// The worker bound this binary runs with: smaller than the logs by far, and than the threads
/// committing, so that a turn waiting on another would deadlock here.
const WORKERS_MAX: usize = 2;

fn runtime() -> &'static Runtime {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let options = RuntimeOptions::default()
            .with_code_cache_dir(Some(TEST_CODE_CACHE_DIR.into()))
            .with_worker_threads_max(Some(WORKERS_MAX));
        Runtime::init(options).expect("the first runtime of this process");
    });
    Runtime::get().unwrap()
}

/// The address space of this process, from `/proc/self/status`, in bytes.
fn address_space_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The most address space one sandboxed log may take (issue 45's target): wasmtime's default
/// reservation alone is 4 GiB.
const ADDRESS_SPACE_PER_LOG_MAX: u64 = 256 << 20;

/// The threads of this process, from `/proc/self/task`.
fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// 400 sandboxed logs (async build), each in a confined root of its own, each with a durable
/// commit; then 8 threads commit durably round-robin across all of them, with tasks' non-durable
/// commits in between, and every log is reopened and read back. The process gains at most
/// [`WORKERS_MAX`] threads (plus the 8 it starts itself) whatever the number of logs, and every
/// acknowledged record is on disk. Each log takes at most [`ADDRESS_SPACE_PER_LOG_MAX`] of
/// address space.
#[test]
fn four_hundred_sandboxed_logs_share_two_worker_threads_and_keep_every_commit() {
    const LOGS: usize = 400;
    const COMMITTERS: u64 = 8;
    const ROUNDS: u64 = 3;
    let runtime = runtime();
    let root = tempfile::tempdir().unwrap();
    let options = WalOptions::new(DurabilityPolicy::FullSync)
        .with_retained_bytes_max(0)
        .with_segment_bytes(Some(1 << 20));
    // The components compiled (or loaded) first: compiling starts wasmtime's own threads, which
    // are the process's, not the logs'.
    {
        let warm = tempfile::tempdir().unwrap();
        let vfs = Arc::new(RealFs::open_root(warm.path()).unwrap());
        Wal::create(vfs, "log", options, Mode::Sandboxed).unwrap();
    }
    let threads_before = threads_now();
    let address_space_before = address_space_now();
    let logs: Vec<Wal> = (0..LOGS)
        .map(|i| {
            let dir = root.path().join(format!("t{i}"));
            std::fs::create_dir(&dir).unwrap();
            let vfs = Arc::new(RealFs::open_root(&dir).unwrap());
            let wal = Wal::create(vfs, "log", options, Mode::Sandboxed).unwrap();
            wal.commit_durable(1, &payload(i as u64, 0, 64)).unwrap();
            wal
        })
        .collect();
    let threads_open = threads_now();
    let address_space_per_log = (address_space_now() - address_space_before) / LOGS as u64;
    assert!(
        address_space_per_log <= ADDRESS_SPACE_PER_LOG_MAX,
        "{} MiB of address space per open log",
        address_space_per_log >> 20
    );
    let (running, max) = runtime.worker_threads();
    assert_eq!(max, WORKERS_MAX);
    assert!(running <= WORKERS_MAX, "{running} workers");
    assert!(
        threads_open <= threads_before + WORKERS_MAX,
        "{LOGS} open logs took the process from {threads_before} to {threads_open} threads"
    );

    // Round-robin from threads, with a task's non-durable commits (whose groups are synced by
    // the dispatcher turns, as no caller waits on them) on every fourth log.
    let logs = Arc::new(logs);
    let tokio = stele_tests::tokio_runtime(2);
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|c| {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    for (i, wal) in logs.iter().enumerate() {
                        if i as u64 % COMMITTERS == c {
                            wal.commit_durable(1, &payload(i as u64, 1 + round, 64))
                                .unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    let non_durable = tokio.block_on({
        let logs = logs.clone();
        async move {
            let mut seqs = 0;
            for (i, wal) in logs.iter().enumerate().filter(|(i, _)| i % 4 == 0) {
                wal.to_async()
                    .commit(2, &payload(i as u64, 100, 64))
                    .await
                    .unwrap();
                seqs += 1;
            }
            seqs
        }
    });
    for committer in committers {
        committer.join().unwrap();
    }
    assert!(
        threads_now() <= threads_before + WORKERS_MAX + COMMITTERS as usize + 2,
        "the committers' load grew the process's threads past the bound"
    );
    // The non-durable commits become durable with a flush (or with the close).
    for wal in logs.iter() {
        wal.flush().unwrap();
    }
    drop(tokio);
    let logs = Arc::into_inner(logs).expect("every committer has finished");
    drop(logs);
    assert_eq!(non_durable, LOGS.div_ceil(4));

    for i in 0..LOGS {
        let dir = root.path().join(format!("t{i}"));
        let vfs = Arc::new(RealFs::open_root(&dir).unwrap());
        let (records, _) = read_wal(vfs, "log", Mode::Native).unwrap();
        let mut got: Vec<(u64, u64)> = records.iter().map(|r| payload_id(&r.payload)).collect();
        got.sort();
        let mut expected: Vec<(u64, u64)> = (0..=ROUNDS).map(|r| (i as u64, r)).collect();
        if i % 4 == 0 {
            expected.push((i as u64, 100));
        }
        assert_eq!(got, expected, "log {i}");
    }
}
