//! The journal's typed API, the same in every [`crate::Mode`]: [`Journal`] (tokio) and the
//! replay functions. May import `crate::sandbox`, `crate::embed` and `crate::archive_gate`; no
//! other facet.

mod convert;
mod engine;
mod error;
mod handle;
mod session;

pub use error::JournalError;
pub use handle::{Journal, replay_blocking, replay_journal};
