//! [`ArchiveGate`]: what a [`crate::Wal`] must respect while an archiver ships its segments.
//!
//! An archiver (the `stele-archive` crate) attaches one gate to a log with
//! [`crate::Wal::attach_archive_gate`] and moves it forward as segments land in object storage.
//! The gate then holds the log to two rules, in every [`crate::Mode`], because the host's
//! [`crate::Wal`] enforces them before a call reaches the engine:
//! - **Retention.** [`crate::Wal::truncate_through`] never deletes a segment holding a record
//!   the archive does not have, nor one of the newest [`ArchiveGate::local_segments_kept`]
//!   sealed segments (the local retention window, for readers on this machine). The request is
//!   lowered to what the gate allows; the returned [`stele::wal::WalTruncation`] says what was
//!   kept.
//! - **Backlog.** A commit that would take the bytes written but not yet archived past
//!   [`ArchiveGate::unarchived_bytes_max`] is refused with [`ArchiveBacklog`] before it is
//!   staged: while the store is unreachable the log stops accepting records instead of
//!   outgrowing the disk or dropping any. It accepts again as soon as the archiver catches up.
//!
//! Journals and push logs are archived as whole files: a [`CompactionListener`] attached to a
//! [`crate::Journal`] or [`crate::PushLog`] hears of each compaction that replaced the file,
//! so that the archiver ships the new generation.
//!
//! The backlog is counted in encoded record bytes (what the segments hold after their
//! headers). A commit counts when it is admitted, so a commit that then fails still counts: the
//! count can run ahead of the disk, never behind it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use stele::wal::LogSeq;

/// Told, after a compaction has durably replaced a journal or push log, the file's path, so
/// that its new generation can be archived. Called on the thread that compacted; it must
/// return quickly (queue the name, do the upload elsewhere).
pub trait CompactionListener: Send + Sync + std::fmt::Debug {
    /// The file at `path` (root-relative) was replaced by a compaction.
    fn compacted(&self, path: &str);
}

/// A commit refused because the archive is too far behind: see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "archive backlog: {unarchived_bytes} bytes written but not archived, {batch_bytes} more \
     would pass the bound of {unarchived_bytes_max}{}",
    if *stopped { " (the archiver has stopped)" } else { "" }
)]
pub struct ArchiveBacklog {
    /// Encoded record bytes written locally and not yet archived.
    pub unarchived_bytes: u64,
    /// The refused batch's encoded bytes.
    pub batch_bytes: u64,
    /// The gate's bound.
    pub unarchived_bytes_max: u64,
    /// The archiver has stopped (fenced, diverged, or shut down): the backlog will not drain
    /// until an archiver is attached again.
    pub stopped: bool,
}

/// The shared state between one log and its archiver. All fields are atomics: commits read
/// them on every call, the archiver writes them after each upload.
#[derive(Debug)]
pub struct ArchiveGate {
    /// The first seq the archive does not hold.
    archived_next: AtomicU64,
    unarchived_bytes: AtomicU64,
    unarchived_bytes_max: u64,
    local_segments_kept: usize,
    stopped: AtomicBool,
}

impl ArchiveGate {
    /// A gate for a log whose archive holds every record before `archived_next`, with
    /// `unarchived_bytes` already on disk past it, refusing commits past `unarchived_bytes_max`
    /// and keeping the newest `local_segments_kept` sealed segments locally.
    pub fn new(
        archived_next: LogSeq,
        unarchived_bytes: u64,
        unarchived_bytes_max: u64,
        local_segments_kept: usize,
    ) -> ArchiveGate {
        ArchiveGate {
            archived_next: AtomicU64::new(archived_next.0),
            unarchived_bytes: AtomicU64::new(unarchived_bytes),
            unarchived_bytes_max,
            local_segments_kept,
            stopped: AtomicBool::new(false),
        }
    }

    /// The first seq the archive does not hold.
    pub fn archived_next(&self) -> LogSeq {
        LogSeq(self.archived_next.load(Ordering::Acquire))
    }

    /// Encoded record bytes admitted or found on disk and not yet archived.
    pub fn unarchived_bytes(&self) -> u64 {
        self.unarchived_bytes.load(Ordering::Acquire)
    }

    /// The backlog bound.
    pub fn unarchived_bytes_max(&self) -> u64 {
        self.unarchived_bytes_max
    }

