//! The journal writer's behaviours (`../shared/reference/journal-writer-api.txt`), each tested
//! in every mode through `stele_host::Journal`: on the real filesystem where the behaviour is
//! about bytes on disk, on the fault-injecting one where it is about a failure.

use std::sync::Arc;

use stele::header::{Family, FileHeader, HeaderError};
use stele::journal::{self, JournalOp, SessionState, encode_frames, snapshot_ops};
use stele::recovery::LogEnd;
use stele::vfs::{Vfs, VfsError};
use stele_host::fs::{FaultFs, FaultRule, InjectedError, OpKind};
use stele_host::{Journal, JournalError, Mode, replay_journal};
use stele_tests::{TempRoot, every_mode, tokio_runtime};

fn set(k: &str, v: &str) -> JournalOp {
    JournalOp::Set {
        key: k.into(),
        value: v.into(),
    }
}

fn engine_error(err: JournalError) -> journal::JournalError {
    match err {
        JournalError::Journal(e) => e,
        other => panic!("expected an engine error, got {other}"),
    }
}

fn ops_of(vfs: Arc<dyn Vfs>, path: &str, mode: Mode) -> Vec<JournalOp> {
    tokio_runtime(2)
        .block_on(replay_journal(vfs, path, mode))
        .unwrap()
        .0
}

fn header_is_written_lazily(mode: Mode) {
    let root = TempRoot::new();
    tokio_runtime(2).block_on(async {
        let journal = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        drop(journal);
        assert_eq!(root.read("s.journal"), b"", "opened and unused: zero bytes");
        let mut journal = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        journal.append(&mut Vec::new()).await.unwrap();
        assert_eq!(
            root.read("s.journal"),
            b"",
            "an empty append writes nothing"
        );
        let mut buf = encode_frames(&[set("a", "1")]);
        journal.append(&mut buf).await.unwrap();
        let bytes = root.read("s.journal");
        assert_eq!(&bytes[..8], b"STELElog");
        assert_eq!(bytes.len(), 32 + buf.len());
        assert_eq!(journal.clean_end().await.unwrap(), bytes.len() as u64);
    });
    assert_eq!(ops_of(root.vfs(), "s.journal", mode), vec![set("a", "1")]);
}

fn other_format_version_is_refused_naming_both(mode: Mode) {
    let root = TempRoot::new();
    let header = FileHeader {
        family: Family::Journal,
        version: 7,
        family_word: 0,
    }
    .encode();
    root.write("s.journal", &header);
    let err = tokio_runtime(2)
        .block_on(Journal::open(root.vfs(), "s.journal", mode))
        .unwrap_err();
    let err = engine_error(err);
    assert_eq!(
        err,
        journal::JournalError::BadHeader(HeaderError::UnsupportedVersion {
            found: 7,
            supported: 1
        })
    );
    // The error names its failure, and its source the versions, each once.
    let message = format!("{:#}", anyhow::Error::new(err));
    assert_eq!(message.matches("format version 7").count(), 1, "{message}");
    assert!(
        message.contains("bad journal header: ") && message.contains('1'),
        "{message}"
    );
    assert_eq!(root.read("s.journal"), header, "the file is untouched");
}

fn buffer_comes_back_without_a_copy(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        let mut buf = Vec::with_capacity(4096);
        buf.extend(encode_frames(&[set("k", "v")]));
        let (ptr, cap, contents) = (buf.as_ptr(), buf.capacity(), buf.clone());
        journal.append(&mut buf).await.unwrap();
        assert_eq!((buf.as_ptr(), buf.capacity()), (ptr, cap), "after success");
        assert_eq!(buf, contents);

        fs.inject(FaultRule {
            op: OpKind::Write,
            nth: fs.count(OpKind::Write) + 1,
            error: InjectedError::Io,
        });
        let err = journal.append(&mut buf).await.unwrap_err();
        assert!(matches!(
            engine_error(err),
            journal::JournalError::AppendFailed { .. }
        ));
        assert_eq!((buf.as_ptr(), buf.capacity()), (ptr, cap), "after an error");
        assert_eq!(buf, contents);
    });
}

