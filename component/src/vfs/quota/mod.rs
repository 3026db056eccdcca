//! Disk quotas: [`QuotaVfs`] bounds the bytes one tenant's files hold, over any [`Vfs`].
//!
//! What it owns: the [`ledger`] (plain data, no I/O) and the wrapper that consults it before
//! every call that could grow a file. What it promises: `used` never passes the limit through
//! this wrapper; a growth that would is refused with [`VfsError::QuotaExceeded`] **before the
//! inner backend sees the call**, so a refused `write_at` or `set_len` changed no byte.
//! Reservations ([`Vfs::reserve`], [`VfsFile::reserve`]) let an engine ask before it makes a
//! record visible, and so refuse a commit whole instead of failing its write.
//!
//! It may import the rest of [`crate::vfs`] and nothing of the facets.
//!
//! What it counts: each file's logical length (a preallocated segment counts in full), under
//! the paths this wrapper sees. Files already there when it is built are counted by a walk of
//! the root ([`QuotaVfs::new`]). Directories and the empty lock files count nothing.

pub mod ledger;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ledger::{DiskLedger, ReservationId};

use super::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock, VfsReservation};

/// A growth or reservation refused by a disk quota: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("disk quota exceeded: {requested} more bytes requested, {used} of {limit} bytes in use")]
pub struct QuotaExceeded {
    /// The quota, in bytes.
    pub limit: u64,
    /// Bytes charged when the request came.
    pub used: u64,
    /// Bytes the request would have added.
    pub requested: u64,
}

/// A disk quota's state, for `stats()` and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes charged now: files' lengths and live reservations.
    pub used: u64,
    /// The quota.
    pub limit: u64,
    /// Growths and reservations refused so far.
    pub refusals: u64,
}

#[derive(Debug)]
struct Shared {
    ledger: DiskLedger,
    refusals: u64,
}

type SharedLedger = Arc<Mutex<Shared>>;

fn lock(ledger: &SharedLedger) -> MutexGuard<'_, Shared> {
    // The ledger is updated in single assignments after each check, so a panic elsewhere
    // cannot leave it half-changed.
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn refused(&mut self, refusal: QuotaExceeded) -> VfsError {
        self.refusals += 1;
        tracing::debug!(
            limit = refusal.limit,
            used = refusal.used,
            requested = refusal.requested,
            "disk quota refused a growth"
        );
        VfsError::QuotaExceeded(refusal)
    }
}

/// A [`Vfs`] whose files may hold at most `disk_bytes_max` bytes together. See the module doc.
#[derive(Clone)]
pub struct QuotaVfs {
    inner: Arc<dyn Vfs>,
    ledger: SharedLedger,
}

impl fmt::Debug for QuotaVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaVfs")
            .field("usage", &self.usage())
            .finish_non_exhaustive()
    }
}

/// How deep [`QuotaVfs::new`] walks: a tenant's logs sit a few directories down at most, and a
/// bound keeps a directory loop (a bind mount) from walking forever.
const WALK_DEPTH_MAX: usize = 16;

impl QuotaVfs {
    /// `inner`, bounded to `disk_bytes_max` bytes. Walks `inner` from its root first and
    /// charges every file found there, even past the limit (a tenant over its quota can then
    /// only shrink, remove or truncate until it fits again).
    ///
    /// # Errors
    /// A listing or opening error of the walk.
    pub fn new(inner: Arc<dyn Vfs>, disk_bytes_max: u64) -> Result<QuotaVfs, VfsError> {
        let mut ledger = DiskLedger::new(disk_bytes_max);
        walk(&*inner, "", 0, &mut ledger)?;
        Ok(QuotaVfs {
            inner,
            ledger: Arc::new(Mutex::new(Shared {
                ledger,
                refusals: 0,
            })),
        })
    }

    /// Moves the quota (a tenant's plan changed, say). Lowering it below what is used refuses
    /// every growth until enough is freed; nothing already written is taken away.
    pub fn set_disk_bytes_max(&self, disk_bytes_max: u64) {
        lock(&self.ledger).ledger.set_limit(disk_bytes_max);
    }

    /// The quota's state now.
    pub fn usage(&self) -> DiskUsage {
        let shared = lock(&self.ledger);
        DiskUsage {
            used: shared.ledger.used(),
            limit: shared.ledger.limit(),
            refusals: shared.refusals,
        }
    }
}

