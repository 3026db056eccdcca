//! The push log through `stele_host::PushLog`, in every mode, on the real filesystem: what the
//! engine's unit tests check in memory, checked again across the component boundary, with
//! bytes on disk.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::push_log::{Finish, PushLogError, refs};
use stele::recovery::LogEnd;
use stele_host::{Mode, PushLog, PushLogCallError};
use stele_tests::{FailingVfs, TempRoot, every_mode};

fn push(seq: u64, rows: &[(&str, Option<&str>)]) -> RecordBatch {
    RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(UInt64Array::from(vec![seq; rows.len()])),
            Arc::new(Int64Array::from(vec![seq as i64 * 10; rows.len()])),
        ],
    )
    .unwrap()
}

/// A batch of a schema that is not the ref table's.
fn other_schema_batch() -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::Int64,
            false,
        )])),
        vec![Arc::new(Int64Array::from(vec![7]))],
    )
    .unwrap()
}

fn open(root: &TempRoot, mode: Mode) -> PushLog {
    PushLog::new(root.vfs(), "refs.log", refs::schema(), mode).unwrap()
}

fn pushes_scan_back_compact_and_seal(mode: Mode) {
    let root = TempRoot::new();
    let log = open(&root, mode);
    let (frames, end) = log.scan_all().unwrap();
    assert_eq!(
        (frames.len(), end),
        (0, LogEnd::Empty),
        "a log never pushed to is empty, in every mode"
    );
    let pushes: Vec<RecordBatch> = (1..=5)
        .map(|seq| push(seq, &[("main", Some(&*format!("c{seq}"))), ("tmp", None)]))
        .collect();
    let offsets: Vec<u64> = pushes.iter().map(|p| log.append(p).unwrap()).collect();
    assert_eq!(offsets[0], 32);
    assert_eq!(&root.read("refs.log")[..8], b"STELElog");
    let (frames, end) = log.scan_all().unwrap();
    assert_eq!(end, LogEnd::Clean);
    assert_eq!(frames.iter().map(|f| f.offset).collect::<Vec<_>>(), offsets);
    let before: Vec<RecordBatch> = frames.into_iter().map(|f| f.batch).collect();
    assert_eq!(before, pushes);
    assert_eq!(log.frame_count().unwrap(), 5);

    let report = log.compact().unwrap();
    assert_eq!(
        (report.frames_before, report.frames_after, report.rows),
        (5, 1, 10)
    );
    let after: Vec<RecordBatch> = log
        .scan_all()
        .unwrap()
        .0
        .into_iter()
        .map(|f| f.batch)
        .collect();
    assert_eq!(refs::fold(&after).unwrap(), refs::fold(&before).unwrap());
    assert!(!root.path("refs.log.compacting").exists());

    let section = log.seal_section("plugin").unwrap();
    assert_eq!(section.name, "stele.push-log.plugin");
    assert_eq!(
        section.pushes().unwrap().1,
        pushes,
        "one batch per push again"
    );
}

fn another_schema_is_a_typed_error_and_writes_nothing(mode: Mode) {
    let root = TempRoot::new();
    let log = open(&root, mode);
    let other = other_schema_batch();
    let err = log.append(&other).unwrap_err();
    assert!(
        matches!(
            err,
            PushLogCallError::PushLog(PushLogError::SchemaMismatch { .. })
        ),
        "{err}"
    );
    assert!(!root.path("refs.log").exists());
}

fn torn_tail_is_reported_and_cut_corruption_refused(mode: Mode) {
    let root = TempRoot::new();
    open(&root, mode)
        .append(&push(1, &[("a", Some("1"))]))
        .unwrap();
    let whole = root.read("refs.log");
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[32..60]);
    root.write("refs.log", &torn);
    let log = open(&root, mode);
    assert_eq!(
        log.scan_all().unwrap().1,
        LogEnd::TornTail {
            valid_end: whole.len() as u64,
            torn_end: torn.len() as u64
        }
    );
    assert_eq!(
        log.append(&push(2, &[("b", Some("2"))])).unwrap(),
        whole.len() as u64
    );
    drop(log);

    let mut corrupt = root.read("refs.log");
    corrupt[40] ^= 0x01;
    root.write("refs.log", &corrupt);
    let log = open(&root, mode);
    assert!(matches!(
        log.scan_all().unwrap().1,
        LogEnd::Corrupt { offset: 32, .. }
    ));
    let err = log.append(&push(3, &[])).unwrap_err();
    assert!(matches!(
        err,
        PushLogCallError::PushLog(PushLogError::Corrupt { offset: 32, .. })
    ));
    assert_eq!(root.read("refs.log"), corrupt, "left untouched");
}

