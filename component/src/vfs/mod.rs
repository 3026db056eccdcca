//! The storage seam. Every byte the engine reads or writes goes through [`Vfs`] and [`VfsFile`],
//! so one engine runs on the host's real filesystem, on the fault-injecting filesystem, in
//! memory, and inside the component over the WIT `stele:log/vfs` imports.
//!
//! Paths are root-relative, `/`-separated UTF-8 strings, because they cross the WIT boundary as
//! `string`. A backend decides what the root is and refuses paths that leave it.
//!
//! What this module promises: the traits say nothing about durability beyond what
//! [`VfsFile::sync`] and [`Vfs::sync_dir`] document; the engine alone decides when to call them.

pub mod io;
mod mem;
pub mod path;
pub mod quota;
pub mod replace;
mod wit_conversions;

pub use io::{
    DeviceIo, FileIo, INLINE_WRITE_BYTES_MAX, ReadyIo, ZERO_BLOCK_BYTES, complete_now, write_zeros,
};
pub use mem::MemVfs;
pub use quota::{QuotaExceeded, QuotaLimits, QuotaStats, Throttled};

use std::fmt;

/// What a [`VfsFile::sync`] makes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncKind {
    /// `fdatasync`: the data, and the metadata needed to read it back (the length).
    Data,
    /// `fsync`: data and all metadata.
    Full,
    /// An ordering barrier: `F_BARRIERFSYNC` on macOS; on Linux backends issue `fdatasync`,
    /// which makes this the same promise as [`SyncKind::Data`] there.
    Barrier,
}

/// How [`Vfs::open`] treats an existing or missing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// The file must exist.
    Existing,
    /// Open the file, creating it empty if missing.
    Create,
    /// Create the file; fail with [`VfsError::AlreadyExists`] if it exists.
    CreateNew,
    /// Open or create the file and cut it to zero bytes.
    Truncate,
}

/// A failed storage operation. Cloneable, because a poisoned writer hands the same cause to
/// every caller it refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VfsError {
    /// The path names nothing.
    #[error("not found")]
    NotFound,
    /// `CreateNew` found the file there, or a directory is where a file must go.
    #[error("already exists")]
    AlreadyExists,
    /// ENOSPC: the device (or quota) is full.
    #[error("no space left on device")]
    NoSpace,
    /// The path is refused: it would leave the root (absolute, `..`, a symlink out), holds
    /// NUL, or is too long. Carries the path and why.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The operating system refused the operation.
    #[error("permission denied")]
    PermissionDenied,
    /// A sandboxed instance holds as many files as its limit allows.
    #[error("too many open files for this instance")]
    TooManyHandles,
    /// An argument the backend cannot act on (an offset past its range, say).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// [`Vfs::lock_exclusive`] found the lock held by another holder (in this process or,
    /// on a real filesystem, in another).
    #[error("{0} is locked by another writer")]
    Locked(String),
    /// Any other failure, with the operating system's message.
    #[error("I/O error: {0}")]
    Io(String),
    /// A disk quota (`stele_host::fs::QuotaVfs`) refused a growth or a reservation. Unlike
    /// [`VfsError::NoSpace`], it is known to come before the call changed anything.
    #[error(transparent)]
    QuotaExceeded(QuotaExceeded),
    /// A rate limit (`stele_host::fs::QuotaVfs`) refused the call before it started: the tenant would have
    /// had to wait past its `throttle_delay_max`.
    #[error(transparent)]
    Throttled(Throttled),
}

impl VfsError {
    /// Maps a `std::io::Error` onto the typed kinds the WIT contract carries.
    pub fn from_io(err: &std::io::Error) -> Self {
        use std::io::ErrorKind;
        match err.kind() {
            ErrorKind::NotFound => VfsError::NotFound,
            ErrorKind::AlreadyExists => VfsError::AlreadyExists,
            ErrorKind::PermissionDenied => VfsError::PermissionDenied,
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded => VfsError::NoSpace,
            ErrorKind::InvalidInput => VfsError::InvalidInput(err.to_string()),
            _ => VfsError::Io(err.to_string()),
        }
    }
}

/// One open file. Offsets are absolute; there is no cursor, so concurrent readers need no lock.
#[allow(clippy::len_without_is_empty)] // a fallible length; emptiness is never asked alone
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// The file's length in bytes.
    fn len(&self) -> Result<u64, VfsError>;
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at end of file. Returns the count.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError>;
    /// Writes all of `data` at `offset`, extending the file if needed. Not durable until `sync`.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError>;
    /// Truncates, or extends with zeros, to `len` bytes. Not durable until `sync`.
    fn set_len(&self, len: u64) -> Result<(), VfsError>;
    /// Makes earlier writes and `set_len`s durable, as `kind` says. After an `Err`, nothing may be
    /// assumed about which earlier writes are durable (fsyncgate): callers must stop trusting
    /// the file.
    fn sync(&self, kind: SyncKind) -> Result<(), VfsError>;
    /// Holds room under the backend's disk quota for this file to grow to `len` bytes, until the
    /// reservation is dropped: see [`Vfs::reserve`]. Backends without a quota grant it.
    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        let _ = len;
        Ok(Box::new(Unbounded))
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `Io` on a short file.
    fn read_exact_at(&self, mut offset: u64, mut buf: &mut [u8]) -> Result<(), VfsError> {
        while !buf.is_empty() {
            let n = self.read_at(offset, buf)?;
            if n == 0 {
                return Err(VfsError::Io(format!(
                    "unexpected end of file at offset {offset}"
                )));
            }
            offset += n as u64;
            buf = &mut buf[n..];
        }
        Ok(())
    }
}

