//! Progress bars for the CLI's long operations, drawn from the bytes the engine moves: a
//! [`ProgressVfs`] wraps the real filesystem and advances a bar by every byte read or written,
//! whichever mode (native or sandboxed) the engine runs in, since the host serves its I/O.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use stele::vfs::{OpenMode, QuotaStats, SyncKind, Vfs, VfsError, VfsFile, VfsLock, VfsReservation};

/// Below this many bytes an operation takes well under a second (the engine reads and writes
/// at hundreds of MB/s or more), so no bar is drawn: it would only flicker.
pub const PROGRESS_BAR_MIN_BYTES: u64 = 64 << 20;

/// A bar for an operation that moves about `total` bytes, labelled `what`; hidden when stdout
/// is not a terminal (output piped or captured) or the operation is small.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    if total < PROGRESS_BAR_MIN_BYTES {
        return ProgressBar::hidden();
    }
    terminal_bar(total, what)
}

/// A bar of `total` bytes (0: set later, as the work learns its size), labelled `what`;
/// hidden when stdout is not a terminal.
pub fn terminal_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let template = format!(
        "{{spinner}} {what} [{{bar:40}}] {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, {{eta}})"
    );
    bar.set_style(
        ProgressStyle::with_template(&template)
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// The bytes an operation on `path` reads: a file's length, or the sum of a directory's files
/// (a segmented WAL).
pub fn bytes_at(path: &Path) -> Result<u64> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if !meta.is_dir() {
        return Ok(meta.len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path).with_context(|| format!("{}", path.display()))? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

/// `fs` seen through a read-only [`ProgressVfs`] whose bar (labelled `what`) counts up to the
/// bytes at `path`: for commands that read a whole log (`wal dump`, `journal dump`). The bar
/// is hidden for small logs and when stdout is not a terminal.
pub fn reading(fs: Arc<dyn Vfs>, path: &Path, what: &str) -> (Arc<dyn Vfs>, ProgressBar) {
    // A missing path reads as 0 bytes here; the engine then gives the real error.
    let progress = bar(bytes_at(path).unwrap_or(0), what);
    let vfs = Arc::new(ProgressVfs::read_only(fs, progress.clone()));
    (vfs, progress)
}

/// The filesystem, with every byte read or written counted on a bar. Read-only, it refuses
/// anything that would change a file: `inspect` and `verify` never do.
#[derive(Debug)]
pub struct ProgressVfs {
    inner: Arc<dyn Vfs>,
    progress: ProgressBar,
    read_only: bool,
}

impl ProgressVfs {
    /// Counts reads and writes, and passes everything through.
    pub fn new(inner: Arc<dyn Vfs>, progress: ProgressBar) -> ProgressVfs {
        ProgressVfs {
            inner,
            progress,
            read_only: false,
        }
    }

    /// Counts reads, and refuses every write with `PermissionDenied`.
    pub fn read_only(inner: Arc<dyn Vfs>, progress: ProgressBar) -> ProgressVfs {
        ProgressVfs {
            inner,
            progress,
            read_only: true,
        }
    }

    fn writable(&self) -> Result<(), VfsError> {
        if self.read_only {
            return Err(VfsError::PermissionDenied);
        }
        Ok(())
    }
}

#[derive(Debug)]
struct ProgressFile {
    inner: Box<dyn VfsFile>,
    progress: ProgressBar,
    read_only: bool,
}

impl VfsFile for ProgressFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let n = self.inner.read_at(offset, buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        if self.read_only {
            return Err(VfsError::PermissionDenied);
        }
        self.inner.write_at(offset, data)?;
        self.progress.inc(data.len() as u64);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        if self.read_only {
            return Err(VfsError::PermissionDenied);
        }
        self.inner.set_len(len)
    }
    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        if self.read_only {
            return Err(VfsError::PermissionDenied);
        }
        self.inner.sync(kind)
    }
    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        self.inner.reserve(len)
    }
}

impl Vfs for ProgressVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        if mode != OpenMode::Existing {
            self.writable()?;
        }
        Ok(Box::new(ProgressFile {
            inner: self.inner.open(path, mode)?,
            progress: self.progress.clone(),
            read_only: self.read_only,
        }))
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        self.writable()?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.writable()?;
        self.inner.sync_dir(dir)
    }
    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.writable()?;
        self.inner.remove(path)
    }
    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.writable()?;
        self.inner.create_dir(dir)
    }
    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        self.inner.exists(path)
    }
    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        self.inner.reserve(path, len)
    }
    fn quota_stats(&self) -> Option<QuotaStats> {
        self.inner.quota_stats()
    }
    fn throttle_wait(&self) -> Result<std::time::Duration, VfsError> {
        self.inner.throttle_wait()
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        self.inner.list(dir)
    }
    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        self.writable()?;
        self.inner.lock_exclusive(path)
    }
}
