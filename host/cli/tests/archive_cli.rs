//! `stele wal soak --archive`, then `stele archive status | verify | restore | tail` on the
//! archive it leaves, from other processes: what they report is checked against what soak
//! acknowledged and what `stele wal dump` reads back.

mod common;

/// The last `archived <seq>` line of a soak run.
fn archived_end(stdout: &str) -> u64 {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("archived "))
        .next_back()
        .expect("soak says how far it archived")
        .parse()
        .unwrap()
}

#[test]
fn soak_archives_and_the_archive_restores_verifies_and_tails_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = format!("file://{}", store.display());
    let soak = common::stele_run(
        Some(dir.path()),
        &[
            "wal",
            "soak",
            "log",
            "--segment-bytes",
            "4096",
            "--threads",
            "2",
            "--count",
            "400",
            "--archive",
            &url,
        ],
    );
    assert_eq!(soak.code, Some(0), "{}", soak.stderr);
    let acked = soak
        .stdout
        .lines()
        .filter(|l| l.starts_with("ack "))
        .count();
    assert_eq!(acked, 400);
    let archived = archived_end(&soak.stdout);
    assert!(archived > 200 && archived <= 400, "{archived}");

    let status = common::stele_run(None, &["archive", "status", "--json", &url]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status = &common::json_lines(&status.stdout)[0];
    assert_eq!(status["next_seq"], archived);
    assert_eq!(status["epoch"], 1);

    let verify = common::stele_run(None, &["archive", "verify", "--json", &url]);
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
    let verify = &common::json_lines(&verify.stdout)[0];
    assert_eq!(verify["report"]["records"], archived);

    let restored = dir.path().join("elsewhere").join("restored");
    let restore = common::stele_run(
        None,
        &[
            "archive",
            "restore",
            "--json",
            &url,
            restored.to_str().unwrap(),
            "--to-seq",
            "99",
        ],
    );
    assert_eq!(restore.code, Some(0), "{}", restore.stderr);
    assert_eq!(
        common::json_lines(&restore.stdout)[0]["report"]["next_seq"],
        100
    );
    let dump = common::stele_run(None, &["wal", "dump", "--json", restored.to_str().unwrap()]);
    assert_eq!(dump.code, Some(0), "{}", dump.stderr);
    let rows = common::json_lines(&dump.stdout);
    assert_eq!(rows.len(), 100 + 1, "100 records, then how the log ended");
    for (seq, row) in rows[..100].iter().enumerate() {
        assert_eq!(row["seq"], seq as u64);
    }
    // The records are the ones the soak wrote: compare with the soak's own log.
    let original = common::stele_run(Some(dir.path()), &["wal", "dump", "--json", "log"]);
    let original = common::json_lines(&original.stdout);
    assert_eq!(rows[..100], original[..100]);

    let tail = common::stele_run(None, &["archive", "tail", "--json", "--from", "150", &url]);
    assert_eq!(tail.code, Some(0), "{}", tail.stderr);
    let tailed = common::json_lines(&tail.stdout);
    assert_eq!(tailed.len() as u64, archived - 150);
    assert_eq!(tailed[..], original[150..archived as usize]);

    // A flipped bit in one object: verify exits 2 and names it.
    let object = std::fs::read_dir(store.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&object, bytes).unwrap();
    let verify = common::stele_run(None, &["archive", "verify", &url]);
    assert_eq!(verify.code, Some(2), "{}", verify.stdout);
    let name = object.file_name().unwrap().to_str().unwrap();
    assert!(
        verify.stdout.contains(name) && verify.stdout.contains("corrupt at byte"),
        "{}",
        verify.stdout
    );
}

#[test]
fn a_bad_url_is_one_clear_line() {
    let run = common::stele_run(None, &["archive", "status", "ftp://somewhere/x"]);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("unknown scheme"), "{}", run.stderr);
    let run = common::stele_run(None, &["archive", "status", "memory://"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("no archive at memory://"),
        "{}",
        run.stderr
    );
}
