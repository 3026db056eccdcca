//! [`AsyncWal`]: the WAL's tokio API over a [`Wal`], the same in every [`crate::Mode`]. Each
//! call makes the [`Wal`]'s checks, in the same order, and goes to the same engine's call for
//! tasks.

use std::ops::Range;
use std::sync::Arc;

use stele::wal::{LogSeq, VisibleRecord, WalRetirement, WalTruncation, WalWriterStats};

use super::engine::on_blocking_pool;
use super::error::WalError;
use super::handle::Wal;
use crate::Mode;

/// The tokio API over a [`Wal`]: the same log, and sandboxed the same instance, so threads and
/// tasks share groups. `Clone`, `Send + Sync`.
///
/// Natively, commits and flushes wait as tasks (`WalWriter::commit_many_durable_async` and
/// its siblings): a waiting call holds a waker, not a thread, and only a group's leader blocks,
/// once per group (in `block_in_place` on a multi-thread runtime, on the blocking pool on a
/// current-thread one); the rarer calls run whole on the blocking pool. Sandboxed, every call
/// is a request the task awaits. Sandboxed-plain, every call runs on the blocking pool.
///
/// Cancellation: dropping a future returned here never loses a record. Natively a dropped
/// call's records are staged before it first waits and go out with the next group (a leader's
/// turn it started runs to its end); sandboxed the guest task runs to completion in
/// the instance. A record staged by a dropped call becomes durable with its group.
#[derive(Clone, Debug)]
pub struct AsyncWal {
    wal: Wal,
}

impl Wal {
    /// The tokio API over this same log.
    pub fn to_async(&self) -> AsyncWal {
        AsyncWal { wal: self.clone() }
    }
}

impl AsyncWal {
    /// The synchronous API over this same log.
    pub fn to_sync(&self) -> Wal {
        self.wal.clone()
    }

    /// Where this log's engine runs.
    pub fn mode(&self) -> Mode {
        self.wal.mode()
    }

    /// See [`stele::wal::WalWriter::commit`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many(&[(op, payload)]).await.map(|r| r.start)
    }

    /// See [`stele::wal::WalWriter::commit_durable`]: once this resolves `Ok`, the record is
    /// durable as the policy says.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalError> {
        self.commit_many_durable(&[(op, payload)])
            .await
            .map(|r| r.start)
    }

    /// See [`stele::wal::WalWriter::commit_many`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalError> {
        let encoded_bytes = self.wal.checked(records)?;
        self.wal.pacer.pace().await?;
        (self.wal.engine.clone())
            .commit_many_async(records, encoded_bytes, false)
            .await
    }

    /// See [`stele::wal::WalWriter::commit_many_durable`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalError> {
        let encoded_bytes = self.wal.checked(records)?;
        self.wal.pacer.pace().await?;
        (self.wal.engine.clone())
            .commit_many_async(records, encoded_bytes, true)
            .await
    }

    /// See [`stele::wal::WalWriter::flush`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn flush(&self) -> Result<(), WalError> {
        self.wal.engine.clone().flush_async().await
    }

    /// See [`Wal::seal_active_segment`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn seal_active_segment(&self) -> Result<bool, WalError> {
        self.wal.engine.clone().seal_active_segment_async().await
    }

    /// See [`stele::wal::WalWriter::visible_records`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        (self.wal.engine.clone())
            .visible_records_async(first_seq, limit)
            .await
    }

    /// See [`stele::wal::WalWriter::retire_visible_through`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalError> {
        (self.wal.engine.clone())
            .retire_visible_through_async(absorbed_through)
            .await
    }

    /// See [`stele::wal::WalWriter::stats`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn stats(&self) -> Result<WalWriterStats, WalError> {
        self.wal.engine.clone().stats_async().await
    }

    /// See [`Wal::checkpoint`].
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub async fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalError> {
        (self.wal.engine.clone())
            .checkpoint_async(absorbed_through)
            .await
    }

    /// See [`Wal::truncate_through`].
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub async fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        if self.wal.archive_gate().is_none() {
            return self
                .wal
                .engine
                .clone()
                .truncate_through_async(through)
                .await;
        }
        // The gate's bound needs the live segments first: two calls, taken together on the
        // blocking pool.
        on_blocking_pool(Arc::new(self.wal.clone()), move |wal| {
            wal.truncate_through(through)
        })
        .await
    }

    /// See [`Wal::segments`].
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        self.wal.engine.clone().segments_async().await
    }
}
