//! The sandbox boundary: what a guest (or a caller passing bad input through it) can do to the
//! host, and the typed error each attempt gets. Paths that escape the root are refused in every
//! facet and every mode; limits on memory, open handles, payload size and busy time give typed
//! errors; a guest that trapped refuses every later call while other instances keep serving.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use stele::journal::JournalError as EngineJournalError;
use stele::push_log::PushLogError;
use stele::vfs::{OpenMode, SyncKind, Vfs, VfsError};
use stele::wal::record::PAYLOAD_BYTES_MAX;
use stele::wal::{DurabilityPolicy, LogSeq, WalOpenError, WalOptions, WalWriteError};
use stele_host::fs::RealFs;
use stele_host::{
    Journal, JournalError, Mode, PushLog, PushLogCallError, SandboxError, SandboxLimits, Wal,
    WalError, read_wal,
};
use stele_tests::{FailingVfs, TempRoot, every_mode, payload};

/// Every path a caller (or a guest, through `stele:log/vfs`) might use to reach outside the
/// root. `link` and `filelink` are symlinks the test makes from outside the sandbox.
fn escaping_paths() -> Vec<String> {
    vec![
        "../x".into(),
        "a/../../x".into(),
        "/etc/passwd".into(),
        "/tmp/x".into(),
        "link/x".into(),
        "link".into(),
        "filelink".into(),
        "nul\0x".into(),
        format!("{}/x", "d".repeat(256)),
        "a/".repeat(2100) + "x",
        "./x".into(),
        "a//x".into(),
    ]
}

/// A root with the two escaping symlinks in it, and the outside directory they lead to, which
/// holds one victim file. [`Outside::assert_untouched`] checks nothing outside changed.
struct Outside {
    root: TempRoot,
    dir: tempfile::TempDir,
}

const VICTIM: &[u8] = b"the host's own file";

impl Outside {
    fn new() -> Outside {
        let root = TempRoot::new();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("victim"), VICTIM).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.path("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("victim"), root.path("filelink")).unwrap();
        Outside { root, dir }
    }

    fn assert_untouched(&self, what: &str) {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["victim"], "{what}: entries outside the root");
        assert_eq!(
            std::fs::read(self.dir.path().join("victim")).unwrap(),
            VICTIM,
            "{what}: the victim file outside the root"
        );
        let parent = self.root.dir.path().parent().unwrap();
        for name in ["x", "x.wal"] {
            assert!(
                !parent.join(name).exists(),
                "{what}: {name} beside the root"
            );
        }
    }
}

fn is_invalid_path(err: &VfsError) -> bool {
    matches!(err, VfsError::InvalidPath(_))
}

/// Every operation of the real backend, with every escaping path in every argument position:
/// each is refused with `InvalidPath`, and nothing outside the root is created, read, renamed or
/// removed. (Sandboxed, the guest's `stele:log/vfs` calls reach exactly these methods.)
#[test]
fn real_fs_refuses_every_escape_in_every_operation() {
    let outside = Outside::new();
    let fs = RealFs::open_root(outside.root.dir.path()).unwrap();
    outside.root.write("inside", b"inside");
    for path in escaping_paths() {
        let path = path.as_str();
        for mode in [
            OpenMode::Existing,
            OpenMode::Create,
            OpenMode::CreateNew,
            OpenMode::Truncate,
        ] {
            let err = fs.open(path, mode).unwrap_err();
            assert!(is_invalid_path(&err), "open({path:?}, {mode:?}): {err:?}");
        }
        for (from, to) in [(path, "inside2"), ("inside", path)] {
            let err = fs.rename(from, to).unwrap_err();
            assert!(is_invalid_path(&err), "rename({from:?}, {to:?}): {err:?}");
        }
        let err = fs.remove(path).unwrap_err();
        assert!(is_invalid_path(&err), "remove({path:?}): {err:?}");
        let err = fs.lock_exclusive(path).unwrap_err();
        assert!(is_invalid_path(&err), "lock_exclusive({path:?}): {err:?}");
        let err = fs.exists(path).unwrap_err();
        assert!(is_invalid_path(&err), "exists({path:?}): {err:?}");
        let err = fs.create_dir(path).unwrap_err();
        assert!(is_invalid_path(&err), "create_dir({path:?}): {err:?}");
        let err = fs.list(path).unwrap_err();
        assert!(is_invalid_path(&err), "list({path:?}): {err:?}");
        let err = fs.sync_dir(path).unwrap_err();
        assert!(is_invalid_path(&err), "sync_dir({path:?}): {err:?}");
        outside.assert_untouched(path);
    }
    assert_eq!(outside.root.read("inside"), b"inside", "the inside file");
    // The same backend works inside the root, through a symlink that stays inside.
    std::os::unix::fs::symlink("inside", outside.root.path("innerlink")).unwrap();
    let file = fs.open("innerlink", OpenMode::Existing).unwrap();
    let mut buf = [0u8; 6];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), 6);
    assert_eq!(&buf, b"inside");
    file.sync(SyncKind::Data).unwrap();
}

