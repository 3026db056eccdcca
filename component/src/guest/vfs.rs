//! [`WitVfs`]: the engine's `Vfs`, served by the host through the `stele:log/vfs` imports.

use crate::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock, VfsReservation};

use super::stele::log::vfs as wit;

/// The `Vfs` of the component: every call crosses to the host.
#[derive(Debug, Default, Clone, Copy)]
pub struct WitVfs;

/// An open file handle owned by the host's resource table.
#[derive(Debug)]
pub struct WitFile(pub(crate) wit::File);

// SAFETY: wasm32-wasip2 components run on one thread; no handle is ever shared across threads.
// The engine's traits require Send + Sync for the native thread driver.
unsafe impl Send for WitFile {}
unsafe impl Sync for WitFile {}

/// A lock held through the host; dropping the handle releases it.
#[derive(Debug)]
struct WitLock(#[allow(dead_code)] wit::FileLock);

// SAFETY: as for `WitFile`.
unsafe impl Send for WitLock {}
unsafe impl Sync for WitLock {}

impl VfsLock for WitLock {}

/// Room held under the tenant's quota through the host; dropping the handle releases it.
#[derive(Debug)]
struct WitReservation(#[allow(dead_code)] wit::Reservation);

// SAFETY: as for `WitFile`.
unsafe impl Send for WitReservation {}
unsafe impl Sync for WitReservation {}

impl VfsReservation for WitReservation {}

crate::vfs_error_wit_conversions!(wit::VfsError, wit::QuotaExceeded);

/// The most bytes one `read-at` asks the host for. The host caps reads too; asking for more
/// than it serves would only be answered short.
const READ_BYTES_MAX: usize = 4 << 20;

impl VfsFile for WitFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.0.len().map_err(from_wit)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let want = buf.len().min(READ_BYTES_MAX);
        let bytes = self.0.read_at(offset, want as u64).map_err(from_wit)?;
        if bytes.len() > want {
            return Err(VfsError::Io(format!(
                "host returned {} bytes for a read of {want}",
                bytes.len()
            )));
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(bytes.len())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        self.0.write_at(offset, data).map_err(from_wit)
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.0.set_len(len).map_err(from_wit)
    }

    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        self.0.sync(wit_sync_kind(kind)).map_err(from_wit)
    }

    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        let held = self.0.reserve(len).map_err(from_wit)?;
        Ok(Box::new(WitReservation(held)))
    }
}

/// Opens `path` through the import, as the concrete handle the async imports take.
pub(crate) fn open_file(path: &str, mode: OpenMode) -> Result<WitFile, VfsError> {
    install_host_crc32c();
    let mode = match mode {
        OpenMode::Existing => wit::OpenMode::Existing,
        OpenMode::Create => wit::OpenMode::Create,
        OpenMode::CreateNew => wit::OpenMode::CreateNew,
        OpenMode::Truncate => wit::OpenMode::Truncate,
    };
    wit::open(path, mode).map(WitFile).map_err(from_wit)
}

pub(crate) fn wit_sync_kind(kind: SyncKind) -> wit::SyncKind {
    match kind {
        SyncKind::Data => wit::SyncKind::Data,
        SyncKind::Full => wit::SyncKind::Full,
        SyncKind::Barrier => wit::SyncKind::Barrier,
    }
}

impl Vfs for WitVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        Ok(Box::new(open_file(path, mode)?))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        wit::rename(from, to).map_err(from_wit)
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        wit::sync_dir(dir).map_err(from_wit)
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        wit::remove(path).map_err(from_wit)
    }

    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        wit::create_dir(dir).map_err(from_wit)
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        wit::exists(path).map_err(from_wit)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        wit::list_dir(dir).map_err(from_wit)
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        let lock = wit::lock_exclusive(path).map_err(from_wit)?;
        Ok(Box::new(WitLock(lock)))
    }

    fn reserve(&self, path: &str, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        let held = wit::reserve(path, len).map_err(from_wit)?;
        Ok(Box::new(WitReservation(held)))
    }
}

/// The shortest input whose CRC the host computes (the `vfs` import `crc32c-append`) rather
/// than the guest. WebAssembly has no CRC instruction: the guest's table-driven loop costs
/// about 9.5 instructions per byte, and a call to the host about 2,100 whatever the length
/// (wasmtime's host-call entry and exit, copying the bytes out, then the CPU's CRC instruction
/// at about 20 GB/s), by callgrind's count. They break even near 230 bytes; 512 leaves the host
/// only inputs it wins by 2x or more (a 0.9 MB push-log frame, by 4,000x), and leaves small WAL
/// records' frames in the guest.
const HOST_CRC_BYTES_MIN: usize = 512;

/// Hands the host's CRC to [`crate::frame`]. Called before the guest opens any file (every
/// frame the engine checks or writes belongs to an open file, see [`open_file`]); a CRC
/// computed before it is computed in the guest, with the same result.
pub(crate) fn install_host_crc32c() {
    crate::frame::install_crc32c_accelerator(crate::frame::Crc32cAccelerator {
        bytes_min: HOST_CRC_BYTES_MIN,
        append: wit::crc32c_append,
    });
}
