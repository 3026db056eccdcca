//! [`ArchiveError`]: every way archiving, restoring, verifying or tailing can fail, each with
//! the key, seq or offset that explains it.

use stele::vfs::VfsError;
use stele::wal::WalOpenError;
use stele_host::WalError;

/// Why an archive operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The archive URL is not one this build can open.
    #[error("bad archive URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The object store refused or failed a request. Transient: the archiver retries on its
    /// next round.
    #[error("object store, {key}: {source}")]
    Store {
        /// The key the request was for (a prefix, for a listing).
        key: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// The local log's files could not be read or written.
    #[error("local log, {path}: {source}")]
    Local {
        /// The root-relative path.
        path: String,
        /// The filesystem's error.
        #[source]
        source: VfsError,
    },
    /// A local segment is not a valid WAL segment.
    #[error("local segment {path}: {source}")]
    LocalSegment {
        /// The root-relative path.
        path: String,
        /// What recovery found.
        #[source]
        source: WalOpenError,
    },
    /// A call on the attached log failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// A create-only put found the key holding different bytes. The archive and this log have
    /// diverged (another log was archived to the same prefix, or a restore to an earlier seq
    /// was reattached to it): the archiver stops rather than overwrite either.
    #[error(
        "{key} already holds {existing_bytes} different bytes (this log's are {our_bytes}): \
         the archive has diverged from this log"
    )]
    Diverged {
        /// The object's key.
        key: String,
        /// Its length in the store.
        existing_bytes: usize,
        /// The length this archiver meant to put.
        our_bytes: usize,
    },
    /// Another writer published a manifest this writer meant to publish: it has taken the
    /// archive over (a newer epoch), and this writer stops archiving.
    #[error(
        "fenced: manifest {manifest} was published by writer epoch {their_epoch} (this writer \
         is epoch {our_epoch}); this writer no longer archives"
    )]
    Fenced {
        /// The manifest number found taken.
        manifest: u64,
        /// The epoch that took it.
        their_epoch: u64,
        /// This writer's epoch.
        our_epoch: u64,
    },
    /// An object's bytes do not match its manifest entry: a flipped bit, a short object, a
    /// record out of place.
    #[error("{key} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The object's key.
        key: String,
        /// The first byte found wrong (the start of the first record that does not check).
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A manifest cannot be decoded, or breaks a rule of the format.
    #[error("bad manifest {key}: {reason}")]
    BadManifest {
        /// The manifest's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// There is no manifest under the prefix: nothing was ever archived there.
    #[error("no archive at {location}: no manifest under it")]
    NoManifest {
        /// The archive's location.
        location: String,
    },
    /// The local log and the archive do not line up: the local log starts after the
    /// archive's end (records in between exist nowhere), or its active segment began before
    /// the archive's end.
    #[error("the local log does not continue the archive: {reason}")]
    Gap {
        /// Which seqs disagree.
        reason: String,
    },
    /// A restore's `--to-seq` outside what the archive holds.
    #[error("seq {requested} is not in the archive, which holds seqs {first}..{next}")]
    SeqOutOfRange {
        /// The seq asked for.
        requested: u64,
        /// The archive's first seq.
        first: u64,
        /// The seq after its last archived one.
        next: u64,
    },
    /// A restore into a directory that already holds a log.
    #[error("restore target {dir} already holds {entries} entries; restore into a new directory")]
    TargetNotEmpty {
        /// The directory.
        dir: String,
        /// How many entries it holds.
        entries: usize,
    },
    /// A file generation name that cannot be archived (empty, or holds `/`).
    #[error("cannot archive {name:?} as a file generation: {reason}")]
    BadFileName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A close ([`crate::Archiver::close`]) did not ship the log's tail within its timeout:
    /// the records from `archived_next` up to `end` are on the local disk only.
    #[error(
        "the archive's tail was not shipped within {timeout:?}: records {archived_next} up to {end} are only local{}",
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default()
    )]
    CloseTimedOut {
        /// The close's bound ([`crate::ArchiveOptions::close_timeout`]).
        timeout: std::time::Duration,
        /// Every record before it is archived.
        archived_next: u64,
        /// Every record before it was to be archived: the log's durable end at the close.
        end: u64,
        /// The last round's error, if it failed.
        last_error: Option<String>,
    },
    /// The archiver stopped earlier (fenced, diverged or shut down) and does no more work.
    #[error("the archiver has stopped: {reason}")]
    Stopped {
        /// Why it stopped, as first reported.
        reason: String,
    },
}

impl ArchiveError {
    /// Whether the archiver must stop for good: the archive belongs to someone else now, or
    /// holds bytes this log does not. Every other error is retried on the next round.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ArchiveError::Diverged { .. }
                | ArchiveError::Fenced { .. }
                | ArchiveError::Gap { .. }
                | ArchiveError::Stopped { .. }
        )
    }

    pub(crate) fn local(path: &str) -> impl FnOnce(VfsError) -> ArchiveError + '_ {
        move |source| ArchiveError::Local {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn store(
        key: &object_store::path::Path,
    ) -> impl FnOnce(object_store::Error) -> ArchiveError + '_ {
        move |source| ArchiveError::Store {
            key: key.to_string(),
            source,
        }
    }
}
