//! [`ArchiveTail`]: follows an archive from anywhere, with no access to the writer's machine.
//!
//! Each [`ArchiveTail::poll`] lists only the manifests newer than the last one seen (a
//! `start-after` listing), reads the newest, and fetches the segments it adds past the tail's
//! position, each checked as a restore checks it. A record is seen once its segment is
//! archived: the tail lags the writer by its segments' seal time.

use std::collections::VecDeque;

use stele::wal::LogSeq;

use crate::manifest::SegmentEntry;
use crate::objects::latest_manifest;
use crate::restore::fetch_segment;
use crate::{ArchiveError, ArchiveLocation};

/// A record read from the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedRecord {
    /// Its seq.
    pub seq: LogSeq,
    /// Its op code.
    pub op: u16,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Follows an archive; see the module doc.
#[derive(Debug)]
pub struct ArchiveTail {
    location: ArchiveLocation,
    next_seq: LogSeq,
    manifest_seen: Option<u64>,
    /// Segments named by a manifest and not yet read, in order.
    unread: VecDeque<SegmentEntry>,
}

impl ArchiveTail {
    /// A tail that yields records from `from` on (`None`: from the archive's first).
    pub fn new(location: ArchiveLocation, from: Option<LogSeq>) -> ArchiveTail {
        ArchiveTail {
            location,
            next_seq: from.unwrap_or(LogSeq(0)),
            manifest_seen: None,
            unread: VecDeque::new(),
        }
    }

    /// The seq of the next record it yields.
    pub fn next_seq(&self) -> LogSeq {
        self.next_seq
    }

    /// The newest manifest seen, if any.
    pub fn manifest_seen(&self) -> Option<u64> {
        self.manifest_seen
    }

    /// The records archived since the last poll: those of the next segment that holds any,
    /// in order, so that memory is one segment. Empty when nothing new is archived.
    ///
    /// # Errors
    /// A store error (retry), a bad manifest, a corrupt segment, or [`ArchiveError::Gap`]
    /// when the archive no longer holds the tail's position (its start is past it).
    pub async fn poll(&mut self) -> Result<Vec<ArchivedRecord>, ArchiveError> {
        if self.unread.is_empty()
            && let Some(manifest) = latest_manifest(&self.location, self.manifest_seen).await?
        {
            if self.manifest_seen.is_none() && self.next_seq.0 < manifest.first_seq {
                self.next_seq = LogSeq(manifest.first_seq);
            }
            let known_end = self.unread.back().map_or(self.next_seq.0, |s| s.next_seq);
            self.unread.extend(
                manifest
                    .segments
                    .iter()
                    .filter(|s| s.next_seq > known_end)
                    .cloned(),
            );
            self.manifest_seen = Some(manifest.manifest);
        }
        while let Some(entry) = self.unread.pop_front() {
            if entry.first_seq > self.next_seq.0 {
                return Err(ArchiveError::Gap {
                    reason: format!(
                        "the tail is at seq {}, the archive's next segment starts at {}",
                        self.next_seq, entry.first_seq
                    ),
                });
            }
            let (bytes, _) = fetch_segment(&self.location, &entry).await?;
            let key = self.location.path(&entry.key).to_string();
            let mut records = Vec::new();
            let from = self.next_seq;
            crate::image::scan(&key, &bytes, LogSeq(entry.first_seq), |record| {
                if record.seq >= from {
                    records.push(ArchivedRecord {
                        seq: record.seq,
                        op: record.op,
                        payload: record.payload.to_vec(),
                    });
                }
            })?;
            self.next_seq = LogSeq(entry.next_seq.max(self.next_seq.0));
            if !records.is_empty() {
                return Ok(records);
            }
        }
        Ok(Vec::new())
    }
}
