//! [`SubdirVfs`]: one directory of another [`Vfs`], as a root of its own. Many tenants' logs
//! then share one open root (one file descriptor, one lock) while each sees only its own
//! directory.

use std::sync::Arc;

use stele::vfs::path::check_relative_path;
use stele::vfs::{OpenMode, Vfs, VfsError, VfsFile, VfsLock};

/// The directory `dir` of `inner`, confined: every path is checked by the `vfs` contract's
/// rules (relative, no `..`, no `.`, no empty segment) before it is joined to `dir`, so no path
/// given here reaches outside it; `inner` then applies its own confinement (a [`super::RealFs`]
/// refuses symlinks that leave its root).
#[derive(Clone)]
pub struct SubdirVfs {
    inner: Arc<dyn Vfs>,
    dir: String,
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
        })
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
        self.inner.lock_exclusive(&self.full(path, false)?)
    }
}