/// An exclusive advisory lock taken by [`Vfs::lock_exclusive`], released when dropped (and by
/// the operating system when its process dies, on a real filesystem).
pub trait VfsLock: Send + Sync + fmt::Debug {}

impl<F: VfsFile + ?Sized> VfsFile for Box<F> {
    fn len(&self) -> Result<u64, VfsError> {
        (**self).len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        (**self).write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        (**self).set_len(len)
    }
    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        (**self).sync(kind)
    }
    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        (**self).reserve(len)
    }
}

/// Room held under a disk quota by [`Vfs::reserve`] or [`VfsFile::reserve`], released when
/// dropped.
pub trait VfsReservation: Send + Sync + fmt::Debug {}

/// The reservation of a backend without a quota: holds nothing.
#[derive(Debug)]
pub struct Unbounded;

impl VfsReservation for Unbounded {}

/// A namespace of files under one root.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Opens the file at `path` for reading and writing, as `mode` says.
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError>;
    /// Atomically replaces `to` with `from`. Durable only after [`Vfs::sync_dir`] of the parent.
    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError>;
    /// Makes creates, renames and removes in directory `dir` durable. `""` is the root.
    fn sync_dir(&self, dir: &str) -> Result<(), VfsError>;
    /// Deletes the file at `path`. Durable only after [`Vfs::sync_dir`] of the parent.
    fn remove(&self, path: &str) -> Result<(), VfsError>;
    /// Creates directory `dir` if it is missing (its parent must exist). Durable only after
    /// [`Vfs::sync_dir`] of the parent. In-memory backends, whose namespace is flat, accept it
    /// and change nothing.
    fn create_dir(&self, dir: &str) -> Result<(), VfsError>;
    /// Whether anything is at `path`.
    fn exists(&self, path: &str) -> Result<bool, VfsError>;
    /// Entry names in directory `dir`, sorted.
    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError>;
    /// Takes an exclusive advisory lock on the file `path`, creating it empty if missing, or
    /// fails with [`VfsError::Locked`] without waiting. Advisory: it excludes only other
    /// `lock_exclusive` callers, never a plain `open`.
    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError>;

    /// Holds room under the backend's disk quota for the file at `path` (which need not exist
    /// yet) to be `len` bytes long, until the reservation is dropped: growing the file up to
    /// `len` is then never refused for quota. An engine reserves before it accepts work, so that
    /// a tenant at its quota is refused whole, before anything is visible or written, rather
    /// than failing a write halfway. Backends without a quota (the default) grant it.
    ///
    /// # Errors
    /// [`VfsError::QuotaExceeded`] when the room is not there; nothing is held.
    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        let _ = (path, len);
        Ok(Box::new(Unbounded))
    }

    /// The quota's figures, when the backend enforces one (`stele_host::fs::QuotaVfs`).
    fn quota_stats(&self) -> Option<QuotaStats> {
        None
    }

    /// Asked by a caller about to write (a commit, an append, a push), before anything is
    /// staged: how long to wait first so that the tenant keeps to its rates (`stele_host::fs::QuotaVfs`),
    /// zero when it is within them (and always, without a rate limit).
    ///
    /// # Errors
    /// [`VfsError::Throttled`] when the wait would pass the tenant's `throttle_delay_max`:
    /// the caller should refuse its call, typed, and nothing else.
    fn throttle_wait(&self) -> Result<std::time::Duration, VfsError> {
        Ok(std::time::Duration::ZERO)
    }
}

/// The entries of directory `dir` in a flat namespace of `/`-separated file paths (sorted
/// input gives sorted, deduplicated output): what an in-memory backend answers to
/// [`Vfs::list`].
pub fn child_names<'a>(sorted_paths: impl Iterator<Item = &'a str>, dir: &str) -> Vec<String> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut names: Vec<String> = sorted_paths
        .filter_map(|path| path.strip_prefix(&prefix))
        .map(|rest| rest.split('/').next().unwrap_or(rest).to_owned())
        .collect();
    names.dedup();
    names
}

/// The directory that holds `path`: `""` (the root) for a bare file name.
pub fn parent_dir(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::parent_dir;

    #[test]
    fn parent_dir_of_nested_and_bare_paths() {
        assert_eq!(parent_dir("a/b/c.wal"), "a/b");
        assert_eq!(parent_dir("c.wal"), "");
    }
}
