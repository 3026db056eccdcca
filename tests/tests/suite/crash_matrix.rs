//! The crash matrix: every operation boundary of recorded workloads, every crash plan there,
//! recovered and checked against what was acknowledged. Prints one summary line per workload.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriter};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, OpKind};
use stele_host::{Mode, Wal, read_wal};
use stele_tests::crash::{
    CrashWorkload, SplitMix, explore, explore_fault_schedule, fault_suffix, sample_states,
};
use stele_tests::{ci_line, op_of, payload, payload_id};

const PATH: &str = "w.wal";
const FIRST_SEQ: u64 = 1000;

pub(crate) type Id = stele_tests::PayloadId;

/// 3 writers commit durable and non-durable records, mixed (single commits, durable commits,
/// durable batches, commits followed by a flush), with payload sizes spanning one to several
/// sectors; the log is closed and reopened (recovered) between the two phases.
struct WalWorkload {
    policy: DurabilityPolicy,
    seed: u64,
    writers: u64,
    records_per_writer_per_phase: u64,
    /// Injected into the run. A single-file log syncs its directory only when it is created
    /// or reopened, so a fault here fails an open, which the run retries once.
    faults: Vec<FaultRule>,
}

#[derive(Default)]
pub(crate) struct WalOracle {
    pub(crate) committed: HashMap<Id, (u16, Vec<u8>)>,
    /// Durable acknowledgments: the boundary at which the acknowledgment was observed.
    pub(crate) acks: Vec<(usize, Id)>,
}

impl WalWorkload {
    fn options(&self) -> WalOptions {
        WalOptions::single_file(self.policy).with_first_seq(LogSeq(FIRST_SEQ))
    }
}

impl CrashWorkload for WalWorkload {
    type Oracle = WalOracle;

    fn name(&self) -> String {
        format!(
            "wal-{:?}-seed{}{}",
            self.policy,
            self.seed,
            fault_suffix(&self.faults)
        )
        .to_lowercase()
    }

    fn faults(&self) -> Vec<FaultRule> {
        self.faults.clone()
    }

    fn run(&self, fs: &FaultFs) -> WalOracle {
        let oracle = Mutex::new(WalOracle::default());
        for phase in 0..2u64 {
            let open = || WalWriter::open_with(fs, PATH, self.options());
            let (writer, _) = match open() {
                Err(_) if !self.faults.is_empty() => open(),
                first => first,
            }
            .expect("open during run");
            std::thread::scope(|s| {
                for t in 0..self.writers {
                    let (writer, oracle) = (&writer, &oracle);
                    let mut rng = SplitMix(self.seed ^ (phase << 32) ^ (t << 16));
                    s.spawn(move || {
                        let writer_id = phase * 100 + t;
                        let mut unacked: Vec<Id> = Vec::new();
                        let mut i = 0;
                        while i < self.records_per_writer_per_phase {
                            let kind = rng.range(0, 4);
                            let count = if kind == 2 { 2 } else { 1 };
                            let ids: Vec<Id> = (i..i + count).map(|k| (writer_id, k)).collect();
                            let payloads: Vec<Vec<u8>> = ids
                                .iter()
                                .map(|id| payload(id.0, id.1, rng.range(16, 700) as usize))
                                .collect();
                            {
                                let mut o = oracle.lock().unwrap();
                                for (id, p) in ids.iter().zip(&payloads) {
                                    o.committed.insert(*id, (op_of(*id), p.clone()));
                                }
                            }
                            let batch: Vec<(u16, &[u8])> = ids
                                .iter()
                                .zip(&payloads)
                                .map(|(id, p)| (op_of(*id), &p[..]))
                                .collect();
                            let acked: Vec<Id> = match kind {
                                0 => {
                                    writer.commit_many(&batch).expect("commit");
                                    unacked.extend(&ids);
                                    vec![]
                                }
                                1 | 2 => {
                                    writer.commit_many_durable(&batch).expect("durable commit");
                                    ids.clone()
                                }
                                _ => {
                                    writer.commit_many(&batch).expect("commit");
                                    unacked.extend(&ids);
                                    writer.flush().expect("flush");
                                    std::mem::take(&mut unacked)
                                }
                            };
                            if !acked.is_empty() {
                                let at = fs.boundaries() - 1;
                                let mut o = oracle.lock().unwrap();
                                o.acks.extend(acked.into_iter().map(|id| (at, id)));
                            }
                            i += count;
                        }
                    });
                }
            });
        }
        oracle.into_inner().unwrap()
    }