fn wal_paths_are_confined(mode: Mode) {
    let outside = Outside::new();
    for path in escaping_paths() {
        for options in [
            WalOptions::single_file(DurabilityPolicy::FullSync),
            WalOptions::new(DurabilityPolicy::FullSync),
        ] {
            let err = Wal::open(outside.root.vfs(), &path, options, mode).unwrap_err();
            assert!(
                matches!(&err, WalError::Open(WalOpenError::Vfs(e)) if is_invalid_path(e)),
                "Wal::open({path:?}): {err:?}"
            );
            let err = Wal::create(outside.root.vfs(), &path, options, mode).unwrap_err();
            assert!(
                matches!(&err, WalError::Open(WalOpenError::Vfs(e)) if is_invalid_path(e)),
                "Wal::create({path:?}): {err:?}"
            );
        }
        let err = read_wal(outside.root.vfs(), &path, mode).unwrap_err();
        assert!(
            matches!(&err, WalError::Open(WalOpenError::Vfs(e)) if is_invalid_path(e)),
            "read_wal({path:?}): {err:?}"
        );
        outside.assert_untouched(&path);
    }
}

fn journal_paths_are_confined(mode: Mode) {
    let outside = Outside::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for path in escaping_paths() {
        let err = rt
            .block_on(Journal::open(outside.root.vfs(), &path, mode))
            .unwrap_err();
        assert!(
            matches!(&err, JournalError::Journal(EngineJournalError::Vfs(e)) if is_invalid_path(e)),
            "Journal::open({path:?}): {err:?}"
        );
        let err = stele_host::replay_journal_blocking(outside.root.vfs(), &path, mode).unwrap_err();
        assert!(
            matches!(&err, JournalError::Journal(EngineJournalError::Vfs(e)) if is_invalid_path(e)),
            "replay_journal({path:?}): {err:?}"
        );
        outside.assert_untouched(&path);
    }
}

fn numbers() -> (Arc<Schema>, RecordBatch) {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    (schema, batch)
}

fn push_log_paths_are_confined(mode: Mode) {
    let outside = Outside::new();
    let (schema, batch) = numbers();
    for path in escaping_paths() {
        let log = PushLog::new(outside.root.vfs(), &path, schema.clone(), mode).unwrap();
        for (what, err) in [
            ("append", log.append(&batch).unwrap_err()),
            ("compact", log.compact().unwrap_err()),
            ("scan", log.scan_all().unwrap_err()),
        ] {
            assert!(
                matches!(&err, PushLogCallError::PushLog(PushLogError::Vfs(e)) if is_invalid_path(e)),
                "{what}({path:?}): {err:?}"
            );
        }
        outside.assert_untouched(&path);
    }
}

/// The payload bound ([`PAYLOAD_BYTES_MAX`]) and the batch bound (the group's bytes) are typed
/// errors that write nothing and consume no seq. Sandboxed, the host refuses the batch before
/// copying it into the guest: the instance here has 32 MiB of memory, less than the payload.
fn oversized_payload_and_batch_are_refused_before_the_boundary(mode: Mode) {
    let root = TempRoot::new();
    let limits = SandboxLimits::default().with_memory_bytes_max(32 << 20);
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    let wal = Wal::create_with_limits(root.vfs(), "big.wal", options, mode, limits).unwrap();
    assert_eq!(wal.commit_durable(1, b"before").unwrap(), LogSeq(0));
    let len_before = root.read("big.wal").len();

    let huge = vec![7u8; PAYLOAD_BYTES_MAX + 1];
    let err = wal.commit_durable(1, &huge).unwrap_err();
    assert_eq!(
        err,
        WalError::Write(WalWriteError::PayloadTooLarge {
            bytes: PAYLOAD_BYTES_MAX + 1,
            bytes_max: PAYLOAD_BYTES_MAX
        })
    );
    let err = wal.commit(1, &huge).unwrap_err();
    assert!(
        matches!(err, WalError::Write(WalWriteError::PayloadTooLarge { .. })),
        "{err:?}"
    );
    // 20 records of 1 MiB: each fits, the batch is past the 16 MiB full-sync group bound.
    let mib = vec![1u8; 1 << 20];
    let batch: Vec<(u16, &[u8])> = (0..20).map(|_| (1u16, &mib[..])).collect();
    for err in [
        wal.commit_many_durable(&batch).unwrap_err(),
        wal.commit_many(&batch).unwrap_err(),
    ] {
        assert!(
            matches!(err, WalError::Write(WalWriteError::GroupTooLarge { bytes_max, .. })
                if bytes_max == 16 << 20),
            "{err:?}"
        );
    }
    assert_eq!(root.read("big.wal").len(), len_before, "nothing written");
    assert_eq!(
        wal.commit_durable(1, b"after").unwrap(),
        LogSeq(1),
        "no seq consumed"
    );
    drop(wal);
    let (records, _) = read_wal(root.vfs(), "big.wal", Mode::Native).unwrap();
    let payloads: Vec<&[u8]> = records.iter().map(|r| &r.payload[..]).collect();
    assert_eq!(payloads, [&b"before"[..], b"after"]);
}

