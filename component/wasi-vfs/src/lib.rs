//! `stele:log/vfs` served from `wasi:filesystem`: the adapter that lets the engine run on any
//! WASI 0.2 host. `host/build.rs` composes it with the plain engine (`wac plug`) into
//! `stele-wasi.wasm`, whose only storage import is `wasi:filesystem`.
//!
//! The root is the host's first preopened directory; every path is opened beneath it with
//! `open-at` and never follows a symlink in its last segment, and the host confines the rest.
//! The `vfs` path rules are checked first, with the engine's own code
//! (`component/src/vfs/path.rs`), so a bad path gets `invalid-path` here exactly as from
//! Stele's host.
//!
//! How each call maps:
//! - `sync(data)` and `sync(barrier)` are `sync-data`; `sync(full)` is `sync`;
//! - `rename` is `rename-at` within the root; `sync-dir` opens the directory and calls `sync`
//!   on it (wasmtime-wasi fsyncs the directory);
//! - `lock-exclusive` cannot be what Stele's host gives: `wasi:filesystem` has no locks. The
//!   adapter creates the lock file and excludes other holders *within this instance* only. Two
//!   instances, or another process, writing one log are not stopped here, so a host that runs
//!   this component must give each log directory to one instance at a time.
//! - `reserve` is granted and holds nothing: `wasi:filesystem` has no quota to hold room in.
//!   A disk that fills answers `no-space` to the write itself, as without the adapter.

#![cfg(target_arch = "wasm32")]

#[path = "../../src/vfs/path.rs"]
mod path;

use std::cell::RefCell;
use std::collections::HashSet;

use exports::stele::log::vfs::{self as wit, OpenMode, SyncKind, VfsError};
use wasi::filesystem::preopens::get_directories;
use wasi::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, ErrorCode, OpenFlags, PathFlags,
};

wit_bindgen::generate!({
    world: "stele:wasi-vfs/adapter",
    path: ["../../wit", "wit"],
});

/// The most bytes one `read-at` returns; a larger request is answered short, as a read at end
/// of file would be, exactly as Stele's host answers (`stele_host::READ_BYTES_MAX`, the same
/// 4 MiB). The engine loops on short reads; the bound keeps one call from making the adapter
/// allocate on the caller's word.
const READ_BYTES_MAX: u64 = 4 << 20;

/// Most bytes one `wasi:filesystem` read or write call is given. Hosts may move fewer; the
/// adapter loops until the whole request is done.
const IO_CHUNK_BYTES: usize = 1 << 20;

struct Adapter;

export!(Adapter);

thread_local! {
    /// The preopened root, fetched once. `None` when the host preopened no directory.
    static ROOT: Option<Descriptor> = get_directories().into_iter().next().map(|(dir, _)| dir);
    /// Paths whose `lock-exclusive` is held by a live `file-lock` of this instance.
    static LOCKED: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
}

fn with_root<T>(f: impl FnOnce(&Descriptor) -> Result<T, VfsError>) -> Result<T, VfsError> {
    ROOT.with(|root| match root {
        Some(root) => f(root),
        None => Err(VfsError::Io(
            "the host preopened no directory: stele-wasi needs one as its root".into(),
        )),
    })
}

fn check(path: &str, allow_root: bool) -> Result<(), VfsError> {
    path::check_relative_path(path, allow_root)
        .map_err(|why| VfsError::InvalidPath(format!("{path:?}: {why}")))
}

fn error(code: ErrorCode) -> VfsError {
    match code {
        ErrorCode::NoEntry => VfsError::NotFound,
        ErrorCode::Exist => VfsError::AlreadyExists,
        ErrorCode::InsufficientSpace | ErrorCode::Quota => VfsError::NoSpace,
        ErrorCode::Access | ErrorCode::NotPermitted | ErrorCode::ReadOnly => {
            VfsError::PermissionDenied
        }
        // The host refused to resolve the path beneath the preopen (a symlink leading out).
        ErrorCode::Loop => VfsError::InvalidPath("too many levels of symbolic links".into()),
        other => VfsError::Io(format!("wasi:filesystem: {other:?}")),
    }
}

/// A `wasi:filesystem` descriptor opened for reading and writing.
pub struct AdapterFile(Descriptor);

/// A held `lock-exclusive`: the path stays in [`LOCKED`] until this is dropped.
pub struct AdapterLock(String);

impl Drop for AdapterLock {
    fn drop(&mut self) {
        LOCKED.with(|locked| locked.borrow_mut().remove(&self.0));
    }
}

impl wit::GuestFileLock for AdapterLock {}

/// A reservation of a host without quotas: holds nothing.
pub struct AdapterReservation;

impl wit::GuestReservation for AdapterReservation {}

