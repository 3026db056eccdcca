//! The tokio API and group commit across concurrent callers, in every mode. Sandboxed, one
//! async-ABI instance serves every task and thread; durable commits must share syncs as they do
//! natively.

use std::collections::HashSet;
use std::sync::Arc;

use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriteError};
use stele_host::fs::{FaultFs, FaultRule, InjectedError, OpKind};
use stele_host::{Mode, Wal, WalError, read_wal};
use stele_tests::{Counters, FailingVfs, TempRoot, every_mode, payload, payload_id, tokio_runtime};

fn options() -> WalOptions {
    WalOptions::new(DurabilityPolicy::FullSync).with_retained_bytes_max(0)
}

fn check_recovered(vfs: Arc<dyn Vfs>, path: &str, mode: Mode, expected: usize) {
    let (records, rec) = read_wal(vfs, path, mode).unwrap();
    assert_eq!(rec.records as usize, expected);
    let mut ids = HashSet::new();
    for r in &records {
        let (w, i) = payload_id(&r.payload);
        assert_eq!(&r.payload[..], &payload(w, i, r.payload.len())[..]);
        assert!(ids.insert((w, i)), "({w}, {i}) twice");
    }
}

/// `tasks` tasks, each making `each` durable commits of `bytes`-byte payloads; every seq
/// they got back.
async fn durable_commits_from_tasks(
    wal: &stele_host::AsyncWal,
    tasks: u64,
    each: u64,
    bytes: usize,
) -> Vec<u64> {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let wal = wal.clone();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..each {
                    seqs.push(
                        wal.commit_durable(1, &payload(t, i, bytes))
                            .await
                            .unwrap()
                            .0,
                    );
                }
                seqs
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

fn tasks_64_x_200_durable_commits(mode: Mode) {
    const TASKS: u64 = 64;
    const EACH: u64 = 200;
    let root = TempRoot::new();
    let wal = Wal::create(root.vfs(), "t.wal", options(), mode)
        .unwrap()
        .to_async();
    let seqs = tokio_runtime(4).block_on(durable_commits_from_tasks(&wal, TASKS, EACH, 128));
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..TASKS * EACH).collect::<Vec<_>>(),
        "distinct and contiguous"
    );
    let stats = wal.to_sync().stats().unwrap();
    eprintln!(
        "{}: {} records in {} groups ({:.1} per group)",
        mode.name(),
        stats.records,
        stats.groups,
        stats.records_per_group()
    );
    if mode != Mode::SandboxedPlain {
        assert!(
            stats.records_per_group() >= 24.0,
            "{}: {:.1} records per group, want >= 24",
            mode.name(),
            stats.records_per_group()
        );
    }
    drop(wal);
    check_recovered(root.vfs(), "t.wal", mode, (TASKS * EACH) as usize);
}

