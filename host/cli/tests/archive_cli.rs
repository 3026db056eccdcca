//! `stele wal soak --archive`, then `stele archive status | verify | restore | tail` on the
//! archive it leaves, from other processes: what they report is checked against what soak
//! acknowledged and what `stele wal dump` reads back. Once on a local directory (`file://`),
//! once on a real S3 server on loopback (`s3://`, opened from the `AWS_*` environment).

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
fn soak_archives_and_the_archive_restores_verifies_and_tails_elsewhere_on_a_local_dir() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = format!("file://{}", store.display());
    soak_then_elsewhere(dir.path(), &url, &store, &[]);
}

#[cfg(feature = "s3")] // the tool's S3 client; the server is a dev-dependency
#[test]
fn soak_archives_and_the_archive_restores_verifies_and_tails_elsewhere_on_s3() {
    let dir = tempfile::tempdir().unwrap();
    let server_root = dir.path().join("s3");
    let server = stele_archive::loopback_s3::LoopbackS3::start(&server_root).unwrap();
    server.create_bucket("archives").unwrap();
    let env = server.environment();
    // Without the endpoint and keys, the same URL goes to AWS itself: the environment is used.
    soak_then_elsewhere(
        dir.path(),
        "s3://archives/tenant-a/log",
        &server_root.join("archives/tenant-a/log"),
        &env,
    );
    // Keys the server does not know are refused: requests are signed and checked.
    let wrong: Vec<_> = env
        .iter()
        .map(|(k, v)| match *k {
            "AWS_SECRET_ACCESS_KEY" => (*k, "not-the-secret".to_owned()),
            _ => (*k, v.clone()),
        })
        .collect();
    let refused = common::stele_run_with(
        None,
        &["archive", "status", "s3://archives/tenant-a/log"],
        &wrong,
    );
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
}

/// Soaks a log in `dir` with an archive at `url`, whose objects are files under `objects`;
/// then reads the archive from processes that have only `url` and `env`.
fn soak_then_elsewhere(
    dir: &std::path::Path,
    url: &str,
    objects: &std::path::Path,
    env: &[(&str, String)],
) {
    let run = |dir: Option<&std::path::Path>, args: &[&str]| common::stele_run_with(dir, args, env);
    let soak = run(
        Some(dir),
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
            url,
        ],
    );
    assert_eq!(soak.code, Some(0), "{}", soak.stderr);
    let acked = soak
        .stdout
        .lines()
        .filter(|l| l.starts_with("ack "))
        .count();
    assert_eq!(acked, 400);
    // A clean exit ships the active segment too: every acknowledged record is archived.
    let archived = archived_end(&soak.stdout);
    assert_eq!(archived, 400, "{}", soak.stderr);

    let status = run(None, &["archive", "status", "--json", url]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status = &common::json_lines(&status.stdout)[0];
    assert_eq!(status["next_seq"], archived);
    assert_eq!(status["epoch"], 1);

    let verify = run(None, &["archive", "verify", "--json", url]);
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
    let verify = &common::json_lines(&verify.stdout)[0];
    assert_eq!(verify["report"]["records"], archived);

    let restored = dir.join("elsewhere").join("restored");
    let restore = run(
        None,
        &[
            "archive",
            "restore",
            "--json",
            url,
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
    let dump = run(None, &["wal", "dump", "--json", restored.to_str().unwrap()]);
    assert_eq!(dump.code, Some(0), "{}", dump.stderr);
    let rows = common::json_lines(&dump.stdout);
    assert_eq!(rows.len(), 100 + 1, "100 records, then how the log ended");
    for (seq, row) in rows[..100].iter().enumerate() {
        assert_eq!(row["seq"], seq as u64);
    }
    // The records are the ones the soak wrote: compare with the soak's own log.
    let original = run(Some(dir), &["wal", "dump", "--json", "log"]);
    let original = common::json_lines(&original.stdout);
    assert_eq!(rows[..100], original[..100]);

    let tail = run(None, &["archive", "tail", "--json", "--from", "150", url]);
    assert_eq!(tail.code, Some(0), "{}", tail.stderr);
    let tailed = common::json_lines(&tail.stdout);
    assert_eq!(tailed.len() as u64, archived - 150);
    assert_eq!(tailed[..], original[150..archived as usize]);

    // A flipped bit in one object: verify exits 2 and names it.
    let object = std::fs::read_dir(objects.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&object, bytes).unwrap();
    let verify = run(None, &["archive", "verify", url]);
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
