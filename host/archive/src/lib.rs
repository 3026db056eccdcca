//! `stele-archive`: a Stele log beyond one disk. Archives a write-ahead log's sealed segments
//! (and journal and push-log files, whole) to object storage through the `object_store`
//! crate, restores it anywhere, fences a stale writer, and follows it remotely.
//!
//! What it owns:
//! - the archive's layout ([`layout`]) and its commit point, the manifest ([`manifest`]);
//! - the create-only puts that make every request safe to retry ([`objects`]);
//! - the [`Archiver`], beside a running [`stele_host::Wal`], in every mode: it reads segments
//!   through the host's own handle on the log's root, so a sandboxed guest gains no
//!   capability;
//! - [`restore`], [`verify`], [`status`] and [`ArchiveTail`], which need nothing but the
//!   archive.
//!
//! What it promises (each item's doc says how):
//! - An archived record is in an object a manifest names, with its CRC32C, and every byte of
//!   it is checked by the engine's own recovery on the way up and on the way down.
//! - Nothing is overwritten: every object is put create-only, under a deterministic name. The
//!   same bytes found there count as done; other bytes stop the archiver
//!   ([`ArchiveError::Diverged`]).
//! - Two writers never both extend one archive ([`ArchiveError::Fenced`]).
//! - No unarchived segment is deleted locally, and no record is dropped while the store is
//!   down: commits are refused past a backlog bound instead
//!   ([`stele_host::archive_gate`]).
//!
//! Stores: a local directory (`file://`) and memory (`memory://`) always; S3 and S3-compatible
//! servers, GCS and Azure with the `aws`, `gcp` and `azure` features (TLS by rustls with
//! ring). Feature `s3-loopback` adds [`loopback_s3`], a real S3 server in this process for
//! tests and benchmarks.

#![warn(missing_docs)]

pub mod archiver;
mod error;
#[cfg(feature = "test-support")]
pub mod fault_store;
pub mod image;
pub mod layout;
mod location;
#[cfg(feature = "s3-loopback")]
pub mod loopback_s3;
pub mod manifest;
pub mod objects;
pub mod restore;
pub mod tail;

pub use archiver::{
    ArchiveOptions, Archiver, ArchiverStats, ArchiverStatus, CLOSE_TIMEOUT_DEFAULT, RoundReport,
    RunningArchiver, SEAL_AGE_MAX_DEFAULT,
};
pub use error::ArchiveError;
pub use location::ArchiveLocation;
pub use manifest::{FileEntry, Manifest, SegmentEntry};
pub use object_store;
pub use restore::{
    ArchiveStatus, RestoreOptions, RestoreReport, VerifyReport, fetch_file, restore, status, verify,
};
pub use tail::{ArchiveTail, ArchivedRecord};
