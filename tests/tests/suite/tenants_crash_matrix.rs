//! The crash matrix through the [`Tenants`] registry: hibernation and resume under a budget
//! of open logs, for each facet. At every operation boundary of a recorded run (commits,
//! appends, pushes, hibernations, the resumes they cause) and every crash plan there, each
//! tenant's logs are recovered natively and checked against what was acknowledged, and a new
//! registry on the crashed disk must write to every tenant again.

use std::sync::Arc;

use stele::journal::{JournalOp, encode_frames, replay};
use stele::push_log::{PushLog, refs};
use stele::recovery::LogEnd;
use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, VisibleRecord, WalOptions};
use stele_host::fs::{FaultFs, SubdirVfs};
use stele_host::tenants::{
    TENANT_JOURNAL_PATH, TENANT_LOG_PATH, TENANT_PUSH_LOG_PATH, TenantWal, Tenants, TenantsOptions,
};
use stele_host::{Mode, read_wal};
use stele_tests::crash::{CrashWorkload, SplitMix, explore};
use stele_tests::{op_of, payload, payload_id, tokio_runtime};

use super::crash_matrix::{Id, WalOracle};
use super::push_log_crash_matrix::{Row, batch, rows_of};

/// Explores `workload`, prints its line, and asserts no violation in at least 1,000 crash
/// states; returns what it acknowledged.
fn explore_without_violations<W: CrashWorkload>(workload: &W) -> W::Oracle {
    let (report, _, oracle) = explore(workload);
    report.print();
    assert!(
        report.violations.is_empty(),
        "{} violations in {}",
        report.violations.len(),
        report.name
    );
    assert!(report.states >= 1000, "{} states", report.states);
    oracle
}

/// Tenants through a [`Tenants`] registry that holds at most two logs open: three tenants
/// commit (durable and not), flush and hibernate in a seeded order, so that most calls resume
/// a hibernated log and hibernate another to make room. The claim held: hibernating flushes,
/// so a record acknowledged before its log hibernated (durable or not) survives any crash
/// after the hibernation returned, and a resume recovers exactly what is on disk.
struct TenantsWorkload {
    /// Where the recorded run's logs run (the check recovers natively).
    mode: Mode,
    seed: u64,
    steps: u64,
}

const TENANT_NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

impl TenantsWorkload {
    fn options(&self) -> TenantsOptions {
        TenantsOptions::default()
            .with_mode(self.mode)
            // Small segments, so that the run also rolls segments over between hibernations.
            .with_wal(WalOptions::segmented(DurabilityPolicy::FullSync, 4096))
            .with_open_logs_max(2)
    }
}

impl CrashWorkload for TenantsWorkload {
    type Oracle = WalOracle;

    fn name(&self) -> String {
        format!("tenants-{}-seed{}", self.mode.name(), self.seed)
    }

