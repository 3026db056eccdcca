//! The write-ahead log's typed API, the same in every [`crate::Mode`]: [`Wal`] for threads,
//! [`AsyncWal`] for tokio tasks, and the readers ([`WalScan`], [`WalTail`], [`read_wal`]).
//!
//! All modes run the same engine code over the same [`stele::vfs::Vfs`]; they differ only in
//! where it runs, and each has one [`engine::WalEngine`]:
//! - `Native`: the engine ([`stele::wal::WalWriter`]) is called directly; concurrent threads
//!   and tasks share group commits.
//! - `Sandboxed`: the engine runs in the async-ABI component ([`session`]). One instance
//!   serves every thread and task, driven by the callers themselves and a dispatcher whose
//!   turns run on the process's shared worker threads (`crate::sandbox::store_driver`), and concurrent durable commits share syncs exactly as
//!   native threads do ([`grouping`]).
//! - `SandboxedPlain`: the plain WASI 0.2 component ([`plain`]). Calls on one instance are
//!   serialized; each durable commit syncs on its own.
//!
//! Durability claims are the engine's (see [`stele::wal::WalWriter`]); they hold in every mode,
//! because the sandboxed engine issues the same syncs through its imports.
//!
//! May import `crate::sandbox`, `crate::embed` and `crate::archive_gate`; no other facet.

mod async_handle;
mod convert;
mod engine;
mod error;
mod grouping;
mod handle;
mod plain;
mod read;
mod request;
mod session;
#[cfg(test)]
mod tests;

pub use async_handle::AsyncWal;
pub use error::WalError;
pub use handle::Wal;
pub use read::{WalScan, WalTail, read_wal, read_wal_from};
