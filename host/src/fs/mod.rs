//! Host-side [`stele::vfs::Vfs`] backends.
//!
//! - [`RealFs`]: the real filesystem, confined to one root directory with cap-std, with real
//!   `fdatasync`, `fsync`, rename and directory fsync.
//! - [`SubdirVfs`]: one directory of another `Vfs` as a root of its own (many tenants on one
//!   open root), its writer locks optionally in a [`LockTable`] in memory.
//! - [`QuotaVfs`]: another `Vfs` under one tenant's disk bound and rates.
//! - `FaultFs` (feature `test-support`): an in-memory disk behind a page cache that loses, tears
//!   and fails what a real one may, for crash tests.
//!
//! Both serve either mode: natively as a `Vfs`, sandboxed behind the component's
//! `stele:log/vfs` imports.

#[cfg(any(test, feature = "test-support"))]
mod fault;
mod quota;
mod real;
mod subdir;

#[cfg(any(test, feature = "test-support"))]
pub use fault::{CrashPlan, FaultFs, FaultRule, InjectedError, OpKind, SECTOR_BYTES, TraceEntry};
pub use quota::QuotaVfs;
pub use real::{NAME_BYTES_MAX, PATH_BYTES_MAX, RealFs};
pub use subdir::{LockTable, SubdirVfs};