    /// Sealed segments kept locally even once archived.
    pub fn local_segments_kept(&self) -> usize {
        self.local_segments_kept
    }

    /// Whether the archiver has said it stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Admits a batch of `batch_bytes` encoded bytes, or refuses it. A compare-and-swap loop,
    /// so that concurrent commits can never overshoot the bound together.
    pub fn admit(&self, batch_bytes: u64) -> Result<(), ArchiveBacklog> {
        let mut current = self.unarchived_bytes.load(Ordering::Acquire);
        loop {
            let after = current.saturating_add(batch_bytes);
            if after > self.unarchived_bytes_max {
                return Err(ArchiveBacklog {
                    unarchived_bytes: current,
                    batch_bytes,
                    unarchived_bytes_max: self.unarchived_bytes_max,
                    stopped: self.is_stopped(),
                });
            }
            match self.unarchived_bytes.compare_exchange_weak(
                current,
                after,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }

    /// The archiver's report: the archive now holds every record before `archived_next`, and
    /// `record_bytes` more encoded bytes of them than before. Never moves backwards.
    pub fn archived(&self, archived_next: LogSeq, record_bytes: u64) {
        self.archived_next
            .fetch_max(archived_next.0, Ordering::AcqRel);
        let _ = self
            .unarchived_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bytes| {
                Some(bytes.saturating_sub(record_bytes))
            });
    }

    /// The archiver's report that it stopped: the backlog now only grows, and a refused commit
    /// says so.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// The highest `through` that [`crate::Wal::truncate_through`] may pass to the engine for
    /// a request of `requested`, given the live segments' first seqs (the last one is being
    /// appended to): no segment holding an unarchived record and none of the window's may go.
    /// `None`: no segment may go.
    pub fn truncation_bound(&self, requested: LogSeq, live: &[LogSeq]) -> Option<LogSeq> {
        let sealed = live.len().saturating_sub(1);
        let deletable = sealed.saturating_sub(self.local_segments_kept);
        if deletable == 0 {
            return None;
        }
        // The first segment that must stay: everything before it may go.
        let first_kept = live[deletable];
        let bound = first_kept
            .0
            .min(self.archived_next().0)
            .checked_sub(1)?
            .min(requested.0);
        Some(LogSeq(bound))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_at_the_bound_and_reopens_as_the_archive_catches_up() {
        let gate = ArchiveGate::new(LogSeq(0), 0, 100, 0);
        gate.admit(60).unwrap();
        let refused = gate.admit(41).unwrap_err();
        assert_eq!(refused.unarchived_bytes, 60);
        assert!(!refused.stopped);
        gate.admit(40).unwrap();
        gate.archived(LogSeq(10), 70);
        assert_eq!(gate.unarchived_bytes(), 30);
        assert_eq!(gate.archived_next(), LogSeq(10));
        gate.archived(LogSeq(5), 0);
        assert_eq!(gate.archived_next(), LogSeq(10), "never backwards");
        gate.stop();
        assert!(gate.admit(71).unwrap_err().stopped);
    }

    #[test]
    fn truncation_keeps_unarchived_and_windowed_segments() {
        let live = [LogSeq(0), LogSeq(10), LogSeq(20), LogSeq(30)];
        // Archived through 24: segments 0 and 10 may go, 20 holds unarchived records.
        let gate = ArchiveGate::new(LogSeq(25), 0, u64::MAX, 0);
        assert_eq!(gate.truncation_bound(LogSeq(29), &live), Some(LogSeq(24)));
        assert_eq!(gate.truncation_bound(LogSeq(5), &live), Some(LogSeq(5)));
        // Nothing archived: nothing goes.
        let gate = ArchiveGate::new(LogSeq(0), 0, u64::MAX, 0);
        assert_eq!(gate.truncation_bound(LogSeq(29), &live), None);
        // Everything archived, two sealed segments kept: only segment 0 may go.
        let gate = ArchiveGate::new(LogSeq(40), 0, u64::MAX, 2);
        assert_eq!(gate.truncation_bound(LogSeq(29), &live), Some(LogSeq(9)));
        let gate = ArchiveGate::new(LogSeq(40), 0, u64::MAX, 3);
        assert_eq!(gate.truncation_bound(LogSeq(29), &live), None);
    }
}