fn threads_and_tasks_share_one_writer(mode: Mode) {
    let root = TempRoot::new();
    let wal = Wal::create(root.vfs(), "m.wal", options(), mode).unwrap();
    let per = 100u64;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let wal = wal.clone();
            s.spawn(move || {
                for i in 0..per {
                    wal.commit_durable(1, &payload(t, i, 100)).unwrap();
                }
            });
        }
        let tasks = wal.to_async();
        s.spawn(move || {
            tokio_runtime(4).block_on(async {
                let handles: Vec<_> = (100..108u64)
                    .map(|t| {
                        let wal = tasks.clone();
                        tokio::spawn(async move {
                            for i in 0..per {
                                wal.commit_durable(1, &payload(t, i, 100)).await.unwrap();
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.await.unwrap();
                }
            })
        });
    });
    let stats = wal.stats().unwrap();
    assert_eq!(stats.durable_end, LogSeq(16 * per));
    if mode != Mode::SandboxedPlain {
        assert!(
            stats.records_per_group() > 1.0,
            "threads and tasks share groups: {stats:?}"
        );
    }
    drop(wal);
    check_recovered(root.vfs(), "m.wal", mode, (16 * per) as usize);
}

/// A FaultFs behind a FailingVfs: its gate holds a group in flight, its fault rules fail it.
fn gated() -> (FaultFs, Arc<FailingVfs>, Arc<Counters>) {
    let fault = FaultFs::new();
    let (vfs, counters) = FailingVfs::new(Arc::new(fault.clone()));
    (fault, vfs, counters)
}

/// Waits until the writer shows `visible` records staged.
async fn until_visible(wal: &stele_host::AsyncWal, visible: u64) {
    // Bounded (each round is one stats call, ~0.1 ms) so a bug fails the test instead of hanging it.
    for _ in 0..100_000 {
        if wal.stats().await.unwrap().visible_end.0 >= visible {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("records were never staged");
}

fn a_failed_sync_reaches_all_16_waiting_tasks(mode: Mode) {
    if mode == Mode::SandboxedPlain {
        // The plain build serializes calls: no caller can wait behind a group in flight, so
        // there is nothing to line up (its poisoning is covered in tests/wal.rs).
        return;
    }
    let (fault, vfs, gate) = gated();
    let wal = Wal::create(vfs, "f.wal", options(), mode)
        .unwrap()
        .to_async();
    tokio_runtime(4).block_on(async {
        // Seq 0 is durable; a group holding seq 1 is in flight and blocked at its sync.
        wal.commit_durable(1, &payload(99, 0, 32)).await.unwrap();
        gate.close_gate();
        let first = tokio::spawn({
            let wal = wal.clone();
            async move { wal.commit_durable(1, &payload(99, 1, 32)).await }
        });
        until_visible(&wal, 2).await;
        let syncs_so_far = fault.count(OpKind::Sync);
        fault.inject(FaultRule {
            op: OpKind::Sync,
            nth: syncs_so_far + 1,
            error: InjectedError::Io,
        });
        let waiters: Vec<_> = (0..16u64)
            .map(|t| {
                let wal = wal.clone();
                tokio::spawn(async move { wal.commit_durable(1, &payload(t, 0, 32)).await })
            })
            .collect();
        until_visible(&wal, 18).await;
        gate.open_gate();
        let first = first.await.unwrap();
        assert!(
            matches!(first, Err(WalError::Write(WalWriteError::Failed { .. }))),
            "{first:?}"
        );
        for w in waiters {
            let r = w.await.unwrap();
            assert!(
                matches!(r, Err(WalError::Write(WalWriteError::Failed { .. }))),
                "{r:?}"
            );
        }
        let later = wal.commit_durable(1, b"later").await;
        assert!(
            matches!(later, Err(WalError::Write(WalWriteError::Poisoned { .. }))),
            "{later:?}"
        );
        assert_eq!(
            wal.stats().await.unwrap().durable_end,
            LogSeq(1),
            "nothing after the failure is durable"
        );
    });
}

/// A group that finds no room at its write stalls the writer: all 16 tasks waiting on it are
/// told `Stalled` (not poisoned), and the next commit, once the fault has passed, writes their
/// records first, once each.
fn a_write_without_room_stalls_16_waiting_tasks_and_the_retry_writes_them(mode: Mode) {
    if mode == Mode::SandboxedPlain {
        // As above: no caller waits behind a group in flight (tests/wal.rs covers its stall).
        return;
    }
    let (fault, vfs, gate) = gated();
    let wal = Wal::create(vfs, "f.wal", options(), mode)
        .unwrap()
        .to_async();
    tokio_runtime(4).block_on(async {
        wal.commit_durable(1, &payload(99, 0, 32)).await.unwrap();
        gate.close_gate();
        let first = tokio::spawn({
            let wal = wal.clone();
            async move { wal.commit_durable(1, &payload(99, 1, 32)).await }
        });
        until_visible(&wal, 2).await;
        // The first group is written and held at its sync: the next write is the waiters'.
        fault.inject(FaultRule {
            op: OpKind::Write,
            nth: fault.count(OpKind::Write) + 1,
            error: InjectedError::NoSpace,
        });
        let waiters: Vec<_> = (0..16u64)
            .map(|t| {
                let wal = wal.clone();
                tokio::spawn(async move { wal.commit_durable(1, &payload(t, 0, 32)).await })
            })
            .collect();
        until_visible(&wal, 18).await;
        gate.open_gate();
        assert_eq!(first.await.unwrap().unwrap(), LogSeq(1));
        for w in waiters {
            let r = w.await.unwrap();
            assert!(
                matches!(
                    r,
                    Err(WalError::Write(WalWriteError::Stalled {
                        cause: stele::vfs::VfsError::NoSpace
                    }))
                ),
                "{r:?}"
            );
        }
        assert_eq!(wal.stats().await.unwrap().durable_end, LogSeq(2));
        let later = wal.commit_durable(1, b"later").await.unwrap();
        assert_eq!(later, LogSeq(18), "after the 16 stalled records");
        assert_eq!(wal.stats().await.unwrap().durable_end, LogSeq(19));
    });
    drop(wal);
    let (records, _) = stele_host::read_wal(Arc::new(fault), "f.wal", mode).unwrap();
    assert_eq!(records.len(), 19);
    for t in 0..16u64 {
        let expected = payload(t, 0, 32);
        let copies = records
            .iter()
            .filter(|r| r.payload[..] == expected[..])
            .count();
        assert_eq!(copies, 1, "task {t}'s record, once");
    }
}

fn cancelled_waiters_lose_nothing(mode: Mode) {
    if mode == Mode::SandboxedPlain {
        // Serialized calls: see a_failed_sync_reaches_all_16_waiting_tasks.
        return;
    }
    let (fault, vfs, gate) = gated();
    let wal = Wal::create(vfs, "c.wal", options(), mode)
        .unwrap()
        .to_async();
    tokio_runtime(4).block_on(async {
        gate.close_gate();
        let handles: Vec<_> = (0..16u64)
            .map(|t| {
                let wal = wal.clone();
                tokio::spawn(async move { wal.commit_durable(1, &payload(t, 0, 48)).await })
            })
            .collect();
        until_visible(&wal, 16).await;
        // Drop half of the waiting futures.
        for h in handles.iter().step_by(2) {
            h.abort();
        }
        gate.open_gate();
        for h in handles.into_iter().skip(1).step_by(2) {
            h.await.unwrap().unwrap();
        }
        wal.flush().await.unwrap();
        let stats = wal.stats().await.unwrap();
        assert_eq!(
            stats.durable_end, stats.visible_end,
            "every staged record is durable"
        );
    });
    let vfs: Arc<dyn Vfs> = Arc::new(fault.crash(stele_host::fs::CrashPlan::KeepPrefix { ops: 0 }));
    let (records, _) = read_wal(vfs, "c.wal", mode).unwrap();
    assert_eq!(
        records.len(),
        16,
        "the cancelled callers' records survive a power loss too"
    );
}

/// A lone caller runs its own group's sync (sandboxed: on its own thread, no hop to the I/O
/// thread), yet the instance stays open meanwhile: while that sync is held at the gate, other
/// threads read stats, commit, and stage a durable commit into the next group.
fn a_lone_callers_sync_leaves_the_instance_open(mode: Mode) {
    if mode == Mode::SandboxedPlain {
        // Serialized calls: see a_failed_sync_reaches_all_16_waiting_tasks.
        return;
    }
    let (_fault, vfs, gate) = gated();
    let wal = Wal::create(vfs, "o.wal", options(), mode).unwrap();
    gate.close_gate();
    std::thread::scope(|s| {
        let lone = s.spawn(|| wal.commit_durable(1, &payload(0, 0, 40)));
        let stats = until_visible_blocking(&wal, 1);
        assert_eq!(
            stats.durable_end,
            LogSeq(0),
            "the lone call's sync is still held"
        );
        assert_eq!(wal.commit(1, &payload(1, 0, 40)).unwrap(), LogSeq(1));
        let next_group = s.spawn(|| wal.commit_durable(1, &payload(2, 0, 40)));
        let stats = until_visible_blocking(&wal, 3);
        assert_eq!(stats.durable_end, LogSeq(0));
        assert!(!lone.is_finished(), "answered before its sync returned");
        gate.open_gate();
        assert_eq!(lone.join().unwrap().unwrap(), LogSeq(0));
        assert_eq!(next_group.join().unwrap().unwrap(), LogSeq(2));
    });
    assert_eq!(wal.stats().unwrap().durable_end, LogSeq(3));
    drop(wal);
}

/// Waits (polling `stats`, bounded) until `visible` records are staged; returns those stats.
fn until_visible_blocking(wal: &Wal, visible: u64) -> stele::wal::WalWriterStats {
    for _ in 0..100_000 {
        let stats = wal.stats().unwrap();
        if stats.visible_end.0 >= visible {
            return stats;
        }
        std::thread::yield_now();
    }
    panic!("records were never staged");
}

/// On a current-thread runtime a lone task drives the instance from its own future while its
/// sync runs on the instance's I/O lane. Dropping that future mid-sync hands the run to the dispatcher:
/// the record still becomes durable, and the instance keeps serving.
fn a_dropped_driver_hands_its_calls_over(mode: Mode) {
    if mode != Mode::Sandboxed {
        // Only the async-ABI instance has callers that drive it.
        return;
    }
    let (fault, vfs, gate) = gated();
    let wal = Wal::create(vfs, "d.wal", options(), mode)
        .unwrap()
        .to_async();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        gate.close_gate();
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            wal.commit_durable(1, &payload(0, 0, 40)),
        )
        .await;
        assert!(dropped.is_err(), "the sync was held: {dropped:?}");
        assert_eq!(wal.stats().await.unwrap().visible_end, LogSeq(1));
        gate.open_gate();
        wal.flush().await.unwrap();
        assert_eq!(wal.stats().await.unwrap().durable_end, LogSeq(1));
        assert_eq!(
            wal.commit_durable(1, &payload(1, 0, 40)).await.unwrap(),
            LogSeq(1)
        );
    });
    drop(wal);
    let vfs: Arc<dyn Vfs> = Arc::new(fault.crash(stele_host::fs::CrashPlan::KeepPrefix { ops: 0 }));
    let (records, _) = read_wal(vfs, "d.wal", mode).unwrap();
    assert_eq!(
        records.len(),
        2,
        "the dropped caller's record survives a power loss"
    );
}

