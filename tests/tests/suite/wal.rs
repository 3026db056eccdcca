//! The WAL suite, run natively and through the component (`native::*`, `sandboxed::*`).

use std::collections::HashSet;
use std::sync::Arc;

use stele::frame::FRAME_HEADER_BYTES;
use stele::header::{Family, FileHeader, HEADER_BYTES, HeaderError};
use stele::vfs::VfsError;
use stele::wal::record::{PAYLOAD_BYTES_MAX, encoded_len};
use stele::wal::{
    DurabilityPolicy, LogEnd, LogSeq, WalOpenError, WalOptions, WalRetireError, WalWriteError,
};
use stele_host::{Mode, Wal, WalError, read_wal};
use stele_tests::{FailingVfs, TempRoot, every_mode, payload, payload_id};

fn opts(policy: DurabilityPolicy, first_seq: u64) -> WalOptions {
    WalOptions::single_file(policy).with_first_seq(LogSeq(first_seq))
}

fn round_trip_across_reopens(mode: Mode) {
    let root = TempRoot::new();
    let o = opts(DurabilityPolicy::FullSync, 100);
    let wal = Wal::create(root.vfs(), "log.wal", o, mode).unwrap();
    assert_eq!(wal.commit(1, &payload(0, 0, 32)).unwrap(), LogSeq(100));
    assert_eq!(
        wal.commit_durable(2, &payload(0, 1, 40)).unwrap(),
        LogSeq(101)
    );
    let batch = [(3u16, &payload(0, 2, 16)[..]), (4, &payload(0, 3, 64)[..])];
    assert_eq!(
        wal.commit_many_durable(&batch).unwrap(),
        LogSeq(102)..LogSeq(104)
    );
    assert_eq!(
        wal.commit_many(&[]).unwrap(),
        LogSeq(104)..LogSeq(104),
        "empty batch"
    );
    wal.flush().unwrap();
    drop(wal);

    // first_seq in options is ignored for an existing log: the header says 100.
    let (wal, rec) = Wal::open(
        root.vfs(),
        "log.wal",
        opts(DurabilityPolicy::FullSync, 7),
        mode,
    )
    .unwrap();
    assert_eq!(
        (rec.first_seq, rec.next_seq, rec.records, rec.end),
        (LogSeq(100), LogSeq(104), 4, LogEnd::Clean)
    );
    assert_eq!(
        wal.commit_durable(5, &payload(1, 0, 20)).unwrap(),
        LogSeq(104)
    );
    drop(wal);

    let (records, rec) = read_wal(root.vfs(), "log.wal", mode).unwrap();
    assert_eq!(rec.end, LogEnd::Clean);
    let got: Vec<(u64, u16, Vec<u8>)> = records
        .iter()
        .map(|r| (r.seq.0, r.op, r.payload.to_vec()))
        .collect();
    let want = vec![
        (100, 1, payload(0, 0, 32)),
        (101, 2, payload(0, 1, 40)),
        (102, 3, payload(0, 2, 16)),
        (103, 4, payload(0, 3, 64)),
        (104, 5, payload(1, 0, 20)),
    ];
    assert_eq!(got, want);
    // Bytes on disk: header, then exactly the encoded records.
    let bytes = root.read("log.wal");
    let header =
        FileHeader::decode_expecting(&bytes, Family::Wal, stele::wal::WAL_VERSION).unwrap();
    assert_eq!(header.family_word, 100);
    let body: usize = want.iter().map(|(_, _, p)| encoded_len(p.len())).sum();
    assert_eq!(bytes.len(), HEADER_BYTES + body);
}

