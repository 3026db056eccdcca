//! The engine alone: `stele` with `default-features = false` is the WAL (and the journal's file
//! layer) without arrow or tokio, and it builds. A platform that wants only the WAL pays for
//! only these crates.

use std::process::Command;

/// The engine's own dependency count without default features, as `cargo tree` lists them
/// (itself excluded): thiserror, crc32c, bytes, tracing and what they pull. Kept under 15 so
/// that an embedder who wants only the WAL compiles little; raise it only with a reason.
const LEAN_DEPENDENCIES_MAX: usize = 14;

fn cargo() -> Command {
    let mut command = Command::new(env!("CARGO"));
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        command.env_remove(var);
    }
    command
}

#[test]
fn the_engine_without_default_features_is_the_wal_on_a_few_crates() {
    let tree = cargo()
        .args([
            "tree",
            "-p",
            "stele",
            "--no-default-features",
            "-e",
            "normal",
        ])
        .args(["--prefix", "none"])
        .output()
        .unwrap();
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let mut crates: Vec<String> = String::from_utf8(tree.stdout)
        .unwrap()
        .lines()
        .map(|line| line.trim_end_matches(" (*)").to_string())
        .filter(|line| !line.is_empty() && !line.starts_with("stele v"))
        .collect();
    crates.sort();
    crates.dedup();
    assert!(crates.len() <= LEAN_DEPENDENCIES_MAX, "{crates:#?}");
    for heavy in ["arrow", "tokio"] {
        assert!(
            !crates.iter().any(|c| c.starts_with(heavy)),
            "{heavy} in the lean engine: {crates:#?}"
        );
    }

    let scratch = tempfile::tempdir().unwrap();
    let check = cargo()
        .args(["check", "-p", "stele", "--no-default-features"])
        .arg("--target-dir")
        .arg(scratch.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
