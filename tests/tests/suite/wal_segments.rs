//! Segmented WALs: rotation, preallocation, recovery across segments, checkpoint and
//! truncation, and the crash matrix over all of them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use stele::header::HEADER_BYTES;
use stele::vfs::{MemVfs, OpenMode, Vfs};
use stele::wal::segment::{
    SEGMENT_BYTES_MIN, SegmentedRecovery, read_checkpoint, replay_segments, segment_file_name,
};
use stele::wal::{
    DurabilityPolicy, LogEnd, LogSeq, WalOpenError, WalOptions, WalRetentionError, WalWriteError,
    WalWriter,
};
use stele_host::fs::{CrashPlan, FaultFs, FaultRule, OpKind, QuotaVfs};
use stele_tests::crash::{CrashWorkload, SplitMix, explore, explore_fault_schedule, fault_suffix};
use stele_tests::{ci_line, op_of, payload, payload_id};

const DIR: &str = "log";
const SEGMENT: u64 = SEGMENT_BYTES_MIN;

fn options(policy: DurabilityPolicy) -> WalOptions {
    WalOptions::segmented(policy, SEGMENT)
}

/// Every record of the segmented log in `dir`, in order, as (seq, op, payload).
fn records(vfs: &dyn Vfs, dir: &str) -> Vec<(u64, u16, Vec<u8>)> {
    let mut out = Vec::new();
    replay_segments(vfs, dir, LogSeq(0), |r| {
        out.push((r.seq.0, r.op, r.payload.to_vec()))
    })
    .expect("replay");
    out
}

/// A new segmented log (`FullSync`, 4 KiB segments) at `DIR`.
fn create(vfs: &Arc<dyn Vfs>) -> WalWriter {
    WalWriter::create_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync)).unwrap()
}

/// The log at `DIR`, recovered.
fn reopen(vfs: &Arc<dyn Vfs>) -> (WalWriter, SegmentedRecovery) {
    WalWriter::open_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync)).unwrap()
}

fn mem() -> (MemVfs, Arc<dyn Vfs>) {
    let vfs = MemVfs::new();
    (vfs.clone(), Arc::new(vfs))
}