fn missing_or_empty_file_is_a_new_log(mode: Mode) {
    let root = TempRoot::new();
    let (wal, rec) = Wal::open(
        root.vfs(),
        "fresh.wal",
        opts(DurabilityPolicy::Barrier, 9),
        mode,
    )
    .unwrap();
    assert_eq!((rec.end, rec.next_seq), (LogEnd::Empty, LogSeq(9)));
    assert_eq!(wal.commit_durable(0, b"x").unwrap(), LogSeq(9));
    drop(wal);
    root.write("empty.wal", b"");
    let (_, rec) = Wal::open(
        root.vfs(),
        "empty.wal",
        opts(DurabilityPolicy::Barrier, 3),
        mode,
    )
    .unwrap();
    assert_eq!((rec.end, rec.next_seq), (LogEnd::Empty, LogSeq(3)));
    // create refuses a file that holds bytes
    let err = Wal::create(
        root.vfs(),
        "fresh.wal",
        opts(DurabilityPolicy::Barrier, 0),
        mode,
    )
    .unwrap_err();
    assert!(
        matches!(err, WalError::Open(WalOpenError::NotEmpty { .. })),
        "{err:?}"
    );
}

/// Builds a log of three records and returns (bytes, offset where the last record starts).
fn three_record_log(root: &TempRoot, mode: Mode) -> (Vec<u8>, usize) {
    let wal = Wal::create(
        root.vfs(),
        "base.wal",
        opts(DurabilityPolicy::Skip, 50),
        mode,
    )
    .unwrap();
    for i in 0..3 {
        wal.commit_durable(1, &payload(0, i, 24 + i as usize * 10))
            .unwrap();
    }
    drop(wal);
    let bytes = root.read("base.wal");
    let last_len = encoded_len(24 + 20);
    (bytes.clone(), bytes.len() - last_len)
}

fn torn_tail_at_every_offset_recovers_the_complete_records(mode: Mode) {
    let root = TempRoot::new();
    let (full, last_start) = three_record_log(&root, mode);
    for cut in last_start + 1..full.len() {
        root.write("cut.wal", &full[..cut]);
        let (wal, rec) = Wal::open(
            root.vfs(),
            "cut.wal",
            opts(DurabilityPolicy::FullSync, 0),
            mode,
        )
        .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(rec.end.is_torn(), "cut at {cut}");
        assert_eq!((rec.records, rec.next_seq), (2, LogSeq(52)), "cut at {cut}");
        assert_eq!(rec.valid_end, last_start as u64);
        assert_eq!(
            root.read("cut.wal").len(),
            last_start,
            "torn bytes are cut before appending"
        );
        assert_eq!(
            wal.commit_durable(9, b"after the tear").unwrap(),
            LogSeq(52)
        );
        drop(wal);
        let (records, rec) = read_wal(root.vfs(), "cut.wal", mode).unwrap();
        assert_eq!(rec.end, LogEnd::Clean, "cut at {cut}");
        let seqs: Vec<u64> = records.iter().map(|r| r.seq.0).collect();
        assert_eq!(seqs, vec![50, 51, 52], "cut at {cut}");
        assert_eq!(&records[2].payload[..], b"after the tear");
        assert_eq!(&records[1].payload[..], &payload(0, 1, 34)[..]);
    }
}