/// A compaction that a crash stopped after staging (the crash point is a native test hook,
/// not part of the component's exports) leaves the old log and a staged file; the log, opened
/// afresh in each mode, still reads whole and compacts over the leftover.
fn compaction_stopped_before_the_rename_leaves_the_old_log(mode: Mode) {
    let root = TempRoot::new();
    {
        let stopped = stele::push_log::PushLog::new(root.vfs(), "refs.log", refs::schema());
        for seq in 1..=3 {
            stopped.append(&push(seq, &[("r", Some("x"))])).unwrap();
        }
        let old = root.read("refs.log");
        stopped.compact_with(Finish::AfterStageSync).unwrap();
        assert_eq!(root.read("refs.log"), old);
    }
    assert!(
        root.path("refs.log.compacting").exists(),
        "the staged file is left for the next compaction"
    );
    let log = open(&root, mode);
    assert_eq!(log.frame_count().unwrap(), 3);
    let report = log.compact().unwrap();
    assert_eq!((report.frames_before, report.frames_after), (3, 1));
    assert_eq!(log.frame_count().unwrap(), 1);
}

fn second_writer_is_refused(mode: Mode) {
    let root = TempRoot::new();
    let first = open(&root, mode);
    first.append(&push(1, &[])).unwrap();
    for other in Mode::ALL {
        let err = open(&root, other).append(&push(2, &[])).unwrap_err();
        assert!(
            matches!(err, PushLogCallError::PushLog(PushLogError::Locked { .. })),
            "{}: {err}",
            other.name()
        );
    }
}

/// 150 pushes span three of the guest's 64-frame lists. A scan dropped halfway releases the
/// guest's scan resource, and the log goes on taking pushes and scanning whole.
fn a_streamed_scan_crosses_lists_and_can_stop_early(mode: Mode) {
    let root = TempRoot::new();
    let log = open(&root, mode);
    let offsets: Vec<u64> = (1..=150)
        .map(|seq| log.append(&push(seq, &[("r", Some("x"))])).unwrap())
        .collect();
    let mut scan = log.scan().unwrap();
    let first_half: Vec<u64> = scan.by_ref().take(75).map(|f| f.unwrap().offset).collect();
    assert_eq!(first_half, offsets[..75]);
    assert_eq!(scan.end(), LogEnd::Clean, "not final yet, and says so");
    drop(scan);

    let last = log.append(&push(151, &[("r", Some("y"))])).unwrap();
    let mut scan = log.scan().unwrap();
    let mut seen = Vec::new();
    for frame in scan.by_ref() {
        let frame = frame.unwrap();
        let seq = frame
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0);
        seen.push((frame.offset, seq));
    }
    assert_eq!(scan.end(), LogEnd::Clean);
    let expected: Vec<(u64, u64)> = offsets.iter().copied().chain([last]).zip(1..).collect();
    assert_eq!(seen, expected);
    assert!(scan.next().is_none(), "an ended scan stays ended");
}

