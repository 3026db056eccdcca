//! [`SubdirVfs`]: one directory of another [`Vfs`], as a root of its own. Many tenants' logs
//! then share one open root (one file descriptor, one lock) while each sees only its own
//! directory. [`LockTable`]: writer locks held in this process's memory, for directories whose
//! root something else already keeps other processes out of.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use stele::vfs::path::check_relative_path;
use stele::vfs::{OpenMode, QuotaStats, Vfs, VfsError, VfsFile, VfsLock, VfsReservation};

/// The directory `dir` of `inner`, confined: every path is checked by the `vfs` contract's
/// rules (relative, no `..`, no `.`, no empty segment) before it is joined to `dir`, so no path
/// given here reaches outside it; `inner` then applies its own confinement (a [`super::RealFs`]
/// refuses symlinks that leave its root).
#[derive(Clone)]
pub struct SubdirVfs {
    inner: Arc<dyn Vfs>,
    dir: String,
    /// Where [`Vfs::lock_exclusive`] takes its locks: `None`, from `inner` (a lock file).
    locks: Option<LockTable>,
}

impl std::fmt::Debug for SubdirVfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubdirVfs")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl SubdirVfs {
    /// `dir` (a relative path in `inner`, which need not exist yet) as a root.
    pub fn new(inner: Arc<dyn Vfs>, dir: &str) -> Result<SubdirVfs, VfsError> {
        check_relative_path(dir, false).map_err(|why| VfsError::InvalidPath(why.into()))?;
        Ok(SubdirVfs {
            inner,
            dir: dir.to_owned(),
            locks: None,
        })
    }

    /// The same directory, its writer locks taken in `table` instead of from `inner`: a lock
    /// then costs no lock file and no file descriptor, but excludes only the holders that
    /// share `table`. Use it only under a root that something else keeps every other process
    /// out of (the [`crate::tenants::Tenants`] registry holds its root's lock for that).
    pub fn with_lock_table(self, table: LockTable) -> SubdirVfs {
        SubdirVfs {
            locks: Some(table),
            ..self
        }
    }

    /// The directory, in `inner`.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// `path` in `inner`; `allow_root`: the empty path names `dir` itself.
    fn full(&self, path: &str, allow_root: bool) -> Result<String, VfsError> {
        check_relative_path(path, allow_root).map_err(|why| VfsError::InvalidPath(why.into()))?;
        Ok(if path.is_empty() || path == "." {
            self.dir.clone()
        } else {
            format!("{}/{path}", self.dir)
        })
    }
}

impl Vfs for SubdirVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        self.inner.open(&self.full(path, false)?, mode)
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        self.inner
            .rename(&self.full(from, false)?, &self.full(to, false)?)
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.sync_dir(&self.full(dir, true)?)
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.inner.remove(&self.full(path, false)?)
    }

    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.create_dir(&self.full(dir, false)?)
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        self.inner.exists(&self.full(path, true)?)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        self.inner.list(&self.full(dir, true)?)
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        let path = self.full(path, false)?;
        match &self.locks {
            Some(table) => table.take(path),
            None => self.inner.lock_exclusive(&path),
        }
    }

    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        self.inner.reserve(&self.full(path, false)?, len)
    }

    /// `inner`'s quota, which this directory shares with whatever else of `inner` it bounds.
    fn quota_stats(&self) -> Option<QuotaStats> {
        self.inner.quota_stats()
    }
    fn throttle_wait(&self) -> Result<std::time::Duration, VfsError> {
        self.inner.throttle_wait()
    }
}

/// Writer locks held in this process's memory, by path: one table shared by the
/// [`SubdirVfs`]es that must exclude one another. Cloning shares the table.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    held: Arc<Mutex<HashSet<String>>>,
}

impl LockTable {
    /// An empty table.
    pub fn new() -> LockTable {
        LockTable::default()
    }

    /// Paths locked now.
    pub fn held(&self) -> usize {
        self.set().len()
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // The set stays consistent through a panic: each insert or remove is one call.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self, path: String) -> Result<Box<dyn VfsLock>, VfsError> {
        if !self.set().insert(path.clone()) {
            return Err(VfsError::Locked(path));
        }
        Ok(Box::new(TableLock {
            path,
            table: self.clone(),
        }))
    }
}

/// A lock held in a [`LockTable`]; dropping it releases it.
#[derive(Debug)]
struct TableLock {
    path: String,
    table: LockTable,
}

impl VfsLock for TableLock {}

impl Drop for TableLock {
    fn drop(&mut self) {
        self.table.set().remove(&self.path);
    }
}
