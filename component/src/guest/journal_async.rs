//! The `stele:log/journal-async` export: the same [`JournalFile`] code as the plain export,
//! driven by [`WitIo::Async`], whose writes and syncs await the `vfs-async` imports. While one
//! journal call waits on the host's fsync, the instance serves its other calls.

use std::cell::Cell;

use crate::journal::JournalFile;

use super::Component;
use super::exports::stele::log::journal as wit_types;
use super::exports::stele::log::journal_async as wit;
use super::journal::{journal_error, replay_export};
use super::wit_io::WitIo;

/// One journal writer. A call takes the `JournalFile` out for its duration: a second call on
/// the same writer while one is in flight (which the Stele host never makes) is refused with
/// `no-handle`, not interleaved.
pub struct AsyncJournal(Cell<Option<JournalFile<WitIo>>>);

impl AsyncJournal {
    fn take(&self) -> Result<JournalFile<WitIo>, wit_types::JournalError> {
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
        let file = JournalFile::open(WitIo::Async, &path)
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
