//! Error paths under the fault-injecting filesystem, in both modes: fsyncgate at every sync
//! index, failed and short writes, ENOSPC.

use std::sync::Arc;

use stele::vfs::{Vfs, VfsError};
use stele::wal::{DurabilityPolicy, LogSeq, RecoveryEnd, WalOpenError, WalOptions, WalWriteError};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, InjectedError, OpKind};
use stele_host::{Mode, Wal, WalError, read_wal};
use stele_tests::{every_mode, payload};

const RECORDS: u64 = 30;

fn options() -> WalOptions {
    WalOptions {
        first_seq: LogSeq(500),
        ..WalOptions::single_file(DurabilityPolicy::FullSync)
    }
}

fn vfs(fs: &FaultFs) -> Arc<dyn Vfs> {
    Arc::new(fs.clone())
}

/// Commits `RECORDS` durable records one by one until the first failure; returns the acked
/// payloads and the writer (if it opened).
fn durable_run(fs: &FaultFs, mode: Mode) -> (Vec<Vec<u8>>, Option<WalError>, Option<Wal>) {
    let wal = match Wal::create(vfs(fs), "f.wal", options(), mode) {
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
    let (wal, rec) = Wal::open(vfs(fs), "f.wal", options(), mode).expect("recovery never fails");
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
            assert_eq!(rec.end, RecoveryEnd::TornTail);
        }
        assert_eq!(
            fs.contents("f.wal").unwrap().len() as u64,
            rec.valid_end,
            "torn bytes cut"
        );
        wal.commit_durable(2, b"next append").unwrap();
        drop(wal);
        let (records, end) = read_wal(vfs(&fs), "f.wal", mode).unwrap();
        assert_eq!(end.end, RecoveryEnd::Clean);
        assert_eq!(records.len(), acked.len() + 1);
        assert_eq!(&records.last().unwrap().payload[..], b"next append");
    }
}

fn enospc_is_a_typed_error(mode: Mode) {
    for op in [OpKind::Write, OpKind::Sync] {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op,
            nth: 4,
            error: InjectedError::NoSpace,
        });
        let (_, err, _) = durable_run(&fs, mode);
        assert_eq!(
            err,
            Some(WalError::Write(WalWriteError::Failed {
                cause: VfsError::NoSpace
            })),
            "{op:?}"
        );
    }
}

every_mode!(
    fsyncgate_at_every_sync_index,
    failed_or_short_write_leaves_no_partial_record_before_the_next_append,
    enospc_is_a_typed_error,
);
