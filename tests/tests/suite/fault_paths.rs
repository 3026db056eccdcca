//! Error paths under the fault-injecting filesystem, in every mode: fsyncgate at every sync
//! index, failed and short writes, ENOSPC; and, in every facet, a failed directory sync at
//! every sync-dir index and a failed rename at every rename index, each followed by more work
//! and a power loss.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::journal::{
    JournalError as EngineJournalError, JournalOp, SessionState, encode_frames, snapshot_ops,
};
use stele::push_log::{PushLogError, refs};
use stele::vfs::{Vfs, VfsError};
use stele::wal::{
    DurabilityPolicy, LogEnd, LogSeq, WalOpenError, WalOptions, WalRetentionError, WalWriteError,
};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, InjectedError, OpKind};
use stele_host::{
    Journal, JournalError, Mode, PushLog, PushLogCallError, Wal, WalError, read_wal,
    replay_journal_blocking,
};
use stele_tests::{ci_line, every_mode, payload, payload_id, tokio_runtime};

const RECORDS: u64 = 30;

fn options() -> WalOptions {
    WalOptions::single_file(DurabilityPolicy::FullSync).with_first_seq(LogSeq(500))
}

fn vfs(fs: &FaultFs) -> Arc<dyn Vfs> {
    Arc::new(fs.clone())
}

/// Commits `RECORDS` durable records one by one until the first failure; returns the acked
/// payloads and the writer (if it opened).
fn durable_run(fs: &FaultFs, mode: Mode) -> (Vec<Vec<u8>>, Option<WalError>, Option<Wal>) {
    durable_run_with(fs, mode, options())
}

fn durable_run_with(
    fs: &FaultFs,
    mode: Mode,
    options: WalOptions,
) -> (Vec<Vec<u8>>, Option<WalError>, Option<Wal>) {
    let wal = match Wal::create(vfs(fs), "f.wal", options, mode) {
        Ok(wal) => wal,
        Err(e) => return (vec![], Some(e), None),
    };
    let mut acked = Vec::new();
    for i in 0..RECORDS {
        let p = payload(0, i, 16 + (i as usize * 37) % 900);
        match wal.commit_durable(1, &p) {
            Ok(seq) => {
                assert_eq!(seq, LogSeq(500 + acked.len() as u64));
                acked.push(p);
            }
            Err(e) => return (acked, Some(e), Some(wal)),
        }
    }
    (acked, None, Some(wal))
}

fn recovered_payloads(fs: &FaultFs, mode: Mode) -> Vec<Vec<u8>> {
    recovered_payloads_with(fs, mode, options())
}

fn recovered_payloads_with(fs: &FaultFs, mode: Mode, options: WalOptions) -> Vec<Vec<u8>> {
    let (wal, rec) = Wal::open(vfs(fs), "f.wal", options, mode).expect("recovery never fails");
    drop(wal);
    let (records, _) = read_wal(vfs(fs), "f.wal", mode).unwrap();
    assert_eq!(records.len() as u64, rec.records);
    records.iter().map(|r| r.payload.to_vec()).collect()
}

