//! What the thread driver keeps and lets go: the visible records it retains until the owner
//! retires them, a durable checkpoint, and truncation of the segments it covers. The rules are
//! the core's (retirement, [`crate::wal::group_commit`]) and
//! [`crate::wal::segment::SegmentRetention`]'s (what may be deleted, in which order, what is
//! synced); this file only takes the writer's locks.

use super::{Storage, WalWriter, lock};
use crate::vfs::DeviceIo;
use crate::wal::segment::WalTruncation;
use crate::wal::{LogSeq, VisibleRecord, WalRetentionError, WalRetireError, WalRetirement};

impl WalWriter {
    /// Returns at most `limit` retained records at or after `first_seq`, in seq order.
    ///
    /// Clones share the encoded WAL allocations. Records are retained from the moment they are
    /// visible until [`Self::retire_visible_through`] releases them, so this includes records not
    /// yet durable (and, after a failure, records that never will be).
    pub fn visible_records(&self, first_seq: LogSeq, limit: usize) -> Vec<VisibleRecord> {
        lock(&self.core).visible_records(first_seq, limit)
    }

    /// Releases retained records through `absorbed_through` (inclusive), which the caller has
    /// incorporated into its own state.
    ///
    /// # Errors
    /// [`WalRetireError::BeyondDurable`] if `absorbed_through` is not durable yet: the request is
    /// never clamped, and nothing is released.
    pub fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalRetireError> {
        lock(&self.core).retire_visible_through(absorbed_through)
    }

    /// Durably records that the owner has absorbed every record through `absorbed_through`
    /// (inclusive), which allows [`Self::truncate_through`] to delete them.
    ///
    /// Durability: on `Ok` the checkpoint survives power loss, whatever the policy (it is
    /// staged, fsynced, renamed into place and the directory fsynced). A checkpoint equal to
    /// the current one returns `Ok` and writes nothing.
    ///
    /// # Errors
    /// [`WalRetentionError::BeyondDurable`] unless `absorbed_through` is durable (never
    /// clamped); [`WalRetentionError::Regressed`] below the current checkpoint;
    /// [`WalRetentionError::NotSegmented`] for a single-file log; `Io` if writing failed, after
    /// which the old checkpoint is still the one in effect for this writer, even when the
    /// failure was the directory sync after the rename (a crash may then bring back either):
    /// [`Self::truncate_through`] relies only on a checkpoint whose call returned `Ok`. Calling
    /// `checkpoint` again writes it again.
    pub fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalRetentionError> {
        let Storage::Segments(segments) = &self.storage else {
            return Err(WalRetentionError::NotSegmented);
        };
        let durable_end = self.durable_end();
        let done = lock(&segments.retention).checkpoint(
            segments.io.vfs(),
            &segments.dir,
            absorbed_through,
            durable_end,
        );
        tracing::info!(dir = %segments.dir, absorbed_through = absorbed_through.0, ok = done.is_ok(), "wal checkpoint");
        done
    }

    /// Deletes the segments whose records all lie at or below `through`, oldest first, then
    /// syncs the directory. The segment being appended to is never deleted.
    ///
    /// Durability: on `Ok` the deletions survive power loss. A crash midway leaves a suffix of
    /// the segments (deletion is oldest first), so a reopen never sees a gap.
    ///
    /// # Errors
    /// [`WalRetentionError::BeyondCheckpoint`] unless a checkpoint covers `through`;
    /// [`WalRetentionError::NotSegmented`]; `Io` if a delete or the directory sync failed (the
    /// segments deleted so far stay deleted; the call can be repeated). No acknowledgement
    /// depends on a deletion: if its directory sync failed, a crash may bring back a prefix of
    /// the deleted segments, whose records the checkpoint covers.
    pub fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalRetentionError> {
        let Storage::Segments(segments) = &self.storage else {
            return Err(WalRetentionError::NotSegmented);
        };
        let truncation = lock(&segments.retention).truncate_through(
            segments.io.vfs(),
            &segments.dir,
            through,
        )?;
        tracing::info!(
            dir = %segments.dir,
            through = through.0,
            segments_removed = truncation.segments_removed,
            "wal truncated"
        );
        if truncation.segments_removed > 0 {
            lock(&self.core).count_setup_syncs(0, 1);
        }
        Ok(truncation)
    }

    /// The first seqs of the live segments, in order (empty for a single-file log).
    pub fn segments(&self) -> Vec<LogSeq> {
        match &self.storage {
            Storage::SingleFile(_) => Vec::new(),
            Storage::Segments(segments) => lock(&segments.retention).live.clone(),
        }
    }

    /// The durable checkpoint: the seq the owner has absorbed through, if one was recorded.
    pub fn checkpointed_through(&self) -> Option<LogSeq> {
        match &self.storage {
            Storage::SingleFile(_) => None,
            Storage::Segments(segments) => lock(&segments.retention).checkpoint,
        }
    }
}