#[test]
fn commits_rotate_across_preallocated_segments_named_by_first_seq() {
    let (mem, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..200u64 {
        let seq = wal.commit_durable(1, &payload(0, i, 100)).unwrap();
        assert_eq!(seq, LogSeq(i));
    }
    let live = wal.segments();
    assert!(
        live.len() >= 6,
        "200 records of 118 bytes need 6+ segments of 4 KiB: {live:?}"
    );
    assert_eq!(wal.stats().segments_started, live.len() as u64 - 1);
    let names = vfs.list(DIR).unwrap();
    let mut expected: Vec<String> = live.iter().map(|s| segment_file_name(*s)).collect();
    expected.push(stele::wal::lock::SEGMENT_DIR_LOCK_FILE.to_owned());
    assert_eq!(names, expected, "the segments, and the writer's lock file");
    for name in &names[..live.len()] {
        let bytes = mem.contents(&format!("{DIR}/{name}")).unwrap();
        assert_eq!(bytes.len() as u64, SEGMENT, "{name} is preallocated");
    }
    drop(wal);

    let (wal, found) = reopen(&vfs);
    assert_eq!(
        found.recovery.end,
        LogEnd::Clean,
        "a zero tail is a clean end"
    );
    assert_eq!(found.recovery.records, 200);
    assert_eq!(found.recovery.next_seq, LogSeq(200));
    // Records never straddle: each segment replays alone to whole records.
    let mut next = 0;
    for s in &found.segments {
        assert_eq!(s.first_seq, LogSeq(next));
        assert_eq!(s.end, LogEnd::Clean);
        next = s.next_seq.0;
    }
    assert_eq!(wal.commit_durable(2, b"after reopen").unwrap(), LogSeq(200));
    let all = records(&*vfs, DIR);
    assert_eq!(all.len(), 201);
    for (k, (seq, _, p)) in all.iter().take(200).enumerate() {
        assert_eq!(*seq, k as u64);
        assert_eq!(p, &payload(0, k as u64, 100));
    }
}

#[test]
fn a_batch_larger_than_a_segment_is_refused_and_one_that_fits_never_straddles() {
    let (_, vfs) = mem();
    let wal = create(&vfs);
    let big = vec![7u8; SEGMENT as usize];
    assert!(matches!(
        wal.commit_durable(1, &big),
        Err(WalWriteError::GroupTooLarge { .. })
    ));
    // Just under one segment's room: it must go to a fresh segment whole.
    wal.commit_durable(1, &[1u8; 100]).unwrap();
    let fill = vec![9u8; SEGMENT as usize - HEADER_BYTES - 18];
    assert_eq!(wal.commit_durable(2, &fill).unwrap(), LogSeq(1));
    assert_eq!(wal.segments(), vec![LogSeq(0), LogSeq(1)]);
    assert_eq!(records(&*vfs, DIR)[1].2, fill);
}

#[test]
fn a_torn_tail_is_zeroed_not_cut_and_leaves_a_clean_segment() {
    let (mem, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..5 {
        wal.commit_durable(1, &payload(0, i, 50)).unwrap();
    }
    let valid_end = HEADER_BYTES + 5 * 68;
    drop(wal);
    // An unfinished group: records 5 and 6 landed whole, record 7 only in part.
    let path = format!("{DIR}/{}", segment_file_name(LogSeq(0)));
    let mut bytes = mem.contents(&path).unwrap();
    let mut tail = Vec::new();
    for i in 5..8u64 {
        stele::wal::record::encode_into(&mut tail, LogSeq(i), 1, &payload(0, i, 50));
    }
    let torn_len = tail.len() - 20;
    bytes[valid_end..valid_end + torn_len].copy_from_slice(&tail[..torn_len]);
    mem.set_contents(&path, bytes);

    let (wal, found) = reopen(&vfs);
    assert!(found.recovery.end.is_torn());
    let new_end = valid_end + 2 * 68;
    assert_eq!(found.recovery.valid_end, new_end as u64);
    assert_eq!(found.recovery.dirty_end, (valid_end + torn_len) as u64);
    assert_eq!(found.recovery.next_seq, LogSeq(7));
    let after = mem.contents(&path).unwrap();
    assert!(
        after[new_end..].iter().all(|&b| b == 0),
        "torn bytes zeroed"
    );
    assert_eq!(after.len() as u64, SEGMENT, "preallocation kept");
    wal.commit_durable(3, b"x").unwrap();
    drop(wal);
    let (_, found) = reopen(&vfs);
    assert_eq!(
        found.recovery.end,
        LogEnd::Clean,
        "nothing torn is left behind"
    );
    let all = records(&*vfs, DIR);
    assert_eq!(all.len(), 8);
    assert_eq!(all[7], (7, 3, b"x".to_vec()));
}

#[test]
fn a_missing_middle_segment_is_a_gap_and_a_misnamed_one_is_refused() {
    let (mem, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..150 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    let live = wal.segments();
    drop(wal);
    let middle = format!("{DIR}/{}", segment_file_name(live[1]));
    let saved = mem.contents(&middle).unwrap();
    vfs.remove(&middle).unwrap();
    let err = WalWriter::open_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync))
        .unwrap_err();
    assert!(
        matches!(&err, WalOpenError::SegmentGap { expected, found, .. }
            if *expected == live[1].0 && *found == live[2].0),
        "{err}"
    );
    // Under another name, the same bytes are refused for their header.
    let wrong = format!("{DIR}/{}", segment_file_name(LogSeq(live[1].0 + 1)));
    mem.set_contents(&wrong, saved);
    assert!(matches!(
        WalWriter::open_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync)),
        Err(WalOpenError::SegmentGap { .. } | WalOpenError::SegmentMisnamed { .. })
    ));
}