/// A write torn partway, then a failed sync: each time the file is cut back to its length
/// before the append, and the retried append lands right after the last whole op.
fn failed_write_or_sync_rolls_back(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let first = encode_frames(&[set("a", "1")]);
    let second = encode_frames(&[set("b", &"x".repeat(3000)), set("c", "3")]);
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        journal.append(&mut first.clone()).await.unwrap();
        let clean = fs.contents("s.journal").unwrap();

        fs.inject(FaultRule {
            op: OpKind::Write,
            nth: fs.count(OpKind::Write) + 1,
            error: InjectedError::ShortWrite { landed_bytes: 1500 },
        });
        let err = engine_error(journal.append(&mut second.clone()).await.unwrap_err());
        assert_eq!(
            err,
            journal::JournalError::AppendFailed {
                cause: VfsError::Io("injected EIO".into()),
                rolled_back: true
            }
        );
        assert_eq!(fs.contents("s.journal").unwrap(), clean, "torn write cut");

        fs.inject(FaultRule {
            op: OpKind::Sync,
            nth: fs.count(OpKind::Sync) + 1,
            error: InjectedError::Io,
        });
        let err = engine_error(journal.append(&mut second.clone()).await.unwrap_err());
        assert!(matches!(
            err,
            journal::JournalError::AppendFailed {
                rolled_back: true,
                ..
            }
        ));
        assert_eq!(
            fs.contents("s.journal").unwrap(),
            clean,
            "unsynced write cut"
        );

        journal.append(&mut second.clone()).await.unwrap();
        let after = fs.contents("s.journal").unwrap();
        assert_eq!(
            &after[..clean.len()],
            &clean[..],
            "the retry starts at the clean end"
        );
        // Two ops travel as one batch frame: each op's 8-byte frame header becomes a 4-byte
        // length, plus the batch's own frame header and tag.
        assert_eq!(after.len(), clean.len() + second.len() - 2 * 4 + 8 + 1);
    });
    assert_eq!(
        ops_of(vfs, "s.journal", mode),
        vec![set("a", "1"), set("b", &"x".repeat(3000)), set("c", "3")]
    );
}

/// When even the rollback's cut fails, the next append cuts before it writes.
fn failed_rollback_is_cut_by_the_next_append(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let long = encode_frames(&[set("long", &"y".repeat(2000))]);
    let short = encode_frames(&[set("s", "1")]);
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        journal.append(&mut short.clone()).await.unwrap();
        fs.inject(FaultRule {
            op: OpKind::Sync,
            nth: fs.count(OpKind::Sync) + 1,
            error: InjectedError::Io,
        });
        fs.inject(FaultRule {
            op: OpKind::SetLen,
            nth: fs.count(OpKind::SetLen) + 1,
            error: InjectedError::Io,
        });
        let err = engine_error(journal.append(&mut long.clone()).await.unwrap_err());
        assert!(matches!(
            err,
            journal::JournalError::AppendFailed {
                rolled_back: false,
                ..
            }
        ));
        journal.append(&mut short.clone()).await.unwrap();
    });
    let bytes = fs.contents("s.journal").unwrap();
    assert_eq!(
        bytes.len(),
        32 + 2 * short.len(),
        "the failed append's tail is gone"
    );
    assert_eq!(ops_of(vfs, "s.journal", mode), vec![set("s", "1"); 2]);
}

fn compact_failures_before_the_rename_change_nothing(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let ops = [set("a", "1"), set("a", "2"), set("b", "3")];
    let snapshot = encode_frames(&snapshot_ops(&SessionState::fold(&ops)));
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        journal.append(&mut encode_frames(&ops)).await.unwrap();
        let before = fs.contents("s.journal").unwrap();
        for (op, what) in [
            (OpKind::Write, "staging write"),
            (OpKind::Sync, "staged fsync"),
            (OpKind::Rename, "rename"),
        ] {
            fs.inject(FaultRule {
                op,
                nth: fs.count(op) + 1,
                error: InjectedError::Io,
            });
            let err = engine_error(journal.compact(snapshot.clone()).await.unwrap_err());
            assert!(
                matches!(err, journal::JournalError::CompactFailed { .. }),
                "{what}: {err}"
            );
            assert_eq!(fs.contents("s.journal").unwrap(), before, "{what}");
            assert!(!fs.exists("s.journal.compacting").unwrap(), "{what}");
        }
        // Still usable, on the old journal.
        journal
            .append(&mut encode_frames(&[set("c", "4")]))
            .await
            .unwrap();
        journal.compact(snapshot.clone()).await.unwrap();
        journal
            .append(&mut encode_frames(&[set("d", "5")]))
            .await
            .unwrap();
    });
    assert_eq!(
        ops_of(vfs, "s.journal", mode),
        vec![set("a", "2"), set("b", "3"), set("d", "5")]
    );
}

