//! The archive to object storage: archive, restore byte-exact, fence, tail, and every fault
//! the issue lists, each checked against what was acknowledged.
//!
//! The round trips (restore byte-exact, restore to a seq, a flipped bit, a takeover, lost
//! replies, kills between puts, remote tail) run on every [`Backend`]: `object_store`'s
//! `InMemory`, a local directory (`file://`) and a real S3 server on loopback
//! ([`LoopbackS3`]: s3s-fs in this process, reached over TCP through object_store's S3
//! client, every request signed), each behind a [`FaultStore`]. Races between writers run on
//! `InMemory` only: it is atomic under one lock, while s3s-fs checks and then puts.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use stele::vfs::{MemVfs, OpenMode, Vfs};
use stele::wal::segment::{SEGMENT_BYTES_MIN, list_segments, segment_path};
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};
use stele_archive::fault_store::{Fault, FaultStore};
use stele_archive::loopback_s3::LoopbackS3;
use stele_archive::object_store::ObjectStore;
use stele_archive::object_store::ObjectStoreExt;
use stele_archive::object_store::memory::InMemory;
use stele_archive::{
    ArchiveError, ArchiveLocation, ArchiveOptions, ArchiveTail, Archiver, RestoreOptions,
};
use stele_host::fs::RealFs;
use stele_host::{Mode, Wal, WalError, read_wal};

const DIR: &str = "log";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn options() -> WalOptions {
    WalOptions::segmented(DurabilityPolicy::FullSync, SEGMENT_BYTES_MIN)
}

/// Record `seq`'s payload in every test: its length varies, its bytes name it.
fn payload_of(seq: u64) -> Vec<u8> {
    let len = 16 + (seq * 37 % 150) as usize;
    stele_tests::payload(7, seq, len)
}

fn op_of(seq: u64) -> u16 {
    (seq % 9) as u16
}

fn commit(wal: &Wal, seqs: std::ops::Range<u64>) {
    for seq in seqs {
        let got = wal.commit_durable(op_of(seq), &payload_of(seq)).unwrap();
        assert_eq!(got, LogSeq(seq));
    }
}

/// Every record of the log at `dir`, as (seq, op, payload).
fn records(vfs: &Arc<dyn Vfs>, dir: &str) -> Vec<(u64, u16, Vec<u8>)> {
    read_wal(vfs.clone(), dir, Mode::Native)
        .unwrap()
        .0
        .into_iter()
        .map(|r| (r.seq.0, r.op, r.payload.to_vec()))
        .collect()
}

/// What records `range` must read back as.
fn expected(range: std::ops::Range<u64>) -> Vec<(u64, u16, Vec<u8>)> {
    range.map(|s| (s, op_of(s), payload_of(s))).collect()
}

/// Where an archive is kept.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    LocalDir,
    S3,
}

/// An archive location on a [`Backend`], behind a [`FaultStore`], and what keeps its store
/// alive.
struct TestStore {
    faults: Arc<FaultStore>,
    location: ArchiveLocation,
    inner: Arc<dyn ObjectStore>,
    /// Dropped before the directory it serves.
    server: Option<LoopbackS3>,
    _dir: Option<tempfile::TempDir>,
}

const PREFIX: &str = "tenant-a/events";

fn open_store(backend: Backend) -> TestStore {
    let (inner, server, url, dir): (Arc<dyn ObjectStore>, _, _, _) = match backend {
        Backend::Memory => (
            Arc::new(InMemory::new()),
            None,
            "memory://test".to_owned(),
            None,
        ),
        Backend::LocalDir => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("file://{}", dir.path().display());
            let store = ArchiveLocation::open(&url).unwrap().store().clone();
            (store, None, url, Some(dir))
        }
        Backend::S3 => {
            let dir = tempfile::tempdir().unwrap();
            let server = LoopbackS3::start(dir.path()).unwrap();
            server.create_bucket("stele").unwrap();
            let store = server.store("stele").unwrap();
            (
                store,
                Some(server),
                format!("s3://stele/{PREFIX}"),
                Some(dir),
            )
        }
    };
    let faults = Arc::new(FaultStore::new(inner.clone()));
    let location = ArchiveLocation::new(faults.clone(), PREFIX, &url);
    TestStore {
        faults,
        location,
        inner,
        server,
        _dir: dir,
    }
}

impl TestStore {
    /// The same archive through a new client with no state of its own (a new machine's), and
    /// no faults.
    fn new_client(&self) -> ArchiveLocation {
        let store = match &self.server {
            Some(server) => server.store("stele").unwrap(),
            None => self.inner.clone(),
        };
        ArchiveLocation::new(store, PREFIX, self.location.url())
    }
}

