//! The `stele:log/journal-async` export: the same [`JournalFile`] code as the plain export,
//! driven by [`WitIo::Async`], whose writes and syncs await the `vfs-async` imports. While one
//! journal call waits on the host's fsync, the instance serves its other calls; calls on one
//! writer wait for each other ([`Baton`]), in the order they reach the guest.

use crate::journal::JournalFile;

use super::Component;
use super::baton::Baton;
use super::exports::stele::log::journal as wit_types;
use super::exports::stele::log::journal_async as wit;
use super::journal::{framed, journal_error, replay_export};
use super::wit_io::WitIo;

/// One journal writer.
pub struct AsyncJournal(Baton<JournalFile<WitIo>>);

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
        Ok(wit::Writer::new(AsyncJournal(Baton::new(file))))
    }

    async fn append(&self, frames: Vec<u8>) -> Result<(), wit_types::JournalError> {
        let mut file = self.0.take().await;
        file.append(&frames).await.map_err(journal_error)
    }

    async fn append_ops(
        &self,
        ops: Vec<wit_types::JournalOp>,
    ) -> Result<(), wit_types::JournalError> {
        let frames = framed(ops)?;
        let mut file = self.0.take().await;
        file.append(&frames).await.map_err(journal_error)
    }

    async fn compact_ops(
        &self,
        ops: Vec<wit_types::JournalOp>,
    ) -> Result<(), wit_types::JournalError> {
        let snapshot = framed(ops)?;
        let mut file = self.0.take().await;
        file.compact(&snapshot).await.map_err(journal_error)
    }

    async fn compact(&self, snapshot: Vec<u8>) -> Result<(), wit_types::JournalError> {
        let mut file = self.0.take().await;
        file.compact(&snapshot).await.map_err(journal_error)
    }

    async fn clean_end(&self) -> u64 {
        self.0.take().await.clean_end()
    }
}
