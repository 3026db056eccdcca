//! [`Writer`]: the journal writer for tokio, as `../shared/reference/journal-writer-api.txt`
//! specifies it. Each call moves the [`JournalFile`] (and the caller's buffer) to tokio's
//! blocking pool, runs the synchronous I/O there, and takes both back, so the executor never
//! blocks on a write or an fsync.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::{JournalError, JournalFile, VfsIo};
use crate::vfs::Vfs;

/// What a blocking operation hands back: the file, the buffer it borrowed, and its outcome.
type Returned = (JournalFile<VfsIo>, Vec<u8>, Result<(), JournalError>);

/// Append-only writer for a journal file with compaction support.
///
/// Cancellation: dropping a future returned by [`Writer::append`] or [`Writer::compact`] does
/// not stop the operation, which runs to completion on the blocking pool; the next call waits
/// for it and takes the handle back (the dropped call's buffer is freed, its outcome unseen).
#[derive(Debug)]
pub struct Writer {
    /// `None` only while a blocking operation owns the handle (`in_flight`), or permanently
    /// after one panicked or after `compact` renamed the journal but could not reopen it (then
    /// the `JournalFile` is kept and reports `NoHandle` itself).
    file: Option<JournalFile<VfsIo>>,
    /// The blocking operation that owns the handle, if its caller stopped waiting.
    in_flight: Option<JoinHandle<Returned>>,
}

fn panicked(what: &str) -> JournalError {
    JournalError::NoHandle {
        why: format!("the blocking {what} panicked and took the file handle with it"),
    }
}

impl Writer {
    /// Opens (or creates) the journal at `path` in `vfs` for appending; see
    /// [`JournalFile::open`]: it takes the advisory lock `<path>.lock` (a second writer, in
    /// this process or another, gets [`JournalError::Locked`]), refuses a header naming another
    /// format version ([`JournalError::BadHeader`] with both versions), and cuts a torn tail.
    pub async fn open(vfs: Arc<dyn Vfs>, path: impl Into<String>) -> Result<Self, JournalError> {
        let path = path.into();
        let file = tokio::task::spawn_blocking(move || JournalFile::open_blocking(vfs, &path))
            .await
            .map_err(|_| panicked("open"))??;
        Ok(Writer {
            file: Some(file),
            in_flight: None,
        })
    }

    /// Appends framed journal bytes (made by [`super::encode_frames`]) and fsyncs, writing the
    /// file header first if this is the first data written to the file. Durable when it returns
    /// `Ok`; see [`JournalFile::append`] for exactly what is synced and how a failure is rolled
    /// back.
    ///
    /// Moves `buf`'s contents to the blocking pool without a copy and restores them into `buf`
    /// afterwards, on success and on error alike (same pointer, same capacity), so the caller
    /// can clear, refill and reuse one allocation: the writer allocates nothing per append
    /// (tokio's `spawn_blocking` allocates its task).
    pub async fn append(&mut self, buf: &mut Vec<u8>) -> Result<(), JournalError> {
        let mut file = self.take_file().await?;
        let bytes = std::mem::take(buf);
        let (file, bytes, result) = self
            .run(move || {
                let result = file.append_blocking(&bytes);
                (file, bytes, result)
            })
            .await?;
        *buf = bytes;
        self.file = Some(file);
        result
    }

    /// Atomically replaces the journal with `snapshot`, a freshly framed encoding of the whole
    /// session state (`encode_frames(&snapshot_ops(&state))`); see [`JournalFile::compact`]
    /// for the staging, the rename, the directory sync and what each failure leaves.
    pub async fn compact(&mut self, snapshot: Vec<u8>) -> Result<(), JournalError> {
        let mut file = self.take_file().await?;
        let (file, _, result) = self
            .run(move || {
                let result = file.compact_blocking(&snapshot);
                (file, snapshot, result)
            })
            .await?;
        self.file = Some(file);
        result
    }

    /// Where the last whole op ends (the file's length), once no operation is in flight.
    pub fn clean_end(&self) -> Option<u64> {
        self.file.as_ref().map(JournalFile::clean_end)
    }

    /// Runs `op` on the blocking pool. If the caller stops waiting, the handle stays in
    /// `in_flight` for the next call to collect.
    async fn run(
        &mut self,
        op: impl FnOnce() -> Returned + Send + 'static,
    ) -> Result<Returned, JournalError> {
        let task = self.in_flight.insert(tokio::task::spawn_blocking(op));
        let returned = task.await;
        self.in_flight = None;
        returned.map_err(|_| panicked("journal operation"))
    }

    /// Takes the file handle for a blocking operation, first collecting it from an operation
    /// whose caller stopped waiting; errors if a previous operation left the writer without
    /// one (only possible after a panic).
    async fn take_file(&mut self) -> Result<JournalFile<VfsIo>, JournalError> {
        if let Some(task) = self.in_flight.as_mut() {
            let returned = task.await;
            self.in_flight = None;
            let (file, _, _) = returned.map_err(|_| panicked("journal operation"))?;
            self.file = Some(file);
        }
        self.file
            .take()
            .ok_or_else(|| panicked("journal operation"))
    }
}
