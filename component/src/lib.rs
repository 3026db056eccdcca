//! Stele: durable append-only logs over a pluggable [`vfs::Vfs`].
//!
//! - [`wal`]: a write-ahead log with group commit, durability tiers, in-memory visibility and
//!   retirement.
//! - [`journal`]: a session state kept as key/value ops: lazy header, append + fsync with
//!   rollback, atomic compaction to a snapshot; a tokio writer natively.
//! - [`push_log`]: Arrow record batches, one frame per push: recovery scan, atomic compaction,
//!   sealing into an archive section.
//! - [`frame`] and [`header`]: the framing and file header every family shares, and the
//!   framed-file writer the journal and the push log share ([`frame::appender`]).
//! - [`recovery`]: how a log's valid prefix ends, the outcome every facet's recovery reports.
//!
//! The same crate builds natively (an rlib the host calls directly) and for `wasm32-wasip2`,
//! where `guest` exports it as the `stele:log` component and its `Vfs` is the WIT `vfs` import.

#![warn(missing_docs)]

pub mod frame;
pub mod header;
pub mod journal;
#[cfg(feature = "push-log")]
pub mod push_log;
pub mod recovery;
pub mod vfs;
pub mod wal;

#[cfg(target_arch = "wasm32")]
mod guest;

// The component exports every facet of `wit/world.wit`, the push log's included.
#[cfg(all(target_arch = "wasm32", not(feature = "push-log")))]
compile_error!("the wasm32 component exports the push log: build it with feature `push-log`");
