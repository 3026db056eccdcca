//! The journal's crash matrix: seeded runs of appends (one to three ops each, values from a few
//! bytes to several sectors), compactions and reopens on the fault-injecting filesystem; at
//! every operation boundary and under every crash plan there, recovery must
//! - succeed (a crash never makes corruption),
//! - give exactly the state before or after the last acknowledged operation, or after the one
//!   in flight: never a mix of an append's ops, never an acknowledged op lost,
//! - and accept a new append that survives a second crash.

use std::sync::Arc;

use stele::journal::{
    JournalError, JournalFile, JournalOp, SessionState, encode_frames, replay, snapshot_ops,
};
use stele::vfs::{OpenMode, Vfs};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, OpKind, QuotaVfs};
use stele_host::{Mode, replay_journal_blocking};
use stele_tests::ci_line;
use stele_tests::crash::{
    CrashWorkload, SplitMix, explore, explore_fault_schedule, fault_suffix, sample_states,
};

const PATH: &str = "session.journal";

struct JournalWorkload {
    seed: u64,
    steps: u64,
    /// The control: acknowledge each append when it starts rather than when it returns, as a
    /// writer that acknowledged before syncing would. The oracle must catch it.
    ack_at_start: bool,
    /// Injected into the run: an append or compaction that fails is not acknowledged, and the
    /// run goes on with the same writer.
    faults: Vec<FaultRule>,
    /// Runs the journal under a disk quota of this many bytes ([`QuotaVfs`]): appends and
    /// compactions past it are refused (typed, not acknowledged, the same writer goes on), and
    /// no crash state may hold more.
    disk_bytes_max: Option<u64>,
}

/// Every op appended, in order, with the boundaries that bound each append.
#[derive(Default)]
struct JournalOracle {
    ops: Vec<JournalOp>,
    /// One per append: (boundary before its first operation, boundary at its acknowledgment,
    /// ops before it, its op count).
    appends: Vec<(usize, usize, usize, usize)>,
    /// Appends the quota refused.
    refusals: u64,
}

impl JournalOracle {
    /// The op counts a recovery at `boundary` may reflect: the ops through the last append
    /// acknowledged by then, or through the one in flight (whole appends only: an append is
    /// atomic).
    fn allowed(&self, boundary: usize) -> Vec<usize> {
        let mut acknowledged = 0;
        let mut started = 0;
        for &(start, acked, before, count) in &self.appends {
            if acked <= boundary {
                acknowledged = before + count;
            }
            if start < boundary {
                started = before + count;
            }
        }
        let mut allowed = vec![acknowledged];
        if started != acknowledged {
            allowed.push(started);
        }
        allowed
    }
}