    fn run(&self, fs: &FaultFs) -> WalOracle {
        let mut oracle = WalOracle::default();
        let tenants = Tenants::on_vfs(Arc::new(fs.clone()), self.options()).expect("registry");
        let handles: Vec<TenantWal> = TENANT_NAMES
            .iter()
            .map(|name| tenants.wal(name).expect("tenant"))
            .collect();
        let hibernations = |t: usize| tenants.stats(TENANT_NAMES[t]).unwrap().hibernations;
        let mut seen_hibernations = [0u64; TENANT_NAMES.len()];
        let mut unacked: Vec<Vec<Id>> = vec![Vec::new(); TENANT_NAMES.len()];
        let mut next_index = [0u64; TENANT_NAMES.len()];
        let mut rng = SplitMix(self.seed);
        for _ in 0..self.steps {
            let t = rng.range(0, TENANT_NAMES.len() as u64) as usize;
            let wal = &handles[t];
            let kind = rng.range(0, 6);
            let count = match kind {
                0..=2 => 1,
                3 => 2,
                _ => 0,
            };
            let ids: Vec<Id> = (next_index[t]..next_index[t] + count)
                .map(|k| (t as u64, k))
                .collect();
            next_index[t] += count;
            let payloads: Vec<Vec<u8>> = ids
                .iter()
                .map(|id| payload(id.0, id.1, rng.range(16, 900) as usize))
                .collect();
            for (id, p) in ids.iter().zip(&payloads) {
                oracle.committed.insert(*id, (op_of(*id), p.clone()));
            }
            let mut acked: Vec<Id> = Vec::new();
            match kind {
                0 | 1 => {
                    wal.commit(op_of(ids[0]), &payloads[0]).expect("commit");
                    unacked[t].extend(&ids);
                }
                2 => {
                    wal.commit_durable(op_of(ids[0]), &payloads[0])
                        .expect("durable commit");
                    acked.extend(&ids);
                }
                3 => {
                    let batch: Vec<(u16, &[u8])> = ids
                        .iter()
                        .zip(&payloads)
                        .map(|(id, p)| (op_of(*id), &p[..]))
                        .collect();
                    wal.commit_many_durable(&batch).expect("durable batch");
                    acked.extend(&ids);
                }
                4 => {
                    wal.flush().expect("flush");
                    acked.append(&mut unacked[t]);
                }
                _ => {
                    // Hibernating an open, idle log flushes it; a hibernated one is left be
                    // (and its records were acknowledged when it hibernated).
                    wal.hibernate().expect("hibernate");
                }
            }
            // A hibernation of any tenant (this call's, or one that made room for it) made
            // that tenant's acknowledged records durable.
            for (u, seen) in seen_hibernations.iter_mut().enumerate() {
                let now = hibernations(u);
                if now > *seen {
                    *seen = now;
                    acked.append(&mut unacked[u]);
                }
            }
            let at = fs.boundaries() - 1;
            oracle.acks.extend(acked.into_iter().map(|id| (at, id)));
        }
        let resumes: u64 = (0..TENANT_NAMES.len())
            .map(|t| tenants.stats(TENANT_NAMES[t]).unwrap().opens)
            .sum();
        assert!(
            resumes >= self.steps / 4,
            "the run must resume logs often: {resumes} opens in {} steps",
            self.steps
        );
        oracle
    }

    fn check(&self, crashed: FaultFs, oracle: &WalOracle, boundary: usize) -> Result<(), String> {
        let root: Arc<dyn Vfs> = Arc::new(crashed.clone());
        let first_seq = self.options().wal.first_seq;
        let mut recovered: Vec<Vec<VisibleRecord>> = Vec::new();
        for (t, name) in TENANT_NAMES.iter().enumerate() {
            let dir: Arc<dyn Vfs> = Arc::new(SubdirVfs::new(root.clone(), name).unwrap());
            let records = if root.exists(name).unwrap() && dir.exists(TENANT_LOG_PATH).unwrap() {
                read_wal(dir, TENANT_LOG_PATH, Mode::Native)
                    .map_err(|e| format!("{name}: read after the crash: {e}"))?
                    .0
            } else {
                Vec::new()
            };
            let mut index = 0;
            for (k, r) in records.iter().enumerate() {
                if r.seq != LogSeq(first_seq.0 + k as u64) {
                    return Err(format!("{name}: record {k} has seq {}", r.seq));
                }
                let id = (r.payload.len() >= 16).then(|| payload_id(&r.payload));
                match id.and_then(|id| oracle.committed.get(&id).map(|c| (id, c))) {
                    Some((id, (op, p)))
                        if id == (t as u64, index) && *op == r.op && p[..] == r.payload[..] => {}
                    _ => {
                        return Err(format!(
                            "{name}: seq {} is not the tenant's record {index} as committed",
                            r.seq
                        ));
                    }
                }
                index += 1;
            }
            for (at, id) in &oracle.acks {
                if *at <= boundary && id.0 == t as u64 && id.1 >= index {
                    return Err(format!(
                        "{name}: {id:?}, acknowledged durable at boundary {at}, was lost"
                    ));
                }
            }
            recovered.push(records);
        }

        // A new registry resumes every tenant where its log ends.
        let tenants = Tenants::on_vfs(root.clone(), self.options().with_mode(Mode::Native))
            .map_err(|e| format!("registry after the crash: {e}"))?;
        for (name, records) in TENANT_NAMES.iter().zip(&recovered) {
            let seq = tenants
                .wal(name)
                .and_then(|wal| wal.commit_durable(9, b"after the crash"))
                .map_err(|e| format!("{name}: commit after the crash: {e}"))?;
            if seq != LogSeq(first_seq.0 + records.len() as u64) {
                return Err(format!(
                    "{name}: the commit after the crash got seq {seq}, after {} records",
                    records.len()
                ));
            }
        }
        Ok(())
    }
}