fn reopen_failure_after_rename_leaves_no_handle(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let snapshot = encode_frames(&[set("z", "9")]);
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        journal
            .append(&mut encode_frames(&[set("a", "1")]))
            .await
            .unwrap();
        // Compaction opens the staged file, then reopens the journal: fail the second.
        fs.inject(FaultRule {
            op: OpKind::Open,
            nth: fs.count(OpKind::Open) + 2,
            error: InjectedError::Io,
        });
        let err = engine_error(journal.compact(snapshot.clone()).await.unwrap_err());
        assert!(
            matches!(err, journal::JournalError::NoHandle { .. }),
            "{err}"
        );
        for _ in 0..2 {
            let err = journal.append(&mut snapshot.clone()).await.unwrap_err();
            assert!(
                matches!(engine_error(err), journal::JournalError::NoHandle { .. }),
                "every later call is refused"
            );
        }
        let err = journal.compact(snapshot.clone()).await.unwrap_err();
        assert!(matches!(
            engine_error(err),
            journal::JournalError::NoHandle { .. }
        ));
    });
    assert_eq!(
        ops_of(vfs, "s.journal", mode),
        vec![set("z", "9")],
        "the rename happened"
    );
}

fn failed_dir_sync_after_compaction_is_retried_before_the_next_append(mode: Mode) {
    let fs = FaultFs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(vfs.clone(), "s.journal", mode).await.unwrap();
        journal
            .append(&mut encode_frames(&[set("a", "1")]))
            .await
            .unwrap();
        fs.inject(FaultRule {
            op: OpKind::SyncDir,
            nth: fs.count(OpKind::SyncDir) + 1,
            error: InjectedError::Io,
        });
        let err = engine_error(
            journal
                .compact(encode_frames(&[set("b", "2")]))
                .await
                .unwrap_err(),
        );
        assert!(matches!(
            err,
            journal::JournalError::CompactNotDurable { .. }
        ));
        let dir_syncs = fs.count(OpKind::SyncDir);
        journal
            .append(&mut encode_frames(&[set("c", "3")]))
            .await
            .unwrap();
        assert_eq!(fs.count(OpKind::SyncDir), dir_syncs + 1, "retried first");
    });
    // Power loss now keeps everything acknowledged: the compacted journal and the append.
    let crashed = fs.crash(stele_host::fs::CrashPlan::KeepPrefix { ops: 0 });
    assert_eq!(
        ops_of(Arc::new(crashed), "s.journal", mode),
        vec![set("b", "2"), set("c", "3")]
    );
}

fn second_writer_is_refused_while_the_first_holds_the_journal(mode: Mode) {
    let root = TempRoot::new();
    tokio_runtime(2).block_on(async {
        let first = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        for other in Mode::ALL {
            let err = Journal::open(root.vfs(), "s.journal", other)
                .await
                .unwrap_err();
            assert_eq!(
                engine_error(err),
                journal::JournalError::Locked {
                    lock_path: "s.journal.lock".into()
                },
                "{} after {}",
                other.name(),
                mode.name()
            );
        }
        drop(first);
        Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
    });
}