fn value(rng: &mut SplitMix) -> Vec<u8> {
    let len = match rng.range(0, 3) {
        0 => rng.range(0, 40),
        1 => rng.range(40, 600),
        _ => rng.range(600, 2500),
    } as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

impl CrashWorkload for JournalWorkload {
    type Oracle = JournalOracle;

    fn name(&self) -> String {
        if self.ack_at_start {
            format!("journal-ack-before-sync-seed{}", self.seed)
        } else {
            let quota = self
                .disk_bytes_max
                .map_or(String::new(), |max| format!("-quota{max}"));
            format!(
                "journal-seed{}{}{quota}",
                self.seed,
                fault_suffix(&self.faults)
            )
        }
    }

    fn faults(&self) -> Vec<FaultRule> {
        self.faults.clone()
    }

    fn run(&self, fs: &FaultFs) -> JournalOracle {
        let vfs: Arc<dyn Vfs> = match self.disk_bytes_max {
            None => Arc::new(fs.clone()),
            Some(max) => {
                Arc::new(QuotaVfs::with_disk_bytes_max(Arc::new(fs.clone()), max).expect("quota"))
            }
        };
        let at_quota = self.disk_bytes_max.is_some();
        let mut rng = SplitMix(self.seed);
        let mut oracle = JournalOracle::default();
        let mut journal = JournalFile::open_blocking(vfs.clone(), PATH).expect("open");
        for step in 0..self.steps {
            match rng.range(0, 10) {
                0 if step > 0 => {
                    let state = SessionState::fold(&oracle.ops);
                    match journal.compact_blocking(&encode_frames(&snapshot_ops(&state))) {
                        Ok(()) => {}
                        Err(
                            JournalError::CompactFailed { .. }
                            | JournalError::CompactNotDurable { .. },
                        ) if !self.faults.is_empty() => {}
                        // No room for the staged snapshot: the old file stays whole.
                        Err(JournalError::QuotaExceeded(_)) if at_quota => {}
                        Err(e) => panic!("compact: {e}"),
                    }
                }
                1 => {
                    drop(journal);
                    journal = JournalFile::open_blocking(vfs.clone(), PATH).expect("reopen");
                }
                _ => {
                    let count = rng.range(1, 4) as usize;
                    let ops: Vec<JournalOp> = (0..count)
                        .map(|_| match rng.range(0, 12) {
                            0 => JournalOp::Clear,
                            1 | 2 => JournalOp::Delete {
                                key: format!("k{}", rng.range(0, 8)).into_bytes(),
                            },
                            _ => JournalOp::Set {
                                key: format!("k{}", rng.range(0, 8)).into_bytes(),
                                value: value(&mut rng),
                            },
                        })
                        .collect();
                    let start = fs.boundaries() - 1;
                    match journal.append_blocking(&encode_frames(&ops)) {
                        Ok(()) => {}
                        // Refused before any write (the pending directory sync failed):
                        // nothing of it can be recovered, and it is not acknowledged.
                        Err(JournalError::AppendFailed { .. }) if !self.faults.is_empty() => {
                            continue;
                        }
                        // Refused before any byte of it was written.
                        Err(JournalError::QuotaExceeded(_)) if at_quota => {
                            oracle.refusals += 1;
                            continue;
                        }
                        Err(e) => panic!("append: {e}"),
                    }
                    let acked = if self.ack_at_start {
                        start
                    } else {
                        fs.boundaries() - 1
                    };
                    oracle
                        .appends
                        .push((start, acked, oracle.ops.len(), ops.len()));
                    oracle.ops.extend(ops);
                }
            }
        }
        oracle
    }

    fn check(
        &self,
        crashed: FaultFs,
        oracle: &JournalOracle,
        boundary: usize,
    ) -> Result<(), String> {
        if let Some(max) = self.disk_bytes_max {
            // What the crash left (the journal and any staged snapshot): never more than the
            // quota, whatever was in flight.
            let vfs: Arc<dyn Vfs> = Arc::new(crashed.clone());
            let held: u64 = vfs
                .list("")
                .map_err(|e| format!("list: {e}"))?
                .iter()
                .filter_map(|name| vfs.open(name, OpenMode::Existing).ok())
                .map(|file| file.len().unwrap_or(0))
                .sum();
            if held > max {
                return Err(format!("{held} bytes on disk after the crash, quota {max}"));
            }
        }
        check_recovery(Mode::Native, crashed, oracle, boundary)
    }
}

fn check_recovery(
    mode: Mode,
    crashed: FaultFs,
    oracle: &JournalOracle,
    boundary: usize,
) -> Result<(), String> {
    let vfs: Arc<dyn Vfs> = Arc::new(crashed.clone());
    let (ops, _) = replay_journal_blocking(vfs.clone(), PATH, mode)
        .map_err(|e| format!("recovery failed: {e}"))?;
    let state = SessionState::fold(&ops);
    let allowed = oracle.allowed(boundary);
    if !allowed
        .iter()
        .any(|&n| SessionState::fold(&oracle.ops[..n]) == state)
    {
        return Err(format!(
            "recovered state ({} keys from {} ops) is neither the state after {allowed:?} ops: an acknowledged append lost, half an append kept, or an op invented",
            state.entries.len(),
            ops.len()
        ));
    }

    // Appending after recovery works and survives a second crash.
    let marker = JournalOp::Set {
        key: b"after-recovery".to_vec(),
        value: b"survives a second crash".to_vec(),
    };
    let mut journal = JournalFile::open_blocking(vfs, PATH).map_err(|e| format!("reopen: {e}"))?;
    journal
        .append_blocking(&encode_frames(std::slice::from_ref(&marker)))
        .map_err(|e| format!("append after recovery: {e}"))?;
    drop(journal);
    let second = crashed.crash(CrashPlan::KeepPrefix { ops: 0 });
    let (after, _) = replay(&second, PATH).map_err(|e| format!("second recovery: {e}"))?;
    let mut expected = state;
    expected.apply(&marker);
    if SessionState::fold(&after) != expected {
        return Err("second crash: the state is not the first recovery plus the marker".into());
    }
    Ok(())
}

#[test]
fn journal_crash_matrix_has_no_violations_and_the_component_agrees() {
    let mut total = 0;
    let mut sampled = 0;
    for seed in 1..=8 {
        let workload = JournalWorkload {
            seed,
            steps: 200,
            ack_at_start: false,
            faults: Vec::new(),
            disk_bytes_max: None,
        };
        let (report, fs, oracle) = explore(&workload);
        report.print();
        assert!(report.violations.is_empty(), "{}", report.violations[0]);
        total += report.states;

        // Sampled states recovered through the component agree with the native recovery.
        for (boundary, plan) in sample_states(&fs, report.states / 60) {
            check_recovery(
                Mode::Sandboxed,
                fs.crash_at(boundary, plan),
                &oracle,
                boundary,
            )
            .unwrap_or_else(|why| panic!("sandboxed, boundary {boundary} {plan:?}: {why}"));
            let native = replay(&fs.crash_at(boundary, plan), PATH).unwrap();
            let plain = replay_journal_blocking(
                Arc::new(fs.crash_at(boundary, plan)),
                PATH,
                Mode::SandboxedPlain,
            )
            .unwrap();
            assert_eq!(native, plain, "boundary {boundary} {plan:?}");
            sampled += 1;
        }
    }
    ci_line(&format!(
        "crash-matrix: journal total states={total} violations=0 sandboxed-sample={sampled}"
    ));
    assert!(total >= 10_000, "only {total} states");
    assert!(
        sampled >= 100,
        "only {sampled} sampled through the component"
    );
}

/// The control: a writer that acknowledged appends before their sync must fail the oracle,
/// or the matrix could not tell a durable journal from one that is not.
#[test]
fn acknowledging_before_the_sync_fails_the_oracle() {
    let workload = JournalWorkload {
        seed: 3,
        steps: 20,
        ack_at_start: true,
        faults: Vec::new(),
        disk_bytes_max: None,
    };
    let (report, _, _) = explore(&workload);
    ci_line(&format!(
        "tier-check: {} states={} violations={} (must be > 0)",
        report.name,
        report.states,
        report.violations.len()
    ));
    assert!(!report.violations.is_empty());
}

/// The fault schedule: runs in which one directory sync or one rename of a clean run fails
/// (each of the first eight directory syncs and four renames). The run goes on with the same
/// writer, which retries the directory sync before its next acknowledgment, and every crash
/// state of it must hold every op acknowledged by then.
#[test]
fn journal_crash_matrix_with_a_failed_dir_sync_or_rename_has_no_violations() {
    let runs = explore_fault_schedule(
        "journal-faults",
        &[(OpKind::SyncDir, 8), (OpKind::Rename, 4)],
        |faults| JournalWorkload {
            seed: 5,
            steps: 60,
            ack_at_start: false,
            faults,
            disk_bytes_max: None,
        },
    );
    assert!(runs >= 6, "{runs} faulted runs");
}

/// The matrix at the quota: appends and compactions under a quota of 12 KiB, so that dozens of
/// appends are refused and compactions meet the quota for their staged snapshot. Every crash
/// state holds every acknowledged op, no refused one, and no more bytes than the quota; after
/// recovery the journal takes an append again.
#[test]
fn journal_crash_matrix_at_the_quota_has_no_violations() {
    const QUOTA: u64 = 12 << 10;
    let mut total = 0;
    let mut refusals = 0;
    for seed in 1..=4 {
        let workload = JournalWorkload {
            seed,
            steps: 200,
            ack_at_start: false,
            faults: Vec::new(),
            disk_bytes_max: Some(QUOTA),
        };
        let (report, _, oracle) = explore(&workload);
        report.print();
        assert!(report.violations.is_empty(), "{}", report.violations[0]);
        total += report.states;
        refusals += oracle.refusals;
    }
    ci_line(&format!(
        "crash-matrix: journal at the quota total states={total} refusals={refusals} violations=0"
    ));
    assert!(refusals >= 20, "only {refusals} appends met the quota");
}