#[test]
fn tenants_crash_matrix_hibernation_and_resume_lose_nothing_acknowledged() {
    for mode in [Mode::Native, Mode::Sandboxed] {
        let workload = TenantsWorkload {
            mode,
            seed: 45,
            steps: 80,
        };
        let oracle = explore_without_violations(&workload);
        assert!(
            oracle.acks.len() >= 20,
            "the run must acknowledge records: {}",
            oracle.acks.len()
        );
    }
}

/// Two tenants' journals and push logs through a registry that holds at most two logs open,
/// so that nearly every call resumes a log and hibernates another (of either facet) to make
/// room: journal appends and pushes (each durable when it returns) and explicit
/// hibernations, in a seeded order. The claim held: a recovered journal or push log is
/// exactly its acknowledged appends, or those and the one in flight; hibernating and resuming
/// lose nothing and tear nothing.
struct TenantFacetsWorkload {
    /// Where the recorded run's logs run (the check recovers natively).
    mode: Mode,
    seed: u64,
    steps: u64,
}

const FACET_TENANTS: [&str; 2] = ["north", "south"];

/// Per tenant, each journal append's and each push's (boundary before its first operation,
/// boundary at its acknowledgment, what it wrote).
#[derive(Default)]
struct FacetsOracle {
    appends: [Vec<(usize, usize, JournalOp)>; 2],
    pushes: [Vec<(usize, usize, Row)>; 2],
}

/// Whether `recovered` is the first `acknowledged` or the first `started` of `written`.
fn recovered_whole<T: PartialEq>(
    written: &[(usize, usize, T)],
    recovered: &[T],
    boundary: usize,
) -> bool {
    let acknowledged = written.iter().filter(|w| w.1 <= boundary).count();
    let started = written.iter().filter(|w| w.0 < boundary).count();
    [acknowledged, started]
        .into_iter()
        .any(|k| k == recovered.len() && written[..k].iter().zip(recovered).all(|(w, r)| w.2 == *r))
}

impl TenantFacetsWorkload {
    fn options(&self) -> TenantsOptions {
        TenantsOptions::default()
            .with_mode(self.mode)
            .with_open_logs_max(2)
    }
}

impl CrashWorkload for TenantFacetsWorkload {
    type Oracle = FacetsOracle;

    fn name(&self) -> String {
        format!("tenant-facets-{}-seed{}", self.mode.name(), self.seed)
    }

    fn run(&self, fs: &FaultFs) -> FacetsOracle {
        let runtime = tokio_runtime(1);
        let tenants = Tenants::on_vfs(Arc::new(fs.clone()), self.options()).expect("registry");
        let journals: Vec<_> = FACET_TENANTS
            .iter()
            .map(|name| tenants.journal(name).expect("journal"))
            .collect();
        let push_logs: Vec<_> = FACET_TENANTS
            .iter()
            .map(|name| tenants.push_log(name, refs::schema()).expect("push log"))
            .collect();
        let mut oracle = FacetsOracle::default();
        let mut rng = SplitMix(self.seed);
        for step in 0..self.steps {
            let t = rng.range(0, FACET_TENANTS.len() as u64) as usize;
            let start = fs.boundaries() - 1;
            match rng.range(0, 10) {
                0..4 => {
                    let op = JournalOp::Set {
                        key: format!("k{}", rng.range(0, 6)).into_bytes(),
                        value: vec![step as u8; rng.range(1, 700) as usize],
                    };
                    let mut frames = encode_frames(std::slice::from_ref(&op));
                    runtime
                        .block_on(journals[t].append(&mut frames))
                        .expect("append");
                    oracle.appends[t].push((start, fs.boundaries() - 1, op));
                }
                4..8 => {
                    let row: Row = (format!("{}-{step}", FACET_TENANTS[t]), None, step, -1);
                    push_logs[t]
                        .append(&batch(std::slice::from_ref(&row)))
                        .expect("push");
                    oracle.pushes[t].push((start, fs.boundaries() - 1, row));
                }
                8 => {
                    runtime.block_on(journals[t].hibernate());
                }
                _ => {
                    push_logs[t].hibernate().expect("hibernate");
                }
            }
        }
        let resumes: u64 = FACET_TENANTS
            .iter()
            .map(|name| tenants.stats(name).unwrap().opens)
            .sum();
        assert!(
            resumes >= self.steps / 3,
            "the run must resume logs often: {resumes} opens in {} steps",
            self.steps
        );
        // The handles go before the runtime their journals were opened on.
        drop((journals, push_logs, tenants));
        oracle
    }

