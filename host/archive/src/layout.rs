//! Object names under an archive's prefix. Every name is deterministic, so a retried put
//! targets the same key, and zero-padded to 20 digits (every u64), so names list in seq order
//! (S3's `start-after` is a byte-order comparison).
//!
//! ```text
//! <prefix>/manifest/<n:020>.json                 manifest n: the commit point, create-only
//! <prefix>/wal/<first:020>-<next:020>.wal        a sealed segment's records [first, next)
//! <prefix>/files/<name>/<generation:020>         a journal or push log file, whole
//! ```

use stele::wal::LogSeq;

/// Where manifests live.
pub const MANIFEST_DIR: &str = "manifest";
/// Where segments live.
pub const WAL_DIR: &str = "wal";
/// Where whole-file generations live.
pub const FILES_DIR: &str = "files";

const MANIFEST_SUFFIX: &str = ".json";
const DIGITS: usize = 20;

/// The key of manifest `n`, under the prefix.
pub fn manifest_key(n: u64) -> String {
    format!("{MANIFEST_DIR}/{n:0DIGITS$}{MANIFEST_SUFFIX}")
}

/// The manifest number a key's last part names, if it is a manifest's.
pub fn parse_manifest_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(MANIFEST_SUFFIX)?;
    if digits.len() != DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The key of the segment holding records `[first, next)`.
pub fn segment_key(first: LogSeq, next: LogSeq) -> String {
    format!("{WAL_DIR}/{:0DIGITS$}-{:0DIGITS$}.wal", first.0, next.0)
}

/// The key of generation `generation` of the file called `name`.
pub fn file_generation_key(name: &str, generation: u64) -> String {
    format!("{FILES_DIR}/{name}/{generation:0DIGITS$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_as_numbers() {
        assert_eq!(manifest_key(7), "manifest/00000000000000000007.json");
        assert_eq!(parse_manifest_name("00000000000000000007.json"), Some(7));
        assert_eq!(
            parse_manifest_name(&manifest_key(u64::MAX)[9..]),
            Some(u64::MAX)
        );
        for bad in [
            "7.json",
            "0000000000000000000x.json",
            "00000000000000000007.wal",
        ] {
            assert_eq!(parse_manifest_name(bad), None, "{bad}");
        }
        assert!(manifest_key(9) < manifest_key(10));
        assert_eq!(
            segment_key(LogSeq(0), LogSeq(4711)),
            "wal/00000000000000000000-00000000000000004711.wal"
        );
    }
}