#[test]
fn an_unfinished_rotation_is_removed_and_the_log_resumes_before_it() {
    let (mem, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..10 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    drop(wal);
    // A rotation that crashed after set_len but before its header reached the disk.
    let residue = format!("{DIR}/{}", segment_file_name(LogSeq(10)));
    mem.set_contents(&residue, vec![0u8; SEGMENT as usize]);
    let (wal, found) = reopen(&vfs);
    assert_eq!(
        found.unfinished_segment().map(|s| s.first_seq),
        Some(LogSeq(10))
    );
    assert_eq!(found.recovery.next_seq, LogSeq(10));
    assert!(!vfs.exists(&residue).unwrap(), "residue removed");
    assert_eq!(wal.segments(), vec![LogSeq(0)]);
    assert_eq!(wal.commit_durable(1, b"next").unwrap(), LogSeq(10));
}

#[test]
fn checkpoint_then_truncate_deletes_whole_covered_segments_only() {
    let (_, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..300 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    let before = wal.segments();
    assert!(matches!(
        wal.truncate_through(LogSeq(100)),
        Err(WalRetentionError::BeyondCheckpoint {
            checkpoint: None,
            ..
        })
    ));
    assert!(matches!(
        wal.checkpoint(LogSeq(300)),
        Err(WalRetentionError::BeyondDurable { .. })
    ));
    wal.checkpoint(LogSeq(150)).unwrap();
    assert_eq!(read_checkpoint(&*vfs, DIR).unwrap(), Some(LogSeq(150)));
    assert!(matches!(
        wal.checkpoint(LogSeq(149)),
        Err(WalRetentionError::Regressed { .. })
    ));
    assert!(matches!(
        wal.truncate_through(LogSeq(151)),
        Err(WalRetentionError::BeyondCheckpoint { .. })
    ));
    let cut = wal.truncate_through(LogSeq(150)).unwrap();
    let after = wal.segments();
    assert_eq!(cut.segments_removed as usize, before.len() - after.len());
    assert!(cut.segments_removed > 0);
    assert_eq!(cut.first_kept_seq, after[0]);
    // Whole segments only: the first survivor still holds seq 151, nothing above 150 is gone.
    assert!(after[0] <= LogSeq(151), "{after:?}");
    let next_of_removed = before[cut.segments_removed as usize];
    assert_eq!(next_of_removed, after[0]);
    drop(wal);

    let (wal, found) = reopen(&vfs);
    assert_eq!(found.checkpoint, Some(LogSeq(150)));
    assert_eq!(found.recovery.first_seq, after[0]);
    assert_eq!(found.recovery.next_seq, LogSeq(300));
    let all = records(&*vfs, DIR);
    assert_eq!(all[0].0, after[0].0);
    assert_eq!(all.last().unwrap().0, 299);
    // Everything: the current segment stays, whatever the checkpoint.
    wal.checkpoint(LogSeq(299)).unwrap();
    wal.truncate_through(LogSeq(299)).unwrap();
    assert_eq!(wal.segments().len(), 1);
    assert_eq!(
        wal.commit_durable(1, b"still appending").unwrap(),
        LogSeq(300)
    );
}

#[test]
fn a_first_segment_after_the_checkpoint_is_a_gap() {
    let (_, vfs) = mem();
    let wal = create(&vfs);
    for i in 0..100 {
        wal.commit_durable(1, &payload(0, i, 100)).unwrap();
    }
    wal.checkpoint(LogSeq(10)).unwrap();
    let live = wal.segments();
    drop(wal);
    // Deleting a segment the checkpoint does not cover loses unabsorbed records.
    vfs.remove(&format!("{DIR}/{}", segment_file_name(live[0])))
        .unwrap();
    assert!(matches!(
        WalWriter::open_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync)),
        Err(WalOpenError::CheckpointGap { checkpoint: 10, .. })
    ));
}

#[test]
fn bad_configurations_get_typed_errors() {
    let (mem, vfs) = mem();
    assert!(matches!(
        WalWriter::create_segmented(
            vfs.clone(),
            DIR,
            WalOptions::segmented(DurabilityPolicy::FullSync, 100)
        ),
        Err(WalOpenError::SegmentTooSmall { .. })
    ));
    // The foundation's single-file log at the path: refused with the way to convert it.
    let single = WalWriter::create(&mem, "old.wal", LogSeq(0), DurabilityPolicy::FullSync).unwrap();
    single.commit_durable(1, b"x").unwrap();
    drop(single);
    let err =
        WalWriter::open_segmented(vfs.clone(), "old.wal", options(DurabilityPolicy::FullSync))
            .unwrap_err();
    assert!(matches!(err, WalOpenError::SingleFileLog { .. }));
    assert!(err.to_string().contains("stele wal convert"), "{err}");
    // Segment options on a single-file constructor are refused, not ignored.
    assert!(matches!(
        WalWriter::open_with(&mem, "old.wal", options(DurabilityPolicy::FullSync)),
        Err(WalOpenError::SegmentOptionsForSingleFile {
            segment_bytes: SEGMENT
        })
    ));
    // Single-file writers have no retention.
    let (single, _) = WalWriter::open(&mem, "old.wal", DurabilityPolicy::FullSync).unwrap();
    assert!(matches!(
        single.checkpoint(LogSeq(0)),
        Err(WalRetentionError::NotSegmented)
    ));
    // Creating over an existing segmented log is refused.
    WalWriter::create_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync))
        .unwrap()
        .commit_durable(1, b"y")
        .unwrap();
    assert!(matches!(
        WalWriter::create_segmented(vfs.clone(), DIR, options(DurabilityPolicy::FullSync)),
        Err(WalOpenError::NotEmpty { .. })
    ));
    let file = vfs.open(
        &format!("{DIR}/{}", segment_file_name(LogSeq(0))),
        OpenMode::Existing,
    );
    assert!(file.is_ok());
}