    fn check(
        &self,
        crashed: FaultFs,
        oracle: &FacetsOracle,
        boundary: usize,
    ) -> Result<(), String> {
        let root: Arc<dyn Vfs> = Arc::new(crashed.clone());
        for (t, name) in FACET_TENANTS.iter().enumerate() {
            let tenant_made = root.exists(name).unwrap();
            let dir: Option<Arc<dyn Vfs>> =
                tenant_made.then(|| Arc::new(SubdirVfs::new(root.clone(), name).unwrap()) as _);
            let exists = |path: &str| dir.as_ref().is_some_and(|d| d.exists(path).unwrap());

            let ops = if exists(TENANT_JOURNAL_PATH) {
                let dir = dir.as_ref().unwrap();
                replay(&**dir, TENANT_JOURNAL_PATH)
                    .map_err(|e| format!("{name}: journal replay after the crash: {e}"))?
                    .0
            } else {
                Vec::new()
            };
            if !recovered_whole(&oracle.appends[t], &ops, boundary) {
                return Err(format!(
                    "{name}: the journal recovered {} ops: not its acknowledged appends, nor \
                     those and the one in flight",
                    ops.len()
                ));
            }

            let mut rows: Vec<Row> = Vec::new();
            if exists(TENANT_PUSH_LOG_PATH) {
                let log = PushLog::new(dir.clone().unwrap(), TENANT_PUSH_LOG_PATH, refs::schema());
                let mut scan = log.scan().map_err(|e| format!("{name}: scan: {e}"))?;
                for frame in scan.by_ref() {
                    let frame = frame.map_err(|e| format!("{name}: scan: {e}"))?;
                    rows.extend(rows_of(&frame.batch));
                }
                if let LogEnd::Corrupt { offset, .. } = scan.end() {
                    return Err(format!("{name}: a crash made corruption at byte {offset}"));
                }
            }
            if !recovered_whole(&oracle.pushes[t], &rows, boundary) {
                return Err(format!(
                    "{name}: the push log recovered {} rows: not its acknowledged pushes, nor \
                     those and the one in flight",
                    rows.len()
                ));
            }
        }

        // A new registry writes to every tenant's logs again.
        let runtime = tokio_runtime(1);
        let tenants = Tenants::on_vfs(root, self.options().with_mode(Mode::Native))
            .map_err(|e| format!("registry after the crash: {e}"))?;
        for name in FACET_TENANTS {
            let journal = tenants.journal(name).map_err(|e| e.to_string())?;
            let mut frames = encode_frames(&[JournalOp::Clear]);
            runtime
                .block_on(journal.append(&mut frames))
                .map_err(|e| format!("{name}: journal append after the crash: {e}"))?;
            let row: Row = ("after".into(), None, 0, 0);
            tenants
                .push_log(name, refs::schema())
                .and_then(|log| log.append(&batch(&[row])))
                .map_err(|e| format!("{name}: push after the crash: {e}"))?;
        }
        Ok(())
    }
}

#[test]
fn tenants_crash_matrix_journals_and_push_logs_lose_nothing_acknowledged() {
    for mode in [Mode::Native, Mode::Sandboxed] {
        let workload = TenantFacetsWorkload {
            mode,
            seed: 46,
            steps: 130,
        };
        let oracle = explore_without_violations(&workload);
        let acked: usize = (0..FACET_TENANTS.len())
            .map(|t| oracle.appends[t].len() + oracle.pushes[t].len())
            .sum();
        assert!(
            acked >= 20,
            "the run must acknowledge appends and pushes: {acked}"
        );
    }
}
