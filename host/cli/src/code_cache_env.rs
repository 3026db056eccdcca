//! Where the `stele` tool and `stele-bench` keep compiled component code between runs. One
//! file, included by both binaries (`stele-bench` by `#[path]`), so that the two read the
//! environment the same way. The library itself reads no environment.

use std::path::PathBuf;

/// Where the CLI (and the bench) keeps compiled component code between runs: a directory, or
/// `off` to compile in every process. Unset: `$XDG_CACHE_HOME/stele`, else `$HOME/.cache/stele`, else off. The
/// library keeps no cache unless told; the CLI turns it on, so that a sandboxed command's first
/// call loads machine code instead of compiling for seconds.
pub const CODE_CACHE_ENV: &str = "STELE_CODE_CACHE";

/// The code-cache directory [`CODE_CACHE_ENV`] and the XDG conventions choose, or `None`.
pub fn code_cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CODE_CACHE_ENV) {
        Some(dir) if dir == "off" => None,
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => std::env::var_os("XDG_CACHE_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|dir| !dir.is_empty())
                    .map(|home| PathBuf::from(home).join(".cache"))
            })
            .map(|dir| dir.join("stele")),
    }
}
