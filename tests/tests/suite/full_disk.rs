//! A real full disk: a small tmpfs mounted by the test itself, filled by each facet in every
//! mode until the device answers ENOSPC. Each must end with a typed error and lose no
//! acknowledged record; then room is freed (a ballast file the test wrote first is removed) and
//! the log takes writes again with the same handle: the journal and the push log because their
//! failed append was rolled back, the WAL because a group that finds no room before its sync
//! stalls the writer instead of poisoning it, and its retry writes the stalled records.
//!
//! Mounting needs root (CI runs as root). With `CI=true` a refused mount fails the test;
//! elsewhere the test prints one line and passes without running.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use stele::journal::{JournalError as EngineJournalError, JournalOp, encode_frames};
use stele::push_log::PushLogError;
use stele::vfs::{Vfs, VfsError};
use stele::wal::segment::replay_segments;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriteError};
use stele_host::fs::RealFs;
use stele_host::{
    JournalError, Mode, PushLog, PushLogCallError, Wal, WalError, replay_journal_blocking,
};
use stele_tests::{every_mode, payload, tokio_runtime};

/// The device's size: a few segments and the ballast.
const DEVICE_BYTES: u64 = 3 << 20;
/// What the test writes first and removes to free room.
const BALLAST_BYTES: usize = 1 << 20;

/// A tmpfs of [`DEVICE_BYTES`], unmounted (and its directory removed) on drop.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    /// Mounts one, or says why not: `None` when mounting is refused outside CI.
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::Builder::new()
            .prefix("stele-full-disk-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={DEVICE_BYTES}"),
                "tmpfs",
            ])
            .arg(&dir)
            .status();
        if matches!(status, Ok(s) if s.success()) {
            return Some(SmallDisk { dir });
        }
        let _ = std::fs::remove_dir(&dir);
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("mounting a tmpfs failed ({status:?}); CI runs as root and must mount");
        }
        println!("full_disk: cannot mount a tmpfs here ({status:?}); skipped outside CI");
        None
    }

    fn vfs(&self) -> Arc<dyn Vfs> {
        Arc::new(RealFs::open_root(&self.dir).expect("open root"))
    }

    fn add_ballast(&self) {
        std::fs::write(self.dir.join("ballast"), vec![0xBA; BALLAST_BYTES]).expect("ballast");
    }

    fn free_ballast(&self) {
        std::fs::remove_file(self.dir.join("ballast")).expect("remove ballast");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn is_no_space(err: &VfsError) -> bool {
    matches!(err, VfsError::NoSpace)
}

fn wal_fills_the_disk_stalls_loses_nothing_and_goes_on_after_room_is_freed(mode: Mode) {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    disk.add_ballast();
    let options = WalOptions::segmented(DurabilityPolicy::FullSync, 256 << 10);
    let wal = Wal::create(disk.vfs(), "log", options, mode).unwrap();
    let acked = Mutex::new(Vec::new());
    // Records whose commit was told `Stalled`: staged, so they must become durable with the
    // retry, exactly once; and calls refused before staging (`StalledRefused`): never.
    let stalled = Mutex::new(Vec::new());
    let refused = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for writer in 0..4u64 {
            let (wal, acked, stalled, refused) = (&wal, &acked, &stalled, &refused);
            scope.spawn(move || {
                for i in 0.. {
                    let record = payload(writer, i, 700);
                    match wal.commit_durable(1, &record) {
                        Ok(seq) => acked.lock().unwrap().push((seq.0, record)),
                        Err(WalError::Write(WalWriteError::Stalled { cause })) => {
                            assert!(is_no_space(&cause), "{cause:?}");
                            stalled.lock().unwrap().push(record);
                            return;
                        }
                        Err(WalError::Write(WalWriteError::StalledRefused { cause })) => {
                            assert!(is_no_space(&cause), "{cause:?}");
                            refused.lock().unwrap().push(record);
                            return;
                        }
                        Err(other) => panic!("expected a typed stall on ENOSPC, got {other:?}"),
                    }
                }
            });
        }
    });
    let mut acked = acked.into_inner().unwrap();
    acked.sort();
    let stalled = stalled.into_inner().unwrap();
    let refused = refused.into_inner().unwrap();
    assert!(
        acked.len() > 1000,
        "only {} records before the disk filled",
        acked.len()
    );
    assert!(
        !stalled.is_empty(),
        "some commit waited on the group that found no room"
    );
    // Not poisoned: while the disk is still full, a flush retries and is told so again.
    assert!(matches!(
        wal.flush(),
        Err(WalError::Write(WalWriteError::Stalled { .. }))
    ));

    disk.free_ballast();
    // The same handle: the flush writes the stalled records, the next commit goes on.
    wal.flush()
        .expect("the stalled records are written once room is back");
    let next = wal.commit_durable(1, b"after the disk was freed").unwrap();
    assert!(next >= LogSeq(acked.last().unwrap().0 + 1));
    drop(wal);

    let (_wal, recovery) = Wal::open(disk.vfs(), "log", options, mode).unwrap();
    let mut by_seq = std::collections::HashMap::new();
    replay_segments(&*disk.vfs(), "log", LogSeq(0), |r| {
        by_seq.insert(r.seq.0, r.payload.to_vec());
    })
    .expect("replay");
    let lost = acked
        .iter()
        .filter(|(seq, record)| by_seq.get(seq) != Some(record))
        .count();
    assert_eq!(
        lost, 0,
        "acknowledged records lost after ENOSPC ({recovery:?})"
    );
    let count = |record: &Vec<u8>| by_seq.values().filter(|r| *r == record).count();
    for record in &stalled {
        assert_eq!(count(record), 1, "a stalled record is written exactly once");
    }
    for record in &refused {
        assert_eq!(count(record), 0, "a refused record was never staged");
    }
    assert_eq!(
        by_seq.len(),
        acked.len() + stalled.len() + 1,
        "the log holds the acknowledged, the stalled and the last record, nothing else"
    );
    println!(
        "full_disk {}: wal, {} records acknowledged before ENOSPC, {} stalled then written, \
         {} refused, 0 lost, same handle after room was freed",
        mode.name(),
        acked.len(),
        stalled.len(),
        refused.len()
    );
}