fn fsyncgate_at_every_sync_index(mode: Mode) {
    let clean = FaultFs::new();
    let (_, err, _) = durable_run(&clean, mode);
    assert!(err.is_none());
    let total_syncs = clean.count(OpKind::Sync);
    assert!(
        total_syncs > RECORDS,
        "creation sync plus one per record: {total_syncs}"
    );
    for n in 1..=total_syncs {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op: OpKind::Sync,
            nth: n,
            error: InjectedError::Io,
        });
        let (acked, err, wal) = durable_run(&fs, mode);
        let err = err.unwrap_or_else(|| panic!("sync #{n} failed but nothing reported it"));
        match (&wal, &err) {
            (None, WalError::Open(WalOpenError::Vfs(VfsError::Io(_)))) => assert_eq!(n, 1),
            (
                Some(_),
                WalError::Write(WalWriteError::Failed {
                    cause: VfsError::Io(_),
                }),
            ) => {}
            other => panic!("sync #{n}: unexpected {other:?}"),
        }
        if let Some(wal) = wal {
            // The sync that failed would succeed if retried: the writer must not retry it.
            for _ in 0..3 {
                let later = wal.commit_durable(1, b"after").unwrap_err();
                assert!(
                    matches!(later, WalError::Write(WalWriteError::Poisoned { .. })),
                    "{later:?}"
                );
                assert!(matches!(
                    wal.flush(),
                    Err(WalError::Write(WalWriteError::Poisoned { .. }))
                ));
            }
            let stats = wal.stats().unwrap();
            assert_eq!(
                stats.durable_end,
                LogSeq(500 + acked.len() as u64),
                "sync #{n}: durable end moved"
            );
        }
        // Everything acknowledged survives a power loss right now, whatever else is lost.
        for plan in [
            CrashPlan::KeepPrefix { ops: 0 },
            CrashPlan::KeepPrefix { ops: usize::MAX },
        ] {
            let recovered = recovered_payloads(&fs.crash(plan), mode);
            assert!(
                recovered.len() >= acked.len(),
                "sync #{n} {plan:?}: lost acknowledged records"
            );
            assert_eq!(recovered[..acked.len()], acked[..], "sync #{n} {plan:?}");
        }
    }
}

fn failed_or_short_write_leaves_no_partial_record_before_the_next_append(mode: Mode) {
    for (nth, error) in [
        (5, InjectedError::ShortWrite { landed_bytes: 11 }),
        (9, InjectedError::ShortWrite { landed_bytes: 0 }),
        (12, InjectedError::Io),
    ] {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op: OpKind::Write,
            nth,
            error,
        });
        let (acked, err, wal) = durable_run(&fs, mode);
        assert!(
            matches!(err, Some(WalError::Write(WalWriteError::Failed { .. }))),
            "{err:?}"
        );
        drop(wal);
        // Reopen on the live file (the process survived): the partial record is a torn tail,
        // cut before anything is appended.
        let (wal, rec) = Wal::open(vfs(&fs), "f.wal", options(), mode).unwrap();
        assert_eq!(rec.records as usize, acked.len());
        if matches!(error, InjectedError::ShortWrite { landed_bytes: 11 }) {
            assert!(rec.end.is_torn());
        }
        assert_eq!(
            fs.contents("f.wal").unwrap().len() as u64,
            rec.valid_end,
            "torn bytes cut"
        );
        wal.commit_durable(2, b"next append").unwrap();
        drop(wal);
        let (records, end) = read_wal(vfs(&fs), "f.wal", mode).unwrap();
        assert_eq!(end.end, LogEnd::Clean);
        assert_eq!(records.len(), acked.len() + 1);
        assert_eq!(&records.last().unwrap().payload[..], b"next append");
    }
}

fn enospc_is_a_typed_error(mode: Mode) {
    // At a sync: poisoned (fsyncgate), as any failed sync.
    let fs = FaultFs::new();
    fs.inject(FaultRule {
        op: OpKind::Sync,
        nth: 4,
        error: InjectedError::NoSpace,
    });
    let (_, err, _) = durable_run(&fs, mode);
    assert_eq!(
        err,
        Some(WalError::Write(WalWriteError::Failed {
            cause: VfsError::NoSpace
        }))
    );
}