impl wit::GuestFile for AdapterFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.0.stat().map(|stat| stat.size).map_err(error)
    }

    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, VfsError> {
        let len = len.min(READ_BYTES_MAX);
        // Bounded by the bytes the host actually returns, never by `len` alone.
        let mut out = Vec::new();
        while (out.len() as u64) < len {
            let want = (len - out.len() as u64).min(IO_CHUNK_BYTES as u64);
            let (chunk, at_end) = self
                .0
                .read(want, offset + out.len() as u64)
                .map_err(error)?;
            out.extend_from_slice(&chunk);
            if at_end || chunk.is_empty() {
                break;
            }
        }
        Ok(out)
    }

    fn write_at(&self, offset: u64, data: Vec<u8>) -> Result<(), VfsError> {
        let mut done = 0usize;
        while done < data.len() {
            let end = (done + IO_CHUNK_BYTES).min(data.len());
            let written = self
                .0
                .write(&data[done..end], offset + done as u64)
                .map_err(error)?;
            if written == 0 {
                return Err(VfsError::Io(format!(
                    "wasi:filesystem wrote 0 bytes at offset {}",
                    offset + done as u64
                )));
            }
            done += written as usize;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.0.set_size(len).map_err(error)
    }

    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        match kind {
            // wasi:filesystem has no barrier; sync-data is the same promise as Stele's host
            // gives for `barrier` on Linux.
            SyncKind::Data | SyncKind::Barrier => self.0.sync_data(),
            SyncKind::Full => self.0.sync(),
        }
        .map_err(error)
    }

    fn reserve(&self, _len: u64) -> Result<wit::Reservation, VfsError> {
        Ok(wit::Reservation::new(AdapterReservation))
    }
}

fn open_file(root: &Descriptor, path: &str, open: OpenFlags) -> Result<Descriptor, VfsError> {
    root.open_at(
        PathFlags::empty(),
        path,
        open,
        DescriptorFlags::READ | DescriptorFlags::WRITE,
    )
    .map_err(error)
}

impl wit::Guest for Adapter {
    type File = AdapterFile;
    type FileLock = AdapterLock;
    type Reservation = AdapterReservation;

    fn reserve(path: String, _len: u64) -> Result<wit::Reservation, VfsError> {
        check(&path, false)?;
        Ok(wit::Reservation::new(AdapterReservation))
    }

    fn open(path: String, mode: OpenMode) -> Result<wit::File, VfsError> {
        check(&path, false)?;
        let flags = match mode {
            OpenMode::Existing => OpenFlags::empty(),
            OpenMode::Create => OpenFlags::CREATE,
            OpenMode::CreateNew => OpenFlags::CREATE | OpenFlags::EXCLUSIVE,
            OpenMode::Truncate => OpenFlags::CREATE | OpenFlags::TRUNCATE,
        };
        with_root(|root| open_file(root, &path, flags))
            .map(|file| wit::File::new(AdapterFile(file)))
    }

    fn lock_exclusive(path: String) -> Result<wit::FileLock, VfsError> {
        check(&path, false)?;
        // The lock file exists on disk, as with Stele's host, so a log's files look the same
        // whichever host wrote them.
        with_root(|root| open_file(root, &path, OpenFlags::CREATE))?;
        LOCKED.with(|locked| {
            if !locked.borrow_mut().insert(path.clone()) {
                return Err(VfsError::Locked(path.clone()));
            }
            Ok(wit::FileLock::new(AdapterLock(path)))
        })
    }

    fn rename(source: String, destination: String) -> Result<(), VfsError> {
        check(&source, false)?;
        check(&destination, false)?;
        with_root(|root| root.rename_at(&source, root, &destination).map_err(error))
    }

    fn sync_dir(path: String) -> Result<(), VfsError> {
        check(&path, true)?;
        // The root too is opened anew (as "."), not synced through the preopen's descriptor:
        // some hosts (jco's preview2-shim) refuse `sync` on a preopen.
        let target = if path.is_empty() { "." } else { path.as_str() };
        with_root(|root| {
            root.open_at(
                PathFlags::empty(),
                target,
                OpenFlags::DIRECTORY,
                DescriptorFlags::READ,
            )
            .and_then(|dir| dir.sync())
            .map_err(error)
        })
    }

    fn remove(path: String) -> Result<(), VfsError> {
        check(&path, false)?;
        with_root(|root| root.unlink_file_at(&path).map_err(error))
    }

    fn create_dir(path: String) -> Result<(), VfsError> {
        check(&path, false)?;
        with_root(|root| match root.create_directory_at(&path) {
            Ok(()) => Ok(()),
            // Already there: fine if it is a directory, as the contract says.
            Err(ErrorCode::Exist) => match root.stat_at(PathFlags::empty(), &path) {
                Ok(stat) if stat.type_ == DescriptorType::Directory => Ok(()),
                Ok(_) => Err(VfsError::AlreadyExists),
                Err(code) => Err(error(code)),
            },
            Err(code) => Err(error(code)),
        })
    }

    fn exists(path: String) -> Result<bool, VfsError> {
        check(&path, false)?;
        with_root(|root| match root.stat_at(PathFlags::empty(), &path) {
            Ok(_) => Ok(true),
            Err(ErrorCode::NoEntry) => Ok(false),
            Err(code) => Err(error(code)),
        })
    }

    fn list_dir(path: String) -> Result<Vec<String>, VfsError> {
        check(&path, true)?;
        with_root(|root| {
            let listed;
            let dir = if path.is_empty() || path == "." {
                root
            } else {
                listed = root
                    .open_at(
                        PathFlags::empty(),
                        &path,
                        OpenFlags::DIRECTORY,
                        DescriptorFlags::READ,
                    )
                    .map_err(error)?;
                &listed
            };
            let entries = dir.read_directory().map_err(error)?;
            let mut names = Vec::new();
            while let Some(entry) = entries.read_directory_entry().map_err(error)? {
                names.push(entry.name);
            }
            names.sort();
            Ok(names)
        })
    }

    /// In wasm, table-driven: a WASI host has no CRC of its own to lend. The engine asks only
    /// for inputs long enough to be worth a call, so this costs what the engine's own loop
    /// would, plus one call between the two components.
    fn crc32c_append(crc: u32, data: Vec<u8>) -> u32 {
        crc32c::crc32c_append(crc, &data)
    }
}
