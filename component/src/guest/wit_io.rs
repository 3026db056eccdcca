//! [`WitIo`]: the engine's [`FileIo`] and [`DeviceIo`] over the imports, for the async build's
//! writers (the WAL's driver and the journal), so that both write and sync one way.

use crate::vfs::{
    DeviceIo, FileIo, INLINE_WRITE_BYTES_MAX, OpenMode, SyncKind, Vfs, VfsError, VfsFile,
};

use super::stele::log::vfs_async;
use super::vfs::{WitFile, WitVfs, from_wit, open_file, wit_sync_kind};

/// How a writer's waiting calls cross to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WitIo {
    /// Through the synchronous `vfs` imports: every future is ready when created, for a caller
    /// that cannot suspend (a non-durable commit that leads) and runs the writer through
    /// [`crate::vfs::complete_now`].
    Blocking,
    /// Syncs, directory syncs and writes over [`INLINE_WRITE_BYTES_MAX`] through the
    /// `vfs-async` imports: the calling task suspends and the instance serves its other calls
    /// while the host works. Smaller writes stay synchronous: a page-cache write costs less
    /// than a suspension.
    Async,
}

impl FileIo for WitIo {
    type File = WitFile;
    async fn write_at(&self, file: &WitFile, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        if *self == WitIo::Blocking || data.len() <= INLINE_WRITE_BYTES_MAX {
            return file.write_at(offset, data);
        }
        vfs_async::write_at(&file.0, offset, data.to_vec())
            .await
            .map_err(from_wit)
    }
    async fn sync(&self, file: &WitFile, kind: SyncKind) -> Result<(), VfsError> {
        if *self == WitIo::Blocking {
            return file.sync(kind);
        }
        vfs_async::sync(&file.0, wit_sync_kind(kind))
            .await
            .map_err(from_wit)
    }
}

impl DeviceIo for WitIo {
    fn vfs(&self) -> &dyn Vfs {
        &WitVfs
    }
    fn open(&self, path: &str, mode: OpenMode) -> Result<WitFile, VfsError> {
        open_file(path, mode)
    }
    async fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        if *self == WitIo::Blocking {
            return WitVfs.sync_dir(dir);
        }
        vfs_async::sync_dir(dir.to_owned()).await.map_err(from_wit)
    }
}
