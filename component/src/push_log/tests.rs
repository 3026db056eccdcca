//! The push log's behaviours on the in-memory filesystem; crashes are the crash matrix's.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use proptest::prelude::*;

use super::refs::{self, fold};
use super::*;
use crate::header::HEADER_BYTES;
use crate::recovery::LogEnd;
use crate::vfs::MemVfs;

/// A push of refs rows: (ref name, target or delete), all with `push_seq`.
fn push(seq: u64, rows: &[(&str, Option<&str>)]) -> RecordBatch {
    RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(UInt64Array::from(vec![seq; rows.len()])),
            Arc::new(Int64Array::from(vec![
                1_700_000_000_000 + seq as i64;
                rows.len()
            ])),
        ],
    )
    .unwrap()
}

fn log(vfs: &MemVfs) -> PushLog {
    PushLog::new(Arc::new(vfs.clone()), "refs.log", refs::schema())
}

fn scanned(log: &PushLog) -> (Vec<(u64, RecordBatch)>, LogEnd) {
    let mut scan = log.scan().unwrap();
    let frames = scan
        .by_ref()
        .map(|f| f.map(|f| (f.offset, f.batch)))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (frames, scan.end())
}

fn batches(log: &PushLog) -> Vec<RecordBatch> {
    scanned(log).0.into_iter().map(|f| f.1).collect()
}

#[test]
fn missing_log_is_empty_and_clean_and_new_touches_nothing() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    assert_eq!(scanned(&log).0.len(), 0);
    assert_eq!(scanned(&log).1, LogEnd::Empty);
    assert_eq!(log.frame_count().unwrap(), 0);
    assert!(!vfs.exists("refs.log").unwrap());
}

#[test]
fn appends_scan_back_in_order_with_their_offsets() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    let pushes = [
        push(1, &[("main", Some("a1"))]),
        push(2, &[("main", Some("b2")), ("dev", Some("c3"))]),
        push(3, &[("dev", None)]),
    ];
    let offsets: Vec<u64> = pushes.iter().map(|p| log.append(p).unwrap()).collect();
    assert_eq!(offsets[0], HEADER_BYTES as u64);
    let (frames, end) = scanned(&log);
    assert_eq!(end, LogEnd::Clean);
    assert_eq!(frames.iter().map(|f| f.0).collect::<Vec<_>>(), offsets);
    assert_eq!(
        frames.iter().map(|f| f.1.clone()).collect::<Vec<_>>(),
        pushes
    );
    let table = fold(&batches(&log)).unwrap();
    assert_eq!(table.len(), 1);
    assert_eq!(table["main"].target, "b2");
    assert_eq!(table["main"].push_seq, 2);
    assert!(vfs.file_syncs() >= 3, "every push is synced");
}

#[test]
fn other_schemas_are_refused_before_any_write() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    let other = RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::Int64,
            false,
        )])),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .unwrap();
    assert!(matches!(
        log.append(&other),
        Err(PushLogError::SchemaMismatch { .. })
    ));
    assert!(!vfs.exists("refs.log").unwrap());
}

#[test]
fn torn_tail_is_reported_then_cut_by_the_next_append() {
    let vfs = MemVfs::new();
    log(&vfs).append(&push(1, &[("main", Some("a"))])).unwrap();
    let whole = vfs.contents("refs.log").unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[HEADER_BYTES..HEADER_BYTES + 20]);
    vfs.set_contents("refs.log", torn.clone());
    let log = log(&vfs);
    let (frames, end) = scanned(&log);
    assert_eq!(frames.len(), 1);
    assert_eq!(
        end,
        LogEnd::TornTail {
            valid_end: whole.len() as u64,
            torn_end: torn.len() as u64
        }
    );
    let at = log.append(&push(2, &[("dev", Some("b"))])).unwrap();
    assert_eq!(
        at,
        whole.len() as u64,
        "the append starts where the torn push began"
    );
    assert_eq!(scanned(&log).0.len(), 2);
    assert_eq!(scanned(&log).1, LogEnd::Clean);
}

