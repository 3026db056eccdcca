//! Model-based property tests, one per facet, in every mode. proptest draws a sequence of
//! operations (commits, flushes, retirements, pushes, compactions, reopens and power-loss
//! crashes on the fault-injecting filesystem), runs it against the real engine and against a
//! plain in-memory model, and compares them after every step. A failure is shrunk to the
//! shortest sequence that still fails; `shrinking_finds_the_minimal_failing_sequence` checks
//! that it does.
//!
//! What the models promise is what the engines document: a record is durable once a durable
//! commit or a flush returns, a journal append and a push once they return, and a compaction is
//! all or nothing. A crash keeps any prefix of what was written (torn or not); the model then
//! checks that the prefix recovered holds everything promised and only what was written.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use stele::journal::{JournalOp, SessionState, encode_frames, snapshot_ops};
use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalRetireError};
use stele_host::fs::FaultFs;
use stele_host::{Journal, Mode, PushLog, Wal, WalError, read_wal, replay_journal_blocking};

/// Cases per run: sandboxed cases cost an instance per reopen, so fewer of them.
fn config(mode: Mode) -> Config {
    Config {
        cases: if mode == Mode::Native { 256 } else { 48 },
        failure_persistence: None,
        ..Config::default()
    }
}

fn vfs(fs: &FaultFs) -> Arc<dyn Vfs> {
    Arc::new(fs.clone())
}

/// The filesystem after a power loss now, under one of the crash plans the current state
/// allows (`pick` chooses which).
fn power_loss(fs: &FaultFs, pick: usize) -> FaultFs {
    let plans = fs.crash_plans();
    fs.crash(plans[pick % plans.len()])
}

fn fail(e: impl std::fmt::Debug) -> TestCaseError {
    TestCaseError::fail(format!("{e:?}"))
}

fn run<S: Strategy>(
    mode: Mode,
    strategy: S,
    check: impl Fn(Mode, &S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(config(mode));
    match runner.run(&strategy, |steps| check(mode, &steps)) {
        Ok(()) => {}
        Err(TestError::Fail(why, minimal)) => {
            panic!(
                "{}: {why}\nminimal failing sequence: {minimal:#?}",
                mode.name()
            )
        }
        Err(e) => panic!("{}: {e}", mode.name()),
    }
}

// ---------------------------------------------------------------------------------------------
// The WAL.

#[derive(Clone, Debug)]
enum WalStep {
    Commit {
        len: usize,
        durable: bool,
    },
    CommitMany {
        lens: Vec<usize>,
        durable: bool,
    },
    Flush,
    /// Retire through the seq `back` before the last committed one.
    Retire {
        back: u64,
    },
    Reopen,
    Crash {
        pick: usize,
    },
}

fn wal_steps() -> impl Strategy<Value = Vec<WalStep>> {
    let step = prop_oneof![
        4 => (0usize..400, any::<bool>()).prop_map(|(len, durable)| WalStep::Commit { len, durable }),
        2 => (prop::collection::vec(0usize..400, 0..6), any::<bool>())
            .prop_map(|(lens, durable)| WalStep::CommitMany { lens, durable }),
        1 => Just(WalStep::Flush),
        1 => (0u64..6).prop_map(|back| WalStep::Retire { back }),
        1 => Just(WalStep::Reopen),
        1 => any::<usize>().prop_map(|pick| WalStep::Crash { pick }),
    ];
    prop::collection::vec(step, 1..40)
}

/// A payload that names its seq, so a record recovered in the wrong place cannot pass.
fn wal_payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.resize(len.max(8), (seq % 251) as u8);
    p
}

#[derive(Default)]
struct WalModel {
    /// Every record committed and not lost to a crash, by seq (from 0).
    committed: Vec<Vec<u8>>,
    /// How many of them a durable commit or a flush promised.
    promised: usize,
    /// The first seq of this writer's session: earlier records are recovered, not retained.
    session_start: usize,
    retired_through: Option<u64>,
    /// A deliberately wrong model (see `shrinking_finds_the_minimal_failing_sequence`): it
    /// believes a durable commit promises one record more than it made.
    overpromise: bool,
}

impl WalModel {
    fn promise_all(&mut self) {
        self.promised = self.committed.len() + usize::from(self.overpromise);
    }

