//! Running cargo (or a script that runs it) from inside a suite, on this workspace: with the
//! outer build's variables removed, because they are meant for the test's own build (its
//! target directory, flags and wrapper), not for the build the suite asks for.

use std::path::PathBuf;
use std::process::{Command, Output};

/// What `cargo test` sets for its own build and a nested build must not inherit.
pub const OUTER_BUILD_VARS: [&str; 7] = [
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_PRIMARY_PACKAGE",
];

/// The workspace's root: this crate sits at `tests/`.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `command` without the outer build's variables.
pub fn without_outer_build(mut command: Command) -> Command {
    for var in OUTER_BUILD_VARS {
        command.env_remove(var);
    }
    command
}

/// The cargo that runs the suites, in the workspace's root, without the outer build's variables.
pub fn cargo() -> Command {
    let mut command = Command::new(env!("CARGO"));
    command.current_dir(workspace_root());
    without_outer_build(command)
}

/// Runs `command` and returns its stdout; panics with its stderr unless it exits 0.
pub fn stdout_of(command: &mut Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        status.success(),
        "{command:?}: {status}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    String::from_utf8(stdout).expect("UTF-8 output")
}