every_mode!(
    tasks_64_x_200_durable_commits,
    a_lone_callers_sync_leaves_the_instance_open,
    a_dropped_driver_hands_its_calls_over,
    threads_and_tasks_share_one_writer,
    a_failed_sync_reaches_all_16_waiting_tasks,
    a_write_without_room_stalls_16_waiting_tasks_and_the_retry_writes_them,
    cancelled_waiters_lose_nothing,
);

/// The native task driver on a current-thread runtime, where a leader cannot block in place:
/// its turns run on the blocking pool while the one thread serves the waiting tasks, which
/// still share groups.
#[test]
fn native_tasks_on_a_current_thread_runtime_share_groups() {
    const TASKS: u64 = 32;
    const EACH: u64 = 50;
    let root = TempRoot::new();
    let wal = Wal::create(root.vfs(), "ct.wal", options(), Mode::Native)
        .unwrap()
        .to_async();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut seqs = runtime.block_on(durable_commits_from_tasks(&wal, TASKS, EACH, 64));
    seqs.sort_unstable();
    assert_eq!(seqs, (0..TASKS * EACH).collect::<Vec<_>>());
    let stats = wal.to_sync().stats().unwrap();
    assert_eq!(stats.durable_end, LogSeq(TASKS * EACH));
    assert!(
        stats.groups * 4 < TASKS * EACH,
        "{} groups for {} records: tasks did not share syncs",
        stats.groups,
        TASKS * EACH
    );
    check_recovered(root.vfs(), "ct.wal", Mode::Native, (TASKS * EACH) as usize);
}

