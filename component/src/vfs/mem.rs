//! [`MemVfs`]: files in memory, for unit tests of the engine and for callers that want a log
//! without a disk. It has no crash model: every write is immediately "durable". The
//! fault-injecting filesystem that models power loss lives in the host crate.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock};

type Contents = Arc<Mutex<Vec<u8>>>;

/// An in-memory [`Vfs`]. Cloning shares the same files.
#[derive(Clone, Debug, Default)]
pub struct MemVfs {
    inner: Arc<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    files: Mutex<BTreeMap<String, Contents>>,
    /// Paths whose [`MemLock`] is alive.
    locks: Mutex<BTreeSet<String>>,
    file_syncs: AtomicU64,
    dir_syncs: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another test thread must not hide this one's result.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemVfs {
    /// An empty filesystem.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the file's bytes, or `None` if it does not exist.
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.inner.files).get(path).map(|c| lock(c).clone())
    }

    /// Replaces (or creates) a file's bytes: the tool of corruption tests.
    pub fn set_contents(&self, path: &str, bytes: Vec<u8>) {
        lock(&self.inner.files).insert(path.to_owned(), Arc::new(Mutex::new(bytes)));
    }

    /// How many `VfsFile::sync` calls returned.
    pub fn file_syncs(&self) -> u64 {
        self.inner.file_syncs.load(Ordering::Relaxed)
    }

    /// How many `Vfs::sync_dir` calls returned.
    pub fn dir_syncs(&self) -> u64 {
        self.inner.dir_syncs.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct MemFile {
    contents: Contents,
    inner: Arc<MemInner>,
}

impl VfsFile for MemFile {
    fn len(&self) -> Result<u64, VfsError> {
        Ok(lock(&self.contents).len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let data = lock(&self.contents);
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), VfsError> {
        let mut data = lock(&self.contents);
        let start = usize::try_from(offset).map_err(|_| VfsError::NoSpace)?;
        let end = start.checked_add(bytes.len()).ok_or(VfsError::NoSpace)?;
        if data.len() < end {
            data.resize(end, 0);
        }
        data[start..end].copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        let len = usize::try_from(len).map_err(|_| VfsError::NoSpace)?;
        lock(&self.contents).resize(len, 0);
        Ok(())
    }

    fn sync(&self, _kind: SyncKind) -> Result<(), VfsError> {
        self.inner.file_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Vfs for MemVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        let mut files = lock(&self.inner.files);
        let contents = match (files.get(path), mode) {
            (Some(_), OpenMode::CreateNew) => return Err(VfsError::AlreadyExists),
            (Some(c), OpenMode::Truncate) => {
                lock(c).clear();
                c.clone()
            }
            (Some(c), _) => c.clone(),
            (None, OpenMode::Existing) => return Err(VfsError::NotFound),
            (None, _) => files.entry(path.to_owned()).or_default().clone(),
        };
        Ok(Box::new(MemFile {
            contents,
            inner: self.inner.clone(),
        }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        let mut files = lock(&self.inner.files);
        let contents = files.remove(from).ok_or(VfsError::NotFound)?;
        files.insert(to.to_owned(), contents);
        Ok(())
    }

    fn sync_dir(&self, _dir: &str) -> Result<(), VfsError> {
        self.inner.dir_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        lock(&self.inner.files)
            .remove(path)
            .map(drop)
            .ok_or(VfsError::NotFound)
    }

    fn create_dir(&self, _dir: &str) -> Result<(), VfsError> {
        Ok(())
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        Ok(lock(&self.inner.files).contains_key(path))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        let files = lock(&self.inner.files);
        Ok(super::child_names(files.keys().map(String::as_str), dir))
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        // Like a real lock file, the file itself exists (and outlives the lock).
        self.open(path, OpenMode::Create)?;
        if !lock(&self.inner.locks).insert(path.to_owned()) {
            return Err(VfsError::Locked(path.to_owned()));
        }
        Ok(Box::new(MemLock {
            path: path.to_owned(),
            inner: self.inner.clone(),
        }))
    }
}

/// A held [`MemVfs`] lock.
#[derive(Debug)]
struct MemLock {
    path: String,
    inner: Arc<MemInner>,
}

impl VfsLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        lock(&self.inner.locks).remove(&self.path);
    }
}