    /// Reads what a (re)opened writer will recover, checks it against the model and adopts it.
    fn recover(&mut self, fs: &FaultFs) -> Result<(), TestCaseError> {
        let (records, _) = read_wal(vfs(fs), "m", Mode::Native).map_err(fail)?;
        prop_assert!(
            records.len() >= self.promised,
            "recovered {} records, {} were promised durable",
            records.len(),
            self.promised
        );
        prop_assert!(
            records.len() <= self.committed.len(),
            "recovered more than committed"
        );
        for (seq, record) in records.iter().enumerate() {
            prop_assert_eq!(record.seq, LogSeq(seq as u64));
            prop_assert_eq!(&record.payload[..], &self.committed[seq][..], "seq {}", seq);
        }
        self.committed.truncate(records.len());
        self.promised = records.len();
        self.session_start = records.len();
        self.retired_through = None;
        Ok(())
    }

    fn expected_visible(&self) -> Vec<(LogSeq, &[u8])> {
        (self.session_start..self.committed.len())
            .filter(|&seq| self.retired_through.is_none_or(|r| seq as u64 > r))
            .map(|seq| (LogSeq(seq as u64), &self.committed[seq][..]))
            .collect()
    }
}

fn check_wal(mode: Mode, steps: &[WalStep], overpromise: bool) -> Result<(), TestCaseError> {
    // Small segments, so that sequences rotate, and a crash can land mid-rotation.
    let options = WalOptions::segmented(DurabilityPolicy::FullSync, 8192);
    let mut fs = FaultFs::new();
    let open = |fs: &FaultFs| Wal::open(vfs(fs), "m", options, mode).map_err(fail);
    let mut wal = Some(Wal::create(vfs(&fs), "m", options, mode).map_err(fail)?);
    let mut model = WalModel {
        overpromise,
        ..WalModel::default()
    };
    for step in steps {
        let w = wal.as_ref().expect("a writer is open between steps");
        match step {
            WalStep::Commit { len, durable } => {
                let seq = model.committed.len() as u64;
                let p = wal_payload(seq, *len);
                let got = if *durable {
                    w.commit_durable(1, &p)
                } else {
                    w.commit(1, &p)
                };
                prop_assert_eq!(got.map_err(fail)?, LogSeq(seq));
                model.committed.push(p);
                if *durable {
                    model.promise_all();
                }
            }
            WalStep::CommitMany { lens, durable } => {
                let start = model.committed.len() as u64;
                let payloads: Vec<Vec<u8>> = (start..)
                    .zip(lens)
                    .map(|(seq, len)| wal_payload(seq, *len))
                    .collect();
                let batch: Vec<(u16, &[u8])> = payloads.iter().map(|p| (2, &p[..])).collect();
                let got = if *durable {
                    w.commit_many_durable(&batch)
                } else {
                    w.commit_many(&batch)
                };
                let end = start + lens.len() as u64;
                prop_assert_eq!(got.map_err(fail)?, LogSeq(start)..LogSeq(end));
                model.committed.extend(payloads);
                if *durable && !lens.is_empty() {
                    model.promise_all();
                }
            }
            WalStep::Flush => {
                w.flush().map_err(fail)?;
                model.promise_all();
            }
            WalStep::Retire { back } => {
                let end = model.committed.len() as u64;
                let Some(target) = end.checked_sub(1 + back) else {
                    continue;
                };
                match w.retire_visible_through(LogSeq(target)) {
                    Ok(_) => {
                        model.retired_through = model.retired_through.max(Some(target));
                    }
                    Err(WalError::Retire(WalRetireError::BeyondDurable { .. })) => {
                        // Only what no durable commit or flush covered may be refused.
                        prop_assert!(
                            target as usize >= model.promised,
                            "retire through {} refused, {} promised durable",
                            target,
                            model.promised
                        );
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            WalStep::Reopen => {
                drop(wal.take());
                model.recover(&fs)?;
                let (w, recovery) = open(&fs)?;
                prop_assert_eq!(recovery.next_seq, LogSeq(model.committed.len() as u64));
                wal = Some(w);
            }
            WalStep::Crash { pick } => {
                let crashed = power_loss(&fs, *pick);
                drop(wal.take());
                fs = crashed;
                model.recover(&fs)?;
                let (w, recovery) = open(&fs)?;
                prop_assert_eq!(recovery.next_seq, LogSeq(model.committed.len() as u64));
                wal = Some(w);
            }
        }
        let w = wal.as_ref().expect("a writer is open between steps");
        let visible = w.visible_records(LogSeq(0), usize::MAX).map_err(fail)?;
        let visible: Vec<(LogSeq, &[u8])> =
            visible.iter().map(|r| (r.seq, &r.payload[..])).collect();
        prop_assert_eq!(visible, model.expected_visible(), "after {:?}", step);
    }
    // Whatever the sequence, a final flush and crash keep every record.
    let w = wal.take().expect("a writer is open between steps");
    w.flush().map_err(fail)?;
    model.promise_all();
    let crashed = power_loss(&fs, 0);
    drop(w);
    model.recover(&crashed)
}

fn wal_matches_its_model(mode: Mode) {
    run(mode, wal_steps(), |mode, steps| {
        check_wal(mode, steps, false)
    });
}

/// Shrinking works: against a model that overpromises (it believes every flush covers one
/// record more than exists, so the final flush and crash of every sequence fail), proptest
/// reports the simplest sequence there is, one empty non-durable commit, whatever long sequence
/// first failed.
#[test]
fn shrinking_finds_the_minimal_failing_sequence() {
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&wal_steps(), |steps| check_wal(Mode::Native, &steps, true));
    let Err(TestError::Fail(_, minimal)) = result else {
        panic!("the overpromising model must fail: {result:?}");
    };
    assert!(
        matches!(
            minimal[..],
            [WalStep::Commit {
                len: 0,
                durable: false
            }]
        ),
        "not shrunk: {minimal:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The journal.

#[derive(Clone, Debug)]
enum JournalStep {
    Append(Vec<JournalOp>),
    Compact,
    Reopen,
    Crash { pick: usize },
}

fn journal_op() -> impl Strategy<Value = JournalOp> {
    let key = (0u8..6).prop_map(|k| vec![b'k', k]);
    prop_oneof![
        6 => (key.clone(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(key, value)| JournalOp::Set { key, value }),
        2 => key.prop_map(|key| JournalOp::Delete { key }),
        1 => Just(JournalOp::Clear),
    ]
}

fn journal_steps() -> impl Strategy<Value = Vec<JournalStep>> {
    let step = prop_oneof![
        6 => prop::collection::vec(journal_op(), 1..4).prop_map(JournalStep::Append),
        1 => Just(JournalStep::Compact),
        1 => Just(JournalStep::Reopen),
        1 => any::<usize>().prop_map(|pick| JournalStep::Crash { pick }),
    ];
    prop::collection::vec(step, 1..30)
}

fn check_journal(mode: Mode, steps: &[JournalStep]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(fail)?;
    let mut fs = FaultFs::new();
    let open = |fs: &FaultFs| rt.block_on(Journal::open(vfs(fs), "j", mode)).map_err(fail);
    let mut journal = Some(open(&fs)?);
    // The ops the file holds, in order: every append is durable once it returns, and a
    // compaction replaces them all with the snapshot.
    let mut ops: Vec<JournalOp> = Vec::new();
    for step in steps {
        match step {
            JournalStep::Append(new) => {
                let mut buf = encode_frames(new);
                let j = journal.as_mut().expect("open between steps");
                rt.block_on(j.append(&mut buf)).map_err(fail)?;
                ops.extend(new.iter().cloned());
            }
            JournalStep::Compact => {
                let snapshot = snapshot_ops(&SessionState::fold(&ops));
                let j = journal.as_mut().expect("open between steps");
                rt.block_on(j.compact(encode_frames(&snapshot)))
                    .map_err(fail)?;
                ops = snapshot;
            }
            JournalStep::Reopen => {
                drop(journal.take());
                journal = Some(open(&fs)?);
            }
            JournalStep::Crash { pick } => {
                let crashed = power_loss(&fs, *pick);
                drop(journal.take());
                fs = crashed;
                journal = Some(open(&fs)?);
            }
        }
        let (replayed, _) = replay_journal_blocking(vfs(&fs), "j", mode).map_err(fail)?;
        prop_assert_eq!(&replayed, &ops, "after {:?}", step);
    }
    Ok(())
}

fn journal_matches_its_model(mode: Mode) {
    run(mode, journal_steps(), |mode, steps| {
        check_journal(mode, steps)
    });
}

// ---------------------------------------------------------------------------------------------
// The push log.

#[derive(Clone, Debug)]
enum PushStep {
    Append(Vec<i64>),
    Compact,
    Reopen,
    Crash { pick: usize },
}

fn push_steps() -> impl Strategy<Value = Vec<PushStep>> {
    let step = prop_oneof![
        5 => prop::collection::vec(any::<i64>(), 0..20).prop_map(PushStep::Append),
        1 => Just(PushStep::Compact),
        1 => Just(PushStep::Reopen),
        1 => any::<usize>().prop_map(|pick| PushStep::Crash { pick }),
    ];
    prop::collection::vec(step, 1..30)
}

fn column_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]))
}

fn check_push_log(mode: Mode, steps: &[PushStep]) -> Result<(), TestCaseError> {
    let schema = column_schema();
    let mut fs = FaultFs::new();
    let open = |fs: &FaultFs| PushLog::new(vfs(fs), "p", schema.clone(), mode).map_err(fail);
    let mut log = open(&fs)?;
    // Every row pushed, in order, and the pushes (frames) since the last compaction.
    let mut rows: Vec<i64> = Vec::new();
    let mut frames: Vec<usize> = Vec::new();
    for step in steps {
        match step {
            PushStep::Append(new) => {
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(Int64Array::from(new.clone()))],
                )
                .map_err(fail)?;
                log.append(&batch).map_err(fail)?;
                rows.extend(new);
                frames.push(new.len());
            }
            PushStep::Compact => {
                let report = log.compact().map_err(fail)?;
                prop_assert_eq!(report.rows, rows.len());
                prop_assert_eq!(report.frames_before, frames.len());
                // Every batch into one frame; a log with no pushes stays empty.
                if !frames.is_empty() {
                    frames = vec![rows.len()];
                }
                prop_assert_eq!(report.frames_after, frames.len());
            }
            PushStep::Reopen => {
                log = open(&fs)?;
            }
            PushStep::Crash { pick } => {
                fs = power_loss(&fs, *pick);
                log = open(&fs)?;
            }
        }
        let (scanned, _) = log.scan_all().map_err(fail)?;
        let scanned_rows: Vec<usize> = scanned.iter().map(|f| f.batch.num_rows()).collect();
        prop_assert_eq!(&scanned_rows, &frames, "frames after {:?}", step);
        let values: Vec<i64> = scanned
            .iter()
            .flat_map(|f| {
                let column = f.batch.column(0);
                let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
                column.values().to_vec()
            })
            .collect();
        prop_assert_eq!(&values, &rows, "rows after {:?}", step);
    }
    Ok(())
}