#[test]
fn damage_before_a_valid_frame_is_corruption_and_refused() {
    let vfs = MemVfs::new();
    {
        let log = log(&vfs);
        log.append(&push(1, &[("main", Some("a"))])).unwrap();
        log.append(&push(2, &[("main", Some("b"))])).unwrap();
    }
    let mut bytes = vfs.contents("refs.log").unwrap();
    bytes[HEADER_BYTES + 12] ^= 0x10;
    vfs.set_contents("refs.log", bytes);
    let log = log(&vfs);
    assert!(matches!(
        scanned(&log).1,
        LogEnd::Corrupt { offset: 32, .. }
    ));
    assert!(matches!(
        log.append(&push(3, &[])),
        Err(PushLogError::Corrupt { offset: 32, .. })
    ));
    assert!(matches!(
        log.compact(),
        Err(PushLogError::Corrupt { offset: 32, .. })
    ));
}

#[test]
fn append_ipc_stores_a_checked_stream_as_it_is_and_refuses_anything_else() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    let stream = ipc::encode_stream(&push(1, &[("main", Some("c1"))])).unwrap();
    let mut trailing = stream.clone();
    trailing.extend_from_slice(b"junk");
    let mut two = ipc::encode_stream(&push(2, &[])).unwrap();
    two.truncate(two.len() - 8);
    two.extend_from_slice(&stream[ipc::encode_schema(&refs::schema()).unwrap().len() - 8..]);
    for (bad, why) in [
        (&trailing[..], "bytes follow"),
        (&two[..], "more than one batch"),
        (&stream[..stream.len() - 8], "end-of-stream"),
    ] {
        let err = log.append_ipc(bad).unwrap_err();
        assert!(
            matches!(&err, PushLogError::BadPush(w) if w.contains(why)),
            "{why}: {err}"
        );
    }
    let other = ipc::encode_stream(
        &RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "x",
                arrow_schema::DataType::Int64,
                false,
            )])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap(),
    )
    .unwrap();
    assert!(matches!(
        log.append_ipc(&other),
        Err(PushLogError::SchemaMismatch { .. })
    ));
    assert_eq!(vfs.contents("refs.log"), None, "nothing written");

    assert_eq!(log.append_ipc(&stream).unwrap(), 32);
    let file = vfs.contents("refs.log").unwrap();
    assert_eq!(
        &file[32 + frame::FRAME_HEADER_BYTES..],
        &stream[..],
        "stored as it is"
    );
    let mut scan = log.scan().unwrap();
    assert_eq!(scan.next_body().unwrap().unwrap(), (32, &stream[..]));
    assert_eq!(batches(&log), [push(1, &[("main", Some("c1"))])]);
}

#[test]
fn a_valid_frame_that_is_not_ipc_is_a_typed_error_not_an_allocation() {
    let vfs = MemVfs::new();
    let mut bytes = PUSH_LOG_FORMAT.header().to_vec();
    // An IPC message claiming 2 GiB of metadata, inside a frame whose checksum holds.
    let mut body = vec![0xff, 0xff, 0xff, 0xff];
    body.extend_from_slice(&i32::MAX.to_le_bytes());
    body.extend_from_slice(&[0u8; 16]);
    frame::push_frame(&mut bytes, |out| out.extend_from_slice(&body));
    vfs.set_contents("refs.log", bytes);
    let mut scan = log(&vfs).scan().unwrap();
    assert!(matches!(
        scan.next(),
        Some(Err(PushLogError::MalformedFrame { offset: 32, .. }))
    ));
    assert!(scan.next().is_none());
}

#[test]
fn compaction_merges_frames_keeps_every_row_and_the_fold() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    for seq in 1..=20 {
        log.append(&push(seq, &[("main", Some(&format!("c{seq}")))]))
            .unwrap();
    }
    log.append(&push(21, &[("main", None), ("tag", Some("t"))]))
        .unwrap();
    let before = batches(&log);
    // A stray staged file from an earlier crash is ignored and overwritten.
    vfs.set_contents("refs.log.compacting", b"junk".to_vec());
    let report = log.compact().unwrap();
    assert_eq!(
        (report.frames_before, report.frames_after, report.rows),
        (21, 1, 22)
    );
    assert!(report.bytes_after < report.bytes_before);
    assert!(!vfs.exists("refs.log.compacting").unwrap());
    let after = batches(&log);
    assert_eq!(after.len(), 1);
    assert_eq!(fold(&before).unwrap(), fold(&after).unwrap());
    // Appends continue after a compaction, on the new file.
    log.append(&push(22, &[("main", Some("again"))])).unwrap();
    assert_eq!(log.frame_count().unwrap(), 2);
    assert_eq!(fold(&batches(&log)).unwrap()["main"].target, "again");
}

