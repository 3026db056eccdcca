//! The crash-matrix harness. A workload runs once against a [`FaultFs`] that snapshots its model
//! after every operation; then, for every operation boundary and every crash plan there (keep
//! none, all, each prefix, each torn variant of each write), the harness builds the crashed
//! filesystem and asks the workload to recover and check it against its oracle of acknowledged
//! operations.
//!
//! Adding a workload is implementing [`CrashWorkload`]: `run` does the work and returns what was
//! acknowledged (with the boundary at which each acknowledgment was observed), `check` recovers a
//! crashed filesystem and reports violations.

use std::time::{Duration, Instant};

use stele_host::fs::{CrashPlan, FaultFs, FaultRule, InjectedError, OpKind};

/// One workload of the matrix.
pub trait CrashWorkload: Sync {
    /// What `run` acknowledged, for `check` to hold recovery against.
    type Oracle: Sync;
    fn name(&self) -> String;
    /// Faults injected into the recorded run (a failed directory sync or rename, say): the run
    /// must tolerate them, and its oracle holds only what was acknowledged despite them.
    fn faults(&self) -> Vec<FaultRule> {
        Vec::new()
    }
    /// Runs the workload on `fs`, which is recording boundaries.
    fn run(&self, fs: &FaultFs) -> Self::Oracle;
    /// Recovers `crashed` (the state after a crash at `boundary` under `plan`) and checks it.
    fn check(&self, crashed: FaultFs, oracle: &Self::Oracle, boundary: usize)
    -> Result<(), String>;
}

/// What one workload's matrix found.
#[derive(Debug)]
pub struct MatrixReport {
    pub name: String,
    pub boundaries: usize,
    pub states: usize,
    pub violations: Vec<String>,
    pub elapsed: Duration,
}

impl MatrixReport {
    /// Prints the summary line and the first violations past libtest's capture.
    pub fn print(&self) {
        crate::ci_line(&self.line());
        for v in self.violations.iter().take(10) {
            crate::ci_line(&format!("  violation: {v}"));
        }
    }

    /// The summary line CI prints.
    pub fn line(&self) -> String {
        format!(
            "crash-matrix: {} states={} violations={} boundaries={} time={:.2}s",
            self.name,
            self.states,
            self.violations.len(),
            self.boundaries,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs `workload` and explores every crash state of its run.
pub fn explore<W: CrashWorkload>(workload: &W) -> (MatrixReport, FaultFs, W::Oracle) {
    let started = Instant::now();
    let fs = FaultFs::new();
    for rule in workload.faults() {
        fs.inject(rule);
    }
    fs.record_boundaries();
    let oracle = workload.run(&fs);
    let boundaries = fs.boundaries();
    let mut states = 0;
    let mut violations = Vec::new();
    for boundary in 0..boundaries {
        for plan in fs.crash_plans_at(boundary) {
            states += 1;
            let crashed = fs.crash_at(boundary, plan);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                workload.check(crashed, &oracle, boundary)
            }));
            let problem = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some(why),
                Err(panic) => Some(format!("recovery panicked: {}", panic_message(&panic))),
            };
            if let Some(why) = problem {
                violations.push(format!("boundary {boundary} {plan:?}: {why}"));
            }
        }
    }
    let report = MatrixReport {
        name: workload.name(),
        boundaries,
        states,
        violations,
        elapsed: started.elapsed(),
    };
    (report, fs, oracle)
}

/// What a workload's name adds for the faults injected into its run: `-syncdir3-fails` for the
/// third directory sync failing, nothing for a clean run.
pub fn fault_suffix(faults: &[FaultRule]) -> String {
    faults
        .iter()
        .map(|f| format!("-{:?}{}-fails", f.op, f.nth).to_lowercase())
        .collect()
}

/// A workload's fault schedule: a clean run counts its operations of each kind in `ops`; then,
/// for each of the first `max` of them, the run in which that one operation fails with EIO is
/// explored. Every faulted run must fire its fault and show no violation. Prints each run's
/// line and a total, `crash-matrix: NAME runs=R total states=S violations=0`; returns the
/// number of faulted runs.
pub fn explore_fault_schedule<W: CrashWorkload>(
    name: &str,
    ops: &[(OpKind, u64)],
    workload: impl Fn(Vec<FaultRule>) -> W,
) -> usize {
    let (_, clean, _) = explore(&workload(Vec::new()));
    let (mut runs, mut states) = (0, 0);
    for &(op, max) in ops {
        for nth in 1..=clean.count(op).min(max) {
            let rule = FaultRule {
                op,
                nth,
                error: InjectedError::Io,
            };
            let (report, fs, _) = explore(&workload(vec![rule]));
            report.print();
            assert!(
                fs.trace().iter().any(|t| t.kind == op && t.failed),
                "{op:?} #{nth} never failed"
            );
            assert!(report.violations.is_empty(), "{}", report.violations[0]);
            states += report.states;
            runs += 1;
        }
    }
    crate::ci_line(&format!(
        "crash-matrix: {name} runs={runs} total states={states} violations=0"
    ));
    runs
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Every `step`-th crash state of a recorded run, for sampling (through the component, say).
pub fn sample_states(fs: &FaultFs, step: usize) -> Vec<(usize, CrashPlan)> {
    let mut all = Vec::new();
    for boundary in 0..fs.boundaries() {
        for plan in fs.crash_plans_at(boundary) {
            all.push((boundary, plan));
        }
    }
    all.into_iter().step_by(step.max(1)).collect()
}

/// A small deterministic generator (SplitMix64) for seeded workloads; no dependency needed for
/// sizes and choices.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
}
