//! [`Journal`]: the journal's tokio API, the same in every [`Mode`].
//!
//! Every mode runs under one driver, [`stele::journal::Writer`]: each call moves the journal
//! and the caller's buffer to tokio's blocking pool and takes them back, so the executor never
//! blocks on a write or an fsync, and `append` gives back the caller's own allocation. Where
//! the engine runs is picked once, at open ([`super::engine`]):
//! - [`Mode::Native`]: the engine's [`stele::journal::JournalFile`] over the caller's [`Vfs`].
//! - [`Mode::Sandboxed`]: the async-ABI component's `journal-async` export, one instance served
//!   by the store driver as the sandboxed WAL's and push log's are: the blocking thread that
//!   makes a call drives the instance, and runs its sync, when the call is alone.
//! - [`Mode::SandboxedPlain`]: the plain component's `journal` export, in an instance of its
//!   own whose calls are serialized.
//!
//! Durability claims are the engine's ([`stele::journal::JournalFile::append`],
//! [`stele::journal::JournalFile::compact`]);
//! they hold in every mode, because the guest issues the same syncs through its imports.

use std::sync::Arc;

use stele::journal::{BlockingJournal, JournalOp, JournalRecovery, Writer, replay};
use stele::vfs::Vfs;

use super::convert::{plain as plain_journal, with_async as async_journal};
use super::engine::{JournalEngine, open_engine};
use super::error::JournalError;
use crate::Mode;
use crate::archive_gate::CompactionListener;
use crate::quota::{Pacer, with_quota};
use crate::sandbox::SandboxError;
use crate::sandbox::runtime::{Runtime, SandboxLimits, trap_error};

/// A journal writer, native or sandboxed, with the API of
/// `../shared/reference/journal-writer-api.txt`. One writer per journal: a second `open` of the
/// same path (in this process or, on [`crate::fs::RealFs`], another) fails with
/// [`stele::journal::JournalError::Locked`] until this one is dropped.
#[derive(Debug)]
pub struct Journal {
    writer: Writer<HostJournal>,
    mode: Mode,
    path: String,
    compaction_listener: Option<Arc<dyn CompactionListener>>,
    /// The tenant's rates, asked before every append and compaction.
    pacer: Pacer,
}

impl Journal {
    /// Opens (or creates) the journal at `path`; see [`stele::journal::JournalFile::open`]. Sandboxed, the
    /// instance has the default [`SandboxLimits`].
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub async fn open(vfs: Arc<dyn Vfs>, path: &str, mode: Mode) -> Result<Journal, JournalError> {
        Journal::open_with_limits(vfs, path, mode, SandboxLimits::default()).await
    }

    /// [`Journal::open`], with the sandboxed instance bounded by `limits` (ignored natively).
    #[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
    pub async fn open_with_limits(
        vfs: Arc<dyn Vfs>,
        path: &str,
        mode: Mode,
        limits: SandboxLimits,
    ) -> Result<Journal, JournalError> {
        let path = path.to_owned();
        let opened_path = path.clone();
        let vfs = with_quota(vfs, &limits).map_err(stele::journal::JournalError::Vfs)?;
        let pacer = Pacer::over(&vfs);
        let journal =
            tokio::task::spawn_blocking(move || HostJournal::open(vfs, &opened_path, mode, limits))
                .await
                .map_err(|_| lost("open panicked"))??;
        Ok(Journal {
            writer: Writer::new(journal),
            mode,
            path,
            compaction_listener: None,
            pacer,
        })
    }

    /// Where this journal's engine runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The quota's figures when the journal's storage has one; see
    /// [`crate::Wal::quota_stats`].
    pub fn quota_stats(&self) -> Option<stele::vfs::QuotaStats> {
        self.pacer.stats()
    }

    /// Appends whole op frames ([`stele::journal::encode_frames`]) and makes them durable; see
    /// [`stele::journal::JournalFile::append`]. `buf` comes back with the same allocation and contents, on
    /// success and on error alike.
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn append(&mut self, buf: &mut Vec<u8>) -> Result<(), JournalError> {
        self.pacer.pace().await?;
        self.writer.append(buf).await
    }

    /// Atomically replaces the journal with `snapshot`; see
    /// [`stele::journal::JournalFile::compact`]. On `Ok`
    /// the attached [`CompactionListener`], if any, is told.
    #[tracing::instrument(level = "info", skip_all, fields(mode = self.mode().name()))]
    pub async fn compact(&mut self, snapshot: Vec<u8>) -> Result<(), JournalError> {
        self.pacer.pace().await?;
        self.writer.compact(snapshot).await?;
        if let Some(listener) = &self.compaction_listener {
            listener.compacted(&self.path);
        }
        Ok(())
    }

