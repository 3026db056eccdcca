//! [`PushLogCallError`]: what a push log handle's call can fail with, in every mode.

use stele::push_log::PushLogError;

use crate::sandbox::SandboxError;

/// Any error a [`PushLog`] call can return: the engine's (typed the same in every mode; Arrow
/// failures inside the guest arrive as [`PushLogCallError::Arrow`] text), plus the sandbox's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushLogCallError {
    /// The engine's own error, the same in every mode.
    #[error(transparent)]
    PushLog(#[from] PushLogError),
    /// A batch or schema could not be encoded or decoded as Arrow IPC on the host's side.
    #[error("arrow: {0}")]
    Arrow(String),
    /// What only a sandboxed push log can fail with (a trap, a limit).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The tenant is over a rate limit (its [`stele::vfs::QuotaVfs`]) by more than its
    /// `throttle_delay_max`: refused before anything was written. Calls within it wait instead.
    #[error(transparent)]
    Throttled(#[from] stele::vfs::Throttled),
}