/// A push past one frame's bound ([`stele::frame::BODY_BYTES_MAX`]) is a typed error that
/// writes nothing, in every mode; sandboxed, the host refuses it before copying it into an
/// instance whose memory (32 MiB here) could not even hold it. The schema is checked first: an
/// oversized batch of another schema gets `SchemaMismatch` in every mode.
fn oversized_push_is_refused_before_the_boundary(mode: Mode) {
    let root = TempRoot::new();
    let limits = SandboxLimits::default().with_memory_bytes_max(32 << 20);
    let (schema, small) = numbers();
    let log = PushLog::new_with_limits(root.vfs(), "p", schema.clone(), mode, limits).unwrap();
    log.append(&small).unwrap();
    let len_before = root.read("p").len();
    let rows = stele::frame::BODY_BYTES_MAX / 8 + 1024;
    let huge =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![7i64; rows]))]).unwrap();
    let err = log.append(&huge).unwrap_err();
    assert!(
        matches!(
            err,
            PushLogCallError::PushLog(PushLogError::PushTooLarge { bytes, bytes_max })
                if bytes > bytes_max && bytes_max == stele::frame::BODY_BYTES_MAX
        ),
        "{err:?}"
    );
    assert_eq!(root.read("p").len(), len_before, "nothing written");
    // Of another schema too: the schema is checked first, in every mode, so the same batch gets
    // the same error natively and sandboxed.
    let other = Arc::new(Schema::new(vec![Field::new("m", DataType::Int64, false)]));
    let huge_other = RecordBatch::try_new(other, vec![huge.column(0).clone()]).unwrap();
    let err = log.append(&huge_other).unwrap_err();
    assert!(
        matches!(
            err,
            PushLogCallError::PushLog(PushLogError::SchemaMismatch { .. })
        ),
        "{err:?}"
    );
    assert_eq!(root.read("p").len(), len_before, "nothing written");
    log.append(&small).unwrap();
    assert_eq!(log.scan_all().unwrap().0.len(), 2, "the log goes on");
}

/// A journal append past one batch frame is a typed error that writes nothing, in every mode;
/// sandboxed, the host refuses it before copying it into an instance with 32 MiB of memory.
fn oversized_journal_append_is_refused_before_the_boundary(mode: Mode) {
    let root = TempRoot::new();
    let limits = SandboxLimits::default().with_memory_bytes_max(32 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut journal = rt
        .block_on(Journal::open_with_limits(root.vfs(), "j", mode, limits))
        .unwrap();
    let set = |key: &str, len: usize| stele::journal::JournalOp::Set {
        key: key.into(),
        value: vec![1u8; len],
    };
    rt.block_on(journal.append(&mut stele::journal::encode_frames(&[set("small", 3)])))
        .unwrap();
    let len_before = root.read("j").len();
    // Two ops of 40 MiB: each fits a frame, together they do not fit one batch frame.
    let mut huge = stele::journal::encode_frames(&[set("a", 40 << 20), set("b", 40 << 20)]);
    let err = rt.block_on(journal.append(&mut huge)).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Journal(EngineJournalError::AppendTooLarge { bytes_max, .. })
                if bytes_max == stele::journal::APPEND_BYTES_MAX
        ),
        "{err:?}"
    );
    assert_eq!(root.read("j").len(), len_before, "nothing written");
    rt.block_on(journal.append(&mut stele::journal::encode_frames(&[set("after", 3)])))
        .unwrap();
    drop(journal);
    let (ops, _) = stele_host::replay_journal_blocking(root.vfs(), "j", mode).unwrap();
    assert_eq!(ops.len(), 2, "the journal goes on");
}

