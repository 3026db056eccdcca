//! The push log's crash matrix: seeded runs of pushes, a compaction, more pushes and a second
//! compaction on the fault-injecting filesystem; at every operation boundary and under every
//! crash plan there, recovery must scan without corruption and give exactly the rows of the
//! pushes acknowledged by then, or of those plus the one in flight: a push is all or nothing,
//! compaction changes no row and no order (so `refs::fold` is identical), and appending after
//! recovery survives a second crash.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::push_log::{PushLog, PushLogError, refs};
use stele::recovery::LogEnd;
use stele::vfs::{OpenMode, Vfs};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, OpKind, QuotaVfs};
use stele_tests::ci_line;
use stele_tests::crash::{CrashWorkload, SplitMix, explore, explore_fault_schedule, fault_suffix};

const PATH: &str = "refs.log";

pub(crate) type Row = (String, Option<String>, u64, i64);

pub(crate) fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.as_deref()))),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
        ],
    )
    .unwrap()
}

pub(crate) fn rows_of(batch: &RecordBatch) -> Vec<Row> {
    let names = batch.column(0).as_string::<i32>();
    let targets = batch.column(1).as_string::<i32>();
    let seqs = batch.column(2).as_primitive::<UInt64Type>();
    let times = batch.column(3).as_primitive::<Int64Type>();
    (0..batch.num_rows())
        .map(|i| {
            (
                names.value(i).to_owned(),
                (!targets.is_null(i)).then(|| targets.value(i).to_owned()),
                seqs.value(i),
                times.value(i),
            )
        })
        .collect()
}

struct PushLogWorkload {
    seed: u64,
    pushes: u64,
    /// The control: count each push acknowledged when it starts, as a log that acknowledged
    /// before its sync would. The oracle must catch it.
    ack_at_start: bool,
    /// Injected into the run: a push or compaction that fails is not acknowledged, and the
    /// run goes on with the same log.
    faults: Vec<FaultRule>,
    /// Runs the log under a disk quota of this many bytes ([`QuotaVfs`]): pushes and
    /// compactions past it are refused (typed, not acknowledged, the same log goes on), and no
    /// crash state may hold more.
    disk_bytes_max: Option<u64>,
}

#[derive(Default)]
struct PushOracle {
    /// Each push's rows, with the boundary before it and the boundary at its acknowledgment.
    pushes: Vec<(usize, usize, Vec<Row>)>,
    /// Pushes and compactions the quota refused.
    refusals: u64,
}

impl CrashWorkload for PushLogWorkload {
    type Oracle = PushOracle;

    fn name(&self) -> String {
        if self.ack_at_start {
            format!("push-log-ack-before-sync-seed{}", self.seed)
        } else {
            let quota = self
                .disk_bytes_max
                .map_or(String::new(), |max| format!("-quota{max}"));
            format!(
                "push-log-seed{}{}{quota}",
                self.seed,
                fault_suffix(&self.faults)
            )
        }
    }

    fn faults(&self) -> Vec<FaultRule> {
        self.faults.clone()
    }

    fn run(&self, fs: &FaultFs) -> PushOracle {
        let vfs: Arc<dyn Vfs> = match self.disk_bytes_max {
            None => Arc::new(fs.clone()),
            Some(max) => {
                Arc::new(QuotaVfs::with_disk_bytes_max(Arc::new(fs.clone()), max).expect("quota"))
            }
        };
        let at_quota = self.disk_bytes_max.is_some();
        let log = PushLog::new(vfs, PATH, refs::schema());
        let mut rng = SplitMix(self.seed);
        let mut oracle = PushOracle::default();
        for seq in 1..=self.pushes {
            let rows: Vec<Row> = (0..rng.range(1, 40))
                .map(|_| {
                    let target = (rng.range(0, 5) > 0).then(|| {
                        // Targets of a few bytes to a few hundred: frames span sectors.
                        "x".repeat(rng.range(1, 300) as usize)
                    });
                    (
                        format!("ref{}", rng.range(0, 6)),
                        target,
                        seq,
                        seq as i64 * 1000,
                    )
                })
                .collect();
            let start = fs.boundaries() - 1;
            match log.append(&batch(&rows)) {
                Ok(_) => {
                    let acked = if self.ack_at_start {
                        start
                    } else {
                        fs.boundaries() - 1
                    };
                    oracle.pushes.push((start, acked, rows));
                }
                // Refused before any write (the pending directory sync failed): nothing of it
                // can be recovered, and it is not acknowledged.
                Err(PushLogError::AppendFailed { .. }) if !self.faults.is_empty() => {}
                // Refused before any byte of it was written.
                Err(PushLogError::QuotaExceeded(_)) if at_quota => oracle.refusals += 1,
                Err(e) => panic!("append: {e}"),
            }
            if seq == self.pushes / 2 || seq == self.pushes {
                match log.compact() {
                    Ok(_) => {}
                    Err(PushLogError::Vfs(_)) if !self.faults.is_empty() => {}
                    // No room for the staged copy: the old file stays whole.
                    Err(PushLogError::QuotaExceeded(_)) if at_quota => oracle.refusals += 1,
                    Err(e) => panic!("compact: {e}"),
                }
            }
        }
        oracle
    }