    /// Tells `listener` of every later successful [`Self::compact`] (an archiver ships each
    /// generation: `stele-archive`). Replaces an earlier listener.
    pub fn set_compaction_listener(&mut self, listener: Arc<dyn CompactionListener>) {
        self.compaction_listener = Some(listener);
    }

    /// The journal's root-relative path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where the last whole op ends (the file's length).
    #[tracing::instrument(level = "debug", skip_all, fields(mode = self.mode().name()))]
    pub async fn clean_end(&mut self) -> Result<u64, JournalError> {
        self.writer.clean_end().await
    }
}

/// Every op of the journal at `path` and what recovery found; cuts a torn tail unless a writer
/// holds the journal. See [`stele::journal::replay`].
#[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
pub async fn replay_journal(
    vfs: Arc<dyn Vfs>,
    path: &str,
    mode: Mode,
) -> Result<(Vec<JournalOp>, JournalRecovery), JournalError> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || replay_blocking(vfs, &path, mode))
        .await
        .map_err(|_| lost("replay panicked"))?
}

/// [`replay_journal`] on the calling thread.
#[tracing::instrument(level = "info", skip_all, fields(path = %path, mode = mode.name()))]
pub fn replay_blocking(
    vfs: Arc<dyn Vfs>,
    path: &str,
    mode: Mode,
) -> Result<(Vec<JournalOp>, JournalRecovery), JournalError> {
    match mode {
        Mode::Native => Ok(replay(&*vfs, path)?),
        Mode::Sandboxed => {
            let runtime = Runtime::get()?;
            let mut store = runtime.store_for_async_inline(vfs, SandboxLimits::default());
            let engine = futures::executor::block_on(runtime.instantiate_async_in(&mut store))?;
            let api = engine.stele_log_journal_async();
            let path = path.to_owned();
            let answer = futures::executor::block_on(
                store.run_concurrent(async |acc| api.call_replay(acc, path).await),
            );
            let (ops, recovery) =
                flatten(answer)?.map_err(async_journal::from_wit_journal_error)?;
            Ok((
                async_journal::from_wit_ops(ops),
                async_journal::from_wit_journal_recovery(recovery),
            ))
        }
        Mode::SandboxedPlain => {
            let (mut store, engine) = Runtime::get()?.instantiate(vfs, SandboxLimits::default())?;
            let answer = engine.stele_log_journal().call_replay(&mut store, path);
            let (ops, recovery) = answer
                .map_err(trap_error)?
                .map_err(plain_journal::from_wit_journal_error)?;
            Ok((
                plain_journal::from_wit_ops(ops),
                plain_journal::from_wit_journal_recovery(recovery),
            ))
        }
    }
}

fn lost(why: &str) -> JournalError {
    <HostJournal as BlockingJournal>::lost(why.into())
}

/// `run_concurrent` wraps the call's own result in the event loop's.
fn flatten<R>(answer: wasmtime::Result<wasmtime::Result<R>>) -> Result<R, SandboxError> {
    answer.and_then(|inner| inner).map_err(trap_error)
}

/// The journal's engine behind the blocking interface [`Writer`] drives, wherever it runs.
/// Every append is checked here, before any engine sees it, in every mode alike: a sandboxed
/// engine is then never handed one larger than its memory may hold (the engine checks again,
/// as it must for callers without this crate).
pub(crate) struct HostJournal {
    engine: Box<dyn JournalEngine>,
    mode: Mode,
}

impl std::fmt::Debug for HostJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostJournal")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl HostJournal {
    fn open(
        vfs: Arc<dyn Vfs>,
        path: &str,
        mode: Mode,
        limits: SandboxLimits,
    ) -> Result<HostJournal, JournalError> {
        let engine = open_engine(vfs, path, mode, limits)?;
        Ok(HostJournal { engine, mode })
    }
}

impl BlockingJournal for HostJournal {
    type Error = JournalError;

    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError> {
        stele::journal::check_append(frames)?;
        self.engine.append(frames)
    }

    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.engine.compact(snapshot)
    }

    fn clean_end(&mut self) -> Result<u64, JournalError> {
        self.engine.clean_end()
    }

    fn lost(why: String) -> JournalError {
        stele::journal::JournalError::NoHandle { why }.into()
    }
}
