//! The manifest: the archive's commit point.
//!
//! Manifest `n` is one small JSON object, put create-only at [`crate::layout::manifest_key`].
//! It lists every archived segment from the archive's first seq, so the newest manifest alone
//! describes the whole archive: a reader lists `manifest/`, takes the highest `n` and needs
//! nothing else. Segments are uploaded before the manifest that names them, so a manifest never
//! names a segment that is not there; a segment no manifest names (a crash between the two
//! puts) is re-put identically by the next writer, or ignored.
//!
//! Fencing: each writer that attaches takes `epoch` = the newest manifest's + 1 and publishes
//! manifest `n + 1` at once. A writer still running with an older epoch then finds its next
//! manifest number taken, by bytes not its own, and stops ([`crate::ArchiveError::Fenced`]).

use serde::{Deserialize, Serialize};
use stele::wal::LogSeq;

use crate::ArchiveError;

/// The manifest format this build writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// A manifest's largest accepted size. At about 200 bytes per segment entry it holds five
/// million segments (320 TB of 64 MiB segments); a larger object is refused, not read.
pub const MANIFEST_BYTES_MAX: usize = 1 << 30;

/// One archived segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Its first record's seq (the local file's name).
    pub first_seq: u64,
    /// The seq after its last record.
    pub next_seq: u64,
    /// Its key under the prefix.
    pub key: String,
    /// The object's length: the segment trimmed to its header and records.
    pub bytes: u64,
    /// CRC32C (Castagnoli) of the object's bytes.
    pub crc32c: u32,
    /// The local file's length (the preallocated segment size), which a restore pads back to.
    pub file_len: u64,
    /// When the archiver first saw the segment sealed (a successor segment existed), in
    /// milliseconds since the Unix epoch.
    pub sealed_at_ms: u64,
}

/// One archived generation of a whole file (a journal or a push log, after a compaction or on
/// demand).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file's root-relative path in the log's filesystem.
    pub name: String,
    /// Its generation: 0 for the first one archived, then one more each time.
    pub generation: u64,
    /// Its key under the prefix.
    pub key: String,
    /// Its length.
    pub bytes: u64,
    /// CRC32C of its bytes.
    pub crc32c: u32,
    /// When it was archived, in milliseconds since the Unix epoch.
    pub archived_at_ms: u64,
}

/// Manifest `n`. See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The archive's id, fixed by its first writer: 32 hex digits.
    pub log_id: String,
    /// This manifest's number: its key's.
    pub manifest: u64,
    /// The writer epoch that published it.
    pub epoch: u64,
    /// The publishing writer's id, fresh per attach (two writers of one epoch still differ).
    pub writer_id: String,
    /// When it was published, in milliseconds since the Unix epoch.
    pub published_at_ms: u64,
    /// The archive's first seq.
    pub first_seq: u64,
    /// The seq after the last archived record: every record before it is archived.
    pub next_seq: u64,
    /// The last archived seq (`next_seq - 1`), `None` while nothing is archived.
    pub archived_through: Option<u64>,
    /// The log's local checkpoint when this manifest was published, if it had one.
    pub checkpoint: Option<u64>,
    /// Every archived segment, in seq order, contiguous from `first_seq` to `next_seq`.
    pub segments: Vec<SegmentEntry>,
    /// The newest archived generation of each archived file, by name.
    #[serde(default)]
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// The first seq the archive does not hold.
    pub fn archived_next(&self) -> LogSeq {
        LogSeq(self.next_seq)
    }

    /// The manifest's bytes, as put.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest always serializes");
        bytes.push(b'\n');
        bytes
    }

    /// Decodes and checks the manifest stored at `key` (under the prefix).
    ///
    /// # Errors
    /// [`ArchiveError::BadManifest`] for bytes that are not a manifest of this format, a
    /// number that is not its key's, or segments that are not contiguous from `first_seq` to
    /// `next_seq`.
    pub fn decode(key: &str, expected_number: u64, bytes: &[u8]) -> Result<Manifest, ArchiveError> {
        let bad = |reason: String| ArchiveError::BadManifest {
            key: key.to_owned(),
            reason,
        };
        if bytes.len() > MANIFEST_BYTES_MAX {
            return Err(bad(format!(
                "{} bytes, more than the bound of {MANIFEST_BYTES_MAX}",
                bytes.len()
            )));
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a manifest: {e}")))?;
        if manifest.format != MANIFEST_FORMAT {
            return Err(bad(format!(
                "format {} (this build reads {MANIFEST_FORMAT})",
                manifest.format
            )));
        }
        if manifest.manifest != expected_number {
            return Err(bad(format!(
                "says it is manifest {} but is stored as {expected_number}",
                manifest.manifest
            )));
        }
        let mut expected = manifest.first_seq;
        for segment in &manifest.segments {
            if segment.first_seq != expected || segment.next_seq < segment.first_seq {
                return Err(bad(format!(
                    "segment {} holds seqs {}..{}, expected it to start at {expected}",
                    segment.key, segment.first_seq, segment.next_seq
                )));
            }
            expected = segment.next_seq;
        }
        if expected != manifest.next_seq
            || manifest.archived_through != archived_through(manifest.first_seq, manifest.next_seq)
        {
            return Err(bad(format!(
                "segments end at {expected}, next_seq is {}, archived_through {:?}",
                manifest.next_seq, manifest.archived_through
            )));
        }
        Ok(manifest)
    }
}

/// `archived_through` for an archive holding `[first, next)`.
pub(crate) fn archived_through(first: u64, next: u64) -> Option<u64> {
    (next > first).then(|| next - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            log_id: "ab".repeat(16),
            manifest: 3,
            epoch: 2,
            writer_id: "cd".repeat(8),
            published_at_ms: 1,
            first_seq: 10,
            next_seq: 30,
            archived_through: Some(29),
            checkpoint: None,
            segments: vec![
                SegmentEntry {
                    first_seq: 10,
                    next_seq: 20,
                    key: "wal/a".into(),
                    bytes: 100,
                    crc32c: 1,
                    file_len: 4096,
                    sealed_at_ms: 0,
                },
                SegmentEntry {
                    first_seq: 20,
                    next_seq: 30,
                    key: "wal/b".into(),
                    bytes: 100,
                    crc32c: 2,
                    file_len: 4096,
                    sealed_at_ms: 0,
                },
            ],
            files: vec![],
        }
    }

    #[test]
    fn round_trips_and_refuses_what_breaks_its_rules() {
        let manifest = sample();
        assert_eq!(
            Manifest::decode("m", 3, &manifest.encode()).unwrap(),
            manifest
        );
        assert!(matches!(
            Manifest::decode("m", 4, &manifest.encode()),
            Err(ArchiveError::BadManifest { .. })
        ));
        let mut gap = sample();
        gap.segments[1].first_seq = 21;
        assert!(Manifest::decode("m", 3, &gap.encode()).is_err());
        let mut short = sample();
        short.next_seq = 31;
        short.archived_through = Some(30);
        assert!(Manifest::decode("m", 3, &short.encode()).is_err());
        let mut future = sample();
        future.format = 2;
        assert!(Manifest::decode("m", 3, &future.encode()).is_err());
        assert!(Manifest::decode("m", 3, b"{\"format\":1}").is_err());
        let mut empty = sample();
        empty.segments.clear();
        empty.next_seq = 10;
        empty.archived_through = None;
        assert_eq!(Manifest::decode("m", 3, &empty.encode()).unwrap(), empty);
    }
}
