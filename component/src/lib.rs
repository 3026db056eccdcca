//! Stele: durable append-only logs over a pluggable [`vfs::Vfs`].
//!
//! - [`wal`]: a write-ahead log with group commit, durability tiers, in-memory visibility and
//!   retirement.
//! - [`journal`]: session-state ops, their framing and recovery (the writer is next).
//! - [`frame`] and [`header`]: the framing and file header every family shares.
//!
//! The same crate builds natively (an rlib the host calls directly) and for `wasm32-wasip2`,
//! where `guest` exports it as the `stele:log` component and its `Vfs` is the WIT `vfs` import.

pub mod frame;
pub mod header;
pub mod journal;
pub mod vfs;
pub mod wal;

#[cfg(target_arch = "wasm32")]
mod guest;