// ---------------------------------------------------------------------------------------------
// The crash matrix for segments.

type Id = stele_tests::PayloadId;

/// Three writers commit durable records of 16 to 700 bytes into 4 KiB segments, so the run
/// rotates dozens of times. Between the phases the log is checkpointed at half its durable
/// records and truncated there, then reopened.
struct SegmentWorkload {
    policy: DurabilityPolicy,
    seed: u64,
    writers: u64,
    records_per_writer_per_phase: u64,
    /// Injected into the run: a commit that fails is not acknowledged and its thread stops
    /// for the phase; the next phase reopens the log (a poisoned writer accepts nothing more).
    faults: Vec<FaultRule>,
    /// Runs the log under a disk quota of this many bytes ([`QuotaVfs`]): commits past it are
    /// refused (never acknowledged, never written), and every crash state must hold no more.
    disk_bytes_max: Option<u64>,
}

#[derive(Default)]
struct SegmentOracle {
    committed: HashMap<Id, (u16, Vec<u8>)>,
    /// (boundary at which the durable ack was observed, id, seq).
    acks: Vec<(usize, Id, u64)>,
    /// (boundary at which `checkpoint` returned, the checkpointed seq).
    checkpoint: Option<(usize, u64)>,
    /// Commits the quota refused.
    refusals: u64,
}

impl CrashWorkload for SegmentWorkload {
    type Oracle = SegmentOracle;

    fn name(&self) -> String {
        format!(
            "wal-segments-{:?}-seed{}{}{}",
            self.policy,
            self.seed,
            fault_suffix(&self.faults),
            self.disk_bytes_max
                .map_or(String::new(), |max| format!("-quota{max}"))
        )
        .to_lowercase()
    }

    fn faults(&self) -> Vec<FaultRule> {
        self.faults.clone()
    }

    fn run(&self, fs: &FaultFs) -> SegmentOracle {
        let oracle = Mutex::new(SegmentOracle::default());
        let vfs: Arc<dyn Vfs> = match self.disk_bytes_max {
            Some(max) => {
                Arc::new(QuotaVfs::with_disk_bytes_max(Arc::new(fs.clone()), max).expect("quota"))
            }
            None => Arc::new(fs.clone()),
        };
        let faulty = !self.faults.is_empty();
        for phase in 0..2u64 {
            let open = || WalWriter::open_segmented(vfs.clone(), DIR, options(self.policy));
            // A failed open (its directory sync, say) is retried once: the fault fires once.
            let (writer, _) = match open() {
                Err(_) if faulty => open(),
                first => first,
            }
            .expect("open during run");
            std::thread::scope(|s| {
                for t in 0..self.writers {
                    let (writer, oracle) = (&writer, &oracle);
                    let mut rng = SplitMix(self.seed ^ (phase << 32) ^ (t << 16));
                    s.spawn(move || {
                        for i in 0..self.records_per_writer_per_phase {
                            let id = (phase * 100 + t, i);
                            let p = payload(id.0, id.1, rng.range(16, 700) as usize);
                            oracle
                                .lock()
                                .unwrap()
                                .committed
                                .insert(id, (op_of(id), p.clone()));
                            let seq = match writer.commit_durable(op_of(id), &p) {
                                Ok(seq) => seq,
                                Err(WalWriteError::QuotaExceeded(_))
                                    if self.disk_bytes_max.is_some() =>
                                {
                                    // Refused before anything was written: it must never
                                    // appear in any crash state.
                                    oracle.lock().unwrap().committed.remove(&id);
                                    oracle.lock().unwrap().refusals += 1;
                                    continue;
                                }
                                Err(_) if faulty => return,
                                Err(e) => panic!("commit: {e}"),
                            };
                            let at = fs.boundaries() - 1;
                            oracle.lock().unwrap().acks.push((at, id, seq.0));
                        }
                    });
                }
            });
            if phase == 0 {
                let through = LogSeq(writer.durable_end().0 / 2);
                match writer.checkpoint(through) {
                    Ok(()) => {
                        oracle.lock().unwrap().checkpoint = Some((fs.boundaries() - 1, through.0));
                        match writer.truncate_through(through) {
                            Ok(cut) => assert!(
                                faulty || cut.segments_removed > 0,
                                "the workload must delete segments"
                            ),
                            Err(_) if faulty => {}
                            Err(e) => panic!("truncate: {e}"),
                        }
                    }
                    Err(_) if faulty => {}
                    Err(e) => panic!("checkpoint: {e}"),
                }
            }
        }
        oracle.into_inner().unwrap()
    }

