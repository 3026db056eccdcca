//! `stele wal append`, `stele wal tail [-f]` and `stele wal dump --json` on real directories:
//! appended records come back with their seqs, `tail -f` prints what another process appends.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

#[test]
fn append_from_arguments_and_stdin_then_dump_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "append", "log", "hello", "world"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("seqs 0..=1 (durable)"),
        "{}",
        run.stdout
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_stele"))
        .current_dir(dir.path())
        .args(["wal", "append", "log", "--op", "7"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    // 3,000 lines in batches of at most 1,024: three durable groups.
    assert_eq!(said.lines().count(), 3, "{said}");
    assert!(said.contains("seqs 2..=1025"), "{said}");
    assert!(said.ends_with("seqs 2050..=3001 (durable)\n"), "{said}");

    let run = common::stele_run(Some(dir.path()), &["wal", "dump", "--json", "log"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let rows = common::json_lines(&run.stdout);
    assert_eq!(rows.len(), 3002 + 1);
    assert_eq!(
        (rows[0]["seq"].as_u64(), rows[0]["text"].as_str()),
        (Some(0), Some("hello"))
    );
    assert_eq!(rows[2]["op"], 7);
    assert_eq!(rows[3001]["text"], "line 2999");
    assert_eq!(rows[3002]["next_seq"], 3002);
    assert_eq!(rows[3002]["end"], "Clean");

    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "tail", "-n", "2", "--json", "log"],
    );
    let rows = common::json_lines(&run.stdout);
    let seqs: Vec<u64> = rows.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [3000, 3001]);
}

#[test]
fn tail_follow_prints_what_another_process_appends() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "append", "--single-file", "log.wal", "first"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let mut tail = Command::new(env!("CARGO_BIN_EXE_stele"))
        .current_dir(dir.path())
        .args(["wal", "tail", "-f", "log.wal"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Lines arrive on a channel, so that a tail that never prints fails the test instead of
    // hanging it.
    let (sender, lines) = std::sync::mpsc::channel();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(20));
    let first = next();
    for word in ["second", "third"] {
        let run = common::stele_run(Some(dir.path()), &["wal", "append", "log.wal", word]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let seen = [next(), next()];
    tail.kill().unwrap();
    let _ = tail.wait();
    assert!(first.unwrap().contains("\"first\""));
    let seen = seen.map(|line| line.expect("tail -f printed the appended record within 20 s"));
    assert!(
        seen[0].starts_with("seq=1 ") && seen[0].contains("\"second\""),
        "{seen:?}"
    );
    assert!(
        seen[1].starts_with("seq=2 ") && seen[1].contains("\"third\""),
        "{seen:?}"
    );
}

/// The journal's and the push log's read commands speak JSON too.
#[test]
fn journal_dump_and_push_log_scan_take_json() {
    let dir = tempfile::tempdir().unwrap();
    let root = Some(dir.path());
    for args in [
        &["journal", "set", "j", "colour", "blue"][..],
        &["journal", "set", "j", "size", "9"],
        &["journal", "delete", "j", "size"],
    ] {
        let run = common::stele_run(root, args);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let run = common::stele_run(root, &["journal", "dump", "--json", "j"]);
    let rows = common::json_lines(&run.stdout);
    assert_eq!(rows.len(), 3 + 2, "{}", run.stdout);
    assert_eq!(rows[2]["op"], "delete");
    assert_eq!(rows[3]["state"], serde_json::json!({"colour": "blue"}));
    assert_eq!(rows[4]["ops"], 3);

    std::fs::write(dir.path().join("in.csv"), "n,name\n1,a\n2,b\n").unwrap();
    let run = common::stele_run(root, &["push-log", "append", "p", "in.csv"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run = common::stele_run(root, &["push-log", "scan", "--json", "p"]);
    let rows = common::json_lines(&run.stdout);
    assert_eq!(
        rows[0]["rows"],
        serde_json::json!([{"n": 1, "name": "a"}, {"n": 2, "name": "b"}])
    );
    assert_eq!(rows[1]["frames"], 1);
    assert_eq!(rows[1]["end"], "Clean");
}
