//! The push log's typed API with `arrow` record batches, the same in every [`crate::Mode`]:
//! [`PushLog`] and its scan. May import `crate::sandbox`, `crate::embed` and
//! `crate::archive_gate`; no other facet.

mod convert;
mod engine;
mod error;
mod handle;
mod plain;
mod scan;
mod session;

pub use error::PushLogCallError;
pub use handle::PushLog;
pub use scan::PushLogScan;