/// ENOSPC from a write, at every write index of a run, whole or after part of the write
/// landed, in a single file and in 4 KiB segments (where the write may be a new segment's
/// header, or its zero fill): the writer stalls (typed, not poisoned), the same handle retries
/// the stalled record and goes on, each record is in the log exactly once, and a power loss at
/// any point keeps every acknowledged record, the stalled one once the retry acknowledged it.
fn enospc_from_a_write_stalls_and_the_same_writer_goes_on_at_every_write_index(mode: Mode) {
    let segmented =
        WalOptions::segmented(DurabilityPolicy::FullSync, 4 << 10).with_first_seq(LogSeq(500));
    for options in [options(), segmented] {
        let clean = FaultFs::new();
        let (_, err, _) = durable_run_with(&clean, mode, options);
        assert!(err.is_none());
        let total_writes = clean.count(OpKind::Write);
        let mut stalls = 0;
        for n in 1..=total_writes {
            for error in [
                InjectedError::NoSpace,
                InjectedError::ShortWriteNoSpace { landed_bytes: 11 },
            ] {
                let at = format!("{:?} write #{n} {error:?}", options.segment_bytes);
                let fs = FaultFs::new();
                fs.inject(FaultRule {
                    op: OpKind::Write,
                    nth: n,
                    error,
                });
                let (mut acked, err, wal) = durable_run_with(&fs, mode, options);
                let Some(err) = err else {
                    panic!("{at}: failed but nothing reported it")
                };
                let wal = match (wal, err) {
                    // The creation's writes: nothing to stall, the open fails typed.
                    (None, WalError::Open(WalOpenError::Vfs(VfsError::NoSpace))) => continue,
                    (Some(wal), WalError::Write(WalWriteError::Stalled { cause })) => {
                        assert_eq!(cause, VfsError::NoSpace);
                        wal
                    }
                    other => panic!("{at}: unexpected {other:?}"),
                };
                stalls += 1;
                let stalled = payload(0, acked.len() as u64, 16 + (acked.len() * 37) % 900);
                // Before the retry, a power loss keeps what was acknowledged.
                let crashed = fs.crash(CrashPlan::KeepPrefix { ops: 0 });
                let recovered = recovered_payloads_with(&crashed, mode, options);
                assert_eq!(recovered[..acked.len()], acked[..], "{at}");
                // The fault has passed: a flush writes the stalled record, a commit goes on.
                wal.flush().expect("the retry finds room");
                acked.push(stalled);
                let last = b"after the stall".to_vec();
                wal.commit_durable(1, &last)
                    .expect("the same writer goes on");
                acked.push(last);
                let expected_end = LogSeq(500 + acked.len() as u64);
                assert_eq!(wal.stats().unwrap().durable_end, expected_end, "{at}");
                drop(wal);
                for plan in [
                    CrashPlan::KeepPrefix { ops: 0 },
                    CrashPlan::KeepPrefix { ops: usize::MAX },
                ] {
                    let recovered = recovered_payloads_with(&fs.crash(plan), mode, options);
                    assert_eq!(recovered, acked, "{at} {plan:?}: exactly once");
                }
            }
        }
        assert!(
            stalls > RECORDS,
            "{:?}: a stall at every record's write: {stalls}",
            options.segment_bytes
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A failed directory sync or rename, in every facet. A clean run of each workload counts its
// sync-dirs and renames; then, for each index, a fresh filesystem fails that one operation, the
// workload goes on to the end (reopening a writer that refuses further work), and the power
// fails with none of the volatile operations kept. Everything acknowledged must be recovered,
// and the call during which the fault fired must have returned an error: its durability
// depended on the step that failed.

/// One injected fault, and the check that the call it fired in reported it.
struct Fault<'a> {
    fs: &'a FaultFs,
    op: OpKind,
    /// 0 for a clean run: never fires.
    nth: u64,
    fired_in: Option<&'static str>,
}

impl<'a> Fault<'a> {
    fn inject(fs: &'a FaultFs, op: OpKind, nth: u64) -> Self {
        if nth > 0 {
            fs.inject(FaultRule {
                op,
                nth,
                error: InjectedError::Io,
            });
        }
        Fault {
            fs,
            op,
            nth,
            fired_in: None,
        }
    }

    /// Runs `call`; if the fault fired during it, the call must have returned an error.
    fn call<T, E: Debug>(
        &mut self,
        what: &'static str,
        call: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let before = self.fs.count(self.op);
        let result = call();
        if self.nth > before && self.nth <= self.fs.count(self.op) {
            assert!(
                result.is_err(),
                "{:?} #{} failed inside `{what}`, which still returned Ok",
                self.op,
                self.nth
            );
            self.fired_in = Some(what);
        }
        result
    }
}

/// Runs `workload` clean to count its operations of kind `op`, then once per index with that
/// operation failing. Returns how many faulted runs it made.
fn at_every_index(op: OpKind, workload: impl Fn(&FaultFs, &mut Fault)) -> u64 {
    let clean = FaultFs::new();
    workload(&clean, &mut Fault::inject(&clean, op, 0));
    let total = clean.count(op);
    for nth in 1..=total {
        let fs = FaultFs::new();
        let mut fault = Fault::inject(&fs, op, nth);
        workload(&fs, &mut fault);
        assert!(
            fault.fired_in.is_some(),
            "{op:?} #{nth} of {total} never fired: the faulted run took another path"
        );
    }
    total
}

/// [`at_every_index`] for directory syncs, then for renames; says how many runs each made.
fn at_every_sync_dir_and_rename(workload: impl Fn(&FaultFs, &mut Fault)) -> String {
    let sync_dirs = at_every_index(OpKind::SyncDir, &workload);
    let renames = at_every_index(OpKind::Rename, &workload);
    format!("SyncDir={sync_dirs} Rename={renames}")
}

fn power_loss(fs: &FaultFs) -> Arc<dyn Vfs> {
    Arc::new(fs.crash(CrashPlan::KeepPrefix { ops: 0 }))
}

/// Commits 40 durable records of 60 to 560 bytes (in 4 KiB segments: several rotations), with
/// a checkpoint and a truncation after the 20th and a reopen after the 30th. A writer that
/// refuses further work (poisoned) is reopened; a failed open is retried once.
fn wal_workload(mode: Mode, segmented: bool, fs: &FaultFs, fault: &mut Fault) {
    let (path, options) = if segmented {
        (
            "log",
            WalOptions::segmented(DurabilityPolicy::FullSync, 4096),
        )
    } else {
        ("f.wal", WalOptions::single_file(DurabilityPolicy::FullSync))
    };
    let options = options.with_first_seq(LogSeq(500));
    let open = |fault: &mut Fault| -> Wal {
        match fault.call("open", || Wal::open(vfs(fs), path, options, mode)) {
            Ok((wal, _)) => wal,
            Err(first) => match Wal::open(vfs(fs), path, options, mode) {
                Ok((wal, _)) => wal,
                Err(again) => panic!("open failed twice: {first:?}, then {again:?}"),
            },
        }
    };
    let mut wal = open(fault);
    let mut acked: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut truncated_through = None;
    for i in 0..40u64 {
        let p = payload(0, i, 60 + (i as usize * 97) % 500);
        match fault.call("commit", || wal.commit_durable(1, &p)) {
            Ok(seq) => {
                acked.insert(seq.0, p);
            }
            Err(WalError::Write(WalWriteError::Failed { .. })) => {
                drop(wal);
                wal = open(fault);
            }
            Err(other) => panic!("commit {i}: {other:?}"),
        }
        if segmented && i == 20 {
            let through = LogSeq(acked.keys().next_back().unwrap() - 3);
            match fault.call("checkpoint", || wal.checkpoint(through)) {
                Ok(()) => {
                    // A truncation whose directory sync failed has still deleted segments.
                    truncated_through = Some(through.0);
                    match fault.call("truncate", || wal.truncate_through(through)) {
                        Ok(_) | Err(WalError::Retention(WalRetentionError::Io(_))) => {}
                        Err(other) => panic!("truncate: {other:?}"),
                    }
                }
                Err(WalError::Retention(WalRetentionError::Io(_))) => {}
                Err(other) => panic!("checkpoint: {other:?}"),
            }
        }
        if i == 30 {
            drop(wal);
            wal = open(fault);
        }
    }
    drop(wal);
    let (records, _) = read_wal(power_loss(fs), path, mode)
        .unwrap_or_else(|e| panic!("recovery after the power loss: {e:?}"));
    let recovered: BTreeMap<u64, &[u8]> =
        records.iter().map(|r| (r.seq.0, &r.payload[..])).collect();
    for (seq, p) in &acked {
        match recovered.get(seq) {
            Some(bytes) => assert_eq!(bytes, &&p[..], "seq {seq}: other bytes"),
            // Truncation may delete what it covers; nothing else may go.
            None if truncated_through.is_some_and(|t| *seq <= t) => {}
            None => panic!(
                "acknowledged seq {seq} lost ({:?} #{} failed in {:?})",
                fault.op, fault.nth, fault.fired_in
            ),
        }
    }
}

fn wal_survives_a_failed_dir_sync_or_rename_at_every_index(mode: Mode) {
    for segmented in [false, true] {
        let runs =
            at_every_sync_dir_and_rename(|fs, fault| wal_workload(mode, segmented, fs, fault));
        let layout = if segmented {
            "segmented"
        } else {
            "single-file"
        };
        ci_line(&format!(
            "fault-paths: wal {layout} {}: {runs}",
            mode.name()
        ));
    }
}

/// A rotation whose directory sync fails fails its group (the writer is poisoned), and the
/// writer's `dir_syncs` counts only the directory syncs that succeeded: the same number the
/// filesystem saw succeed, in every mode (the async driver used to count the failed one).
fn a_failed_rotation_dir_sync_is_not_counted(mode: Mode) {
    let fs = FaultFs::new();
    let options = WalOptions::segmented(DurabilityPolicy::FullSync, 4096);
    let (wal, _) = Wal::open(vfs(&fs), "log", options, mode).unwrap();
    fs.inject(FaultRule {
        op: OpKind::SyncDir,
        nth: fs.count(OpKind::SyncDir) + 1,
        error: InjectedError::Io,
    });
    let payload = vec![7u8; 500];
    let failed = (0..32).find_map(|_| wal.commit_durable(1, &payload).err());
    assert!(
        matches!(failed, Some(WalError::Write(WalWriteError::Failed { .. }))),
        "{}: the rotation's group fails: {failed:?}",
        mode.name()
    );
    let succeeded = fs
        .trace()
        .iter()
        .filter(|e| e.kind == OpKind::SyncDir && !e.failed)
        .count() as u64;
    let failed_dir_syncs = fs
        .trace()
        .iter()
        .filter(|e| e.kind == OpKind::SyncDir && e.failed)
        .count();
    assert_eq!(failed_dir_syncs, 1);
    assert_eq!(
        wal.stats().unwrap().dir_syncs,
        succeeded,
        "{}: dir_syncs counts the successful directory syncs",
        mode.name()
    );
}

/// `seal_active_segment`'s durability claim: once it returns `true` under `FullSync`, a power
/// loss keeps the sealed segment sealed (a later, empty segment after it) with every record
/// acknowledged before; commits after it land in the new segment. A failed directory sync
/// fails the seal and poisons the writer, and no acknowledged record is lost.
fn a_seal_survives_power_loss_and_a_failed_one_poisons(mode: Mode) {
    let fs = FaultFs::new();
    let options = WalOptions::segmented(DurabilityPolicy::FullSync, 64 << 10);
    let (wal, _) = Wal::open(vfs(&fs), "log", options, mode).unwrap();
    assert!(
        !wal.seal_active_segment().unwrap(),
        "an empty segment: nothing to seal"
    );
    for i in 0..5u64 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    assert!(wal.seal_active_segment().unwrap(), "{}", mode.name());
    assert!(!wal.seal_active_segment().unwrap(), "sealed already");
    assert_eq!(wal.segments().unwrap(), vec![LogSeq(0), LogSeq(5)]);
    let crashed = power_loss(&fs);
    let (reopened, recovery) = Wal::open(crashed.clone(), "log", options, mode).unwrap();
    assert_eq!(recovery.next_seq, LogSeq(5), "{}", mode.name());
    assert_eq!(reopened.segments().unwrap(), vec![LogSeq(0), LogSeq(5)]);
    reopened.commit_durable(1, &payload(0, 5, 100)).unwrap();
    drop(reopened);
    let (records, _) = read_wal(crashed, "log", mode).unwrap();
    let ids: Vec<(u64, u64)> = records.iter().map(|r| payload_id(&r.payload)).collect();
    assert_eq!(ids, (0..6).map(|i| (0, i)).collect::<Vec<_>>());

    // A seal whose directory sync fails.
    let fs = FaultFs::new();
    let (wal, _) = Wal::open(vfs(&fs), "log", options, mode).unwrap();
    for i in 0..3u64 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    fs.inject(FaultRule {
        op: OpKind::SyncDir,
        nth: fs.count(OpKind::SyncDir) + 1,
        error: InjectedError::Io,
    });
    let failed = wal.seal_active_segment();
    assert!(
        matches!(failed, Err(WalError::Write(WalWriteError::Failed { .. }))),
        "{}: {failed:?}",
        mode.name()
    );
    assert!(matches!(
        wal.commit_durable(1, b"after"),
        Err(WalError::Write(WalWriteError::Poisoned { .. }))
    ));
    drop(wal);
    let (_, recovery) = Wal::open(power_loss(&fs), "log", options, mode).unwrap();
    assert_eq!(
        recovery.next_seq,
        LogSeq(3),
        "{}: the acknowledged survive",
        mode.name()
    );
}

/// Twelve appends of one or two ops, compactions after the 4th and 8th, and a reopen right
/// after the second compaction (a new writer must not trust a name the old one left
/// undurable). The writer retries a pending directory sync itself, so it is kept after a
/// failure.
fn journal_workload(mode: Mode, fs: &FaultFs, fault: &mut Fault) {
    let rt = tokio_runtime(1);
    let open = |fault: &mut Fault| -> Journal {
        fault
            .call("open", || rt.block_on(Journal::open(vfs(fs), "j", mode)))
            .expect("the journal's open makes no directory sync or rename")
    };
    let mut journal = open(fault);
    let mut acked: Vec<JournalOp> = Vec::new();
    for i in 0..12u64 {
        let mut ops = vec![JournalOp::Set {
            key: format!("k{}", i % 5).into_bytes(),
            value: format!("v{i}").into_bytes(),
        }];
        if i % 3 == 2 {
            ops.push(JournalOp::Delete {
                key: format!("k{}", (i + 2) % 5).into_bytes(),
            });
        }
        let mut buf = encode_frames(&ops);
        match fault.call("append", || rt.block_on(journal.append(&mut buf))) {
            Ok(()) => acked.extend(ops),
            Err(JournalError::Journal(EngineJournalError::AppendFailed { .. })) => {}
            Err(other) => panic!("append {i}: {other:?}"),
        }
        if i == 4 || i == 8 {
            let snapshot = encode_frames(&snapshot_ops(&SessionState::fold(&acked)));
            match fault.call("compact", || rt.block_on(journal.compact(snapshot))) {
                Ok(())
                | Err(JournalError::Journal(
                    EngineJournalError::CompactFailed { .. }
                    | EngineJournalError::CompactNotDurable { .. },
                )) => {}
                Err(other) => panic!("compact: {other:?}"),
            }
        }
        if i == 8 {
            drop(journal);
            journal = open(fault);
        }
    }
    drop(journal);
    let (ops, _) = replay_journal_blocking(power_loss(fs), "j", mode)
        .unwrap_or_else(|e| panic!("recovery after the power loss: {e:?}"));
    // A failed append or compaction leaves nothing behind, so the state is exactly the
    // acknowledged one.
    assert_eq!(
        SessionState::fold(&ops),
        SessionState::fold(&acked),
        "{:?} #{} failed in {:?}",
        fault.op,
        fault.nth,
        fault.fired_in
    );
}

fn journal_survives_a_failed_dir_sync_or_rename_at_every_index(mode: Mode) {
    let runs = at_every_sync_dir_and_rename(|fs, fault| journal_workload(mode, fs, fault));
    ci_line(&format!("fault-paths: journal {}: {runs}", mode.name()));
}

fn push(seq: u64) -> RecordBatch {
    RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from(vec![format!("ref{}", seq % 3)])),
            Arc::new(StringArray::from(vec![Some(format!("c{seq}"))])),
            Arc::new(UInt64Array::from(vec![seq])),
            Arc::new(Int64Array::from(vec![seq as i64])),
        ],
    )
    .unwrap()
}

