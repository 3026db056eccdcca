//! One writer per journal, across processes: while this process holds a journal (natively or
//! through the component), the `stele` binary, another process, cannot open it as a writer,
//! and gets a clear error; once the holder drops it, the same command succeeds.

use std::process::Command;
use std::sync::Arc;

use stele_host::fs::RealFs;
use stele_host::{Journal, Mode};

fn stele_set(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stele"))
        .args(["journal", "set"])
        .arg(path)
        .args(["k", "from-another-process"])
        .output()
        .unwrap()
}

#[test]
fn another_process_cannot_open_a_held_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.journal");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for mode in [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain] {
        let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
        let holder = runtime
            .block_on(Journal::open(fs, "held.journal", mode))
            .unwrap();
        let refused = stele_set(&path);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{}: {stderr}", mode.name());
        assert!(
            stderr.contains("held.journal") && stderr.contains("held by another writer"),
            "{}: {stderr}",
            mode.name()
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "one line, no backtrace: {stderr}"
        );
        drop(holder);
        let accepted = stele_set(&path);
        assert!(
            accepted.status.success(),
            "{}",
            String::from_utf8_lossy(&accepted.stderr)
        );
    }
}