    fn check(&self, crashed: FaultFs, oracle: &PushOracle, boundary: usize) -> Result<(), String> {
        let vfs: Arc<dyn Vfs> = Arc::new(crashed.clone());
        if let Some(max) = self.disk_bytes_max {
            // What the crash left (the log and any staged copy): never more than the quota,
            // whatever was in flight.
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
        let log = PushLog::new(vfs, PATH, refs::schema());
        let mut scan = log.scan().map_err(|e| format!("scan: {e}"))?;
        let mut recovered: Vec<Row> = Vec::new();
        for frame in scan.by_ref() {
            let frame = frame.map_err(|e| format!("scan: {e}"))?;
            recovered.extend(rows_of(&frame.batch));
        }
        if let LogEnd::Corrupt { offset, .. } = scan.end() {
            return Err(format!("a crash made corruption at byte {offset}"));
        }
        let acked = oracle.pushes.iter().filter(|p| p.1 <= boundary).count();
        let started = oracle.pushes.iter().filter(|p| p.0 < boundary).count();
        let rows_through = |k: usize| -> Vec<Row> {
            oracle.pushes[..k]
                .iter()
                .flat_map(|p| p.2.clone())
                .collect()
        };
        let matches = [acked, started]
            .iter()
            .any(|&k| rows_through(k) == recovered);
        if !matches {
            return Err(format!(
                "recovered {} rows: not the rows of the first {acked} (acknowledged) or {started} (started) pushes",
                recovered.len()
            ));
        }

        // Appending after recovery works (it cuts a torn tail) and survives a second crash.
        let marker = vec![("after".to_owned(), Some("crash".to_owned()), 999, 1)];
        log.append(&batch(&marker))
            .map_err(|e| format!("append after recovery: {e}"))?;
        drop(log);
        let second: Arc<dyn Vfs> = Arc::new(crashed.crash(CrashPlan::KeepPrefix { ops: 0 }));
        let log = PushLog::new(second, PATH, refs::schema());
        let mut after: Vec<Row> = Vec::new();
        for frame in log.scan().map_err(|e| format!("second scan: {e}"))? {
            after.extend(rows_of(
                &frame.map_err(|e| format!("second scan: {e}"))?.batch,
            ));
        }
        let mut expected = recovered;
        expected.extend(marker);
        if after != expected {
            return Err("second crash: not the first recovery plus the marker".into());
        }
        Ok(())
    }
}

#[test]
fn push_log_crash_matrix_has_no_violations() {
    let mut total = 0;
    for seed in 1..=8 {
        let (report, _, _) = explore(&PushLogWorkload {
            seed,
            pushes: 24,
            ack_at_start: false,
            faults: Vec::new(),
            disk_bytes_max: None,
        });
        report.print();
        assert!(report.violations.is_empty(), "{}", report.violations[0]);
        total += report.states;
    }
    ci_line(&format!(
        "crash-matrix: push-log total states={total} violations=0"
    ));
    assert!(total >= 3_000, "only {total} states");
}

#[test]
fn acknowledging_before_the_sync_fails_the_oracle() {
    let (report, _, _) = explore(&PushLogWorkload {
        seed: 5,
        pushes: 6,
        ack_at_start: true,
        faults: Vec::new(),
        disk_bytes_max: None,
    });
    ci_line(&format!(
        "tier-check: {} states={} violations={} (must be > 0)",
        report.name,
        report.states,
        report.violations.len()
    ));
    assert!(!report.violations.is_empty());
}

/// The fault schedule: a run for each directory sync and each rename of a clean run, that one
/// failing. The run goes on with the same log (which retries the directory sync before its next
/// acknowledgment), and every crash state of it must hold every push acknowledged by then.
#[test]
fn push_log_crash_matrix_with_a_failed_dir_sync_or_rename_has_no_violations() {
    let runs = explore_fault_schedule(
        "push-log-faults",
        &[(OpKind::SyncDir, u64::MAX), (OpKind::Rename, u64::MAX)],
        |faults| PushLogWorkload {
            seed: 3,
            pushes: 12,
            ack_at_start: false,
            faults,
            disk_bytes_max: None,
        },
    );
    assert!(
        runs >= 5,
        "3 directory syncs and 2 renames, at least: {runs}"
    );
}

/// The matrix at the quota: pushes and two compactions under a quota of 64 KiB, so that the
/// later pushes are refused and a compaction meets the quota for its staged copy. Every crash
/// state holds every acknowledged push, no refused one, and no more bytes than the quota;
/// after recovery the log takes a push again.
#[test]
fn push_log_crash_matrix_at_the_quota_has_no_violations() {
    let mut total = 0;
    let mut refusals = 0;
    for seed in 1..=4 {
        let (report, _, oracle) = explore(&PushLogWorkload {
            seed,
            pushes: 24,
            ack_at_start: false,
            faults: Vec::new(),
            disk_bytes_max: Some(64 << 10),
        });
        report.print();
        assert!(report.violations.is_empty(), "{}", report.violations[0]);
        total += report.states;
        refusals += oracle.refusals;
    }
    ci_line(&format!(
        "crash-matrix: push-log at the quota total states={total} refusals={refusals} violations=0"
    ));
    assert!(refusals >= 8, "only {refusals} pushes met the quota");
}
