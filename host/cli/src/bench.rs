//! `stele bench`: runs the `stele-bench` binary with the same arguments. The bench is a binary
//! of its own so that this tool compiles none of what only measuring needs (the peers, a
//! bundled SQLite, an S3 server); this verb keeps `stele bench` the one name to remember.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Result, bail};

/// The bench binary's name, as `cargo build -p stele-bench` and `cargo install` name it.
const BENCH_BINARY: &str = "stele-bench";

/// Runs `stele-bench ARGS`: the one beside this executable (a `target/release` or an install
/// directory holds both), else the first on `PATH`. On Unix it replaces this process, so that
/// its output, signals and exit status are the bench's own.
pub(crate) fn bench(args: Vec<OsString>) -> Result<ExitCode> {
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(BENCH_BINARY))
        .filter(|path| path.is_file());
    let program = beside.as_deref().unwrap_or(Path::new(BENCH_BINARY));
    let mut command = Command::new(program);
    command.args(args);
    #[cfg(unix)]
    let error = {
        use std::os::unix::process::CommandExt;
        command.exec()
    };
    #[cfg(not(unix))]
    let error = match command.status() {
        Ok(status) => return Ok(ExitCode::from(status.code().unwrap_or(1) as u8)),
        Err(error) => error,
    };
    if error.kind() == std::io::ErrorKind::NotFound && beside.is_none() {
        bail!(
            "`stele bench` runs the `{BENCH_BINARY}` binary, which is neither beside this \
             executable nor on PATH: in a checkout, `cargo build --release -p stele-bench` puts \
             it beside `stele` (or run `cargo run --release -p stele-bench -- ARGS`)"
        );
    }
    bail!("running {}: {error}", program.display())
}