fn journal_fills_the_disk_rolls_back_and_appends_again_with_the_same_writer(mode: Mode) {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    disk.add_ballast();
    let rt = tokio_runtime(2);
    let mut journal = rt
        .block_on(stele_host::Journal::open(disk.vfs(), "j", mode))
        .unwrap();
    let mut acked = Vec::new();
    let err = loop {
        let op = JournalOp::Set {
            key: format!("k{}", acked.len()).into_bytes(),
            value: payload(0, acked.len() as u64, 4000),
        };
        let mut buf = encode_frames(std::slice::from_ref(&op));
        match rt.block_on(journal.append(&mut buf)) {
            Ok(()) => acked.push(op),
            Err(err) => break err,
        }
    };
    match &err {
        JournalError::Journal(EngineJournalError::AppendFailed { cause, rolled_back }) => {
            assert!(is_no_space(cause), "{cause:?}");
            assert!(rolled_back, "the failed append is cut back");
        }
        other => panic!("expected a typed ENOSPC, got {other:?}"),
    }
    disk.free_ballast();
    let op = JournalOp::Set {
        key: b"after".to_vec(),
        value: b"the disk was freed".to_vec(),
    };
    rt.block_on(journal.append(&mut encode_frames(std::slice::from_ref(&op))))
        .expect("the same writer appends once room is freed");
    acked.push(op);
    drop(journal);
    let (ops, _) = replay_journal_blocking(disk.vfs(), "j", mode).unwrap();
    assert!(
        ops == acked,
        "replayed {} ops, acknowledged {}",
        ops.len(),
        acked.len()
    );
    println!(
        "full_disk {}: journal, {} appends acknowledged before ENOSPC, 0 lost",
        mode.name(),
        acked.len() - 1
    );
}

fn push_log_fills_the_disk_rolls_back_and_pushes_again_with_the_same_handle(mode: Mode) {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    disk.add_ballast();
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let log = PushLog::new(disk.vfs(), "p", schema.clone(), mode).unwrap();
    let batch = |first: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(first..first + 512))],
        )
        .unwrap()
    };
    let mut pushed = 0i64;
    let err = loop {
        match log.append(&batch(pushed * 512)) {
            Ok(_) => pushed += 1,
            Err(err) => break err,
        }
    };
    match &err {
        PushLogCallError::PushLog(PushLogError::AppendFailed { cause, rolled_back }) => {
            assert!(is_no_space(cause), "{cause:?}");
            assert!(rolled_back, "the failed push is cut back");
        }
        other => panic!("expected a typed ENOSPC, got {other:?}"),
    }
    disk.free_ballast();
    log.append(&batch(pushed * 512))
        .expect("the same handle pushes once room is freed");
    pushed += 1;
    let (frames, _) = log.scan_all().unwrap();
    let rows: Vec<i64> = frames
        .iter()
        .flat_map(|f| {
            let column = f.batch.column(0);
            let values = column.as_any().downcast_ref::<Int64Array>().unwrap();
            values.values().to_vec()
        })
        .collect();
    assert!(
        rows == (0..pushed * 512).collect::<Vec<_>>(),
        "scanned {} rows, acknowledged {}",
        rows.len(),
        pushed * 512
    );
    println!(
        "full_disk {}: push log, {} pushes acknowledged before ENOSPC, 0 lost",
        mode.name(),
        pushed - 1
    );
}

every_mode!(
    wal_fills_the_disk_stalls_loses_nothing_and_goes_on_after_room_is_freed,
    journal_fills_the_disk_rolls_back_and_appends_again_with_the_same_writer,
    push_log_fills_the_disk_rolls_back_and_pushes_again_with_the_same_handle,
);