fn malformed_bytes_are_refused_before_any_write(mode: Mode) {
    let root = TempRoot::new();
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        let good = encode_frames(&[set("a", "1")]);
        let mut cut = good[..good.len() - 2].to_vec();
        let err = engine_error(journal.append(&mut cut).await.unwrap_err());
        assert!(matches!(
            err,
            journal::JournalError::MalformedAppend { offset: 0, .. }
        ));
        let mut flipped = good.clone();
        flipped[10] ^= 0x40;
        assert!(journal.append(&mut flipped).await.is_err());
        assert!(journal.compact(b"not frames".to_vec()).await.is_err());
    });
    assert_eq!(root.read("s.journal"), b"");
}

/// A torn tail left by a crash: replay reports and cuts it (no writer holds the journal), and
/// open cuts it too, so appends continue at a whole op. Damage before a valid op is refused
/// with its offset and the file left alone.
fn torn_tail_is_cut_and_corruption_refused(mode: Mode) {
    let root = TempRoot::new();
    let ops = [set("a", "1"), set("b", "2")];
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        for op in &ops {
            journal
                .append(&mut encode_frames(std::slice::from_ref(op)))
                .await
                .unwrap();
        }
    });
    let whole = root.read("s.journal");
    let mut torn = whole.clone();
    torn.extend(&encode_frames(&[set("c", "3")])[..7]);
    root.write("s.journal", &torn);
    let (got, recovery) = tokio_runtime(2)
        .block_on(replay_journal(root.vfs(), "s.journal", mode))
        .unwrap();
    assert_eq!(got, ops);
    assert!(recovery.tail_truncated);
    assert_eq!(
        recovery.end,
        LogEnd::TornTail {
            valid_end: whole.len() as u64,
            torn_end: torn.len() as u64
        }
    );
    assert_eq!(root.read("s.journal"), whole);
    let (_, recovery) = tokio_runtime(2)
        .block_on(replay_journal(root.vfs(), "missing.journal", mode))
        .unwrap();
    assert_eq!(recovery.end, LogEnd::Empty, "a missing journal is empty");

    let mut corrupt = whole.clone();
    corrupt[32 + 9] ^= 1;
    root.write("s.journal", &corrupt);
    let err = tokio_runtime(2)
        .block_on(replay_journal(root.vfs(), "s.journal", mode))
        .unwrap_err();
    assert!(matches!(
        engine_error(err),
        journal::JournalError::Corrupt { offset: 32, .. }
    ));
    let err = tokio_runtime(2)
        .block_on(Journal::open(root.vfs(), "s.journal", mode))
        .unwrap_err();
    assert!(matches!(
        engine_error(err),
        journal::JournalError::Corrupt { offset: 32, .. }
    ));
    assert_eq!(root.read("s.journal"), corrupt, "left untouched");
}

/// A caller that stops waiting loses nothing: the append completes on the blocking pool, and
/// the next call collects the handle.
fn dropped_append_future_completes_and_the_writer_carries_on(mode: Mode) {
    let root = TempRoot::new();
    tokio_runtime(2).block_on(async {
        let mut journal = Journal::open(root.vfs(), "s.journal", mode).await.unwrap();
        let mut buf = encode_frames(&[set("a", "1")]);
        {
            let append = journal.append(&mut buf);
            let mut append = std::pin::pin!(append);
            // Poll once so the blocking task starts, then drop the future.
            let _ = futures_poll_once(append.as_mut()).await;
        }
        journal
            .append(&mut encode_frames(&[set("b", "2")]))
            .await
            .unwrap();
    });
    assert_eq!(
        ops_of(root.vfs(), "s.journal", mode),
        vec![set("a", "1"), set("b", "2")],
        "the dropped append ran to completion before the next one"
    );
}

async fn futures_poll_once<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

every_mode!(
    header_is_written_lazily,
    other_format_version_is_refused_naming_both,
    buffer_comes_back_without_a_copy,
    failed_write_or_sync_rolls_back,
    failed_rollback_is_cut_by_the_next_append,
    compact_failures_before_the_rename_change_nothing,
    reopen_failure_after_rename_leaves_no_handle,
    failed_dir_sync_after_compaction_is_retried_before_the_next_append,
    second_writer_is_refused_while_the_first_holds_the_journal,
    malformed_bytes_are_refused_before_any_write,
    torn_tail_is_cut_and_corruption_refused,
    dropped_append_future_completes_and_the_writer_carries_on,
);