    fn check(&self, crashed: FaultFs, oracle: &WalOracle, boundary: usize) -> Result<(), String> {
        check_recovery(Mode::Native, crashed, self.options(), oracle, boundary)
    }
}

/// Recovers `crashed` in `mode` and checks it against `oracle` at `boundary`, then appends,
/// crashes again (keeping only durable state) and checks the second recovery.
fn check_recovery(
    mode: Mode,
    crashed: FaultFs,
    options: WalOptions,
    oracle: &WalOracle,
    boundary: usize,
) -> Result<(), String> {
    let vfs: Arc<dyn Vfs> = Arc::new(crashed.clone());
    let (wal, recovery) =
        Wal::open(vfs.clone(), PATH, options, mode).map_err(|e| format!("recovery failed: {e}"))?;
    let (records, _) =
        read_wal(vfs.clone(), PATH, mode).map_err(|e| format!("read after recovery: {e}"))?;
    if records.len() as u64 != recovery.records {
        return Err(format!(
            "recovery counted {} records, reader found {}",
            recovery.records,
            records.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut last_index: HashMap<u64, u64> = HashMap::new();
    for (k, r) in records.iter().enumerate() {
        if r.seq != LogSeq(FIRST_SEQ + k as u64) {
            return Err(format!(
                "record {k} has seq {}, expected {}",
                r.seq,
                FIRST_SEQ + k as u64
            ));
        }
        if r.payload.len() < 16 {
            return Err(format!(
                "seq {}: payload of {} bytes was never committed",
                r.seq,
                r.payload.len()
            ));
        }
        let id = payload_id(&r.payload);
        match oracle.committed.get(&id) {
            Some((op, p)) if *op == r.op && p[..] == r.payload[..] => {}
            _ => {
                return Err(format!(
                    "seq {} holds {id:?}, which was never committed with these bytes",
                    r.seq
                ));
            }
        }
        if !seen.insert(id) {
            return Err(format!("{id:?} recovered twice"));
        }
        if let Some(prev) = last_index.insert(id.0, id.1)
            && prev >= id.1
        {
            return Err(format!(
                "writer {} out of order: {} after {prev}",
                id.0, id.1
            ));
        }
    }
    for (at, id) in &oracle.acks {
        if *at <= boundary && !seen.contains(id) {
            return Err(format!(
                "{id:?}, acknowledged durable at boundary {at}, was lost"
            ));
        }
    }

    // Reopening and appending after recovery works, and survives a second crash.
    let marker = b"appended after recovery, survives a second crash".to_vec();
    let seq = wal
        .commit_durable(9, &marker)
        .map_err(|e| format!("append after recovery: {e}"))?;
    if seq != recovery.next_seq {
        return Err(format!(
            "append after recovery got seq {seq}, expected {}",
            recovery.next_seq
        ));
    }
    drop(wal);
    let second: Arc<dyn Vfs> = Arc::new(crashed.crash(CrashPlan::KeepPrefix { ops: 0 }));
    let (after, _) = read_wal(second, PATH, mode).map_err(|e| format!("second recovery: {e}"))?;
    if after.len() != records.len() + 1 || after.last().map(|r| &r.payload[..]) != Some(&marker[..])
    {
        return Err(format!(
            "second crash: {} records, expected {} ending in the marker",
            after.len(),
            records.len() + 1
        ));
    }
    if after[..records.len()] != records[..] {
        return Err("second crash changed the records recovered by the first".into());
    }
    Ok(())
}

fn durable_workloads() -> Vec<WalWorkload> {
    // Seven recorded runs. How many states a run has depends on how its threads interleave
    // (bigger groups, fewer operations): observed 2,185 to 4,657 per run, so seven keep the
    // total well above the 10,000-state floor even when every run groups heavily.
    (1..=7)
        .map(|seed| WalWorkload {
            policy: if seed % 2 == 1 {
                DurabilityPolicy::FullSync
            } else {
                DurabilityPolicy::Barrier
            },
            seed,
            writers: 3,
            records_per_writer_per_phase: 250,
            faults: Vec::new(),
        })
        .collect()
}

#[test]
fn wal_crash_matrix_has_no_violations_and_the_component_agrees() {
    let mut total_states = 0;
    let mut sampled = 0;
    for workload in durable_workloads() {
        let (r, fs, oracle) = explore(&workload);
        r.print();
        assert!(
            r.violations.is_empty(),
            "{} violations in {}",
            r.violations.len(),
            r.name
        );
        total_states += r.states;

        // The same states, recovered through the component: same checks, same result.
        let started = std::time::Instant::now();
        let sample = sample_states(&fs, r.states / 80);
        for (boundary, plan) in &sample {
            check_recovery(
                Mode::Sandboxed,
                fs.crash_at(*boundary, *plan),
                workload.options(),
                &oracle,
                *boundary,
            )
            .unwrap_or_else(|why| panic!("sandboxed, boundary {boundary} {plan:?}: {why}"));
            // And the component recovers exactly what the native engine does.
            let native: Arc<dyn Vfs> = Arc::new(fs.crash_at(*boundary, *plan));
            let sandboxed: Arc<dyn Vfs> = Arc::new(fs.crash_at(*boundary, *plan));
            let n =
                Wal::open(native.clone(), PATH, workload.options(), Mode::Native).map(|(_, r)| r);
            let s = Wal::open(sandboxed.clone(), PATH, workload.options(), Mode::Sandboxed)
                .map(|(_, r)| r);
            assert_eq!(n, s, "boundary {boundary} {plan:?}: recoveries differ");
            let n = read_wal(native, PATH, Mode::Native).unwrap().0;
            let s = read_wal(sandboxed, PATH, Mode::Sandboxed).unwrap().0;
            assert_eq!(n, s, "boundary {boundary} {plan:?}: records differ");
        }
        sampled += sample.len();
        ci_line(&format!(
            "crash-matrix: {}-sandboxed-sample states={} violations=0 time={:.2}s",
            r.name,
            sample.len(),
            started.elapsed().as_secs_f64()
        ));
    }
    ci_line(&format!(
        "crash-matrix: wal total states={total_states} sandboxed={sampled}"
    ));
    assert!(
        total_states >= 10_000,
        "the matrix must cover at least 10,000 states, covered {total_states}"
    );
    assert!(
        sampled >= 200,
        "at least 200 states through the component, got {sampled}"
    );
}

/// The tier test: under `Skip` nothing is synced, so the power-loss oracle must find acknowledged
/// records that a crash loses. If it did not, the matrix could not tell the tiers apart.
#[test]
fn skip_policy_fails_the_power_loss_oracle() {
    let workload = WalWorkload {
        policy: DurabilityPolicy::Skip,
        seed: 4,
        writers: 3,
        records_per_writer_per_phase: 10,
        faults: Vec::new(),
    };
    let (r, _, _) = explore(&workload);
    ci_line(&format!(
        "tier-check: {} under the power-loss oracle: states={} states-losing-acknowledged-records={} (must be > 0)",
        r.name,
        r.states,
        r.violations
            .iter()
            .filter(|v| v.contains("was lost"))
            .count()
    ));
    assert!(
        !r.violations.is_empty(),
        "Skip must not pass the power-loss oracle"
    );
    assert!(
        r.violations.iter().any(|v| v.contains("was lost")),
        "{:?}",
        &r.violations[..1]
    );
}

/// The fault schedule: a run for each directory sync of a clean run (the new log's, and the
/// reopen's), that one failing. The failed open is retried, and every crash state of the run
/// must hold every record acknowledged by then: the retry syncs the directory again before it
/// returns a writer, so no record is acknowledged in a file whose name is not durable.
#[test]
fn wal_crash_matrix_with_a_failed_dir_sync_has_no_violations() {
    let runs = explore_fault_schedule("wal-faults", &[(OpKind::SyncDir, u64::MAX)], |faults| {
        WalWorkload {
            policy: DurabilityPolicy::FullSync,
            seed: 9,
            writers: 2,
            records_per_writer_per_phase: 40,
            faults,
        }
    });
    assert_eq!(runs, 2, "the new log's directory sync and the reopen's");
}