/// Tasks aborted at random points of their wait (staged, parked, handed leadership) never
/// strand the others: in every round the survivors finish, a flush returns, and every staged
/// record, the aborted callers' included, is durable and recovered.
#[test]
fn native_tasks_aborted_anywhere_strand_no_one() {
    const ROUNDS: u64 = 150;
    const TASKS: u64 = 12;
    let root = TempRoot::new();
    let wal = Wal::create(root.vfs(), "ab.wal", options(), Mode::Native)
        .unwrap()
        .to_async();
    // On a thread of its own: a stranded waiter shows as a hang, which this thread turns into
    // a failure (a stuck leader blocks a worker for good, and the runtime's drop would wait).
    let (finished, finish) = std::sync::mpsc::channel();
    let rounds = std::thread::spawn({
        let wal = wal.clone();
        move || {
            tokio_runtime(2).block_on(async {
                for round in 0..ROUNDS {
                    let handles: Vec<_> = (0..TASKS)
                        .map(|t| {
                            let wal = wal.clone();
                            tokio::spawn(async move {
                                wal.commit_durable(1, &payload(t, round, 40)).await.unwrap()
                            })
                        })
                        .collect();
                    // Abort a round-dependent subset after a round-dependent number of turns,
                    // so that aborts land before staging, while parked, and around hand-offs.
                    for _ in 0..(round % 7) {
                        tokio::task::yield_now().await;
                    }
                    for (k, h) in handles.iter().enumerate() {
                        if (k as u64 + round).is_multiple_of(3) {
                            h.abort();
                        }
                    }
                    for h in handles {
                        if let Err(e) = h.await {
                            assert!(e.is_cancelled(), "{e}");
                        }
                    }
                    wal.flush().await.unwrap();
                    let stats = wal.stats().await.unwrap();
                    assert_eq!(stats.durable_end, stats.visible_end, "round {round}");
                }
            });
            let _ = finished.send(());
        }
    });
    match finish.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => rounds.join().unwrap(),
        // The thread panicked: its assertion is the failure.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => rounds.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{ROUNDS} rounds did not finish in 60 s: a waiter was stranded")
        }
    }
    let visible = wal.to_sync().stats().unwrap().visible_end.0;
    assert!(visible > ROUNDS * TASKS / 2, "{visible} records staged");
    check_recovered(root.vfs(), "ab.wal", Mode::Native, visible as usize);
}
