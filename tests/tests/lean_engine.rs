//! The engine alone: `stele` with `default-features = false` is the WAL (and the journal's file
//! layer) without arrow or tokio, and it builds. A platform that wants only the WAL pays for
//! only these crates.

use stele_tests::nested_cargo::{cargo, stdout_of};

/// The engine's own dependency count without default features, as `cargo tree` lists them
/// (itself excluded): thiserror, crc32c, bytes, tracing and what they pull. Kept under 15 so
/// that an embedder who wants only the WAL compiles little; raise it only with a reason.
const LEAN_DEPENDENCIES_MAX: usize = 14;

#[test]
fn the_engine_without_default_features_is_the_wal_on_a_few_crates() {
    let tree = stdout_of(
        cargo()
            .args(["tree", "-p", "stele", "--no-default-features"])
            .args(["-e", "normal", "--prefix", "none"]),
    );
    let mut crates: Vec<String> = tree
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
    stdout_of(
        cargo()
            .args(["check", "-p", "stele", "--no-default-features"])
            .arg("--target-dir")
            .arg(scratch.path()),
    );
}