/// Ten pushes, compactions after the 4th and 8th, and a new handle right after the second
/// compaction (a new writer must not trust a name the old one left undurable). The log retries
/// a pending directory sync itself, so it is kept after a failure.
fn push_log_workload(mode: Mode, fs: &FaultFs, fault: &mut Fault) {
    let open = || PushLog::new(vfs(fs), "refs.log", refs::schema(), mode).unwrap();
    let mut log = open();
    let mut acked = Vec::new();
    for seq in 1..=10u64 {
        match fault.call("append", || log.append(&push(seq))) {
            Ok(_) => acked.push(seq),
            Err(PushLogCallError::PushLog(PushLogError::AppendFailed { .. })) => {}
            Err(other) => panic!("push {seq}: {other:?}"),
        }
        if seq == 4 || seq == 8 {
            match fault.call("compact", || log.compact()) {
                Ok(_) | Err(PushLogCallError::PushLog(PushLogError::Vfs(_))) => {}
                Err(other) => panic!("compact: {other:?}"),
            }
        }
        if seq == 8 {
            drop(log);
            log = open();
        }
    }
    drop(log);
    let crashed = PushLog::new(power_loss(fs), "refs.log", refs::schema(), mode).unwrap();
    let (frames, _) = crashed
        .scan_all()
        .unwrap_or_else(|e| panic!("recovery after the power loss: {e:?}"));
    let recovered: Vec<u64> = frames
        .iter()
        .flat_map(|f| {
            f.batch
                .column(2)
                .as_primitive::<UInt64Type>()
                .values()
                .to_vec()
        })
        .collect();
    // A failed push writes nothing that survives, so the pushes are exactly the acknowledged.
    assert_eq!(
        recovered, acked,
        "{:?} #{} failed in {:?}",
        fault.op, fault.nth, fault.fired_in
    );
}

fn push_log_survives_a_failed_dir_sync_or_rename_at_every_index(mode: Mode) {
    let runs = at_every_sync_dir_and_rename(|fs, fault| push_log_workload(mode, fs, fault));
    ci_line(&format!("fault-paths: push-log {}: {runs}", mode.name()));
}

every_mode!(
    fsyncgate_at_every_sync_index,
    failed_or_short_write_leaves_no_partial_record_before_the_next_append,
    enospc_is_a_typed_error,
    enospc_from_a_write_stalls_and_the_same_writer_goes_on_at_every_write_index,
    wal_survives_a_failed_dir_sync_or_rename_at_every_index,
    a_failed_rotation_dir_sync_is_not_counted,
    a_seal_survives_power_loss_and_a_failed_one_poisons,
    journal_survives_a_failed_dir_sync_or_rename_at_every_index,
    push_log_survives_a_failed_dir_sync_or_rename_at_every_index,
);