    fn check(
        &self,
        crashed: FaultFs,
        oracle: &SegmentOracle,
        boundary: usize,
    ) -> Result<(), String> {
        let vfs: Arc<dyn Vfs> = Arc::new(crashed.clone());
        if let Some(max) = self.disk_bytes_max {
            // What the crash left: never more than the quota, whatever was in flight.
            let held: u64 = vfs
                .list(DIR)
                .map_err(|e| format!("list: {e}"))?
                .iter()
                .filter_map(|name| vfs.open(&format!("{DIR}/{name}"), OpenMode::Existing).ok())
                .map(|file| file.len().unwrap_or(0))
                .sum();
            if held > max {
                return Err(format!("{held} bytes on disk after the crash, quota {max}"));
            }
        }
        let (wal, found) = WalWriter::open_segmented(vfs.clone(), DIR, options(self.policy))
            .map_err(|e| format!("recovery failed: {e}"))?;
        let recovered_checkpoint = found.checkpoint.map(|c| c.0);
        if let Some((at, seq)) = oracle.checkpoint
            && at <= boundary
            && recovered_checkpoint != Some(seq)
        {
            return Err(format!(
                "checkpoint {seq}, acknowledged at boundary {at}, recovered as {recovered_checkpoint:?}"
            ));
        }
        let all = records(&*vfs, DIR);
        if all.len() as u64 != found.recovery.records {
            return Err(format!(
                "recovery counted {} records, replay found {}",
                found.recovery.records,
                all.len()
            ));
        }
        let mut seen = HashSet::new();
        for (k, (seq, op, p)) in all.iter().enumerate() {
            if *seq != found.recovery.first_seq.0 + k as u64 {
                return Err(format!("record {k} has seq {seq}: a gap"));
            }
            let id = payload_id(p);
            match oracle.committed.get(&id) {
                Some((o, bytes)) if o == op && bytes == p => {}
                _ => return Err(format!("seq {seq} holds bytes never committed")),
            }
            seen.insert(id);
        }
        // No acknowledged record above the checkpoint in effect may be lost.
        let floor = recovered_checkpoint.map_or(0, |c| c + 1);
        if found.recovery.first_seq.0 > floor {
            return Err(format!(
                "first surviving seq {} is above the checkpoint floor {floor}",
                found.recovery.first_seq
            ));
        }
        for (at, id, seq) in &oracle.acks {
            if *at <= boundary && *seq >= floor && !seen.contains(id) {
                return Err(format!(
                    "{id:?} (seq {seq}), acknowledged at boundary {at}, was lost"
                ));
            }
        }
        // Appending after recovery works, and survives a second crash.
        let seq = wal
            .commit_durable(9, b"after recovery")
            .map_err(|e| format!("append after recovery: {e}"))?;
        if seq != found.recovery.next_seq {
            return Err(format!(
                "append got seq {seq}, expected {}",
                found.recovery.next_seq
            ));
        }
        drop(wal);
        let second = crashed.crash(CrashPlan::KeepPrefix { ops: 0 });
        let again = records(&second, DIR);
        if again.len() != all.len() + 1 || again[..all.len()] != all[..] {
            return Err(format!(
                "second crash: {} records, expected {} plus the marker",
                again.len(),
                all.len()
            ));
        }
        Ok(())
    }
}

#[test]
fn segment_crash_matrix_has_no_violations() {
    let mut total = 0;
    // Eight recorded runs of three writers: about 20,000 states, a few seconds in release.
    for seed in 1..=8 {
        let workload = SegmentWorkload {
            policy: if seed % 2 == 1 {
                DurabilityPolicy::FullSync
            } else {
                DurabilityPolicy::Barrier
            },
            seed,
            writers: 3,
            records_per_writer_per_phase: 60,
            faults: Vec::new(),
            disk_bytes_max: None,
        };
        let (r, _, _) = explore(&workload);
        r.print();
        assert!(
            r.violations.is_empty(),
            "{} violations in {}",
            r.violations.len(),
            r.name
        );
        total += r.states;
    }
    ci_line(&format!(
        "crash-matrix: wal-segments total states={total} violations=0"
    ));
}

