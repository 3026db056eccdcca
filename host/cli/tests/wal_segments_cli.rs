//! `stele wal convert|segments|dump|soak` on real files: a single-file log converted into
//! segments keeps every record and seq, and the segment listing matches the engine's view.

use std::sync::Arc;

use stele::vfs::Vfs;
use stele::wal::segment::segment_file_name;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalReader, WalWriter};
use stele_host::fs::RealFs;

mod common;

fn stele(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    common::stele_in(Some(dir), args)
}

fn read_all(vfs: Arc<dyn Vfs>, path: &str) -> Vec<(u64, u16, Vec<u8>)> {
    let mut reader = WalReader::open(vfs, path).unwrap();
    let mut out = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        out.push((r.seq.0, r.op, r.payload.to_vec()));
    }
    out
}

#[test]
fn convert_then_list_segments_and_append() {
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let old =
        WalWriter::create(&*vfs, "old.wal", LogSeq(1000), DurabilityPolicy::FullSync).unwrap();
    for i in 0..400u64 {
        let payload = vec![(i % 251) as u8; 50 + (i as usize % 300)];
        old.commit_durable((i % 7) as u16, &payload).unwrap();
    }
    drop(old);
    let before = std::fs::read(dir.path().join("old.wal")).unwrap();

    let (ok, out) = stele(
        dir.path(),
        &[
            "wal",
            "convert",
            "old.wal",
            "segs",
            "--segment-bytes",
            "16384",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("converted 400 records"), "{out}");
    assert_eq!(
        std::fs::read(dir.path().join("old.wal")).unwrap(),
        before,
        "source untouched"
    );
    assert_eq!(
        read_all(vfs.clone(), "segs"),
        read_all(vfs.clone(), "old.wal")
    );

    let (ok, table) = stele(dir.path(), &["wal", "segments", "segs"]);
    assert!(ok, "{table}");
    let (_, found) = WalWriter::open_segmented(
        vfs.clone(),
        "segs",
        WalOptions::segmented(DurabilityPolicy::FullSync, 16384),
    )
    .unwrap();
    assert!(found.segments.len() >= 4, "{table}");
    for s in &found.segments {
        let line = format!(
            "| {} | {}..={} | {} | {} | 16384 | clean | no |",
            segment_file_name(s.first_seq),
            s.first_seq,
            s.next_seq.0 - 1,
            s.records,
            s.valid_end
        );
        assert!(table.contains(&line), "missing {line} in\n{table}");
    }
    assert!(table.contains("next seq: 1400"), "{table}");
    let (ok, json) = stele(dir.path(), &["wal", "segments", "segs", "--json"]);
    assert!(ok && json.contains("\"next_seq\":1400"), "{json}");

    // The converted log takes appends, through the CLI too.
    let (ok, out) = stele(
        dir.path(),
        &[
            "wal",
            "soak",
            "segs",
            "--segment-bytes",
            "16384",
            "--count",
            "10",
        ],
    );
    assert!(ok, "{out}");
    let after = read_all(vfs.clone(), "segs");
    assert_eq!(after.len(), 410);
    assert_eq!(after.last().unwrap().0, 1409);

    // Wrong kinds of input: one clear line and a non-zero exit.
    let (ok, out) = stele(dir.path(), &["wal", "segments", "old.wal"]);
    assert!(!ok && out.contains("stele wal convert"), "{out}");
    let (ok, out) = stele(dir.path(), &["wal", "convert", "old.wal", "segs"]);
    assert!(!ok && out.starts_with("stele: segs"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

/// `stele wal soak --disk-max` stops at the quota with the typed refusal, every acknowledged
/// seq is in the log, the files hold no more than the quota, and `stele inspect --disk-max`
/// reports the bytes against it.
#[test]
fn soak_under_a_disk_quota_stops_typed_and_inspect_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &[
            "wal",
            "soak",
            "log",
            "--segment-bytes",
            "65536",
            "--disk-max",
            "200K",
            "--threads",
            "2",
            "--count",
            "100000",
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("disk quota exceeded: 65536 more bytes requested"),
        "{}",
        run.stderr
    );
    let acked: Vec<u64> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ack ")?.parse().ok())
        .collect();
    assert!(acked.len() > 1000, "{} acknowledged", acked.len());
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let seqs: std::collections::HashSet<u64> = read_all(vfs, "log")
        .into_iter()
        .map(|(seq, _, _)| seq)
        .collect();
    assert!(
        acked.iter().all(|seq| seqs.contains(seq)),
        "an acknowledged seq is missing"
    );
    let on_disk: u64 = std::fs::read_dir(dir.path().join("log"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(on_disk <= 200 << 10, "{on_disk} bytes on disk");

    let (ok, out) = stele(dir.path(), &["inspect", "log", "--disk-max", "200K"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("quota        {on_disk} of 204800 bytes")),
        "{out}"
    );
}
