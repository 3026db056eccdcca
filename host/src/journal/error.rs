//! [`JournalError`]: what a journal handle's call can fail with, in every mode.

use crate::sandbox::SandboxError;

/// Any error a [`Journal`] call can return: the engine's, in every mode, plus what only the
/// sandbox can add.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The engine's own error, the same in every mode.
    #[error(transparent)]
    Journal(#[from] stele::journal::JournalError),
    /// What only a sandboxed journal can fail with (a trap, a limit).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The tenant is over a rate limit (its [`stele::vfs::QuotaVfs`]) by more than its
    /// `throttle_delay_max`: refused before anything was written. Calls within it wait instead.
    #[error(transparent)]
    Throttled(#[from] stele::vfs::Throttled),
}
