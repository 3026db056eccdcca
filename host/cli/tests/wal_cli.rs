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

/// Starts `stele ARGS` in `dir` with its stdout read line by line onto a channel, so that a
/// `tail -f` that never prints fails the test (on `recv_timeout`) instead of hanging it.
fn spawn_tail(
    dir: &std::path::Path,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut tail = Command::new(env!("CARGO_BIN_EXE_stele"))
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    (tail, lines)
}

#[test]
fn tail_follow_prints_what_another_process_appends() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "append", "--single-file", "log.wal", "first"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (mut tail, lines) = spawn_tail(dir.path(), &["wal", "tail", "-f", "log.wal"]);
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

/// Appends `count` records of 100 bytes to the segmented log `log` in `dir` (created if
/// missing) with 4 KiB segments: about 30 records a segment.
fn soak_small_segments(dir: &std::path::Path, count: &str) {
    let run = common::stele_run(
        Some(dir),
        &[
            "wal",
            "soak",
            "log",
            "--count",
            count,
            "--threads",
            "1",
            "--segment-bytes",
            "4096",
            "--payload-bytes",
            "100",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// `tail -f` of a segmented log that rotates while it follows, in the sandboxed modes (the
/// component's `follower`): every record appended by another process arrives once, in order,
/// across the new segments.
#[test]
fn tail_follow_crosses_rotations_in_the_sandboxed_modes() {
    for mode in ["sandboxed", "sandboxed-plain"] {
        let dir = tempfile::tempdir().unwrap();
        soak_small_segments(dir.path(), "40");
        let (mut tail, lines) = spawn_tail(
            dir.path(),
            &[
                "wal", "tail", "-f", "-n", "1", "--json", "--mode", mode, "log",
            ],
        );
        let seq = |line: Result<String, _>| -> u64 {
            let line = line.expect("tail -f printed the next record within 30 s");
            common::json_lines(&line)[0]["seq"].as_u64().unwrap()
        };
        assert_eq!(
            seq(lines.recv_timeout(Duration::from_secs(30))),
            39,
            "{mode}"
        );
        // About 30 records a segment: 120 more cross four rotations.
        soak_small_segments(dir.path(), "120");
        let followed: Vec<u64> = (0..120)
            .map(|_| seq(lines.recv_timeout(Duration::from_secs(30))))
            .collect();
        tail.kill().unwrap();
        let _ = tail.wait();
        assert_eq!(followed, (40..160).collect::<Vec<u64>>(), "{mode}");
    }
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

// ---------------------------------------------------------------------------------------------
// One writer per WAL, across processes.

/// Asserts that a writer command was refused because another writer holds the log: a non-zero
/// exit, nothing acknowledged, and one line on stderr naming `lock` (the lock file's path, as
/// the command was given its log's: relative to its working directory here).
fn assert_refused(run: &common::Run, lock: &std::path::Path, what: &str) {
    assert_ne!(run.code, Some(0), "{what}: not refused: {}", run.stdout);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line, got {:?}", run.stderr);
    assert!(
        lines[0].contains(&lock.display().to_string()) && lines[0].contains("another writer"),
        "{what}: the line names the lock {}: {:?}",
        lock.display(),
        lines[0]
    );
    assert!(!run.stdout.contains("ack"), "{what}: {}", run.stdout);
}

/// While a writer in this process holds a log (natively or in the component), every writer
/// command of the CLI is refused with one line naming the lock, and every reader command
/// works.
#[test]
fn readers_work_and_writer_commands_are_refused_while_a_writer_holds_the_log() {
    use stele::wal::{DurabilityPolicy, WalOptions};
    use stele_host::{Mode, Wal};

    let dir = tempfile::tempdir().unwrap();
    let root = Some(dir.path());
    let run = common::stele_run(
        root,
        &["wal", "append", "--single-file", "src.wal", "a", "b"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let fs = std::sync::Arc::new(stele_host::fs::RealFs::open_root(dir.path()).unwrap());
    for mode in [Mode::Native, Mode::Sandboxed] {
        let segmented = WalOptions::segmented(DurabilityPolicy::FullSync, 4096);
        let holder = Wal::open(fs.clone(), "log", segmented, mode).unwrap().0;
        for i in 0..60u32 {
            holder
                .commit_durable(1, format!("record {i:03} {}", "x".repeat(90)).as_bytes())
                .unwrap();
        }
        let lock = std::path::Path::new("log/LOCK");
        for args in [
            &["wal", "append", "log", "refused"][..],
            &["wal", "soak", "log", "--count", "3"],
            &["wal", "soak", "log", "--count", "3", "--mode", "sandboxed"],
            &["wal", "convert", "src.wal", "log"],
        ] {
            assert_refused(
                &common::stele_run(root, args),
                lock,
                &format!("{mode:?} {args:?}"),
            );
        }
        for args in [
            &["wal", "dump", "log"][..],
            &["wal", "dump", "--json", "log"],
            &["wal", "tail", "-n", "3", "log"],
            &["wal", "segments", "log"],
            &["inspect", "log"],
            &["verify", "log"],
        ] {
            let run = common::stele_run(root, args);
            assert_eq!(run.code, Some(0), "{mode:?} {args:?}: {}", run.stderr);
        }
        let rows =
            common::json_lines(&common::stele_run(root, &["wal", "dump", "--json", "log"]).stdout);
        assert_eq!(rows.len() as u64 - 1, holder.stats().unwrap().durable_end.0);

        let single = WalOptions::single_file(DurabilityPolicy::FullSync);
        let file_holder = Wal::open(fs.clone(), "f.wal", single, mode).unwrap().0;
        file_holder.commit_durable(1, b"held").unwrap();
        let lock = std::path::Path::new("f.wal.lock");
        for args in [
            &["wal", "append", "f.wal", "refused"][..],
            &["wal", "soak", "--single-file", "f.wal", "--count", "3"],
        ] {
            assert_refused(
                &common::stele_run(root, args),
                lock,
                &format!("{mode:?} {args:?}"),
            );
        }
        let run = common::stele_run(root, &["wal", "dump", "f.wal"]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);

        // Dropped, the holders let the next writer in.
        drop((holder, file_holder));
        for args in [
            &["wal", "append", "log", "after"][..],
            &["wal", "append", "f.wal", "after"],
        ] {
            let run = common::stele_run(root, args);
            assert_eq!(run.code, Some(0), "{mode:?} {args:?}: {}", run.stderr);
        }
    }
}

/// Starts `stele wal soak ARGS` in `dir`; returns it and a channel of the seqs it acknowledges.
fn spawn_soak(
    dir: &std::path::Path,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<u64>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stele"))
        .current_dir(dir)
        .args(["wal", "soak"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, acks) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(seq) = line.strip_prefix("ack ")
                && sender.send(seq.parse::<u64>().unwrap()).is_err()
            {
                return;
            }
        }
    });
    (child, acks)
}

/// Two `stele wal soak` processes on one directory, as a user would start them: the second is
/// refused (in either mode, against a first in either mode), and after the first is killed
/// with SIGKILL every seq it acknowledged is recovered and the next writer opens (the kernel
/// released the lock).
#[test]
fn a_second_soak_is_refused_and_the_first_loses_nothing() {
    use std::collections::BTreeSet;

    for (first, second) in [
        (&[][..], &["--mode", "sandboxed"][..]),
        (&["--mode", "sandboxed"], &[]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, acks) = spawn_soak(dir.path(), &[&["log"][..], first].concat());
        let mut acked = BTreeSet::new();
        acked.insert(
            acks.recv_timeout(Duration::from_secs(60))
                .expect("the first writer acknowledged within 60 s"),
        );
        let mut args = vec!["wal", "soak", "log", "--count", "5"];
        args.extend(second);
        let run = common::stele_run(Some(dir.path()), &args);
        assert_refused(&run, std::path::Path::new("log/LOCK"), &format!("{args:?}"));
        // The first goes on acknowledging after the refusal.
        let after_refusal = acks
            .recv_timeout(Duration::from_secs(20))
            .expect("still acknowledging");
        acked.insert(after_refusal);
        std::thread::sleep(Duration::from_millis(100));
        writer.kill().unwrap(); // SIGKILL
        writer.wait().unwrap();
        acked.extend(acks.try_iter());

        let run = common::stele_run(Some(dir.path()), &["wal", "dump", "--json", "log"]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let rows = common::json_lines(&run.stdout);
        let present: BTreeSet<u64> = rows[..rows.len() - 1]
            .iter()
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        let lost: Vec<_> = acked.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "{first:?} then {second:?}: acknowledged seqs lost: {lost:?}"
        );

        // SIGKILL released the lock: the next writer opens and appends after the last seq.
        let mut args = vec!["wal", "soak", "log", "--count", "10"];
        args.extend(second);
        let run = common::stele_run(Some(dir.path()), &args);
        assert_eq!(run.code, Some(0), "after SIGKILL: {}", run.stderr);
        assert_eq!(
            run.stdout.lines().filter(|l| l.starts_with("ack ")).count(),
            10
        );
    }
}

/// Every verb that runs the engine takes the same `--mode`: records appended inside the plain
/// component come back through the async component's `tail` and the native `dump`.
#[test]
fn append_and_tail_take_mode() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &[
            "wal",
            "append",
            "log",
            "a",
            "b",
            "--mode",
            "sandboxed-plain",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "append", "log", "c", "--mode", "sandboxed"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("seqs 2..=2 (durable)"),
        "{}",
        run.stdout
    );
    for mode in ["native", "sandboxed", "sandboxed-plain"] {
        let run = common::stele_run(
            Some(dir.path()),
            &["wal", "tail", "-n", "2", "--mode", mode, "log"],
        );
        assert_eq!(run.code, Some(0), "{mode}: {}", run.stderr);
        assert_eq!(
            run.stdout, "seq=1 op=1 len=1 \"b\"\nseq=2 op=1 len=1 \"c\"\n",
            "{mode}"
        );
    }
    let run = common::stele_run(Some(dir.path()), &["wal", "tail", "--mode", "bogus", "log"]);
    assert_eq!(run.code, Some(2), "clap refuses an unknown mode");
    assert!(
        run.stderr.contains("native, sandboxed, sandboxed-plain"),
        "{}",
        run.stderr
    );
}

/// The CLI, unlike the library, keeps compiled code: where `STELE_CODE_CACHE` says, else under
/// `$XDG_CACHE_HOME/stele`, else `$HOME/.cache/stele`; `off` keeps none.
#[test]
fn the_cli_caches_compiled_code_where_its_environment_says() {
    let dir = tempfile::tempdir().unwrap();
    let cwasm = |cache: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(cache)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|name| name.ends_with(".cwasm"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let home = dir.path().join("home");
    let named = dir.path().join("named");
    std::fs::create_dir(&home).unwrap();
    let append = |log: &str, env: &[(&str, String)]| {
        let run = common::stele_run_with(
            Some(dir.path()),
            &[
                "wal",
                "append",
                "--single-file",
                log,
                "x",
                "--mode",
                "sandboxed",
            ],
            env,
        );
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    };
    let home_env = ("HOME", home.display().to_string());
    let no_xdg = ("XDG_CACHE_HOME", String::new());

    append(
        "a.wal",
        &[
            home_env.clone(),
            no_xdg.clone(),
            ("STELE_CODE_CACHE", "off".into()),
        ],
    );
    assert!(!home.join(".cache").exists(), "off wrote under HOME");

    append(
        "b.wal",
        &[
            home_env.clone(),
            no_xdg.clone(),
            ("STELE_CODE_CACHE", named.display().to_string()),
        ],
    );
    let files = cwasm(&named);
    assert!(
        files.len() == 1 && files[0].starts_with("stele-async-"),
        "{files:?}"
    );
    assert!(
        !home.join(".cache").exists(),
        "a named cache also wrote under HOME"
    );

    append(
        "c.wal",
        &[home_env, no_xdg, ("STELE_CODE_CACHE", String::new())],
    );
    let files = cwasm(&home.join(".cache").join("stele"));
    assert!(
        files.len() == 1 && files[0].starts_with("stele-async-"),
        "{files:?}"
    );
}

/// A reader whose stdout closes early (`stele wal dump LOG | head -1`) ends quietly: no panic,
/// nothing on stderr.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut append = Command::new(env!("CARGO_BIN_EXE_stele"))
        .current_dir(dir.path())
        .args(["wal", "append", "log"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines: String = (0..20_000).map(|i| format!("record {i}\n")).collect();
    append
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    assert!(append.wait().unwrap().success());

    for args in [
        &["wal", "dump", "log"][..],
        &["inspect", "log"],
        &["wal", "tail", "-n", "20000", "log"],
    ] {
        let mut reader = Command::new(env!("CARGO_BIN_EXE_stele"))
            .current_dir(dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(reader.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The pipe's read end is dropped here, with most of the output unread.
        let out = reader.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!first.is_empty(), "{args:?}");
        assert!(stderr.is_empty(), "{args:?} said on stderr: {stderr}");
        assert!(
            out.status.success()
                || std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(13),
            "{args:?} ended by {:?}",
            out.status
        );
    }
}

/// An error's causes are each printed once, on one line.
#[test]
fn each_cause_of_an_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        Some(dir.path()),
        &["wal", "append", "one.wal", "x", "--single-file"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let path = dir.path().join("one.wal");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0x40; // inside the header, under its checksum
    std::fs::write(&path, &bytes).unwrap();
    for args in [
        &["wal", "dump", "one.wal"][..],
        &["wal", "append", "one.wal", "y"],
    ] {
        let run = common::stele_run(Some(dir.path()), args);
        assert_eq!(run.code, Some(1), "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("bad WAL header"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(
            run.stderr.matches("header checksum mismatch").count(),
            1,
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn help_lists_the_exit_statuses() {
    let run = common::stele_run(None, &["--help"]);
    assert_eq!(run.code, Some(0));
    assert!(run.stdout.contains("Exit status:"), "{}", run.stdout);
    for status in ["  0  success", "  1  an error", "  2  verify"] {
        assert!(run.stdout.contains(status), "{status}: {}", run.stdout);
    }
}

/// `tail -n N` on a log of many segments prints exactly the last N records, reading back only
/// as many segments as hold them; `-n 0` prints nothing, and a larger N than the log holds
/// prints the whole log.
#[test]
fn tail_prints_the_last_records_of_a_many_segment_log() {
    let dir = tempfile::tempdir().unwrap();
    soak_small_segments(dir.path(), "600");
    let segments = std::fs::read_dir(dir.path().join("log"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".wal")
        })
        .count();
    assert!(segments > 10, "{segments} segments");
    let seqs = |args: &[&str]| -> Vec<u64> {
        let run = common::stele_run(Some(dir.path()), args);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        common::json_lines(&run.stdout)
            .iter()
            .map(|row| row["seq"].as_u64().unwrap())
            .collect()
    };
    // 100-byte payloads: about 30 records a segment, so 45 records span two or three.
    assert_eq!(
        seqs(&["wal", "tail", "-n", "45", "--json", "log"]),
        (555..600).collect::<Vec<u64>>()
    );
    for mode in ["sandboxed", "sandboxed-plain"] {
        assert_eq!(
            seqs(&["wal", "tail", "-n", "3", "--json", "--mode", mode, "log"]),
            [597, 598, 599],
            "{mode}"
        );
    }
    assert!(seqs(&["wal", "tail", "-n", "0", "--json", "log"]).is_empty());
    assert_eq!(
        seqs(&["wal", "tail", "-n", "100000", "--json", "log"]).len(),
        600
    );
}
