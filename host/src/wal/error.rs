//! [`WalError`]: what a WAL handle's call can fail with, in every mode.

use stele::vfs::Throttled;
use stele::wal::{WalOpenError, WalRetentionError, WalRetireError, WalWriteError};

use crate::archive_gate::ArchiveBacklog;
use crate::sandbox::SandboxError;

/// Any error a [`Wal`] call can return: the engine's typed errors, in every mode, plus what
/// only the sandbox can add.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// Creating or recovering the log failed.
    #[error(transparent)]
    Open(#[from] WalOpenError),
    /// A commit or flush failed, or was refused.
    #[error(transparent)]
    Write(#[from] WalWriteError),
    /// Retiring retained records was refused.
    #[error(transparent)]
    Retire(#[from] WalRetireError),
    /// A checkpoint or truncation was refused or failed.
    #[error(transparent)]
    Retention(#[from] WalRetentionError),
    /// What only a sandboxed log can fail with (a trap, a limit).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A commit refused because the attached archiver is too far behind
    /// ([`ArchiveGate`]); nothing of the batch was written.
    #[error(transparent)]
    ArchiveBacklog(#[from] ArchiveBacklog),
    /// The tenant is over a rate limit (its [`stele::vfs::QuotaVfs`]) by more than its
    /// `throttle_delay_max`: refused before anything was staged. Calls within it wait instead.
    #[error(transparent)]
    Throttled(#[from] Throttled),
    /// [`Wal::attach_archive_gate`] on a log that already has an archiver.
    #[error("this log already has an archiver attached")]
    ArchiveAttached,
}