/// The matrix at the quota: three writers commit into 4 KiB segments under a quota of six
/// segments (and the checkpoint's room), so that dozens of commits are refused in each phase,
/// and the checkpoint and truncation between the phases free room for the second. A crash at
/// every operation loses nothing acknowledged, no refused record ever appears, and no crash
/// state holds more than the quota.
#[test]
fn segment_crash_matrix_at_the_quota_has_no_violations() {
    let mut total = 0;
    for seed in [21, 22, 23, 24] {
        let workload = SegmentWorkload {
            policy: DurabilityPolicy::FullSync,
            seed,
            writers: 3,
            records_per_writer_per_phase: 40,
            faults: Vec::new(),
            disk_bytes_max: Some(6 * SEGMENT + 2 * HEADER_BYTES as u64),
        };
        let (r, _, oracle) = explore(&workload);
        r.print();
        assert!(
            r.violations.is_empty(),
            "{} violations in {}",
            r.violations.len(),
            r.name
        );
        assert!(oracle.refusals > 10, "only {} refusals", oracle.refusals);
        total += r.states;
    }
    ci_line(&format!(
        "crash-matrix: wal-segments at the quota total states={total} violations=0"
    ));
}

/// The fault schedule: runs in which one directory sync (creation, a rotation, the checkpoint,
/// the truncation, a reopen) or the checkpoint's rename of a clean run fails. The writer that
/// saw it fails its group or call (a rotation poisons it, and the next phase reopens the log,
/// whose open syncs the directory again), and every crash state of the run must hold every
/// record acknowledged by then.
#[test]
fn segment_crash_matrix_with_a_failed_dir_sync_or_rename_has_no_violations() {
    let runs = explore_fault_schedule(
        "wal-segments-faults",
        &[(OpKind::SyncDir, u64::MAX), (OpKind::Rename, u64::MAX)],
        |faults| SegmentWorkload {
            policy: DurabilityPolicy::FullSync,
            seed: 11,
            writers: 2,
            records_per_writer_per_phase: 25,
            faults,
            disk_bytes_max: None,
        },
    );
    assert!(runs >= 6, "{runs} faulted runs");
}

// ---------------------------------------------------------------------------------------------
// Both modes, through `stele_host::Wal`, on the real filesystem.

mod modes {
    use super::*;
    use stele::vfs::VfsError;
    use stele_host::{Mode, Wal, WalError, read_wal};
    use stele_tests::{TempRoot, every_mode};

    fn segmented_log_rotates_truncates_and_recovers(mode: Mode) {
        let root = TempRoot::new();
        let o = options(DurabilityPolicy::FullSync);
        let wal = Wal::create(root.vfs(), DIR, o, mode).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let wal = wal.clone();
                s.spawn(move || {
                    for i in 0..75 {
                        wal.commit_durable(t as u16, &payload(t, i, 100)).unwrap();
                    }
                });
            }
        });
        let live = wal.segments().unwrap();
        assert!(live.len() >= 8, "{live:?}");
        assert_eq!(wal.stats().unwrap().segments_started, live.len() as u64 - 1);
        for seq in &live {
            let on_disk =
                std::fs::metadata(root.path(&format!("{DIR}/{}", segment_file_name(*seq))))
                    .unwrap();
            assert_eq!(on_disk.len(), SEGMENT, "preallocated on disk");
        }
        wal.checkpoint(LogSeq(149)).unwrap();
        let cut = wal.truncate_through(LogSeq(149)).unwrap();
        assert!(cut.segments_removed > 0);
        assert!(cut.first_kept_seq <= LogSeq(150));
        assert_eq!(wal.segments().unwrap()[0], cut.first_kept_seq);
        drop(wal);

        let (wal, rec) = Wal::open(root.vfs(), DIR, o, mode).unwrap();
        assert_eq!(rec.first_seq, cut.first_kept_seq);
        assert_eq!(rec.next_seq, LogSeq(300));
        assert_eq!(rec.end, LogEnd::Clean);
        assert_eq!(wal.commit_durable(9, b"again").unwrap(), LogSeq(300));
        drop(wal);
        let (records, rec) = read_wal(root.vfs(), DIR, mode).unwrap();
        assert_eq!(rec.next_seq, LogSeq(301));
        assert_eq!(records[0].seq, cut.first_kept_seq);
        let mut ids = HashSet::new();
        for (k, r) in records.iter().enumerate() {
            assert_eq!(r.seq.0, cut.first_kept_seq.0 + k as u64);
            if r.seq.0 < 300 {
                assert!(ids.insert(payload_id(&r.payload)));
            }
        }
        // Every record above the checkpoint survived, from every writer.
        assert!(records.iter().filter(|r| r.seq.0 >= 150).count() == 151);
    }

    fn segmented_errors_are_typed(mode: Mode) {
        let root = TempRoot::new();
        let o = options(DurabilityPolicy::FullSync);
        let wal = Wal::create(root.vfs(), DIR, o, mode).unwrap();
        for i in 0..120 {
            wal.commit_durable(1, &payload(0, i, 100)).unwrap();
        }
        assert!(matches!(
            wal.checkpoint(LogSeq(120)),
            Err(WalError::Retention(WalRetentionError::BeyondDurable { .. }))
        ));
        assert!(matches!(
            wal.truncate_through(LogSeq(5)),
            Err(WalError::Retention(WalRetentionError::BeyondCheckpoint {
                checkpoint: None,
                ..
            }))
        ));
        wal.checkpoint(LogSeq(50)).unwrap();
        assert!(matches!(
            wal.checkpoint(LogSeq(40)),
            Err(WalError::Retention(WalRetentionError::Regressed { .. }))
        ));
        let live = wal.segments().unwrap();
        drop(wal);
        std::fs::remove_file(root.path(&format!("{DIR}/{}", segment_file_name(live[2])))).unwrap();
        let err = Wal::open(root.vfs(), DIR, o, mode).unwrap_err();
        assert!(
            matches!(&err, WalError::Open(WalOpenError::SegmentGap { found, .. }) if *found == live[3].0),
            "{err:?}"
        );

        let single = WalOptions::single_file(DurabilityPolicy::FullSync);
        let wal = Wal::create(root.vfs(), "one.wal", single, mode).unwrap();
        wal.commit_durable(1, b"x").unwrap();
        assert!(matches!(
            wal.checkpoint(LogSeq(0)),
            Err(WalError::Retention(WalRetentionError::NotSegmented))
        ));
        assert_eq!(wal.segments().unwrap(), vec![]);
        drop(wal);
        assert!(matches!(
            Wal::open(root.vfs(), "one.wal", o, mode),
            Err(WalError::Open(WalOpenError::SingleFileLog { .. }))
        ));
        assert!(matches!(
            Wal::create(
                root.vfs(),
                "tiny",
                WalOptions::segmented(DurabilityPolicy::FullSync, 512),
                mode
            ),
            Err(WalError::Open(WalOpenError::SegmentTooSmall { .. }))
        ));
        // A segment directory confined like a file: nothing is created outside the root.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path("link")).unwrap();
        for dir in ["../d", "/abs/d", "a/../../d", "link/d", "nul\0d"] {
            let err = Wal::create(root.vfs(), dir, o, mode).unwrap_err();
            assert!(
                matches!(
                    err,
                    WalError::Open(WalOpenError::Vfs(VfsError::InvalidPath(_)))
                ),
                "{dir:?}: {err:?}"
            );
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(!root.dir.path().parent().unwrap().join("d").exists());
    }

    every_mode!(
        segmented_log_rotates_truncates_and_recovers,
        segmented_errors_are_typed
    );
}

