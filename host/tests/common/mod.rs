//! What the CLI suites share: running the `stele` binary.

use std::path::Path;
use std::process::Command;

/// Runs `stele ARGS` in `dir` (this process's directory if `None`); returns whether it exited
/// 0, and its stdout followed by its stderr.
pub fn stele_in(dir: Option<&Path>, args: &[&str]) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stele"));
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let out = command.args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
