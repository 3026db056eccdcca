//! The process's peak resident set on Linux, for the benchmarks and the memory tests: reset it
//! before a measured step, read it after.

/// Resets the peak resident set (`VmHWM`) to the current one (`/proc/self/clear_refs`, value
/// 5). `false` where that file is missing or not writable: a later reading then covers the whole
/// life of the process, not the step.
pub fn reset() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set in bytes since the process started or since the last [`reset`];
/// `None` where `/proc/self/status` does not say.
pub fn peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
