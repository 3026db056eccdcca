//! One writer per log: the advisory lock every WAL writer takes before it reads or writes the
//! log.
//!
//! Why: two writers on one log each recover the same tail and then append the same seqs at the
//! same offsets, so the last write wins and records that the other writer acknowledged are gone,
//! while the log still reads clean. SQLite, RocksDB (`LOCK`), okaywal and etcd refuse a second
//! writer for the same reason.
//!
//! What it promises:
//! - The lock is [`Vfs::lock_exclusive`] on [`writer_lock_path`]: `<dir>/LOCK` for a segment
//!   directory, `<file>.lock` for a single-file log. It is taken before the log is opened,
//!   recovered or written, and held until the writer is dropped.
//! - A second writer gets [`WalOpenError::Locked`], naming the lock file, and has written
//!   nothing to the log.
//! - On a real filesystem the lock is `flock(2)`: it excludes other processes as well as other
//!   writers in this one, and the kernel releases it when its holder dies (SIGKILL included), so
//!   a crashed writer never blocks the next. Readers take no lock.
//! - The lock file holds no data. It is created empty and never removed: removing it would let a
//!   writer that opened the old file and one that created a new one both hold "the" lock.

use crate::vfs::{Vfs, VfsError, VfsLock};

use super::WalOpenError;
use super::segment::join;

/// The lock file's name inside a segment directory. Recovery ignores it, as it ignores every
/// name that is not a segment's or the checkpoint's.
pub const SEGMENT_DIR_LOCK_FILE: &str = "LOCK";

/// The suffix of a single-file log's lock file, beside the log.
pub const SINGLE_FILE_LOCK_SUFFIX: &str = ".lock";

/// The lock file that a writer of the log at `path` holds: `<path>/LOCK` for a segment
/// directory, `<path>.lock` for a single file.
pub fn writer_lock_path(path: &str, segmented: bool) -> String {
    if segmented {
        join(path, SEGMENT_DIR_LOCK_FILE)
    } else {
        format!("{path}{SINGLE_FILE_LOCK_SUFFIX}")
    }
}

/// Takes the writer lock of the log at `path` without waiting. For a segment directory, the
/// directory must exist.
///
/// # Errors
/// [`WalOpenError::Locked`] if another writer holds it; a Vfs error if the lock file cannot be
/// created.
pub fn lock_writer(
    vfs: &dyn Vfs,
    path: &str,
    segmented: bool,
) -> Result<Box<dyn VfsLock>, WalOpenError> {
    let lock_path = writer_lock_path(path, segmented);
    vfs.lock_exclusive(&lock_path).map_err(|e| match e {
        VfsError::Locked(_) => WalOpenError::Locked { lock_path },
        other => WalOpenError::Vfs(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::MemVfs;

    #[test]
    fn lock_paths_by_layout() {
        assert_eq!(writer_lock_path("events", true), "events/LOCK");
        assert_eq!(writer_lock_path("", true), "LOCK");
        assert_eq!(writer_lock_path("events.wal", false), "events.wal.lock");
    }

    #[test]
    fn a_held_lock_refuses_a_second_writer_until_dropped() {
        let vfs = MemVfs::new();
        let held = lock_writer(&vfs, "log", false).unwrap();
        assert_eq!(
            lock_writer(&vfs, "log", false).unwrap_err(),
            WalOpenError::Locked {
                lock_path: "log.lock".into()
            }
        );
        drop(held);
        lock_writer(&vfs, "log", false).unwrap();
    }
}
