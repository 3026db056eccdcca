//! What the CLI suites share: running the `stele` binary.

use std::path::Path;
use std::process::Command;

/// How one run of `stele` ended.
pub struct Run {
    /// The exit status (`None` if a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `stele ARGS` in `dir` (this process's directory if `None`).
pub fn stele_run(dir: Option<&Path>, args: &[&str]) -> Run {
    stele_run_with(dir, args, &[])
}

/// Runs `stele ARGS` in `dir` (this process's directory if `None`) with `env` added to its
/// environment.
pub fn stele_run_with(dir: Option<&Path>, args: &[&str], env: &[(&str, String)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stele"));
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let out = command.args(args).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `stele ARGS` in `dir` (this process's directory if `None`); returns whether it exited
/// 0, and its stdout followed by its stderr.
#[allow(dead_code)] // not every suite that includes this module uses both
pub fn stele_in(dir: Option<&Path>, args: &[&str]) -> (bool, String) {
    let run = stele_run(dir, args);
    (run.code == Some(0), format!("{}{}", run.stdout, run.stderr))
}

/// Parses `stele ... --json` output: one JSON value per line.
#[allow(dead_code)] // not every suite that includes this module reads JSON
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}