/// A frame whose checksum holds but whose body is another schema's batch: every mode reports
/// `MalformedFrame` at its offset and stops (sandboxed, the host decodes what the guest hands
/// over, so this is the host's own check).
fn a_checksummed_frame_of_another_schema_is_malformed(mode: Mode) {
    let root = TempRoot::new();
    open(&root, mode)
        .append(&push(1, &[("a", Some("1"))]))
        .unwrap();
    let other = other_schema_batch();
    let mut bytes = root.read("refs.log");
    let second = bytes.len() as u64;
    let body = stele::push_log::ipc::encode_stream(&other).unwrap();
    stele::frame::push_frame(&mut bytes, |out| out.extend_from_slice(&body));
    root.write("refs.log", &bytes);
    let log = open(&root, mode);
    let mut scan = log.scan().unwrap();
    assert_eq!(scan.next().unwrap().unwrap().offset, 32);
    let err = scan.next().unwrap().unwrap_err();
    assert!(
        matches!(
            &err,
            PushLogCallError::PushLog(PushLogError::MalformedFrame { offset, .. }) if *offset == second
        ),
        "{err}"
    );
    assert!(scan.next().is_none());
}

/// One writer serves concurrent callers: while one thread's push is held at its sync, a second
/// thread's push waits (it writes nothing until the first returns), and a count from a third
/// caller is answered meanwhile. Sandboxed, that is one async instance serving all three (the
/// guest's push task suspends at the sync and the instance runs the others); natively, the
/// engine's writer lock. Both pushes are then durable, in the order they were applied. The plain
/// build serializes every call on its instance, so the count would wait behind the held sync:
/// there it only checks that both pushes land.
fn two_threads_pushing_share_one_writer(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, gate) = FailingVfs::new(root.vfs());
    let log = PushLog::new(vfs, "refs.log", refs::schema(), mode).unwrap();
    // The first push takes the lock, writes the header and syncs the directory.
    let first = log.append(&push(1, &[("main", Some("c1"))])).unwrap();
    let writes_before = gate.writes.load(Ordering::SeqCst);
    if mode != Mode::SandboxedPlain {
        gate.close_gate();
    }
    let (second, third) = std::thread::scope(|s| {
        let second = s.spawn(|| log.append(&push(2, &[("main", Some("c2"))])));
        if mode != Mode::SandboxedPlain {
            // The second push's frame (header and body) is written; its sync waits at the gate.
            wait_for(|| gate.writes.load(Ordering::SeqCst) >= writes_before + 2);
        }
        let third = s.spawn(|| log.append(&push(3, &[("tmp", Some("c3"))])));
        if mode != Mode::SandboxedPlain {
            assert_eq!(
                log.frame_count().unwrap(),
                2,
                "a count is answered while a push waits on its sync"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(
                gate.writes.load(Ordering::SeqCst),
                writes_before + 2,
                "the third push writes nothing while the second holds the writer"
            );
            gate.open_gate();
        }
        (
            second.join().unwrap().unwrap(),
            third.join().unwrap().unwrap(),
        )
    });
    // The gate fixes the second push before the third; the plain build takes the two in
    // whichever order their threads reach its instance.
    assert!(first < second && first < third, "{first} {second} {third}");
    if mode != Mode::SandboxedPlain {
        assert!(second < third, "{second} {third}");
    }
    drop(log);
    let (frames, end) = open(&root, mode).scan_all().unwrap();
    assert_eq!(end, LogEnd::Clean);
    let found: Vec<(u64, u64)> = frames
        .iter()
        .map(|f| {
            let seq = f
                .batch
                .column_by_name("push_seq")
                .unwrap()
                .as_any()
                .downcast_ref::<UInt64Array>()
                .unwrap()
                .value(0);
            (f.offset, seq)
        })
        .collect();
    // Each push's frame where its append said, in the order they were applied.
    let mut applied = vec![(first, 1), (second, 2), (third, 3)];
    applied.sort_unstable();
    assert_eq!(found, applied);
}

/// Waits (bounded, so that a bug fails the test instead of hanging it) until `done`.
fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("the condition never held");
}

every_mode!(
    two_threads_pushing_share_one_writer,
    pushes_scan_back_compact_and_seal,
    a_checksummed_frame_of_another_schema_is_malformed,
    a_streamed_scan_crosses_lists_and_can_stop_early,
    another_schema_is_a_typed_error_and_writes_nothing,
    torn_tail_is_reported_and_cut_corruption_refused,
    compaction_stopped_before_the_rename_leaves_the_old_log,
    second_writer_is_refused,
);
