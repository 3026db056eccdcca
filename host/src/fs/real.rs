//! [`RealFs`]: a [`Vfs`] over one root directory of the real filesystem.
//!
//! Confinement has two layers. First, every path is checked lexically: it must be relative,
//! non-empty, UTF-8 without NUL, made of normal components (no `..`, no `.`, no empty segment),
//! and within [`PATH_BYTES_MAX`] / [`NAME_BYTES_MAX`]. Second, every operation resolves the path
//! through cap-std's `Dir`, which refuses any resolution (a symlink, say) that would leave the
//! root. A refusal from either layer is [`VfsError::InvalidPath`].
//!
//! Syncs are the real system calls: [`SyncKind::Data`] is `fdatasync`, [`SyncKind::Full`] is
//! `fsync`, [`SyncKind::Barrier`] is `F_BARRIERFSYNC` on macOS and `fdatasync` elsewhere.
//! [`Vfs::sync_dir`] opens the directory and fsyncs it.

use std::io;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use stele::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock};

pub use stele::vfs::path::{NAME_BYTES_MAX, PATH_BYTES_MAX};

/// The real filesystem under one root directory. Cloning shares the root handle.
#[derive(Clone, Debug)]
pub struct RealFs {
    root: Arc<Dir>,
}

impl RealFs {
    /// Confines all access to `root`, which must be an existing directory. The path itself is
    /// resolved with the process's ambient authority once, here; nothing after this does.
    pub fn open_root(root: impl AsRef<std::path::Path>) -> Result<Self, VfsError> {
        let dir = Dir::open_ambient_dir(root.as_ref(), ambient_authority())
            .map_err(|e| VfsError::from_io(&e))?;
        Ok(RealFs {
            root: Arc::new(dir),
        })
    }
}

/// The `vfs` contract's lexical path rules ([`stele::vfs::path`]), as a typed error.
fn check_path(path: &str, allow_root: bool) -> Result<(), VfsError> {
    stele::vfs::path::check_relative_path(path, allow_root)
        .map_err(|why| VfsError::InvalidPath(format!("{path:?}: {why}")))
}

/// Maps an error from cap-std, turning its sandbox refusals into `InvalidPath`. Recognised by
/// kind and errno, never by message text:
/// - cap-std's own refusal of an escape (a symlink or `..` leading out of the root) is a
///   `PermissionDenied` that carries no OS error (`cap_primitives::fs::errors::escape_attempt`);
///   a real `EACCES` from the OS always carries its errno;
/// - `openat2(RESOLVE_BENEATH)`'s refusal is `EXDEV`;
/// - `ELOOP` is a symlink cycle, or a symlink where cap-std refuses to follow one (its number
///   differs between Linux and macOS, so it is named, not numbered).
fn map_err(path: &str, err: io::Error) -> VfsError {
    let errno = rustix::io::Errno::from_io_error(&err);
    let refused_by_cap_std =
        err.kind() == io::ErrorKind::PermissionDenied && err.raw_os_error().is_none();
    if refused_by_cap_std || errno == Some(rustix::io::Errno::XDEV) {
        return VfsError::InvalidPath(format!("{path:?}: leads outside the root"));
    }
    if errno == Some(rustix::io::Errno::LOOP) {
        return VfsError::InvalidPath(format!("{path:?}: too many levels of symbolic links"));
    }
    VfsError::from_io(&err)
}

#[derive(Debug)]
struct RealFile {
    file: std::fs::File,
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}
#[cfg(unix)]
fn write_all_at(file: &std::fs::File, data: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, offset)
}
#[cfg(windows)]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}
#[cfg(windows)]
fn write_all_at(file: &std::fs::File, mut data: &[u8], mut offset: u64) -> io::Result<()> {
    while !data.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, data, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(target_os = "macos")]
fn barrier(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // F_BARRIERFSYNC orders this file's writes before later ones without a full media flush.
    // SAFETY: fcntl on a valid, open descriptor owned by `file`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_BARRIERFSYNC) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
#[cfg(not(target_os = "macos"))]
fn barrier(file: &std::fs::File) -> io::Result<()> {
    // Linux has no ordering-only barrier; fdatasync is the cheapest call that gives one.
    file.sync_data()
}

impl VfsFile for RealFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| VfsError::from_io(&e))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        loop {
            match read_at(&self.file, buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other.map_err(|e| VfsError::from_io(&e)),
            }
        }
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        write_all_at(&self.file, data, offset).map_err(|e| VfsError::from_io(&e))
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.file.set_len(len).map_err(|e| VfsError::from_io(&e))
    }

    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        let result = match kind {
            SyncKind::Data => self.file.sync_data(),
            SyncKind::Full => self.file.sync_all(),
            SyncKind::Barrier => barrier(&self.file),
        };
        result.map_err(|e| VfsError::from_io(&e))
    }
}

