//! `stele bench ARGS` runs the `stele-bench` beside it with ARGS, and its exit status is the
//! bench's; with no bench beside it or on PATH, it says how to build one.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// A copy of the `stele` binary in a directory of its own, so that what sits beside it is
/// what the test puts there.
fn stele_alone(dir: &std::path::Path) -> std::path::PathBuf {
    let stele = dir.join("stele");
    std::fs::copy(env!("CARGO_BIN_EXE_stele"), &stele).unwrap();
    stele
}

/// One test, not two: a file this process writes and then executes fails with ETXTBSY when
/// another test thread forks while the file is open for writing.
#[test]
fn bench_runs_the_stele_bench_beside_it_or_says_how_to_build_one() {
    forwards_arguments_and_status();
    without_a_bench_says_how_to_build_one();
}

fn forwards_arguments_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let stele = stele_alone(dir.path());
    let fake = dir.path().join("stele-bench");
    std::fs::write(&fake, "#!/bin/sh\necho \"bench got: $*\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = Command::new(&stele)
        .args(["bench", "--workloads", "wal", "--help", "--quick"])
        .env("PATH", "")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "bench got: --workloads wal --help --quick\n"
    );
    assert_eq!(run.status.code(), Some(7));
}

fn without_a_bench_says_how_to_build_one() {
    let dir = tempfile::tempdir().unwrap();
    let stele = stele_alone(dir.path());
    let run = Command::new(&stele)
        .args(["bench", "--quick"])
        .env("PATH", dir.path().join("empty"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("stele: `stele bench` runs the `stele-bench` binary")
            && stderr.contains("cargo build --release -p stele-bench"),
        "{stderr}"
    );
}