every_mode!(
    oversized_journal_append_is_refused_before_the_boundary,
    oversized_push_is_refused_before_the_boundary,
    wal_paths_are_confined,
    journal_paths_are_confined,
    push_log_paths_are_confined,
    oversized_payload_and_batch_are_refused_before_the_boundary,
);

/// Runs a body once per sandboxed mode (the limits below have no meaning natively).
macro_rules! sandboxed_modes {
    ($($name:ident),* $(,)?) => {
        mod sandboxed_only {
            $( #[test] fn $name() { super::$name(stele_host::Mode::Sandboxed) } )*
        }
        mod sandboxed_plain_only {
            $( #[test] fn $name() { super::$name(stele_host::Mode::SandboxedPlain) } )*
        }
    };
}

/// A guest whose memory would grow past its limit traps with a typed error. The instance then
/// refuses every later call with the same error, what it made durable before survives, and the
/// host keeps serving its other instances.
fn memory_limit_traps_this_instance_only(mode: Mode) {
    let root = TempRoot::new();
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    let limits = SandboxLimits::default().with_memory_bytes_max(16 << 20);
    let other = Wal::create(root.vfs(), "other.wal", options, mode).unwrap();
    let wal = Wal::create_with_limits(root.vfs(), "small.wal", options, mode, limits).unwrap();
    assert_eq!(wal.commit_durable(1, b"durable").unwrap(), LogSeq(0));

    // 12 MiB in four records: within the payload and group bounds, so the host lets it through;
    // the guest needs it twice over (the lowered list and the encoded group).
    let chunk = vec![5u8; 3 << 20];
    let batch: Vec<(u16, &[u8])> = (0..4).map(|_| (2u16, &chunk[..])).collect();
    let err = wal.commit_many_durable(&batch).unwrap_err();
    let WalError::Sandbox(SandboxError::MemoryLimit {
        limit_bytes,
        requested_bytes,
    }) = err.clone()
    else {
        panic!("expected a memory-limit error, got {err:?}");
    };
    assert_eq!(limit_bytes, 16 << 20);
    assert!(requested_bytes > limit_bytes, "{requested_bytes}");
    assert_eq!(wal.commit_durable(1, b"later").unwrap_err(), err, "sticky");
    assert_eq!(wal.stats().unwrap_err(), err, "sticky");

    assert_eq!(other.commit_durable(1, b"still served").unwrap(), LogSeq(0));
    drop((wal, other));
    let (records, _) = read_wal(root.vfs(), "small.wal", Mode::Native).unwrap();
    assert_eq!(
        records[0].payload,
        &b"durable"[..],
        "acknowledged record kept"
    );
    assert!(
        records.len() == 1 || records.len() == 5,
        "the trapped batch is all or nothing: {} records",
        records.len()
    );
}

/// Past `open_files_max`, opening gives `TooManyHandles`; below it, handles are given back
/// (a hundred pushes and twenty scans under a tight bound do not leak).
fn open_file_cap_gives_too_many_handles(mode: Mode) {
    let root = TempRoot::new();
    let none = SandboxLimits::default().with_open_files_max(0);
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    let err = Wal::create_with_limits(root.vfs(), "a.wal", options, mode, none).unwrap_err();
    assert_eq!(
        err,
        WalError::Open(WalOpenError::Vfs(VfsError::TooManyHandles))
    );
    assert!(!root.path("a.wal").exists(), "nothing created");

    let one = SandboxLimits::default().with_open_files_max(1);
    // A journal holds its file and its lock: two handles.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let err = rt
        .block_on(Journal::open_with_limits(root.vfs(), "j", mode, one))
        .unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Journal(EngineJournalError::Vfs(VfsError::TooManyHandles))
        ),
        "{err:?}"
    );

    // A push log holds its lock and its file (two handles); a scan opens a third, and a
    // compaction a fourth (the staged file). Under each bound, what fits works as often as it
    // is asked (so every handle is given back), and what does not is refused and writes nothing.
    let (schema, batch) = numbers();
    let limited = |open_files_max| SandboxLimits::default().with_open_files_max(open_files_max);
    let log = PushLog::new_with_limits(root.vfs(), "p", schema.clone(), mode, limited(2)).unwrap();
    for _ in 0..100 {
        log.append(&batch).unwrap();
    }
    let err = log.scan_all().unwrap_err();
    assert!(
        matches!(
            err,
            PushLogCallError::PushLog(PushLogError::Vfs(VfsError::TooManyHandles))
        ),
        "{err:?}"
    );
    drop(log);
    let log = PushLog::new_with_limits(root.vfs(), "p", schema.clone(), mode, limited(3)).unwrap();
    for _ in 0..20 {
        assert_eq!(log.scan_all().unwrap().0.len(), 100);
    }
    let err = log.compact().unwrap_err();
    assert!(
        matches!(
            err,
            PushLogCallError::PushLog(PushLogError::Vfs(VfsError::TooManyHandles))
        ),
        "{err:?}"
    );
    drop(log);
    let log = PushLog::new(root.vfs(), "p", schema, mode).unwrap();
    assert_eq!(log.scan_all().unwrap().0.len(), 100, "nothing lost");
    assert!(!root.path("p.compacting").exists() || root.read("p.compacting").is_empty());
}

