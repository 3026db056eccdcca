//! [`WalEngine`]: what a WAL handle asks of the engine, wherever the engine runs. There is one
//! implementation per [`Mode`]: [`WalWriter`] itself (here), the plain instance
//! ([`super::plain::PlainWal`]) and the async instance ([`super::session::AsyncSandbox`]).
//! A handle picks one when it opens the log, so that no call matches on the mode again.
//!
//! A handle checks every batch before it reaches an engine ([`super::handle::Wal`]'s
//! `checked`), so an engine is only ever given a batch within the writer's bounds.
//!
//! The calls for tasks have defaults that run the call for threads on tokio's blocking pool;
//! an engine that can wait as a task overrides them (natively, commits and flushes use the
//! writer's task driver; sandboxed, every call is a request that a task awaits).

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use stele::wal::{LogSeq, VisibleRecord, WalRetirement, WalTruncation, WalWriter, WalWriterStats};

use super::error::WalError;
use crate::Mode;
use crate::sandbox::SandboxError;

/// One batch of records, as `(op, payload)`.
pub(crate) type Batch<'a> = &'a [(u16, &'a [u8])];

/// A call for tasks, in flight.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, WalError>> + Send + 'a>>;

/// What a WAL handle asks of the engine. `encoded_bytes` is the batch's size as the handle's
/// check found it.
pub(crate) trait WalEngine: Send + Sync + 'static {
    fn mode(&self) -> Mode;

    /// Commits a checked batch: durably (`commit_many_durable`) or visibly only.
    fn commit_many(
        &self,
        records: Batch<'_>,
        encoded_bytes: usize,
        durable: bool,
    ) -> Result<Range<LogSeq>, WalError>;
    fn flush(&self) -> Result<(), WalError>;
    fn seal_active_segment(&self) -> Result<bool, WalError>;
    fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError>;
    fn retire_visible_through(&self, through: LogSeq) -> Result<WalRetirement, WalError>;
    fn stats(&self) -> Result<WalWriterStats, WalError>;
    fn checkpoint(&self, through: LogSeq) -> Result<(), WalError>;
    fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError>;
    fn segments(&self) -> Result<Vec<LogSeq>, WalError>;

    /// [`Self::commit_many`] for tasks. The records are copied for the blocking pool.
    fn commit_many_async<'a>(
        self: Arc<Self>,
        records: Batch<'a>,
        encoded_bytes: usize,
        durable: bool,
    ) -> Pending<'a, Range<LogSeq>> {
        let owned: Vec<(u16, Vec<u8>)> = records.iter().map(|(op, p)| (*op, p.to_vec())).collect();
        on_blocking_pool(self, move |engine| {
            let records: Vec<(u16, &[u8])> = owned.iter().map(|(op, p)| (*op, &p[..])).collect();
            engine.commit_many(&records, encoded_bytes, durable)
        })
    }
    fn flush_async(self: Arc<Self>) -> Pending<'static, ()> {
        on_blocking_pool(self, |engine| engine.flush())
    }
    fn seal_active_segment_async(self: Arc<Self>) -> Pending<'static, bool> {
        on_blocking_pool(self, |engine| engine.seal_active_segment())
    }
    fn visible_records_async(
        self: Arc<Self>,
        first_seq: LogSeq,
        limit: usize,
    ) -> Pending<'static, Vec<VisibleRecord>> {
        on_blocking_pool(self, move |engine| engine.visible_records(first_seq, limit))
    }
    fn retire_visible_through_async(
        self: Arc<Self>,
        through: LogSeq,
    ) -> Pending<'static, WalRetirement> {
        on_blocking_pool(self, move |engine| engine.retire_visible_through(through))
    }
    fn stats_async(self: Arc<Self>) -> Pending<'static, WalWriterStats> {
        on_blocking_pool(self, |engine| engine.stats())
    }
    fn checkpoint_async(self: Arc<Self>, through: LogSeq) -> Pending<'static, ()> {
        on_blocking_pool(self, move |engine| engine.checkpoint(through))
    }
    fn truncate_through_async(self: Arc<Self>, through: LogSeq) -> Pending<'static, WalTruncation> {
        on_blocking_pool(self, move |engine| engine.truncate_through(through))
    }
    fn segments_async(self: Arc<Self>) -> Pending<'static, Vec<LogSeq>> {
        on_blocking_pool(self, |engine| engine.segments())
    }
}

/// Runs a call for threads on tokio's blocking pool; a panic in it is typed.
pub(crate) fn on_blocking_pool<E: ?Sized + Send + Sync + 'static, R: Send + 'static>(
    engine: Arc<E>,
    call: impl FnOnce(&E) -> Result<R, WalError> + Send + 'static,
) -> Pending<'static, R> {
    Box::pin(async move {
        match tokio::task::spawn_blocking(move || call(&engine)).await {
            Ok(result) => result,
            Err(join) => Err(SandboxError::Panicked(format!("the blocking call: {join}")).into()),
        }
    })
}

/// Natively the engine is the writer, called directly. Commits and flushes for tasks use its
/// task driver (`WalWriter::*_async`): a waiting call holds a waker, not a thread, and only a
/// group's leader blocks, once per group.
impl WalEngine for WalWriter {
    fn mode(&self) -> Mode {
        Mode::Native
    }

    fn commit_many(
        &self,
        records: Batch<'_>,
        _encoded_bytes: usize,
        durable: bool,
    ) -> Result<Range<LogSeq>, WalError> {
        Ok(match durable {
            true => WalWriter::commit_many_durable(self, records)?,
            false => WalWriter::commit_many(self, records)?,
        })
    }
    fn flush(&self) -> Result<(), WalError> {
        Ok(WalWriter::flush(self)?)
    }
    fn seal_active_segment(&self) -> Result<bool, WalError> {
        Ok(WalWriter::seal_active_segment(self)?)
    }
    fn visible_records(
        &self,
        first_seq: LogSeq,
        limit: usize,
    ) -> Result<Vec<VisibleRecord>, WalError> {
        Ok(WalWriter::visible_records(self, first_seq, limit))
    }
    fn retire_visible_through(&self, through: LogSeq) -> Result<WalRetirement, WalError> {
        Ok(WalWriter::retire_visible_through(self, through)?)
    }
    fn stats(&self) -> Result<WalWriterStats, WalError> {
        Ok(WalWriter::stats(self))
    }
    fn checkpoint(&self, through: LogSeq) -> Result<(), WalError> {
        Ok(WalWriter::checkpoint(self, through)?)
    }
    fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalError> {
        Ok(WalWriter::truncate_through(self, through)?)
    }
    fn segments(&self) -> Result<Vec<LogSeq>, WalError> {
        Ok(WalWriter::segments(self))
    }

    fn commit_many_async<'a>(
        self: Arc<Self>,
        records: Batch<'a>,
        _encoded_bytes: usize,
        durable: bool,
    ) -> Pending<'a, Range<LogSeq>> {
        Box::pin(async move {
            Ok(match durable {
                // Named in full: the trait's methods of the same names take the writer by `Arc`.
                true => WalWriter::commit_many_durable_async(&self, records).await?,
                false => WalWriter::commit_many_async(&self, records).await?,
            })
        })
    }
    fn flush_async(self: Arc<Self>) -> Pending<'static, ()> {
        Box::pin(async move { Ok(WalWriter::flush_async(&self).await?) })
    }
}
