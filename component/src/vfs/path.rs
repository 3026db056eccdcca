//! The path rules of the `vfs` contract, checked lexically, before any system call: a path is
//! relative, non-empty, UTF-8 without NUL, made of normal `/`-separated segments (no `..`, no
//! `.`, no empty segment, no backslash, no drive letter), and within [`PATH_BYTES_MAX`] /
//! [`NAME_BYTES_MAX`]. Every backend applies them first, so a path is refused the same way on
//! every backend and every OS; backends then add their own resolution checks (symlinks).
//!
//! This file uses `core` alone, so that the WASI-filesystem adapter (`component/wasi-vfs`) can
//! compile the same rules in with `#[path]` without linking the engine.

/// Longest path accepted, in bytes: Linux's `PATH_MAX`. Longer paths are refused before any
/// system call, so the error is the same on every OS.
pub const PATH_BYTES_MAX: usize = 4096;
/// Longest single path component, in bytes: `NAME_MAX` on Linux and macOS.
pub const NAME_BYTES_MAX: usize = 255;

/// Checks `path` against the rules above; the error says which rule it breaks. `allow_root`
/// admits `""` and `"."` (the root itself), for directory operations.
pub fn check_relative_path(path: &str, allow_root: bool) -> Result<(), &'static str> {
    if path.is_empty() || path == "." {
        return if allow_root {
            Ok(())
        } else {
            Err("empty path")
        };
    }
    if path.len() > PATH_BYTES_MAX {
        return Err("longer than PATH_BYTES_MAX");
    }
    if path.contains('\0') {
        return Err("contains NUL");
    }
    if path.starts_with('/') || path.starts_with('\\') || path.contains(':') {
        return Err("absolute paths are refused");
    }
    for name in path.split('/') {
        match name {
            "" => return Err("empty path segment"),
            "." | ".." => return Err("`.` and `..` segments are refused"),
            _ if name.contains('\\') => return Err("backslash in a path segment"),
            _ if name.len() > NAME_BYTES_MAX => return Err("segment longer than NAME_BYTES_MAX"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_relative_path;

    #[test]
    fn lexical_checks() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\0b",
            "C:\\x",
            "a\\b",
        ] {
            assert!(
                check_relative_path(bad, false).is_err(),
                "{bad:?} must be refused"
            );
        }
        assert!(check_relative_path(&"a".repeat(256), false).is_err());
        assert!(check_relative_path(&"a/".repeat(2100), false).is_err());
        for good in ["a", "a/b.wal", "dir/sub/log", &"a".repeat(255)] {
            assert!(
                check_relative_path(good, false).is_ok(),
                "{good:?} must pass"
            );
        }
        assert!(check_relative_path("", true).is_ok());
        assert!(check_relative_path(".", true).is_ok());
    }
}