/// Crash states of the segment workload recovered through the component recover exactly what
/// the native engine recovers.
#[test]
fn sandboxed_recovery_of_segment_crash_states_matches_native() {
    use stele_host::{Mode, Wal, read_wal};
    let workload = SegmentWorkload {
        policy: DurabilityPolicy::FullSync,
        seed: 3,
        writers: 2,
        records_per_writer_per_phase: 30,
        faults: Vec::new(),
        disk_bytes_max: None,
    };
    let (r, fs, oracle) = explore(&workload);
    assert!(r.violations.is_empty(), "{:?}", &r.violations[..1]);
    let sample = stele_tests::crash::sample_states(&fs, r.states / 60);
    for (boundary, plan) in &sample {
        let native: Arc<dyn Vfs> = Arc::new(fs.crash_at(*boundary, *plan));
        let sandboxed: Arc<dyn Vfs> = Arc::new(fs.crash_at(*boundary, *plan));
        let o = options(workload.policy);
        let n = Wal::open(native.clone(), DIR, o, Mode::Native).map(|(_, r)| r);
        let s = Wal::open(sandboxed.clone(), DIR, o, Mode::Sandboxed).map(|(_, r)| r);
        assert_eq!(n, s, "boundary {boundary} {plan:?}: recoveries differ");
        let n = read_wal(native, DIR, Mode::Native).unwrap().0;
        let s = read_wal(sandboxed, DIR, Mode::Sandboxed).unwrap().0;
        assert_eq!(n, s, "boundary {boundary} {plan:?}: records differ");
        // And the sandboxed recovery passes the oracle on its own.
        workload
            .check(fs.crash_at(*boundary, *plan), &oracle, *boundary)
            .unwrap();
    }
    ci_line(&format!(
        "crash-matrix: wal-segments-sandboxed-sample states={} violations=0",
        sample.len()
    ));
}

