//! What the CLI's commands share: where a command runs the engine ([`ModeArg`]), how a path
//! becomes a root and a name, the one-line errors and exit statuses, and how a payload prints.
//! Imports no command module.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use stele::wal::WalOpenError;
use stele_host::fs::RealFs;
use stele_host::{Mode, WalError};

/// Where a command runs the engine.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// The engine called directly.
    Native,
    /// Inside the async-ABI component.
    Sandboxed,
    /// Inside the plain WASI 0.2 component.
    SandboxedPlain,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Native => Mode::Native,
            ModeArg::Sandboxed => Mode::Sandboxed,
            ModeArg::SandboxedPlain => Mode::SandboxedPlain,
        }
    }
}

/// A command's own exit status, or one line with the path and the cause and status 2.
pub(crate) fn exit(outcome: Result<ExitCode>) -> ExitCode {
    outcome.unwrap_or_else(|err| {
        eprintln!("stele: {err:#}");
        ExitCode::from(2)
    })
}

pub(crate) fn open_read_only(path: &std::path::Path) -> Result<Box<dyn stele::vfs::VfsFile>> {
    let (fs, name) = root_and_name(path)?;
    stele::vfs::Vfs::open(&*fs, &name, stele::vfs::OpenMode::Existing)
        .with_context(|| format!("{}", path.display()))
}

/// The error a WAL writer command exits with when opening the log at `path` failed: the
/// refusal of a second writer becomes one line that names the lock file by its path on disk
/// (the engine names it relative to the root, `path`'s directory); anything else keeps its
/// chain under `path`.
pub(crate) fn wal_writer_error(
    path: &std::path::Path,
    err: impl Into<anyhow::Error>,
) -> anyhow::Error {
    let err = err.into();
    let lock_path = match (
        err.downcast_ref::<WalError>(),
        err.downcast_ref::<WalOpenError>(),
    ) {
        (Some(WalError::Open(WalOpenError::Locked { lock_path })), _)
        | (_, Some(WalOpenError::Locked { lock_path })) => lock_path.clone(),
        _ => return err.context(path.display().to_string()),
    };
    let root = path.parent().unwrap_or(std::path::Path::new(""));
    anyhow::anyhow!(
        "{}: another writer holds this WAL (lock {}); only one writer at a time",
        path.display(),
        root.join(lock_path).display()
    )
}

/// Splits a path into a Vfs root (its directory) and the file name inside it.
pub(crate) fn root_and_name(path: &std::path::Path) -> Result<(Arc<RealFs>, String)> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: not a UTF-8 file name", path.display()))?
        .to_owned();
    let fs = RealFs::open_root(&dir)
        .with_context(|| format!("{}: cannot open directory", dir.display()))?;
    Ok((Arc::new(fs), name))
}

/// A value as quoted text when it is short printable UTF-8, else as a hex preview.
pub(crate) fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if text.len() <= 64 && !text.chars().any(char::is_control) => format!("{text:?}"),
        _ => preview(bytes),
    }
}

pub(crate) fn preview(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(24)];
    let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
    if bytes.len() > shown.len() {
        format!("{hex}…")
    } else {
        hex
    }
}

/// The payload `demo` and `wal soak` commit: thread and index in the first 16 bytes, then a pattern, so recovery can
/// check every record byte for byte.
pub(crate) fn demo_payload(thread: usize, index: usize, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&(thread as u64).to_le_bytes());
    p.extend_from_slice(&(index as u64).to_le_bytes());
    p.extend((16..len).map(|i| (i as u8) ^ (thread as u8) ^ (index as u8)));
    p
}

/// Set to `perfmap` to have the engine write `/tmp/perf-<pid>.map`, so that `perf report`
/// names the guest's functions (the profile in `docs/BENCHMARKS.md` was taken so).
pub(crate) const WASM_PROFILER_ENV: &str = "STELE_WASM_PROFILER";

/// Makes the process's sandbox runtime as the CLI's environment asks: the code cache on, and a
/// perf map when [`WASM_PROFILER_ENV`] says so. Compiles nothing yet (unless profiling): a
/// command that never runs sandboxed never compiles a component.
pub(crate) fn init_runtime() -> Result<()> {
    use stele_host::runtime::{Runtime, RuntimeOptions};
    let mut options =
        RuntimeOptions::default().with_code_cache_dir(crate::code_cache_env::code_cache_dir());
    if std::env::var_os(WASM_PROFILER_ENV).is_some_and(|v| v == "perfmap") {
        let mut config = Runtime::default_config();
        config.profiler(stele_host::wasmtime::ProfilingStrategy::PerfMap);
        let engine = stele_host::wasmtime::Engine::new(&config)
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .context("making the profiled engine")?;
        options = options.with_engine(engine);
    }
    Runtime::init(options).context("starting the sandbox runtime")?;
    Ok(())
}

/// A byte count as the options take it: plain bytes, or with a binary suffix (`64K`, `3M`,
/// `2G`, `1T`; `KiB`, `MiB`... and `B` accepted).
pub(crate) fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: not a byte count (say 4096, 64K, 3M or 2G)"))?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => return Err(format!("{text:?}: unknown unit {other:?} (K, M, G or T)")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}

#[cfg(test)]
mod byte_count_tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("3MiB"), Ok(3 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert!(parse_bytes("3X").is_err());
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