/// Charges every file under `dir` to `ledger`. A path that opens is a file; one that does not
/// but lists is a directory (a directory does not open read-write on a real filesystem, and an
/// in-memory namespace lists nothing under a file).
fn walk(vfs: &dyn Vfs, dir: &str, depth: usize, ledger: &mut DiskLedger) -> Result<(), VfsError> {
    for name in vfs.list(dir)? {
        let path = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        match vfs.open(&path, OpenMode::Existing) {
            Ok(file) => ledger.adopt(&path, file.len()?),
            Err(open_error) => {
                if depth + 1 >= WALK_DEPTH_MAX {
                    return Err(VfsError::InvalidInput(format!(
                        "{path}: deeper than {WALK_DEPTH_MAX} directories"
                    )));
                }
                walk(vfs, &path, depth + 1, ledger).map_err(|_| open_error)?;
            }
        }
    }
    Ok(())
}

impl Vfs for QuotaVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        let inner = self.inner.open(path, mode)?;
        // The file's length now is the truth: `Truncate` cut it, and a file the walk did not
        // see (another writer's) is charged from here on.
        lock(&self.ledger).ledger.adopt(path, inner.len()?);
        Ok(Box::new(QuotaFile {
            inner,
            path: path.to_owned(),
            ledger: Arc::clone(&self.ledger),
        }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        // Checked and applied under one lock around the rename itself (a metadata call), so no
        // growth can take the room between the check and the rename.
        let mut shared = lock(&self.ledger);
        if let Err(refusal) = shared.ledger.rename_allowed(from, to) {
            return Err(shared.refused(refusal));
        }
        self.inner.rename(from, to)?;
        shared
            .ledger
            .rename(from, to)
            .expect("allowed under the same lock");
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.sync_dir(dir)
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.inner.remove(path)?;
        lock(&self.ledger).ledger.remove(path);
        Ok(())
    }

    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.create_dir(dir)
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        self.inner.exists(path)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        self.inner.list(dir)
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        self.inner.lock_exclusive(path)
    }

    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        super::path::check_relative_path(path, false)
            .map_err(|why| VfsError::InvalidPath(format!("{path:?}: {why}")))?;
        reserve(&self.ledger, path, len)
    }

    fn disk_usage(&self) -> Option<DiskUsage> {
        Some(self.usage())
    }
}

fn reserve(
    ledger: &SharedLedger,
    path: &str,
    len: u64,
) -> Result<Box<dyn VfsReservation>, VfsError> {
    let mut shared = lock(ledger);
    match shared.ledger.reserve(path, len) {
        Ok(id) => Ok(Box::new(LedgerReservation {
            ledger: Arc::clone(ledger),
            path: path.to_owned(),
            id,
        })),
        Err(refusal) => Err(shared.refused(refusal)),
    }
}

/// A file of a [`QuotaVfs`]: growths are asked of the ledger first.
#[derive(Debug)]
struct QuotaFile {
    inner: Box<dyn VfsFile>,
    path: String,
    ledger: SharedLedger,
}

impl QuotaFile {
    /// After a failed write or `set_len` the file may have changed length anyway (a short
    /// write): charge what is there.
    fn recount(&self) {
        if let Ok(len) = self.inner.len() {
            lock(&self.ledger).ledger.adopt(&self.path, len);
        }
    }

    fn grant(
        &self,
        change: impl FnOnce(&mut DiskLedger) -> Result<(), QuotaExceeded>,
    ) -> Result<(), VfsError> {
        let mut shared = lock(&self.ledger);
        change(&mut shared.ledger).map_err(|refusal| shared.refused(refusal))
    }
}

impl VfsFile for QuotaFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        let end = offset.saturating_add(data.len() as u64);
        self.grant(|ledger| ledger.extend_to(&self.path, end))?;
        self.inner
            .write_at(offset, data)
            .inspect_err(|_| self.recount())
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.grant(|ledger| ledger.set_len(&self.path, len))?;
        self.inner.set_len(len).inspect_err(|_| self.recount())
    }

    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        self.inner.sync(kind)
    }

    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        reserve(&self.ledger, &self.path, len)
    }
}

/// Room held in a [`QuotaVfs`]'s ledger until dropped.
struct LedgerReservation {
    ledger: SharedLedger,
    path: String,
    id: ReservationId,
}

impl fmt::Debug for LedgerReservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerReservation")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl VfsReservation for LedgerReservation {}

impl Drop for LedgerReservation {
    fn drop(&mut self) {
        lock(&self.ledger).ledger.release(&self.path, self.id);
    }
}
