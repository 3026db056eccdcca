//! The `stele:log/journal-async` export: the same [`JournalFile`] code as the plain export,
//! driven by [`WitAsyncIo`], whose writes and syncs await the `vfs-async` imports. While one
//! journal call waits on the host's fsync, the instance serves its other calls.

use std::cell::Cell;

use crate::journal::{JournalFile, JournalIo};
use crate::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock};

use super::Component;
use super::exports::stele::log::journal as wit_types;
use super::exports::stele::log::journal_async as wit;
use super::journal::{journal_error, replay_export};
use super::stele::log::vfs_async;
use super::vfs::{WitFile, WitVfs, from_wit, open_file, wit_sync_kind};

/// Writes up to this size go through the synchronous `vfs.write-at`: a page-cache write of
/// 64 KiB costs microseconds, less than a hop to the host's I/O thread; the fsync after it is
/// what is worth suspending on. The same bound as the WAL's async driver, for the same reason.
const INLINE_WRITE_BYTES_MAX: usize = 64 << 10;

/// [`JournalIo`] over the imports: metadata calls synchronous, writes and syncs async.
#[derive(Debug)]
pub struct WitAsyncIo;

impl JournalIo for WitAsyncIo {
    type File = WitFile;
    fn open(&self, path: &str, mode: OpenMode) -> Result<WitFile, VfsError> {
        open_file(path, mode)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        WitVfs.rename(from, to)
    }
    fn remove(&self, path: &str) -> Result<(), VfsError> {
        WitVfs.remove(path)
    }
    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        WitVfs.lock_exclusive(path)
    }
    async fn write_at(&self, file: &WitFile, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        if data.len() <= INLINE_WRITE_BYTES_MAX {
            return file.write_at(offset, data);
        }
        vfs_async::write_at(&file.0, offset, data.to_vec())
            .await
            .map_err(from_wit)
    }
    async fn sync(&self, file: &WitFile, kind: SyncKind) -> Result<(), VfsError> {
        vfs_async::sync(&file.0, wit_sync_kind(kind))
            .await
            .map_err(from_wit)
    }
    async fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        vfs_async::sync_dir(dir.to_owned()).await.map_err(from_wit)
    }
}

/// One journal writer. A call takes the `JournalFile` out for its duration: a second call on
/// the same writer while one is in flight (which the Stele host never makes) is refused with
/// `no-handle`, not interleaved.
pub struct AsyncJournal(Cell<Option<JournalFile<WitAsyncIo>>>);

impl AsyncJournal {
    fn take(&self) -> Result<JournalFile<WitAsyncIo>, wit_types::JournalError> {
        self.0.take().ok_or_else(|| {
            wit_types::JournalError::NoHandle(
                "another call on this journal writer is in flight".into(),
            )
        })
    }
}

impl wit::Guest for Component {
    type Writer = AsyncJournal;

    async fn replay(
        path: String,
    ) -> Result<(Vec<wit_types::JournalOp>, wit_types::JournalRecovery), wit_types::JournalError>
    {
        replay_export(&path)
    }
}

impl wit::GuestWriter for AsyncJournal {
    async fn open(path: String) -> Result<wit::Writer, wit_types::JournalError> {
        let file = JournalFile::open(WitAsyncIo, &path)
            .await
            .map_err(journal_error)?;
        Ok(wit::Writer::new(AsyncJournal(Cell::new(Some(file)))))
    }

    async fn append(&self, frames: Vec<u8>) -> Result<(), wit_types::JournalError> {
        let mut file = self.take()?;
        let result = file.append(&frames).await;
        self.0.set(Some(file));
        result.map_err(journal_error)
    }

    async fn compact(&self, snapshot: Vec<u8>) -> Result<(), wit_types::JournalError> {
        let mut file = self.take()?;
        let result = file.compact(&snapshot).await;
        self.0.set(Some(file));
        result.map_err(journal_error)
    }

    async fn clean_end(&self) -> u64 {
        match self.0.take() {
            Some(file) => {
                let end = file.clean_end();
                self.0.set(Some(file));
                end
            }
            None => 0,
        }
    }
}