/// One test per [`Backend`] for each function named, in a module per backend.
macro_rules! every_backend {
    ($($name:ident),* $(,)?) => {
        mod in_memory {
            $( #[test] fn $name() { super::$name(super::Backend::Memory) } )*
        }
        mod local_dir {
            $( #[test] fn $name() { super::$name(super::Backend::LocalDir) } )*
        }
        mod loopback_s3 {
            $( #[test] fn $name() { super::$name(super::Backend::S3) } )*
        }
    };
}

every_backend!(
    a_restore_after_whole_disk_loss_is_byte_exact_and_resumes,
    a_restore_to_a_seq_returns_exactly_that_prefix,
    a_flipped_bit_is_refused_by_key_and_offset,
    a_takeover_fences_the_old_writer_which_stops_and_refuses_at_its_backlog,
    a_failed_put_is_retried_and_a_lost_reply_counts_as_done,
    a_kill_between_the_segment_put_and_the_manifest_put_loses_nothing,
    a_kill_between_the_manifest_put_and_local_truncation_loses_nothing,
    a_remote_tail_follows_new_manifests,
    archiving_runs_beside_a_sandboxed_writer_on_its_own_thread,
    a_clean_close_ships_the_active_segment_so_every_acknowledged_record_is_archived,
    a_dropped_running_archiver_ships_the_tail_too,
);

fn memory_store() -> (Arc<FaultStore>, ArchiveLocation) {
    let store = open_store(Backend::Memory);
    (store.faults, store.location)
}

fn mem_vfs() -> Arc<dyn Vfs> {
    Arc::new(MemVfs::new())
}

fn no_truncation() -> ArchiveOptions {
    ArchiveOptions::default().with_truncate_local(false)
}

/// No sealing by age, so that only a full segment or a close ships; the whole log kept
/// locally; quick polls.
fn quiet_options() -> ArchiveOptions {
    no_truncation()
        .with_seal_age_max(None)
        .with_poll_interval(Duration::from_millis(5))
}

/// Restores the whole archive at `location` and checks that it holds exactly seqs `0..next`.
fn assert_archive_holds(rt: &tokio::runtime::Runtime, location: &ArchiveLocation, next: u64) {
    let (target, restored) = restore_all(rt, location, None);
    assert_eq!(restored.unwrap().next_seq, next);
    assert_eq!(records(&target, "restored"), expected(0..next));
}

fn attach(
    rt: &tokio::runtime::Runtime,
    location: &ArchiveLocation,
    vfs: &Arc<dyn Vfs>,
    wal: &Wal,
    options: ArchiveOptions,
) -> Result<Archiver, ArchiveError> {
    rt.block_on(Archiver::attach(
        location.clone(),
        vfs.clone(),
        DIR,
        wal.clone(),
        options,
    ))
}

/// A new log on a `MemVfs`, native, with an archiver attached to `location`.
fn archived_log(
    rt: &tokio::runtime::Runtime,
    location: &ArchiveLocation,
    options: ArchiveOptions,
) -> (Arc<dyn Vfs>, Wal, Archiver) {
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, self::options(), Mode::Native).unwrap();
    let archiver = attach(rt, location, &vfs, &wal, options).unwrap();
    (vfs, wal, archiver)
}

fn restore_all(
    rt: &tokio::runtime::Runtime,
    location: &ArchiveLocation,
    to_seq: Option<u64>,
) -> (
    Arc<dyn Vfs>,
    Result<stele_archive::RestoreReport, ArchiveError>,
) {
    let target = mem_vfs();
    let options = RestoreOptions::default().with_to_seq(to_seq.map(LogSeq));
    let report = rt.block_on(stele_archive::restore(
        location,
        target.clone(),
        "restored",
        options,
    ));
    (target, report)
}

/// The first seq of the local active segment: every record before it is sealed.
fn sealed_end(vfs: &Arc<dyn Vfs>) -> u64 {
    list_segments(&**vfs, DIR).unwrap().last().unwrap().0
}

fn a_restore_after_whole_disk_loss_is_byte_exact_and_resumes(backend: Backend) {
    let rt = runtime();
    let disk = tempfile::tempdir().unwrap();
    let store = open_store(backend);
    let location = store.location.clone();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(disk.path()).unwrap());
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    let mut archiver = attach(&rt, &location, &vfs, &wal, no_truncation()).unwrap();
    commit(&wal, 0..300);
    let report = rt.block_on(archiver.archive_round()).unwrap();
    let s = sealed_end(&vfs);
    assert!(s > 100, "several sealed segments: {s}");
    assert_eq!(report.archived_next, LogSeq(s));
    assert_eq!(archiver.gate().archived_next(), LogSeq(s));

    // Each archived object is its local segment's header and records, byte for byte.
    let mut originals = Vec::new();
    for first in list_segments(&*vfs, DIR).unwrap() {
        let path = segment_path(DIR, first);
        let file = vfs.open(&path, OpenMode::Existing).unwrap();
        let mut bytes = vec![0; file.len().unwrap() as usize];
        file.read_exact_at(0, &mut bytes).unwrap();
        originals.push((first, bytes));
    }
    for entry in &archiver.manifest().segments {
        let object = rt
            .block_on(location.store().get(&location.path(&entry.key)))
            .unwrap();
        let object = rt.block_on(object.bytes()).unwrap();
        let (_, original) = originals
            .iter()
            .find(|(first, _)| first.0 == entry.first_seq)
            .unwrap();
        assert_eq!(&object[..], &original[..object.len()]);
        assert!(original[object.len()..].iter().all(|&b| b == 0));
        assert_eq!(entry.crc32c, crc32c::crc32c(&object));
    }

    // The machine is lost.
    drop(archiver);
    drop(wal);
    drop(vfs);
    drop(disk);

    let new_disk = tempfile::tempdir().unwrap();
    let target: Arc<dyn Vfs> = Arc::new(RealFs::open_root(new_disk.path()).unwrap());
    let location = store.new_client();
    let report = rt
        .block_on(stele_archive::restore(
            &location,
            target.clone(),
            "restored",
            RestoreOptions::default(),
        ))
        .unwrap();
    assert_eq!(report.next_seq, s);
    assert_eq!(records(&target, "restored"), expected(0..s));
    // Every sealed segment comes back as it was on the lost disk, padding included.
    for (first, original) in originals.iter().filter(|(first, _)| first.0 < s) {
        let path = segment_path("restored", *first);
        let file = target.open(&path, OpenMode::Existing).unwrap();
        let mut bytes = vec![0; file.len().unwrap() as usize];
        file.read_exact_at(0, &mut bytes).unwrap();
        assert_eq!(&bytes, original, "{path}");
    }
    // A normal open recovers exactly the archived prefix and appends after it.
    let (wal, recovery) = Wal::open(target.clone(), "restored", options(), Mode::Native).unwrap();
    assert_eq!(recovery.next_seq, LogSeq(s));
    assert_eq!(wal.commit_durable(1, b"after").unwrap(), LogSeq(s));
}

#[test]
fn a_restore_that_returned_ok_survives_power_loss() {
    let rt = runtime();
    let (_, location) = memory_store();
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    commit(&wal, 0..150);
    wal.checkpoint(LogSeq(40)).unwrap();
    rt.block_on(archiver.archive_round()).unwrap();
    let s = sealed_end(&vfs);

    let disk = stele_host::fs::FaultFs::new();
    let target: Arc<dyn Vfs> = Arc::new(disk.clone());
    rt.block_on(stele_archive::restore(
        &location,
        target,
        "restored",
        RestoreOptions::default(),
    ))
    .unwrap();
    let plans = disk.crash_plans();
    assert!(!plans.is_empty());
    for plan in plans {
        let after: Arc<dyn Vfs> = Arc::new(disk.crash(plan));
        assert_eq!(records(&after, "restored"), expected(0..s), "{plan:?}");
        let (_, recovery) = Wal::open(after, "restored", options(), Mode::Native).unwrap();
        assert_eq!(recovery.next_seq, LogSeq(s), "{plan:?}");
    }
}

fn a_restore_to_a_seq_returns_exactly_that_prefix(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let location = store.location.clone();
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    commit(&wal, 0..250);
    rt.block_on(archiver.archive_round()).unwrap();
    let s = sealed_end(&vfs);
    let boundaries: Vec<u64> = archiver
        .manifest()
        .segments
        .iter()
        .map(|e| e.next_seq)
        .collect();
    for n in [
        0,
        1,
        boundaries[0] - 1,
        boundaries[0],
        boundaries[1] - 1,
        s / 2,
        s - 1,
    ] {
        let (target, report) = restore_all(&rt, &location, Some(n));
        assert_eq!(report.unwrap().next_seq, n + 1);
        assert_eq!(
            records(&target, "restored"),
            expected(0..n + 1),
            "to seq {n}"
        );
        let (wal, recovery) = Wal::open(target, "restored", options(), Mode::Native).unwrap();
        assert_eq!(recovery.next_seq, LogSeq(n + 1));
        drop(wal);
    }
    let (_, past) = restore_all(&rt, &location, Some(s));
    assert!(
        matches!(past, Err(ArchiveError::SeqOutOfRange { requested, next, .. }) if requested == s && next == s)
    );
}

fn a_flipped_bit_is_refused_by_key_and_offset(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let (faults, location) = (store.faults.clone(), store.location.clone());
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    commit(&wal, 0..120);
    rt.block_on(archiver.archive_round()).unwrap();
    let entry = archiver.manifest().segments[1].clone();
    let path = location.path(&entry.key);
    let good = rt
        .block_on(async { location.store().get(&path).await?.bytes().await })
        .unwrap();
    for flip_at in [5usize, 700, good.len() - 3] {
        let mut bad = good.to_vec();
        bad[flip_at] ^= 0x10;
        rt.block_on(faults.overwrite(&path, bad)).unwrap();
        let (_, restored) = restore_all(&rt, &location, None);
        let verified = rt.block_on(stele_archive::verify(&location, RestoreOptions::default()));
        for error in [restored.unwrap_err(), verified.unwrap_err()] {
            match error {
                ArchiveError::Corrupt { key, offset, .. } => {
                    assert_eq!(key, path.to_string());
                    assert!(
                        offset as usize <= flip_at,
                        "{offset} after the flip at {flip_at}"
                    );
                    assert!(
                        flip_at - (offset as usize) < 200,
                        "{offset} is the damaged record"
                    );
                }
                other => panic!("flip at {flip_at}: {other}"),
            }
        }
    }
    rt.block_on(faults.overwrite(&path, good.to_vec())).unwrap();
    let (target, restored) = restore_all(&rt, &location, None);
    restored.unwrap();
    assert_eq!(records(&target, "restored").len() as u64, sealed_end(&vfs));
}

fn a_takeover_fences_the_old_writer_which_stops_and_refuses_at_its_backlog(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let location = store.location.clone();
    let vfs_a = mem_vfs();
    let (wal_a, _) = Wal::open(vfs_a.clone(), DIR, options(), Mode::Native).unwrap();
    let small_backlog = no_truncation().with_unarchived_bytes_max(64 << 10);
    let mut a = attach(&rt, &location, &vfs_a, &wal_a, small_backlog).unwrap();
    commit(&wal_a, 0..150);
    rt.block_on(a.archive_round()).unwrap();
    let s = sealed_end(&vfs_a);

    // Machine B restores the archive and takes it over: epoch + 1.
    let (vfs_b, restored) = restore_all(&rt, &location, None);
    restored.unwrap();
    let (wal_b, recovery) = Wal::open(vfs_b.clone(), "restored", options(), Mode::Native).unwrap();
    assert_eq!(recovery.next_seq, LogSeq(s));
    let mut b = rt
        .block_on(Archiver::attach(
            location.clone(),
            vfs_b.clone(),
            "restored",
            wal_b.clone(),
            no_truncation(),
        ))
        .unwrap();
    assert_eq!(b.manifest().epoch, a.manifest().epoch + 1);

    // The zombie goes on committing; its next manifest put finds the number taken.
    commit(&wal_a, 150..300);
    let fenced = rt.block_on(a.archive_round()).unwrap_err();
    assert!(
        matches!(fenced, ArchiveError::Fenced { their_epoch, our_epoch, .. } if their_epoch == our_epoch + 1),
        "{fenced}"
    );
    assert!(matches!(
        rt.block_on(a.archive_round()),
        Err(ArchiveError::Stopped { .. })
    ));
    assert!(a.gate().is_stopped());
    // It stopped archiving, so its backlog only grows, and its commits are refused at the bound.
    let mut refused = None;
    for seq in 300..2000 {
        match wal_a.commit_durable(op_of(seq), &payload_of(seq)) {
            Ok(_) => {}
            Err(WalError::ArchiveBacklog(backlog)) => {
                refused = Some(backlog);
                break;
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert!(refused.expect("the bound is reached").stopped);

    // The new owner extends the archive; nothing of the zombie's is in it.
    for seq in s..s + 150 {
        wal_b.commit_durable(op_of(seq), &payload_of(seq)).unwrap();
    }
    rt.block_on(b.archive_round()).unwrap();
    let (target, restored) = restore_all(&rt, &location, None);
    let next = restored.unwrap().next_seq;
    assert!(next > s);
    assert_eq!(records(&target, "restored"), expected(0..next));
}

#[test]
fn racing_attaches_on_an_atomic_store_let_exactly_one_writer_win() {
    for round in 0..16 {
        let (_, location) = memory_store();
        let outcomes: Vec<Result<u64, ArchiveError>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let location = location.clone();
                    scope.spawn(move || {
                        let rt = runtime();
                        let vfs = mem_vfs();
                        let (wal, _) =
                            Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
                        attach(&rt, &location, &vfs, &wal, no_truncation())
                            .map(|archiver| archiver.manifest().manifest)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let won = outcomes.iter().filter(|o| o.is_ok()).count();
        let fenced = outcomes
            .iter()
            .filter(|o| matches!(o, Err(ArchiveError::Fenced { .. })))
            .count();
        // Both may win in turn (the second reads the first's manifest and takes the next
        // epoch); never may two publish one manifest number.
        assert_eq!(won + fenced, 2, "round {round}: {outcomes:?}");
        if won == 2 {
            let numbers: Vec<u64> = outcomes.iter().map(|o| *o.as_ref().unwrap()).collect();
            assert_ne!(numbers[0], numbers[1], "round {round}");
        }
    }
}

fn a_failed_put_is_retried_and_a_lost_reply_counts_as_done(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let (faults, location) = (store.faults.clone(), store.location.clone());
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());

    commit(&wal, 0..60);
    faults.inject(Fault::FailPut("/wal/".into()));
    let failed = rt.block_on(archiver.archive_round()).unwrap_err();
    assert!(matches!(failed, ArchiveError::Store { .. }), "{failed}");
    assert!(!failed.is_terminal());
    assert_eq!(archiver.gate().archived_next(), LogSeq(0));
    rt.block_on(archiver.archive_round()).unwrap();
    assert_eq!(archiver.gate().archived_next(), LogSeq(sealed_end(&vfs)));

    commit(&wal, 60..120);
    faults.inject(Fault::LosePutReply("/wal/".into()));
    let puts_before = faults.puts();
    rt.block_on(archiver.archive_round()).unwrap_err();
    // The lost one, and the uploads in flight beside it that the failed round abandoned: on a
    // store whose puts complete on their own (a thread, a server), those may have landed too.
    let sent = faults.puts() - puts_before;
    let before = archiver.status().stats.already_there;
    rt.block_on(archiver.archive_round()).unwrap();
    let found = archiver.status().stats.already_there - before;
    assert!((1..=sent).contains(&found), "{found} of {sent}");

    commit(&wal, 120..180);
    faults.inject(Fault::LosePutReply("/manifest/".into()));
    let lost = rt.block_on(archiver.archive_round()).unwrap_err();
    assert!(!lost.is_terminal(), "{lost}");
    // The retry puts the same manifest bytes: found identical, it is ours, not a takeover.
    rt.block_on(archiver.archive_round()).unwrap();
    assert!(archiver.status().stopped.is_none());
    assert_eq!(faults.pending(), 0);
    let s = sealed_end(&vfs);
    assert_eq!(archiver.gate().archived_next(), LogSeq(s));
    assert_archive_holds(&rt, &location, s);
}

fn a_kill_between_the_segment_put_and_the_manifest_put_loses_nothing(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let (faults, location) = (store.faults.clone(), store.location.clone());
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    commit(&wal, 0..100);
    faults.inject(Fault::FailPut("/manifest/".into()));
    rt.block_on(archiver.archive_round()).unwrap_err();
    let uploaded = faults.puts();
    assert!(uploaded >= 2, "the segments landed, the manifest did not");
    // Killed: the process is gone, the disk survives.
    drop(archiver);
    drop(wal);

    let (wal, recovery) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    assert_eq!(recovery.next_seq, LogSeq(100));
    let mut archiver = attach(&rt, &location, &vfs, &wal, no_truncation()).unwrap();
    assert_eq!(
        archiver.gate().archived_next(),
        LogSeq(0),
        "no manifest named them"
    );
    rt.block_on(archiver.archive_round()).unwrap();
    assert!(
        archiver.status().stats.already_there >= 1,
        "the orphans were found, identical"
    );
    let s = sealed_end(&vfs);
    assert_archive_holds(&rt, &location, s);
}

#[test]
fn a_quiet_log_is_sealed_at_seal_age_max_and_its_records_leave_the_disk() {
    let rt = runtime();
    let age = Duration::from_millis(40);
    let (_faults, location) = memory_store();
    let vfs = mem_vfs();
    // Sandboxed: the seal crosses the WIT boundary (every mode's seal is in fault_paths).
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Sandboxed).unwrap();
    let aged = no_truncation().with_seal_age_max(Some(age));
    let mut archiver = attach(&rt, &location, &vfs, &wal, aged).unwrap();
    commit(&wal, 0..3);
    // The first round to see the records starts the clock: nothing is sealed yet.
    let report = rt.block_on(archiver.archive_round()).unwrap();
    assert_eq!(report.archived_next, LogSeq(0));
    assert_eq!(list_segments(&*vfs, DIR).unwrap(), vec![LogSeq(0)]);
    std::thread::sleep(age + Duration::from_millis(10));
    let report = rt.block_on(archiver.archive_round()).unwrap();
    assert_eq!(
        report.archived_next,
        LogSeq(3),
        "sealed and shipped in one round"
    );
    assert_eq!(
        list_segments(&*vfs, DIR).unwrap(),
        vec![LogSeq(0), LogSeq(3)]
    );
    assert_eq!(archiver.status().stats.segments_sealed_by_age, 1);
    // Idle: the new active segment holds nothing, so it is never sealed.
    std::thread::sleep(age + Duration::from_millis(10));
    rt.block_on(archiver.archive_round()).unwrap();
    assert_eq!(
        list_segments(&*vfs, DIR).unwrap(),
        vec![LogSeq(0), LogSeq(3)]
    );
    // The writer goes on in the new segment.
    commit(&wal, 3..5);
    drop(archiver);
    drop(wal);
    // Machine lost: the sealed records come back.
    assert_archive_holds(&rt, &location, 3);

    // Without seal_age_max, a quiet log's records wait for their segment to fill.
    let (_faults, location) = memory_store();
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    let unaged = no_truncation().with_seal_age_max(None);
    let mut archiver = attach(&rt, &location, &vfs, &wal, unaged).unwrap();
    commit(&wal, 0..3);
    rt.block_on(archiver.archive_round()).unwrap();
    std::thread::sleep(age + Duration::from_millis(10));
    let report = rt.block_on(archiver.archive_round()).unwrap();
    assert_eq!(report.archived_next, LogSeq(0));
    assert_eq!(list_segments(&*vfs, DIR).unwrap(), vec![LogSeq(0)]);
}

fn a_kill_between_the_manifest_put_and_local_truncation_loses_nothing(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let (faults, location) = (store.faults.clone(), store.location.clone());
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    let truncating = ArchiveOptions::default().with_local_segments_kept(0);
    let mut archiver = attach(&rt, &location, &vfs, &wal, truncating.clone()).unwrap();
    commit(&wal, 0..200);
    wal.checkpoint(LogSeq(150)).unwrap();
    // The manifest lands and the process dies before it hears so, so before it truncates.
    faults.inject(Fault::LosePutReply("/manifest/".into()));
    rt.block_on(archiver.archive_round()).unwrap_err();
    let segments_before = list_segments(&*vfs, DIR).unwrap();
    drop(archiver);
    drop(wal);

    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    assert_eq!(
        list_segments(&*vfs, DIR).unwrap(),
        segments_before,
        "nothing was deleted"
    );
    let mut archiver = attach(&rt, &location, &vfs, &wal, truncating).unwrap();
    let s = archiver.gate().archived_next();
    assert_eq!(s, LogSeq(sealed_end(&vfs)), "the landed manifest counts");
    let report = rt.block_on(archiver.archive_round()).unwrap();
    let truncation = report.truncation.expect("a checkpoint, so a truncation");
    assert!(truncation.segments_removed > 0);
    // Only archived segments wholly under the checkpoint went.
    let first_kept = list_segments(&*vfs, DIR).unwrap()[0];
    assert!(first_kept.0 <= 151);
    let local = records(&vfs, DIR);
    assert_eq!(local.first().unwrap().0, first_kept.0);
    assert_eq!(local, expected(first_kept.0..200));
    assert_archive_holds(&rt, &location, s.0);
}

#[test]
fn truncation_never_deletes_an_unarchived_segment_nor_the_local_window() {
    let rt = runtime();
    let (faults, location) = memory_store();
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    let windowed = ArchiveOptions::default()
        .with_local_segments_kept(2)
        .with_truncate_local(false);
    let mut archiver = attach(&rt, &location, &vfs, &wal, windowed).unwrap();
    commit(&wal, 0..150);
    rt.block_on(archiver.archive_round()).unwrap();
    let archived = archiver.gate().archived_next();
    faults.set_down(true);
    commit(&wal, 150..300);
    rt.block_on(archiver.archive_round()).unwrap_err();
    wal.checkpoint(LogSeq(299)).unwrap();
    let live = list_segments(&*vfs, DIR).unwrap();
    let truncation = wal.truncate_through(LogSeq(299)).unwrap();
    let kept = list_segments(&*vfs, DIR).unwrap();
    assert_eq!(kept[0], truncation.first_kept_seq);
    // Every segment holding a record at or past the archive's end is still here...
    let first_unarchived = live.iter().rposition(|&f| f <= archived).unwrap();
    assert!(kept.contains(&live[first_unarchived]));
    // ...and so are the two newest sealed ones, whatever was archived.
    for window in &live[live.len() - 3..] {
        assert!(kept.contains(window));
    }
    assert_eq!(records(&vfs, DIR), expected(kept[0].0..300));
}

#[test]
fn the_store_down_refuses_commits_at_the_backlog_bound_and_loses_nothing() {
    for mode in [Mode::Native, Mode::Sandboxed] {
        let rt = runtime();
        let (faults, location) = memory_store();
        let vfs = mem_vfs();
        let (wal, _) = Wal::open(vfs.clone(), DIR, options(), mode).unwrap();
        let bounded = no_truncation().with_unarchived_bytes_max(16 << 10);
        let mut archiver = attach(&rt, &location, &vfs, &wal, bounded).unwrap();
        faults.set_down(true);
        let mut acknowledged = 0u64;
        let refusal = loop {
            match wal.commit_durable(op_of(acknowledged), &payload_of(acknowledged)) {
                Ok(seq) => {
                    assert_eq!(seq, LogSeq(acknowledged));
                    acknowledged += 1;
                }
                Err(WalError::ArchiveBacklog(backlog)) => break backlog,
                Err(other) => panic!("{mode:?}: {other}"),
            }
            if acknowledged.is_multiple_of(20) {
                // Fails once a sealed segment waits for the store; nothing moves either way.
                let _ = rt.block_on(archiver.archive_round());
                assert_eq!(archiver.gate().archived_next(), LogSeq(0));
            }
        };
        assert!(
            archiver.status().last_error.is_some(),
            "the store was tried"
        );
        assert!(!refusal.stopped);
        assert!(refusal.unarchived_bytes + refusal.batch_bytes > 16 << 10);
        // Refused means not written: the disk holds exactly what was acknowledged.
        assert_eq!(records(&vfs, DIR), expected(0..acknowledged), "{mode:?}");
        let stats = wal.stats().unwrap();
        assert_eq!(stats.visible_end, LogSeq(acknowledged));

        // The store comes back: the backlog drains, commits are accepted again.
        faults.set_down(false);
        rt.block_on(archiver.archive_round()).unwrap();
        assert!(archiver.gate().unarchived_bytes() < 16 << 10);
        commit(&wal, acknowledged..acknowledged + 40);
        rt.block_on(archiver.archive_round()).unwrap();
        let s = sealed_end(&vfs);
        assert!(s > acknowledged / 2);
        let (target, restored) = restore_all(&rt, &location, None);
        assert_eq!(restored.unwrap().next_seq, s, "{mode:?}");
        assert_eq!(records(&target, "restored"), expected(0..s), "{mode:?}");
    }
}

#[test]
fn a_different_log_on_the_same_prefix_is_refused() {
    let rt = runtime();
    let (_, location) = memory_store();
    let (_vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    commit(&wal, 0..100);
    rt.block_on(archiver.archive_round()).unwrap();

    let other = mem_vfs();
    let (other_wal, _) = Wal::open(other.clone(), DIR, options(), Mode::Native).unwrap();
    // Enough that its active segment starts past the archive's end: only the bytes differ.
    for seq in 0..300 {
        other_wal.commit_durable(1, &[seq as u8; 40]).unwrap();
    }
    let refused = attach(&rt, &location, &other, &other_wal, no_truncation()).unwrap_err();
    assert!(
        matches!(refused, ArchiveError::Diverged { .. }),
        "{refused}"
    );
    assert!(
        other_wal.archive_gate().is_none(),
        "a refused attach attaches no gate"
    );
}

fn a_remote_tail_follows_new_manifests(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let location = store.location.clone();
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    // The reader has no access to the writer's machine: a client of its own on the store.
    let mut tail = ArchiveTail::new(store.new_client(), Some(LogSeq(5)));
    assert!(rt.block_on(tail.poll()).unwrap().is_empty());

    let mut seen = Vec::new();
    let mut committed = 0;
    for _ in 0..3 {
        commit(&wal, committed..committed + 80);
        committed += 80;
        rt.block_on(archiver.archive_round()).unwrap();
        loop {
            let batch = rt.block_on(tail.poll()).unwrap();
            if batch.is_empty() {
                break;
            }
            seen.extend(batch.into_iter().map(|r| (r.seq.0, r.op, r.payload)));
        }
        let s = sealed_end(&vfs);
        assert_eq!(tail.next_seq(), LogSeq(s));
        assert_eq!(seen, expected(5..s));
    }
}

/// Attached on this thread's runtime, which then sits idle, the archiver runs on a thread and
/// runtime of its own: nothing it needs may stay with the first. (A cloud client's pooled
/// connection did, and each round's request hung for the client's 30 s timeout.)
fn archiving_runs_beside_a_sandboxed_writer_on_its_own_thread(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let location = store.location.clone();
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Sandboxed).unwrap();
    let fast = no_truncation().with_poll_interval(Duration::from_millis(5));
    let running = attach(&rt, &location, &vfs, &wal, fast)
        .unwrap()
        .spawn()
        .unwrap();
    commit(&wal, 0..200);
    let s = sealed_end(&vfs);
    // Well under a client timeout: here each round takes milliseconds.
    assert!(
        running.wait_archived(LogSeq(s), Duration::from_secs(10)),
        "{:?}",
        running.status()
    );
    let archiver = running.stop();
    assert_eq!(archiver.status().archived_next, LogSeq(s));
    assert_archive_holds(&rt, &location, s);
}

/// Records in the active segment are acknowledged but, until it seals, only local: a clean
/// close seals it and ships it, so that the archive then holds every acknowledged record, in
/// every mode (the sandboxed writer's flush and seal go through its instance). The log stays
/// usable after the close.
fn a_clean_close_ships_the_active_segment_so_every_acknowledged_record_is_archived(
    backend: Backend,
) {
    let rt = runtime();
    let store = open_store(backend);
    for (i, mode) in [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain]
        .into_iter()
        .enumerate()
    {
        let location = ArchiveLocation::new(
            store.faults.clone(),
            &format!("{PREFIX}/{}", mode.name()),
            store.location.url(),
        );
        let vfs = mem_vfs();
        let (wal, _) = Wal::open(vfs.clone(), DIR, options(), mode).unwrap();
        let running = attach(&rt, &location, &vfs, &wal, quiet_options())
            .unwrap()
            .spawn()
            .unwrap();
        let acknowledged = 150 + 7 * i as u64;
        commit(&wal, 0..acknowledged);
        let sealed = sealed_end(&vfs);
        assert!(
            sealed < acknowledged,
            "the test needs records in the active segment"
        );
        assert!(running.wait_archived(LogSeq(sealed), Duration::from_secs(10)));
        assert_eq!(
            running.status().archived_next,
            LogSeq(sealed),
            "the active segment shipped before the close"
        );

        let (archiver, shipped) = running.close();
        assert_eq!(shipped.unwrap(), LogSeq(acknowledged), "{}", mode.name());
        assert_eq!(archiver.status().archived_next, LogSeq(acknowledged));
        assert_archive_holds(&rt, &location, acknowledged);
        // The log goes on, in a new segment.
        commit(&wal, acknowledged..acknowledged + 3);
    }
}

/// Dropping a running archiver closes it: the tail is shipped as by `close`.
fn a_dropped_running_archiver_ships_the_tail_too(backend: Backend) {
    let rt = runtime();
    let store = open_store(backend);
    let location = store.location.clone();
    let vfs = mem_vfs();
    let (wal, _) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    let running = attach(&rt, &location, &vfs, &wal, quiet_options())
        .unwrap()
        .spawn()
        .unwrap();
    commit(&wal, 0..130);
    drop(running);
    assert_archive_holds(&rt, &store.new_client(), 130);
}

/// With the store down, a close gives up at its timeout with a typed error that says what is
/// only local, and the records stay on the disk; once the store is back, a second close ships
/// them.
#[test]
fn a_close_with_the_store_down_times_out_with_what_is_only_local() {
    let rt = runtime();
    let (faults, location) = memory_store();
    let (vfs, wal, mut archiver) = archived_log(
        &rt,
        &location,
        no_truncation()
            .with_seal_age_max(None)
            .with_close_timeout(Duration::from_millis(300)),
    );
    commit(&wal, 0..140);
    faults.set_down(true);
    let started = std::time::Instant::now();
    let failed = rt.block_on(archiver.close()).unwrap_err();
    let took = started.elapsed();
    match &failed {
        ArchiveError::CloseTimedOut {
            archived_next,
            end,
            last_error,
            ..
        } => {
            assert_eq!((*archived_next, *end), (0, 140), "{failed}");
            assert!(last_error.is_some(), "{failed}");
        }
        other => panic!("{other}"),
    }
    assert!(
        took < Duration::from_secs(5),
        "a 300 ms close took {took:?}"
    );
    assert!(!failed.is_terminal());
    assert_eq!(sealed_end(&vfs), 140, "the close sealed the active segment");
    assert_eq!(
        records(&vfs, DIR),
        expected(0..140),
        "nothing left the disk"
    );

    faults.set_down(false);
    assert_eq!(rt.block_on(archiver.close()).unwrap(), LogSeq(140));
    assert_archive_holds(&rt, &location, 140);
}

#[test]
fn file_generations_are_archived_whole_and_only_when_changed() {
    let rt = runtime();
    let (_, location) = memory_store();
    let (vfs, _wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    let write = |bytes: &[u8]| {
        let file = vfs.open("journal", OpenMode::Truncate).unwrap();
        file.write_at(0, bytes).unwrap();
    };
    write(b"generation zero");
    let first = rt.block_on(archiver.archive_file("journal")).unwrap();
    assert_eq!(first.generation, 0);
    let again = rt.block_on(archiver.archive_file("journal")).unwrap();
    assert_eq!(again, first, "unchanged: no new generation");
    write(b"generation one, after a compaction");
    let second = rt.block_on(archiver.archive_file("journal")).unwrap();
    assert_eq!(second.generation, 1);
    assert_eq!(
        &rt.block_on(stele_archive::fetch_file(&location, "journal"))
            .unwrap()[..],
        b"generation one, after a compaction"
    );
    let status = rt.block_on(stele_archive::status(&location)).unwrap();
    assert_eq!(status.files, vec![("journal".to_owned(), 1, 34)]);
}

#[test]
fn each_journal_compaction_ships_a_new_generation() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_, location) = memory_store();
    let (vfs, _wal, mut archiver) = archived_log(&rt, &location, no_truncation());
    let mut journal = rt
        .block_on(stele_host::Journal::open(
            vfs.clone(),
            "session",
            Mode::Native,
        ))
        .unwrap();
    journal.set_compaction_listener(archiver.compaction_listener());
    let ops = |n: u8| {
        stele::journal::encode_frames(&[stele::journal::JournalOp::Set {
            key: b"k".to_vec(),
            value: vec![n; 100],
        }])
    };
    let mut frames = ops(1);
    rt.block_on(journal.append(&mut frames)).unwrap();
    rt.block_on(archiver.archive_round()).unwrap();
    assert!(
        archiver.manifest().files.is_empty(),
        "appends alone ship nothing"
    );
    for generation in 0..3u8 {
        rt.block_on(journal.compact(ops(10 + generation))).unwrap();
        rt.block_on(archiver.archive_round()).unwrap();
        let entry = archiver.manifest().files[0].clone();
        assert_eq!(
            (entry.name.as_str(), entry.generation),
            ("session", u64::from(generation))
        );
        let archived = rt
            .block_on(stele_archive::fetch_file(&location, "session"))
            .unwrap();
        let local = vfs.open("session", OpenMode::Existing).unwrap();
        let mut bytes = vec![0; local.len().unwrap() as usize];
        local.read_exact_at(0, &mut bytes).unwrap();
        assert_eq!(&archived[..], &bytes[..]);
    }
}

/// One random run: commits, archive rounds, store faults, then a crash (the process dies; the
/// disk keeps what it synced, which under `FullSync` is every acknowledged record), a new
/// archiver, and a restore to a random archived seq.
fn crash_then_restore(seed: u64, records_total: u64, rounds: Vec<(u8, u64)>, to: f64) {
    let rt = runtime();
    let (faults, location) = memory_store();
    let (vfs, wal, mut archiver) = archived_log(&rt, &location, ArchiveOptions::default());
    let mut committed = 0;
    for (fault, commits) in rounds {
        let next = (committed + commits).min(records_total);
        commit(&wal, committed..next);
        committed = next;
        if committed % 3 == seed % 3 {
            wal.checkpoint(LogSeq(committed.saturating_sub(1))).ok();
        }
        match fault % 4 {
            0 => faults.inject(Fault::FailPut("/wal/".into())),
            1 => faults.inject(Fault::LosePutReply("/wal/".into())),
            2 => faults.inject(Fault::LosePutReply("/manifest/".into())),
            _ => {}
        }
        let _ = rt.block_on(archiver.archive_round());
    }
    // The crash.
    drop(archiver);
    drop(wal);
    let (wal, recovery) = Wal::open(vfs.clone(), DIR, options(), Mode::Native).unwrap();
    assert_eq!(recovery.next_seq, LogSeq(committed));
    // A fault queued for an upload that never came is dropped: the store is healthy again.
    faults.clear();
    let mut archiver = attach(&rt, &location, &vfs, &wal, ArchiveOptions::default()).unwrap();
    rt.block_on(archiver.archive_round()).unwrap();
    let archived = archiver.gate().archived_next().0;
    if archived == 0 {
        let (_, restored) = restore_all(&rt, &location, Some(0));
        assert!(matches!(restored, Err(ArchiveError::SeqOutOfRange { .. })));
        return;
    }
    let n = ((archived - 1) as f64 * to) as u64;
    let (target, restored) = restore_all(&rt, &location, Some(n));
    assert_eq!(restored.unwrap().next_seq, n + 1);
    assert_eq!(records(&target, "restored"), expected(0..n + 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_at_a_random_point_then_a_restore_to_a_random_seq_returns_that_prefix(
        seed in any::<u64>(),
        records_total in 40u64..400,
        rounds in proptest::collection::vec((any::<u8>(), 1u64..120), 1..8),
        to in 0.0f64..1.0,
    ) {
        crash_then_restore(seed, records_total, rounds, to);
    }
}