/// A guest busy past its deadline without touching the host is interrupted with a typed
/// error. The guest's longest stretch without an import is encoding a batch (copy and
/// checksum); 15 MiB of it takes several milliseconds in the guest, against a deadline of one
/// epoch tick. The instance then refuses every later call; what it acknowledged survives.
fn busy_guest_is_interrupted(mode: Mode) {
    let root = TempRoot::new();
    let options = WalOptions::single_file(DurabilityPolicy::FullSync).with_retained_bytes_max(0);
    let deadline = stele_host::runtime::EPOCH_TICK;
    let limits = SandboxLimits::default().with_busy_deadline(Some(deadline));
    let wal = Wal::create_with_limits(root.vfs(), "busy.wal", options, mode, limits).unwrap();
    assert_eq!(wal.commit_durable(1, b"acked").unwrap(), LogSeq(0));
    let chunk = vec![9u8; 1 << 20];
    let batch: Vec<(u16, &[u8])> = (0..15).map(|_| (2u16, &chunk[..])).collect();
    let mut err = None;
    // Each batch is one uninterrupted stretch of guest work; on a machine fast enough to
    // finish one inside the tick, the next tries again.
    for _ in 0..20 {
        if let Err(e) = wal.commit_many_durable(&batch) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("a 15 MiB encode outlasts one epoch tick");
    assert_eq!(
        err,
        WalError::Sandbox(SandboxError::Interrupted { deadline }),
        "typed"
    );
    assert_eq!(wal.commit_durable(1, b"later").unwrap_err(), err, "sticky");
    drop(wal);
    let (records, _) = read_wal(root.vfs(), "busy.wal", Mode::Native).unwrap();
    assert_eq!(records[0].payload, &b"acked"[..]);
    assert_eq!((records.len() - 1) % 15, 0, "whole batches only");
}

/// Time the host spends in an import is not the guest's: a sync held for 20 deadlines, and a
/// steady stream of commits, never trip a busy deadline.
fn busy_deadline_ignores_host_time(mode: Mode) {
    let root = TempRoot::new();
    let (vfs, counters) = FailingVfs::new(root.vfs());
    let options = WalOptions::single_file(DurabilityPolicy::FullSync);
    let deadline = Duration::from_millis(10);
    let limits = SandboxLimits::default().with_busy_deadline(Some(deadline));
    let wal = Wal::create_with_limits(vfs, "slow.wal", options, mode, limits).unwrap();
    for i in 0..200 {
        assert_eq!(
            wal.commit_durable(1, &payload(0, i, 64)).unwrap(),
            LogSeq(i)
        );
    }
    counters.close_gate();
    let syncs_before = counters.syncs.load(Ordering::SeqCst);
    let committer = {
        let wal = wal.clone();
        std::thread::spawn(move || wal.commit_durable(1, b"held"))
    };
    let started = Instant::now();
    std::thread::sleep(deadline * 20);
    counters.open_gate();
    assert_eq!(committer.join().unwrap().unwrap(), LogSeq(200));
    assert!(started.elapsed() >= deadline * 20);
    assert!(counters.syncs.load(Ordering::SeqCst) > syncs_before);
    assert_eq!(wal.commit_durable(1, b"after").unwrap(), LogSeq(201));
}

sandboxed_modes!(
    memory_limit_traps_this_instance_only,
    open_file_cap_gives_too_many_handles,
    busy_guest_is_interrupted,
    busy_deadline_ignores_host_time,
);