fn push_log_matches_its_model(mode: Mode) {
    run(mode, push_steps(), |mode, steps| {
        check_push_log(mode, steps)
    });
}

/// The case the journal's model found, kept as a fixed test for both facets that create files
/// lazily: a zero-byte file that an earlier writer created and never wrote (so no one synced
/// its directory entry) is where the first append lands; a power loss that keeps nothing
/// unsynced must still keep the acknowledged append.
fn an_empty_file_left_unsynced_keeps_the_first_append(mode: Mode) {
    use stele::vfs::OpenMode;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let keep_nothing_unsynced = 0;

    let fs = FaultFs::new();
    drop(fs.open("j", OpenMode::Create).unwrap());
    let mut journal = rt.block_on(Journal::open(vfs(&fs), "j", mode)).unwrap();
    let op = JournalOp::Set {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
    };
    rt.block_on(journal.append(&mut encode_frames(std::slice::from_ref(&op))))
        .unwrap();
    let crashed = power_loss(&fs, keep_nothing_unsynced);
    drop(journal);
    let (ops, _) = replay_journal_blocking(vfs(&crashed), "j", mode).unwrap();
    assert_eq!(ops, [op], "the acknowledged append");

    let fs = FaultFs::new();
    drop(fs.open("p", OpenMode::Create).unwrap());
    let schema = column_schema();
    let log = PushLog::new(vfs(&fs), "p", schema.clone(), mode).unwrap();
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![7]))]).unwrap();
    log.append(&batch).unwrap();
    let crashed = power_loss(&fs, keep_nothing_unsynced);
    drop(log);
    let log = PushLog::new(vfs(&crashed), "p", schema, mode).unwrap();
    assert_eq!(log.scan_all().unwrap().0.len(), 1, "the acknowledged push");
}

stele_tests::every_mode!(
    an_empty_file_left_unsynced_keeps_the_first_append,
    wal_matches_its_model,
    journal_matches_its_model,
    push_log_matches_its_model,
);