impl RealFs {
    /// The lexical checks, and then: if the path's last component is a symlink, it must
    /// resolve inside the root. cap-std already refuses to follow such a link, but some calls
    /// never follow the last component (`O_CREAT|O_EXCL`, `mkdir`, `lstat`, `unlink`,
    /// `rename`) and would answer about the link itself; a link that leads out is refused the
    /// same way in every operation instead. One `lstat` per path call: these calls open,
    /// rename or list, never the per-record reads, writes and syncs, which use handles.
    fn confine(&self, path: &str, allow_root: bool) -> Result<(), VfsError> {
        check_path(path, allow_root)?;
        if path.is_empty() || path == "." {
            return Ok(());
        }
        match self.root.symlink_metadata(path) {
            Ok(meta) if meta.is_symlink() => match self.root.metadata(path) {
                Err(e) => match map_err(path, e) {
                    escape @ VfsError::InvalidPath(_) => Err(escape),
                    // Dangling inside the root: the call itself answers.
                    _ => Ok(()),
                },
                Ok(_) => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn dir(&self, dir: &str) -> Result<Dir, VfsError> {
        self.confine(dir, true)?;
        if dir.is_empty() || dir == "." {
            self.root.try_clone().map_err(|e| map_err(dir, e))
        } else {
            self.root.open_dir(dir).map_err(|e| map_err(dir, e))
        }
    }
}

impl Vfs for RealFs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        self.confine(path, false)?;
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        match mode {
            OpenMode::Existing => {}
            OpenMode::Create => {
                options.create(true);
            }
            OpenMode::CreateNew => {
                options.create_new(true);
            }
            OpenMode::Truncate => {
                options.create(true).truncate(true);
            }
        }
        let file = self
            .root
            .open_with(path, &options)
            .map_err(|e| map_err(path, e))?;
        Ok(Box::new(RealFile {
            file: file.into_std(),
        }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        self.confine(from, false)?;
        self.confine(to, false)?;
        self.root
            .rename(from, &self.root, to)
            .map_err(|e| map_err(from, e))
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.confine(dir, true)?;
        // cap-std holds directories as O_PATH descriptors, which fsync refuses (EBADF); open the
        // directory read-only as a file to get a descriptor that can be synced.
        let target = if dir.is_empty() { "." } else { dir };
        let mut options = OpenOptions::new();
        options.read(true);
        let handle = self
            .root
            .open_with(target, &options)
            .map_err(|e| map_err(dir, e))?;
        handle.sync_all().map_err(|e| VfsError::from_io(&e))
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.confine(path, false)?;
        self.root.remove_file(path).map_err(|e| map_err(path, e))
    }

    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.confine(dir, false)?;
        match self.root.create_dir(dir) {
            Ok(()) => Ok(()),
            // An existing directory is what the caller asked for; an existing file is not.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                match self.root.symlink_metadata(dir) {
                    Ok(meta) if meta.is_dir() => Ok(()),
                    _ => Err(VfsError::AlreadyExists),
                }
            }
            Err(e) => Err(map_err(dir, e)),
        }
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        self.confine(path, false)?;
        match self.root.symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(map_err(path, e)),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        let handle = self.dir(dir)?;
        let mut names = Vec::new();
        for entry in handle.entries().map_err(|e| map_err(dir, e))? {
            let entry = entry.map_err(|e| map_err(dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        self.confine(path, false)?;
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true);
        let file = self
            .root
            .open_with(path, &options)
            .map_err(|e| map_err(path, e))?
            .into_std();
        // flock(2) on Unix, LockFileEx on Windows: held per open file description, so a second
        // holder is refused whether it is another process or this one, and the kernel releases
        // the lock when the holder dies, so a crash never leaves a journal locked.
        match file.try_lock() {
            Ok(()) => Ok(Box::new(RealLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Err(VfsError::Locked(path.to_owned())),
            Err(std::fs::TryLockError::Error(e)) => Err(map_err(path, e)),
        }
    }
}

/// A held [`RealFs`] lock: the open, locked lock file. Closing it releases the lock.
#[derive(Debug)]
struct RealLock {
    _file: std::fs::File,
}

impl VfsLock for RealLock {}