fn middle_corruption_is_refused_with_its_offset(mode: Mode) {
    let root = TempRoot::new();
    let (full, _) = three_record_log(&root, mode);
    let first = HEADER_BYTES;
    let second = first + encoded_len(24);
    for (flip_at, record_start) in [
        (first + FRAME_HEADER_BYTES + 3, first),
        (second + 2, second),
    ] {
        let mut bad = full.clone();
        bad[flip_at] ^= 0x5a;
        root.write("bad.wal", &bad);
        let err = Wal::open(
            root.vfs(),
            "bad.wal",
            opts(DurabilityPolicy::FullSync, 0),
            mode,
        )
        .unwrap_err();
        match err {
            WalError::Open(WalOpenError::Corrupt {
                offset,
                valid_record_at,
            }) => {
                assert_eq!(offset, record_start as u64);
                assert!(valid_record_at > offset);
            }
            other => panic!("flip at {flip_at}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(root.read("bad.wal"), bad, "a refused log is not modified");
        let err = read_wal(root.vfs(), "bad.wal", mode).unwrap_err();
        assert!(
            matches!(err, WalError::Open(WalOpenError::Corrupt { .. })),
            "{err:?}"
        );
    }
}

fn header_of_another_version_is_refused(mode: Mode) {
    let root = TempRoot::new();
    let (mut bytes, _) = three_record_log(&root, mode);
    let newer = FileHeader {
        family: Family::Wal,
        version: 2,
        family_word: 50,
    }
    .encode();
    bytes[..HEADER_BYTES].copy_from_slice(&newer);
    root.write("newer.wal", &bytes);
    let err = Wal::open(
        root.vfs(),
        "newer.wal",
        opts(DurabilityPolicy::FullSync, 0),
        mode,
    )
    .unwrap_err();
    assert_eq!(
        err,
        WalError::Open(WalOpenError::BadHeader(HeaderError::UnsupportedVersion {
            found: 2,
            supported: 1
        }))
    );
    root.write("junk.wal", &[0xEE; 100]);
    let err = Wal::open(
        root.vfs(),
        "junk.wal",
        opts(DurabilityPolicy::FullSync, 0),
        mode,
    )
    .unwrap_err();
    assert_eq!(
        err,
        WalError::Open(WalOpenError::BadHeader(HeaderError::BadMagic))
    );
}

fn group_commit_16_threads_500_each(mode: Mode) {
    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 500;
    let root = TempRoot::new();
    let o = opts(DurabilityPolicy::FullSync, 0).with_retained_bytes_max(0);
    let wal = Arc::new(Wal::create(root.vfs(), "group.wal", o, mode).unwrap());
    let seqs: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let wal = wal.clone();
                s.spawn(move || {
                    (0..PER_THREAD)
                        .map(|i| wal.commit_durable(1, &payload(t, i, 128)).unwrap().0)
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = seqs.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..THREADS * PER_THREAD).collect::<Vec<_>>(),
        "distinct and contiguous"
    );
    for per_thread in &seqs {
        assert!(
            per_thread.windows(2).all(|w| w[0] < w[1]),
            "a thread's seqs increase"
        );
    }
    let stats = wal.stats().unwrap();
    assert_eq!(stats.records, THREADS * PER_THREAD);
    assert_eq!(stats.durable_end, LogSeq(THREADS * PER_THREAD));
    if mode == Mode::Native {
        // About 15.8 on this 2-core machine (FullSync); 4 leaves room for a noisy CI host.
        assert!(
            stats.records_per_group() >= 4.0,
            "native threads must share groups: {} records in {} groups",
            stats.records,
            stats.groups
        );
    }
    drop(wal);
    let (records, rec) = read_wal(root.vfs(), "group.wal", mode).unwrap();
    assert_eq!(rec.records, THREADS * PER_THREAD);
    let mut ids = HashSet::new();
    for r in &records {
        let (t, i) = payload_id(&r.payload);
        assert_eq!(
            &r.payload[..],
            &payload(t, i, 128)[..],
            "record {} intact",
            r.seq
        );
        assert!(ids.insert((t, i)), "({t}, {i}) recovered once");
    }
    assert_eq!(ids.len() as u64, THREADS * PER_THREAD);
}

fn failed_sync_poisons_the_writer(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, counters) = FailingVfs::new(root.vfs());
    let wal = Wal::create(
        vfs.clone(),
        "p.wal",
        opts(DurabilityPolicy::FullSync, 0),
        mode,
    )
    .unwrap();
    let syncs_after_create = counters.syncs.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(wal.commit_durable(1, b"durable").unwrap(), LogSeq(0));
    counters.fail_sync_at(syncs_after_create + 2, VfsError::Io("injected EIO".into()));
    let err = wal.commit_durable(1, b"doomed").unwrap_err();
    assert_eq!(
        err,
        WalError::Write(WalWriteError::Failed {
            cause: VfsError::Io("injected EIO".into())
        })
    );
    // Staged records stay visible; nothing after the failure is reported durable.
    let visible: Vec<u64> = wal
        .visible_records(LogSeq(0), 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(visible, vec![0, 1]);
    let stats = wal.stats().unwrap();
    assert_eq!(
        (stats.durable_end, stats.visible_end),
        (LogSeq(1), LogSeq(2))
    );
    // Every later call is refused, even though the Vfs would now sync fine.
    for err in [
        wal.commit(1, b"x").map(|_| ()).unwrap_err(),
        wal.commit_durable(1, b"x").map(|_| ()).unwrap_err(),
        wal.commit_many_durable(&[(1, b"x")])
            .map(|_| ())
            .unwrap_err(),
        wal.flush().unwrap_err(),
    ] {
        assert!(
            matches!(err, WalError::Write(WalWriteError::Poisoned { .. })),
            "{err:?}"
        );
    }
    assert_eq!(wal.stats().unwrap().durable_end, LogSeq(1));
    assert!(
        wal.retire_visible_through(LogSeq(1)).is_err(),
        "seq 1 never became durable"
    );
    assert_eq!(wal.retire_visible_through(LogSeq(0)).unwrap().records, 1);
}

fn failed_sync_reaches_every_waiter_and_nothing_later_is_durable(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, counters) = FailingVfs::new(root.vfs());
    let o = opts(DurabilityPolicy::FullSync, 0).with_retained_bytes_max(0);
    let wal = Arc::new(Wal::create(vfs.clone(), "many.wal", o, mode).unwrap());
    let base = counters.syncs.load(std::sync::atomic::Ordering::SeqCst);
    counters.fail_sync_at(base + 5, VfsError::Io("injected EIO".into()));
    let results: Vec<Vec<Result<LogSeq, WalError>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16u64)
            .map(|t| {
                let wal = wal.clone();
                s.spawn(move || {
                    (0..20)
                        .map(|i| wal.commit_durable(1, &payload(t, i, 64)))
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let durable_end = wal.stats().unwrap().durable_end;
    let (mut acked, mut failed) = (Vec::new(), 0);
    for per_thread in &results {
        let mut refused = false;
        for r in per_thread {
            match r {
                Ok(seq) => {
                    assert!(!refused, "no success after this thread saw the failure");
                    assert!(
                        *seq < durable_end,
                        "acknowledged {seq} beyond durable end {durable_end}"
                    );
                    acked.push(seq.0);
                }
                Err(WalError::Write(WalWriteError::Failed { cause })) => {
                    assert_eq!(cause, &VfsError::Io("injected EIO".into()));
                    failed += 1;
                    refused = true;
                }
                Err(WalError::Write(WalWriteError::Poisoned { .. })) => refused = true,
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert!(refused, "every thread ends refused");
    }
    assert!(failed >= 1);
    assert_eq!(
        acked.len() as u64,
        durable_end.0,
        "exactly the acknowledged records are durable"
    );
    drop(wal);
    let (records, _) = read_wal(root.vfs(), "many.wal", mode).unwrap();
    let on_disk: HashSet<u64> = records.iter().map(|r| r.seq.0).collect();
    assert!(
        acked.iter().all(|s| on_disk.contains(s)),
        "every acknowledged record is on disk"
    );
}

fn failed_write_poisons_and_reopen_recovers_the_durable_prefix(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, counters) = FailingVfs::new(root.vfs());
    let wal = Wal::create(
        vfs.clone(),
        "w.wal",
        opts(DurabilityPolicy::FullSync, 0),
        mode,
    )
    .unwrap();
    wal.commit_durable(1, b"one").unwrap();
    let writes = counters.writes.load(std::sync::atomic::Ordering::SeqCst);
    counters.fail_write_at(writes + 1, VfsError::Io("EIO".into()));
    let err = wal.commit_durable(1, b"two").unwrap_err();
    assert_eq!(
        err,
        WalError::Write(WalWriteError::Failed {
            cause: VfsError::Io("EIO".into())
        })
    );
    assert!(matches!(
        wal.commit_durable(1, b"three"),
        Err(WalError::Write(WalWriteError::Poisoned { .. }))
    ));
    drop(wal);
    let (records, rec) = read_wal(root.vfs(), "w.wal", mode).unwrap();
    assert_eq!((records.len(), rec.end), (1, LogEnd::Clean));
}

/// ENOSPC from a write, before the group's sync: the writer stalls instead of poisoning; the
/// stalled record is written by the next flush, once, and the same handle goes on.
fn no_room_for_a_write_stalls_and_the_same_writer_goes_on(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, counters) = FailingVfs::new(root.vfs());
    let wal = Wal::create(
        vfs.clone(),
        "w.wal",
        opts(DurabilityPolicy::FullSync, 0),
        mode,
    )
    .unwrap();
    wal.commit_durable(1, b"one").unwrap();
    let writes = counters.writes.load(std::sync::atomic::Ordering::SeqCst);
    counters.fail_write_at(writes + 1, VfsError::NoSpace);
    assert_eq!(
        wal.commit_durable(1, b"two").unwrap_err(),
        WalError::Write(WalWriteError::Stalled {
            cause: VfsError::NoSpace
        })
    );
    // The fault has passed: the next commit retries "two" first, then stages its own.
    assert_eq!(wal.commit_durable(1, b"three").unwrap(), LogSeq(2));
    wal.flush().unwrap();
    assert_eq!(wal.stats().unwrap().durable_end, LogSeq(3));
    drop(wal);
    let (records, rec) = read_wal(root.vfs(), "w.wal", mode).unwrap();
    let payloads: Vec<&[u8]> = records.iter().map(|r| &r.payload[..]).collect();
    assert_eq!(payloads, [&b"one"[..], b"two", b"three"]);
    assert_eq!(rec.end, LogEnd::Clean);
}

fn retiring_beyond_durable_end_fails_and_within_releases_bytes(mode: Mode) {
    let root = TempRoot::new();
    let wal = Wal::create(
        root.vfs(),
        "r.wal",
        opts(DurabilityPolicy::FullSync, 10),
        mode,
    )
    .unwrap();
    wal.commit_many_durable(&[(1, b"a"), (1, b"bb"), (1, b"ccc")])
        .unwrap();
    let before = wal.stats().unwrap();
    assert_eq!(
        (before.retained_records, before.durable_end),
        (3, LogSeq(13))
    );
    let err = wal.retire_visible_through(LogSeq(13)).unwrap_err();
    assert_eq!(
        err,
        WalError::Retire(WalRetireError::BeyondDurable {
            requested: LogSeq(13),
            durable_end: LogSeq(13)
        })
    );
    assert_eq!(
        wal.stats().unwrap().retained_bytes,
        before.retained_bytes,
        "nothing clamped"
    );
    let r = wal.retire_visible_through(LogSeq(11)).unwrap();
    assert_eq!(r.records, 2);
    assert_eq!(r.bytes, (encoded_len(1) + encoded_len(2)) as u64);
    assert_eq!(r.retained_bytes, before.retained_bytes - r.bytes);
    let left = wal.visible_records(LogSeq(0), 10).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(
        (left[0].seq, &left[0].payload[..]),
        (LogSeq(12), &b"ccc"[..])
    );
}

fn oversized_payload_and_group_are_typed_errors_that_consume_nothing(mode: Mode) {
    let root = TempRoot::new();
    let o = opts(DurabilityPolicy::FullSync, 0).with_group_bytes_max(Some(1024));
    let wal = Wal::create(root.vfs(), "big.wal", o, mode).unwrap();
    let err = wal.commit_durable(1, &vec![0u8; 2000]).unwrap_err();
    assert_eq!(
        err,
        WalError::Write(WalWriteError::GroupTooLarge {
            bytes: encoded_len(2000),
            bytes_max: 1024
        })
    );
    let _ = PAYLOAD_BYTES_MAX; // the format bound; the group bound above is hit first here
    assert_eq!(
        wal.commit_durable(1, b"ok").unwrap(),
        LogSeq(0),
        "no seq consumed"
    );
    drop(wal);
    assert_eq!(root.read("big.wal").len(), HEADER_BYTES + encoded_len(2));
}

fn confinement_refuses_escapes(mode: Mode) {
    let root = TempRoot::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x.wal"), root.path("filelink.wal")).unwrap();
    for path in [
        "../x.wal",
        "/etc/passwd",
        "link/x.wal",
        "filelink.wal",
        "a/../../x.wal",
        "nul\0.wal",
    ] {
        let err =
            Wal::open(root.vfs(), path, opts(DurabilityPolicy::FullSync, 0), mode).unwrap_err();
        assert!(
            matches!(
                err,
                WalError::Open(WalOpenError::Vfs(VfsError::InvalidPath(_)))
            ),
            "{path:?}: {err:?}"
        );
    }
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing created outside"
    );
    assert!(!root.dir.path().parent().unwrap().join("x.wal").exists());
}

/// Durable commits, batches, non-durable commits and flushes from 32 threads on one writer, under
/// a watchdog: a caller left asleep with nobody to wake it (a lost wake-up, a hand-off to no
/// one) hangs the run, and the watchdog turns that into a failure. Each durable return is
/// checked against `durable_end` as it happens, and the log is read back whole.
fn mixed_callers_are_all_answered_and_every_ack_is_durable(mode: Mode) {
    const THREADS: u64 = 32;
    const OPS: u64 = 150;
    const LAST_COMMIT_ROUNDS: u64 = 20;
    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(300);
    let root = TempRoot::new();
    let o = opts(DurabilityPolicy::Barrier, 0).with_retained_bytes_max(0);
    let wal = Arc::new(Wal::create(root.vfs(), "mixed.wal", o, mode).unwrap());
    let (done, finished) = std::sync::mpsc::channel();
    let worker = {
        let wal = wal.clone();
        std::thread::spawn(move || {
            let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let wal = wal.clone();
                        s.spawn(move || {
                            let mut seqs = Vec::new();
                            for i in 0..OPS {
                                match (t + i) % 5 {
                                    0 | 1 => {
                                        let seq =
                                            wal.commit_durable(1, &payload(t, i, 128)).unwrap();
                                        let durable_end = wal.stats().unwrap().durable_end;
                                        assert!(
                                            seq < durable_end,
                                            "{seq} acked, durable end {durable_end}"
                                        );
                                        seqs.push(seq.0);
                                    }
                                    2 => seqs.push(wal.commit(1, &payload(t, i, 128)).unwrap().0),
                                    3 => {
                                        let visible = wal.stats().unwrap().visible_end;
                                        wal.flush().unwrap();
                                        let durable_end = wal.stats().unwrap().durable_end;
                                        assert!(
                                            durable_end >= visible,
                                            "flush returned at {durable_end}, below {visible}"
                                        );
                                    }
                                    _ => {
                                        let records: Vec<Vec<u8>> = (0..3)
                                            .map(|k| payload(t, i * 3 + k + OPS, 64))
                                            .collect();
                                        let batch: Vec<(u16, &[u8])> =
                                            records.iter().map(|r| (2, &r[..])).collect();
                                        let range = wal.commit_many_durable(&batch).unwrap();
                                        assert_eq!(range.end.0 - range.start.0, 3);
                                        assert!(range.end <= wal.stats().unwrap().durable_end);
                                        seqs.extend(range.start.0..range.end.0);
                                    }
                                }
                            }
                            seqs
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            // Then rounds in which every thread makes one durable commit and exits: whoever
            // leads the first group cannot also lead the next (its caller returns and is gone),
            // so the records staged behind it are written only if leadership reaches one of
            // their callers.
            let mut last_commits = Vec::new();
            for round in 0..LAST_COMMIT_ROUNDS {
                let start = std::sync::Barrier::new(THREADS as usize);
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..THREADS)
                        .map(|t| {
                            let (wal, start) = (wal.clone(), &start);
                            s.spawn(move || {
                                start.wait();
                                let id = OPS * 4 + round;
                                wal.commit_durable(3, &payload(t, id, 128)).unwrap().0
                            })
                        })
                        .collect();
                    last_commits.extend(handles.into_iter().map(|h| h.join().unwrap()));
                });
            }
            let _ = done.send(());
            (per_thread, last_commits)
        })
    };
    if finished.recv_timeout(WATCHDOG).is_err() && !worker.is_finished() {
        panic!("callers still waiting after {WATCHDOG:?}: a waiter was stranded");
    }
    let (per_thread, last_commits) = worker.join().expect("a caller panicked");
    let mut all: Vec<u64> = per_thread.iter().flatten().copied().collect();
    all.extend(last_commits);
    all.sort_unstable();
    let expected = all.len() as u64;
    assert_eq!(
        all,
        (0..expected).collect::<Vec<_>>(),
        "distinct and contiguous"
    );
    wal.flush().unwrap();
    assert_eq!(wal.stats().unwrap().durable_end, LogSeq(expected));
    drop(wal);
    let (records, _) = read_wal(root.vfs(), "mixed.wal", mode).unwrap();
    assert_eq!(records.len() as u64, expected, "every record recovered");
    let ids: HashSet<(u64, u64)> = records.iter().map(|r| payload_id(&r.payload)).collect();
    assert_eq!(ids.len() as u64, expected, "each recovered once");
}

/// One writer per log, in the same process: create then open, open then open, and create
/// over a held log are refused with `Locked` naming the lock file, write nothing, and leave the
/// holder working; readers keep reading; once the holder is dropped the next writer opens. A
/// writer in the other mode is refused the same way (the lock is the host's, whichever side
/// asks).
fn a_second_writer_is_refused_until_the_first_is_dropped(mode: Mode) {
    let other = match mode {
        Mode::Native => Mode::Sandboxed,
        _ => Mode::Native,
    };
    let root = TempRoot::new();
    for (path, options, lock_path) in [
        ("f.wal", opts(DurabilityPolicy::FullSync, 0), "f.wal.lock"),
        (
            "seg",
            WalOptions::segmented(DurabilityPolicy::FullSync, 4096),
            "seg/LOCK",
        ),
    ] {
        let holder = Wal::create(root.vfs(), path, options, mode).unwrap();
        holder.commit_durable(1, b"held").unwrap();
        let on_disk = |root: &TempRoot| -> Vec<(String, Vec<u8>)> {
            let dir = root.path(path);
            if dir.is_dir() {
                let mut files: Vec<_> = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
                    .collect();
                files.sort();
                files
            } else {
                vec![(path.to_owned(), root.read(path))]
            }
        };
        let before = on_disk(&root);
        let locked = WalError::Open(WalOpenError::Locked {
            lock_path: lock_path.into(),
        });
        for second_mode in [mode, other] {
            assert_eq!(
                Wal::open(root.vfs(), path, options, second_mode).unwrap_err(),
                locked,
                "{path}: open while held, {second_mode:?}"
            );
            assert_eq!(
                Wal::create(root.vfs(), path, options, second_mode).unwrap_err(),
                locked,
                "{path}: create while held (refused before NotEmpty), {second_mode:?}"
            );
        }
        assert_eq!(on_disk(&root), before, "{path}: a refused writer wrote");
        // Readers take no lock.
        let (records, _) = read_wal(root.vfs(), path, mode).unwrap();
        assert_eq!(records.len(), 1);
        // The holder is untouched by the refusals.
        assert_eq!(holder.commit_durable(1, b"still").unwrap(), LogSeq(1));
        drop(holder);

        let (reopened, rec) = Wal::open(root.vfs(), path, options, mode).unwrap();
        assert_eq!(rec.next_seq, LogSeq(2));
        assert_eq!(
            Wal::open(root.vfs(), path, options, mode).unwrap_err(),
            locked,
            "{path}: open then open"
        );
        drop(reopened);
        Wal::open(root.vfs(), path, options, other).unwrap();
    }
}

/// One bad batch gets the same error in every mode, from the thread API and the task API alike:
/// the handle checks a batch before any engine sees it, in one order (the writer's size bounds,
/// then an attached archiver's backlog), and nothing of a refused batch is written.
#[test]
fn one_bad_batch_gets_the_same_error_in_all_six_ways_to_call() {
    let big = vec![0u8; PAYLOAD_BYTES_MAX + 1];
    let half = vec![0u8; 600];
    let small = [0u8; 200];
    /// What a case says it is, the batch, and the error every way to call must return.
    type Case<'a> = (&'static str, Vec<(u16, &'a [u8])>, WalError);
    let cases: [Case<'_>; 3] = [
        (
            "a payload past the format's bound, in a batch also past the group bound",
            vec![(1, &half[..]), (1, &big[..])],
            WalError::Write(WalWriteError::PayloadTooLarge {
                bytes: PAYLOAD_BYTES_MAX + 1,
                bytes_max: PAYLOAD_BYTES_MAX,
            }),
        ),
        (
            "a batch past the group bound, also past the archiver's backlog",
            vec![(1, &half[..]), (1, &half[..])],
            WalError::Write(WalWriteError::GroupTooLarge {
                bytes: 2 * encoded_len(600),
                bytes_max: 1024,
            }),
        ),
        (
            "a batch within the writer's bounds, past the archiver's backlog",
            vec![(1, &small[..])],
            WalError::ArchiveBacklog(stele_host::archive_gate::ArchiveBacklog {
                unarchived_bytes: 0,
                batch_bytes: encoded_len(200) as u64,
                unarchived_bytes_max: 100,
                stopped: false,
            }),
        ),
    ];
    let runtime = stele_tests::tokio_runtime(2);
    for mode in Mode::ALL {
        let root = TempRoot::new();
        let o = opts(DurabilityPolicy::FullSync, 0).with_group_bytes_max(Some(1024));
        let wal = Wal::create(root.vfs(), "same.wal", o, mode).unwrap();
        let gate = Arc::new(stele_host::archive_gate::ArchiveGate::new(
            LogSeq(0),
            0,
            100,
            1,
        ));
        wal.attach_archive_gate(gate).unwrap();
        let tasks = wal.to_async();
        for (what, batch, expected) in &cases {
            let got = [
                ("commit_many", wal.commit_many(batch)),
                ("commit_many_durable", wal.commit_many_durable(batch)),
                (
                    "async commit_many",
                    runtime.block_on(tasks.commit_many(batch)),
                ),
                (
                    "async commit_many_durable",
                    runtime.block_on(tasks.commit_many_durable(batch)),
                ),
            ];
            for (call, outcome) in got {
                assert_eq!(
                    outcome.as_ref().err(),
                    Some(expected),
                    "{}: {call}: {what}",
                    mode.name()
                );
            }
        }
        assert_eq!(
            wal.commit_durable(1, b"ok").unwrap(),
            LogSeq(0),
            "{}: no refused batch consumed a seq",
            mode.name()
        );
        drop((wal, tasks));
        assert_eq!(
            root.read("same.wal").len(),
            HEADER_BYTES + encoded_len(2),
            "{}: nothing of a refused batch is on disk",
            mode.name()
        );
    }
}

every_mode!(
    a_second_writer_is_refused_until_the_first_is_dropped,
    round_trip_across_reopens,
    missing_or_empty_file_is_a_new_log,
    torn_tail_at_every_offset_recovers_the_complete_records,
    middle_corruption_is_refused_with_its_offset,
    header_of_another_version_is_refused,
    group_commit_16_threads_500_each,
    failed_sync_poisons_the_writer,
    failed_sync_reaches_every_waiter_and_nothing_later_is_durable,
    failed_write_poisons_and_reopen_recovers_the_durable_prefix,
    no_room_for_a_write_stalls_and_the_same_writer_goes_on,
    retiring_beyond_durable_end_fails_and_within_releases_bytes,
    oversized_payload_and_group_are_typed_errors_that_consume_nothing,
    confinement_refuses_escapes,
    mixed_callers_are_all_answered_and_every_ack_is_durable,
);