/// A reader opened at a seq skips, by their names, the segments that end before it: at the
/// last seq of a long log it opens the last segment only, so it reads at most one segment
/// (4 KiB here) of a log of dozens. From any seq it returns exactly the records from that seq
/// on, and after a truncation it starts at a kept segment without a checkpoint-gap error.
#[test]
fn a_reader_opened_at_a_seq_reads_only_from_the_segment_that_holds_it() {
    use stele_host::{Mode, WalScan, WalTail};

    let fault = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
    let wal = create(&vfs);
    let payloads: Vec<Vec<u8>> = (0..1200u64).map(|i| payload(0, i, 64)).collect();
    for p in &payloads {
        wal.commit_durable(1, p).unwrap();
    }
    let segments = wal.segments();
    assert!(
        segments.len() >= 20,
        "a long log: {} segments",
        segments.len()
    );
    let segments_opened_since = |before: usize| -> Vec<String> {
        fault.trace()[before..]
            .iter()
            .filter(|e| e.kind == OpKind::Open && e.path.ends_with(".wal"))
            .map(|e| e.path.clone())
            .collect()
    };
    // Natively and through the component's `reader.open-at` alike: the same records, and the
    // same segments opened.
    let read_from = |from: u64| -> (Vec<u64>, Vec<String>) {
        let mut outcomes = Vec::new();
        for mode in Mode::ALL {
            let before = fault.trace().len();
            let mut scan = WalScan::open_at(vfs.clone(), DIR, LogSeq(from), mode).unwrap();
            let mut seqs = Vec::new();
            loop {
                let batch = scan.next_batch(500).unwrap();
                if batch.is_empty() {
                    break;
                }
                for r in batch {
                    assert_eq!(&r.payload[..], &payloads[r.seq.0 as usize][..]);
                    seqs.push(r.seq.0);
                }
            }
            outcomes.push((mode, seqs, segments_opened_since(before)));
        }
        for (mode, seqs, opened) in &outcomes[1..] {
            assert_eq!(
                (seqs, opened),
                (&outcomes[0].1, &outcomes[0].2),
                "{} from {from}",
                mode.name()
            );
        }
        let (_, seqs, opened) = outcomes.swap_remove(0);
        (seqs, opened)
    };

    let last = payloads.len() as u64 - 1;
    let last_segment = format!("{DIR}/{}", segment_file_name(*segments.last().unwrap()));
    let (seqs, opened) = read_from(last);
    assert_eq!(seqs, [last]);
    assert_eq!(
        opened,
        std::slice::from_ref(&last_segment),
        "only the segment holding the last seq is opened"
    );

    // From the middle: the segment holding the seq and every later one, nothing before.
    let middle = segments[segments.len() / 2].0 + 3;
    let (seqs, opened) = read_from(middle);
    assert_eq!(seqs, (middle..=last).collect::<Vec<_>>());
    assert_eq!(opened.len(), segments.len() - segments.len() / 2);
    // From 0, every segment; past the end, the last segment and no record.
    let (seqs, opened) = read_from(0);
    assert_eq!((seqs.len(), opened.len()), (payloads.len(), segments.len()));
    let (seqs, opened) = read_from(last + 100);
    assert_eq!((seqs.len(), opened.len()), (0, 1));

    // After a truncation the first kept segment starts past seq 0; a reader at a later seq
    // skips more of them and the checkpoint does not make that a gap.
    let through = LogSeq(segments[5].0 - 1);
    wal.checkpoint(through).unwrap();
    wal.truncate_through(through).unwrap();
    let kept = wal.segments();
    let (seqs, _) = read_from(kept[3].0);
    assert_eq!(seqs, (kept[3].0..=last).collect::<Vec<_>>());
    let (seqs, _) = read_from(0);
    assert_eq!(
        seqs.first(),
        Some(&kept[0].0),
        "from 0 reads from the first kept segment"
    );

    // A follower at the last seq, in every mode: one segment opened, then only what comes.
    let mut tails: Vec<WalTail> = Mode::ALL
        .iter()
        .map(|&mode| {
            let before = fault.trace().len();
            let mut tail = WalTail::open_at(vfs.clone(), DIR, LogSeq(last), mode).unwrap();
            let first: Vec<u64> = tail.poll(100).unwrap().iter().map(|r| r.seq.0).collect();
            assert_eq!(first, [last], "{}", mode.name());
            assert_eq!(
                segments_opened_since(before),
                std::slice::from_ref(&last_segment)
            );
            tail
        })
        .collect();
    wal.commit_durable(1, b"after").unwrap();
    for tail in &mut tails {
        let next = tail.poll(100).unwrap();
        assert_eq!((next.len(), &next[0].payload[..]), (1, &b"after"[..]));
        assert!(tail.poll(100).unwrap().is_empty());
    }
}
