//! `stele inspect` and `stele verify` on real files of every family: the family comes from the
//! header, the counts and ranges from the engine's recovery, and `verify`'s exit status says
//! clean (0), torn tail (1) or corrupt (2), with the offset.

use std::sync::Arc;

use stele::journal::{JournalOp, encode_frames};
use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriter};
use stele_host::fs::RealFs;

mod common;

fn json(dir: &std::path::Path, command: &str, path: &str) -> (Option<i32>, serde_json::Value) {
    let run = common::stele_run(Some(dir), &[command, "--json", path]);
    let value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("{command} {path}: {e}: {}{}", run.stdout, run.stderr));
    (run.code, value)
}

/// One record of the WAL below, encoded.
const RECORD: usize = stele::wal::record::encoded_len(100);

/// A single-file WAL of 100 records of 100 bytes.
fn write_wal(vfs: &dyn Vfs, path: &str) {
    let wal = WalWriter::create(vfs, path, LogSeq(7), DurabilityPolicy::FullSync).unwrap();
    for i in 0..100u8 {
        wal.commit_durable(1, &[i; 100]).unwrap();
    }
}

#[test]
fn every_family_and_every_ending() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(root).unwrap());
    write_wal(&*vfs, "clean.wal");
    let clean = std::fs::read(root.join("clean.wal")).unwrap();
    let len = clean.len() as u64;

    let (code, v) = json(root, "inspect", "clean.wal");
    assert_eq!(code, Some(0));
    assert_eq!(v["kind"], "wal");
    assert_eq!(v["version"], 1);
    assert_eq!(v["header_word"]["first_seq"], 7);
    assert_eq!(v["count"], 100);
    assert_eq!(v["bytes"], len);
    assert_eq!(v["spans"][1]["start"], 32);
    assert_eq!(v["spans"][1]["end"], len);
    assert_eq!(v["status"], "clean");
    let (code, v) = json(root, "verify", "clean.wal");
    assert_eq!((code, v["status"].as_str()), (Some(0), Some("clean")));

    // Torn: the last record cut short.
    std::fs::write(root.join("torn.wal"), &clean[..clean.len() - 50]).unwrap();
    let (code, v) = json(root, "verify", "torn.wal");
    assert_eq!(code, Some(1));
    assert_eq!(v["status"], "torn-tail");
    assert_eq!(v["count"], 99);
    assert_eq!(v["valid_end"], len - RECORD as u64);

    // Corrupt: a flipped byte in record 10, with valid records after it.
    let mut bad = clean.clone();
    let at = 32 + 10 * RECORD + 20;
    bad[at] ^= 0xff;
    std::fs::write(root.join("bad.wal"), &bad).unwrap();
    let (code, v) = json(root, "verify", "bad.wal");
    assert_eq!(code, Some(2));
    assert_eq!(v["status"], "corrupt");
    assert_eq!(v["offset"], 32 + 10 * RECORD);
    let run = common::stele_run(Some(root), &["verify", "bad.wal"]);
    let said = format!("corrupt at byte {}", 32 + 10 * RECORD);
    assert!(run.stdout.contains(&said), "{}", run.stdout);
    // Inspect describes a corrupt file and still exits 0.
    assert_eq!(json(root, "inspect", "bad.wal").0, Some(0));

    // Another version.
    let mut future = stele::header::FileHeader {
        family: stele::header::Family::Wal,
        version: 9,
        family_word: 7,
    }
    .encode()
    .to_vec();
    future.extend_from_slice(&clean[32..]);
    std::fs::write(root.join("future.wal"), &future).unwrap();
    let (code, v) = json(root, "verify", "future.wal");
    assert_eq!((code, v["status"].as_str()), (Some(2), Some("corrupt")));
    assert!(v["detail"].as_str().unwrap().contains("version"), "{v}");

    // Not a Stele file at all; a missing file is one error line, exit 2.
    std::fs::write(
        root.join("notes.txt"),
        b"just some text, longer than a header is",
    )
    .unwrap();
    let (code, v) = json(root, "verify", "notes.txt");
    assert_eq!((code, v["offset"].as_u64()), (Some(2), Some(0)));
    let run = common::stele_run(Some(root), &["verify", "missing.wal"]);
    assert_eq!(run.code, Some(2));
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("missing.wal"), "{}", run.stderr);

    // A journal: two ops.
    let frames = encode_frames(&[
        JournalOp::Set {
            key: b"a".to_vec(),
            value: b"1".to_vec(),
        },
        JournalOp::Delete { key: b"b".to_vec() },
    ]);
    let mut journal = stele::header::FileHeader {
        family: stele::header::Family::Journal,
        version: stele::journal::JOURNAL_VERSION,
        family_word: 0,
    }
    .encode()
    .to_vec();
    journal.extend_from_slice(&frames);
    std::fs::write(root.join("session.j"), &journal).unwrap();
    let (code, v) = json(root, "inspect", "session.j");
    assert_eq!(code, Some(0));
    assert_eq!(
        (v["kind"].as_str(), v["count"].as_u64()),
        (Some("journal"), Some(2))
    );
    assert_eq!(v["unit"], "ops");

    // A segment directory, named like nothing in particular.
    let options = WalOptions::segmented(DurabilityPolicy::FullSync, 4096);
    let wal = WalWriter::create_segmented(vfs.clone(), "events", options).unwrap();
    for i in 0..200u8 {
        wal.commit_durable(1, &[i; 100]).unwrap();
    }
    drop(wal);
    let (code, v) = json(root, "verify", "events");
    assert_eq!(code, Some(0));
    assert_eq!(
        (v["kind"].as_str(), v["count"].as_u64()),
        (Some("wal-segments"), Some(200))
    );
    assert!(
        v["spans"].as_array().unwrap().len() > 5,
        "one span per segment"
    );
}

/// The progress bar is drawn only on a terminal: with stdout captured, a 64 MiB check prints
/// its one line and nothing else.
#[test]
fn no_progress_bar_when_stdout_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let options = WalOptions::single_file(DurabilityPolicy::Skip)
        .with_group_bytes_max(Some(16 << 20))
        .with_retained_bytes_max(0);
    let wal = WalWriter::create_with(&*vfs, "big.wal", options).unwrap();
    let payload = vec![3u8; 1 << 20];
    for _ in 0..70 {
        wal.commit(1, &payload).unwrap();
    }
    wal.flush().unwrap();
    drop(wal);
    let run = common::stele_run(Some(dir.path()), &["verify", "big.wal"]);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}
