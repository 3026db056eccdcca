//! [`Writer`]: the journal writer for tokio, as `../shared/reference/journal-writer-api.txt`
//! specifies it. Each call moves the journal (and the caller's buffer) to tokio's blocking
//! pool, runs the synchronous I/O there, and takes both back, so the executor never blocks on a
//! write or an fsync.
//!
//! The journal it drives is any [`BlockingJournal`]: natively a [`JournalFile`] over a `Vfs`;
//! the host crate plugs in the component, so every mode gets this same driver.

#![expect(
    clippy::disallowed_methods,
    reason = "the tokio driver runs the journal's blocking calls on tokio's blocking pool"
)]

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::{JournalError, JournalFile};
use crate::vfs::{ReadyIo, Vfs};

/// A journal whose calls block the calling thread until their I/O is done.
pub trait BlockingJournal: Send + 'static {
    /// What its calls fail with.
    type Error: std::fmt::Debug + Send + 'static;
    /// Appends whole op frames and makes them durable ([`JournalFile::append`]).
    fn append(&mut self, frames: &[u8]) -> Result<(), Self::Error>;
    /// Atomically replaces the journal with `snapshot` ([`JournalFile::compact`]).
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), Self::Error>;
    /// Where the last whole op ends (the file's length).
    fn clean_end(&mut self) -> Result<u64, Self::Error>;
    /// The error every call returns once a blocking operation panicked with the journal.
    fn lost(why: String) -> Self::Error;
}

impl BlockingJournal for JournalFile<ReadyIo> {
    type Error = JournalError;
    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError> {
        self.append_blocking(frames)
    }
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.compact_blocking(snapshot)
    }
    fn clean_end(&mut self) -> Result<u64, JournalError> {
        Ok(JournalFile::clean_end(self))
    }
    fn lost(why: String) -> JournalError {
        JournalError::NoHandle { why }
    }
}

/// What a blocking operation hands back: the journal, the buffer it borrowed, and its outcome.
type Returned<J> = (J, Vec<u8>, Result<(), <J as BlockingJournal>::Error>);

/// Append-only writer for a journal file with compaction support.
///
/// Cancellation: dropping a future returned by [`Writer::append`] or [`Writer::compact`] does
/// not stop the operation, which runs to completion on the blocking pool; the next call waits
/// for it and takes the handle back (the dropped call's buffer is freed, its outcome unseen).
#[derive(Debug)]
pub struct Writer<J: BlockingJournal = JournalFile<ReadyIo>> {
    /// `None` only while a blocking operation owns the handle (`in_flight`), or permanently
    /// after one panicked. (After `compact` renamed the journal but could not reopen it, the
    /// `JournalFile` is kept and reports `NoHandle` itself.)
    file: Option<J>,
    /// The blocking operation that owns the handle, if its caller stopped waiting.
    in_flight: Option<JoinHandle<Returned<J>>>,
}

fn panicked<J: BlockingJournal>(what: &str) -> J::Error {
    J::lost(format!(
        "the blocking {what} panicked and took the file handle with it"
    ))
}

impl Writer<JournalFile<ReadyIo>> {
    /// Opens (or creates) the journal at `path` in `vfs` for appending; see
    /// [`JournalFile::open`]: it takes the advisory lock `<path>.lock` (a second writer, in
    /// this process or another, gets [`JournalError::Locked`]), refuses a header naming another
    /// format version ([`JournalError::BadHeader`] with both versions), and cuts a torn tail.
    pub async fn open(vfs: Arc<dyn Vfs>, path: impl Into<String>) -> Result<Self, JournalError> {
        let path = path.into();
        let file = tokio::task::spawn_blocking(move || JournalFile::open_blocking(vfs, &path))
            .await
            .map_err(|_| panicked::<JournalFile<ReadyIo>>("open"))??;
        Ok(Writer::new(file))
    }
}

impl<J: BlockingJournal> Writer<J> {
    /// Drives an open journal.
    pub fn new(journal: J) -> Self {
        Writer {
            file: Some(journal),
            in_flight: None,
        }
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
    pub async fn append(&mut self, buf: &mut Vec<u8>) -> Result<(), J::Error> {
        let mut file = self.take_file().await?;
        let bytes = std::mem::take(buf);
        let (file, bytes, result) = self
            .run(move || {
                let result = file.append(&bytes);
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
    pub async fn compact(&mut self, snapshot: Vec<u8>) -> Result<(), J::Error> {
        let mut file = self.take_file().await?;
        let (file, _, result) = self
            .run(move || {
                let result = file.compact(&snapshot);
                (file, snapshot, result)
            })
            .await?;
        self.file = Some(file);
        result
    }

    /// Where the last whole op ends (the file's length).
    pub async fn clean_end(&mut self) -> Result<u64, J::Error> {
        let mut file = self.take_file().await?;
        let result = file.clean_end();
        self.file = Some(file);
        result
    }

    /// Runs `op` on the blocking pool. If the caller stops waiting, the handle stays in
    /// `in_flight` for the next call to collect.
    async fn run(
        &mut self,
        op: impl FnOnce() -> Returned<J> + Send + 'static,
    ) -> Result<Returned<J>, J::Error> {
        let task = self.in_flight.insert(tokio::task::spawn_blocking(op));
        let returned = task.await;
        self.in_flight = None;
        returned.map_err(|_| panicked::<J>("journal operation"))
    }

    /// Takes the file handle for a blocking operation, first collecting it from an operation
    /// whose caller stopped waiting; errors if a previous operation left the writer without
    /// one (only possible after a panic).
    async fn take_file(&mut self) -> Result<J, J::Error> {
        if let Some(task) = self.in_flight.as_mut() {
            let returned = task.await;
            self.in_flight = None;
            let (file, _, _) = returned.map_err(|_| panicked::<J>("journal operation"))?;
            self.file = Some(file);
        }
        self.file
            .take()
            .ok_or_else(|| panicked::<J>("journal operation"))
    }
}