#[test]
fn compact_with_stops_at_each_crash_point_and_the_log_reads_before_or_after() {
    for finish in [
        Finish::AfterStage,
        Finish::AfterStageSync,
        Finish::AfterRename,
        Finish::BeforeDirSync,
    ] {
        let vfs = MemVfs::new();
        let log = log(&vfs);
        for seq in 1..=3 {
            log.append(&push(seq, &[("r", Some("x"))])).unwrap();
        }
        let before = batches(&log);
        let report = log.compact_with(finish).unwrap();
        assert_eq!(report.finished, finish);
        let now = batches(&log);
        let renamed = matches!(finish, Finish::AfterRename | Finish::BeforeDirSync);
        assert_eq!(now.len(), if renamed { 1 } else { 3 }, "{finish:?}");
        assert_eq!(fold(&now).unwrap(), fold(&before).unwrap());
        log.append(&push(4, &[("r", Some("y"))])).unwrap();
        assert_eq!(fold(&batches(&log)).unwrap()["r"].target, "y", "{finish:?}");
    }
}

#[test]
fn maybe_compact_runs_only_past_the_policy() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    let policy = CompactionPolicy {
        frames: Some(4),
        bytes: None,
    };
    for seq in 1..=3 {
        log.append(&push(seq, &[("r", Some("x"))])).unwrap();
    }
    assert_eq!(log.maybe_compact(policy).unwrap(), None);
    log.append(&push(4, &[("r", Some("x"))])).unwrap();
    assert_eq!(log.maybe_compact(policy).unwrap().unwrap().frames_after, 1);
    assert_eq!(
        log.maybe_compact(CompactionPolicy::default()).unwrap(),
        None
    );
}

#[test]
fn a_second_writer_is_refused() {
    let vfs = MemVfs::new();
    let first = log(&vfs);
    first.append(&push(1, &[])).unwrap();
    let second = log(&vfs);
    assert!(matches!(
        second.append(&push(2, &[])),
        Err(PushLogError::Locked { .. })
    ));
    drop(first);
    second.append(&push(2, &[])).unwrap();
}

#[test]
fn sealed_section_is_an_ipc_file_with_one_batch_per_push_even_after_compaction() {
    let vfs = MemVfs::new();
    let log = log(&vfs);
    let pushes = [
        push(1, &[("a", Some("1"))]),
        push(2, &[("b", Some("2")), ("c", Some("3"))]),
        push(3, &[("a", None)]),
    ];
    for p in &pushes {
        log.append(p).unwrap();
    }
    log.compact().unwrap();
    let section = log.seal_section("my_module").unwrap();
    assert_eq!(section.name, "stele.push-log.my_module");
    assert_eq!(section.module_name(), Some("my_module"));
    assert_eq!(&section.payload[..6], b"ARROW1");
    let (schema, sealed) = section.pushes().unwrap();
    assert_eq!(schema.fields(), refs::schema().fields());
    assert_eq!(sealed, pushes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `fold` is identical before and after compaction, whatever the pushes (including
    /// out-of-order push_seq, deletes, and several writes to one ref in one push).
    #[test]
    fn fold_survives_compaction(
        pushes in prop::collection::vec(
            (0u64..20, prop::collection::vec((0usize..5, prop::option::of(0u8..4)), 0..6)),
            1..12,
        )
    ) {
        let vfs = MemVfs::new();
        let log = log(&vfs);
        let names = ["main", "dev", "v1", "v2", "tmp"];
        for (seq, rows) in &pushes {
            let rows: Vec<(&str, Option<String>)> = rows
                .iter()
                .map(|(n, t)| (names[*n], t.map(|t| format!("t{t}"))))
                .collect();
            let rows: Vec<(&str, Option<&str>)> =
                rows.iter().map(|(n, t)| (*n, t.as_deref())).collect();
            log.append(&push(*seq, &rows)).unwrap();
        }
        let before = fold(&batches(&log)).unwrap();
        let rows_before: usize = batches(&log).iter().map(|b| b.num_rows()).sum();
        log.compact().unwrap();
        let after_batches = batches(&log);
        prop_assert_eq!(after_batches.iter().map(|b| b.num_rows()).sum::<usize>(), rows_before);
        prop_assert_eq!(fold(&after_batches).unwrap(), before);
    }
}
