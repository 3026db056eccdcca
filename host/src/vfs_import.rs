//! The host side of `stele:log/vfs`: serves a guest's file calls from the store's [`Vfs`].
//!
//! Open files live in the store's [`ResourceTable`]; a guest holds only their handles. A handle
//! that is not in the table (never issued, or already dropped) cannot reach this code: the
//! component model checks handles on entry and traps the guest, never the host. Limits:
//! [`READ_BYTES_MAX`] per read and the instance's `open_files_max`.

use std::sync::Arc;

use stele::vfs::{OpenMode, SyncKind, VfsError, VfsFile, VfsLock};
use wasmtime::component::{Accessor, HasSelf, Resource};

use crate::runtime::GuestState;
use crate::runtime::bindings::stele::log::vfs as wit;
use crate::runtime::bindings_async::stele::log::vfs_async as wit_async;

/// The most bytes one `read-at` returns; a larger request is answered short, as a read at end
/// of file would be. Bounds the host allocation a guest can ask for in one call. 4 MiB is four
/// replay chunks; chosen, not measured.
pub const READ_BYTES_MAX: u64 = 4 << 20;

/// An async `write-at` of at most this many bytes runs inline, on the thread serving the
/// instance: a buffered write this small is a copy into the page cache (microseconds), where
/// the I/O thread's round trip costs two thread wake-ups (77 µs on this 2-core VM). Larger
/// writes go to the I/O thread, so the instance keeps serving other calls meanwhile.
const WRITE_INLINE_BYTES_MAX: usize = 64 << 10;

/// A file a guest opened. Shared (`Arc`) so that an async import can hand it to the I/O thread
/// while the guest's other calls keep running.
pub struct HostFile {
    file: Arc<dyn VfsFile>,
}

/// A lock a guest holds. Dropping the handle (or the instance) releases it.
pub struct HostLock {
    _lock: Box<dyn VfsLock>,
}

pub(crate) fn to_wit(err: VfsError) -> wit::VfsError {
    match err {
        VfsError::NotFound => wit::VfsError::NotFound,
        VfsError::AlreadyExists => wit::VfsError::AlreadyExists,
        VfsError::NoSpace => wit::VfsError::NoSpace,
        VfsError::InvalidPath(p) => wit::VfsError::InvalidPath(p),
        VfsError::PermissionDenied => wit::VfsError::PermissionDenied,
        VfsError::TooManyHandles => wit::VfsError::TooManyHandles,
        VfsError::InvalidInput(m) => wit::VfsError::InvalidInput(m),
        VfsError::Io(m) => wit::VfsError::Io(m),
        VfsError::Locked(p) => wit::VfsError::Locked(p),
        other => wit::VfsError::Io(other.to_string()),
    }
}

pub(crate) fn from_wit(err: wit::VfsError) -> VfsError {
    match err {
        wit::VfsError::NotFound => VfsError::NotFound,
        wit::VfsError::AlreadyExists => VfsError::AlreadyExists,
        wit::VfsError::NoSpace => VfsError::NoSpace,
        wit::VfsError::InvalidPath(p) => VfsError::InvalidPath(p),
        wit::VfsError::PermissionDenied => VfsError::PermissionDenied,
        wit::VfsError::TooManyHandles => VfsError::TooManyHandles,
        wit::VfsError::InvalidInput(m) => VfsError::InvalidInput(m),
        wit::VfsError::Io(m) => VfsError::Io(m),
        wit::VfsError::Locked(p) => VfsError::Locked(p),
    }
}

type Answer<T> = wasmtime::Result<Result<T, wit::VfsError>>;

impl wit::Host for GuestState {
    fn open(&mut self, path: String, mode: wit::OpenMode) -> Answer<Resource<HostFile>> {
        self.touch();
        if self.open_files >= self.open_files_max {
            return Ok(Err(wit::VfsError::TooManyHandles));
        }
        let mode = match mode {
            wit::OpenMode::Existing => OpenMode::Existing,
            wit::OpenMode::Create => OpenMode::Create,
            wit::OpenMode::CreateNew => OpenMode::CreateNew,
            wit::OpenMode::Truncate => OpenMode::Truncate,
        };
        match self.vfs.open(&path, mode) {
            Ok(file) => {
                let handle = self.table.push(HostFile {
                    file: Arc::from(file),
                })?;
                self.open_files += 1;
                Ok(Ok(handle))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }

    fn lock_exclusive(&mut self, path: String) -> Answer<Resource<HostLock>> {
        self.touch();
        if self.open_files >= self.open_files_max {
            return Ok(Err(wit::VfsError::TooManyHandles));
        }
        match self.vfs.lock_exclusive(&path) {
            Ok(lock) => {
                let handle = self.table.push(HostLock { _lock: lock })?;
                self.open_files += 1;
                Ok(Ok(handle))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }

    fn rename(&mut self, source: String, destination: String) -> Answer<()> {
        self.touch();
        Ok(self.vfs.rename(&source, &destination).map_err(to_wit))
    }

    fn sync_dir(&mut self, path: String) -> Answer<()> {
        self.touch();
        Ok(self.vfs.sync_dir(&path).map_err(to_wit))
    }

    fn remove(&mut self, path: String) -> Answer<()> {
        self.touch();
        Ok(self.vfs.remove(&path).map_err(to_wit))
    }

    fn create_dir(&mut self, path: String) -> Answer<()> {
        self.touch();
        Ok(self.vfs.create_dir(&path).map_err(to_wit))
    }

    fn exists(&mut self, path: String) -> Answer<bool> {
        self.touch();
        Ok(self.vfs.exists(&path).map_err(to_wit))
    }

    fn list_dir(&mut self, path: String) -> Answer<Vec<String>> {
        self.touch();
        Ok(self.vfs.list(&path).map_err(to_wit))
    }
}

impl wit::HostFile for GuestState {
    fn len(&mut self, file: Resource<HostFile>) -> Answer<u64> {
        self.touch();
        Ok(self.table.get(&file)?.file.len().map_err(to_wit))
    }

    fn read_at(&mut self, file: Resource<HostFile>, offset: u64, len: u64) -> Answer<Vec<u8>> {
        self.touch();
        let file = &self.table.get(&file)?.file;
        let want = len.min(READ_BYTES_MAX) as usize;
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            match file.read_at(offset + filled as u64, &mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => return Ok(Err(to_wit(e))),
            }
        }
        buf.truncate(filled);
        Ok(Ok(buf))
    }

    fn write_at(&mut self, file: Resource<HostFile>, offset: u64, data: Vec<u8>) -> Answer<()> {
        self.touch();
        Ok(self
            .table
            .get(&file)?
            .file
            .write_at(offset, &data)
            .map_err(to_wit))
    }

    fn set_len(&mut self, file: Resource<HostFile>, len: u64) -> Answer<()> {
        self.touch();
        Ok(self.table.get(&file)?.file.set_len(len).map_err(to_wit))
    }

    fn sync(&mut self, file: Resource<HostFile>, kind: wit::SyncKind) -> Answer<()> {
        self.touch();
        Ok(self
            .table
            .get(&file)?
            .file
            .sync(sync_kind(kind))
            .map_err(to_wit))
    }

    fn drop(&mut self, file: Resource<HostFile>) -> wasmtime::Result<()> {
        self.touch();
        self.table.delete(file)?;
        self.open_files -= 1;
        Ok(())
    }
}

impl wit::HostFileLock for GuestState {
    fn drop(&mut self, lock: Resource<HostLock>) -> wasmtime::Result<()> {
        self.touch();
        self.table.delete(lock)?;
        self.open_files -= 1;
        Ok(())
    }
}

fn sync_kind(kind: wit::SyncKind) -> SyncKind {
    match kind {
        wit::SyncKind::Data => SyncKind::Data,
        wit::SyncKind::Full => SyncKind::Full,
        wit::SyncKind::Barrier => SyncKind::Barrier,
    }
}

/// Runs an async import's blocking work: posted to the instance's I/O thread if it has one
/// (the store's driver then runs it there or on its own thread, see `io_thread`), so that the
/// store keeps running the guest's other calls meanwhile; inline otherwise. Only instances
/// driven from a thread that is there to block (the journal's, on tokio's blocking pool) have
/// no I/O thread: a hop to another thread would only add a wake-up each way.
async fn run_io<R: Send + 'static>(
    io: Option<crate::io_thread::IoThread>,
    work: impl FnOnce() -> R + Send + 'static,
) -> wasmtime::Result<R> {
    match io {
        Some(io) => Ok(io.run(work).await?),
        None => Ok(work()),
    }
}

/// Takes what an async import needs out of the store: the file (shared) and the instance's I/O
/// thread, if any. Nothing is held across the await.
fn file_and_io<T>(
    accessor: &Accessor<T, HasSelf<GuestState>>,
    file: &Resource<HostFile>,
) -> wasmtime::Result<(Arc<dyn VfsFile>, Option<crate::io_thread::IoThread>)> {
    accessor.with(|mut access| {
        let state = access.get();
        state.touch();
        Ok((state.table.get(file)?.file.clone(), state.io.clone()))
    })
}

/// An async import finished: the guest resumes, and the busy deadline restarts (the time the
/// host spent serving the import is not the guest's).
fn touch<T>(accessor: &Accessor<T, HasSelf<GuestState>>) {
    accessor.with(|mut access| access.get().touch());
}

impl wit_async::Host for GuestState {}

/// The async imports really suspend when the instance has an I/O thread: the write or sync runs
/// there while the store runs the guest's other calls, which stage into the next group. (An
/// import that completed on its first poll would serialize the calls: one record per sync.)
impl<T: Send + 'static> wit_async::HostWithStore<T> for HasSelf<GuestState> {
    fn write_at(
        accessor: &Accessor<T, Self>,
        file: Resource<HostFile>,
        offset: u64,
        data: Vec<u8>,
    ) -> impl Future<Output = wasmtime::Result<Result<(), wit::VfsError>>> + Send {
        let taken = file_and_io(accessor, &file);
        async move {
            let (file, io) = taken?;
            let io = io.filter(|_| data.len() > WRITE_INLINE_BYTES_MAX);
            let written = run_io(io, move || file.write_at(offset, &data)).await?;
            touch(accessor);
            Ok(written.map_err(to_wit))
        }
    }

    fn sync(
        accessor: &Accessor<T, Self>,
        file: Resource<HostFile>,
        kind: wit::SyncKind,
    ) -> impl Future<Output = wasmtime::Result<Result<(), wit::VfsError>>> + Send {
        let taken = file_and_io(accessor, &file);
        async move {
            let (file, io) = taken?;
            let kind = sync_kind(kind);
            let synced = run_io(io, move || file.sync(kind)).await?;
            touch(accessor);
            Ok(synced.map_err(to_wit))
        }
    }

    fn sync_dir(
        accessor: &Accessor<T, Self>,
        path: String,
    ) -> impl Future<Output = wasmtime::Result<Result<(), wit::VfsError>>> + Send {
        let (vfs, io) = accessor.with(|mut access| {
            let state = access.get();
            state.touch();
            (state.vfs.clone(), state.io.clone())
        });
        async move {
            let synced = run_io(io, move || vfs.sync_dir(&path)).await?;
            touch(accessor);
            Ok(synced.map_err(to_wit))
        }
    }
}

#[cfg(test)]
mod tests {
    use stele::vfs::MemVfs;
    use stele::vfs::Vfs;

    use super::*;
    use crate::runtime::{Runtime, SandboxLimits};

    /// A file handle that is not (or no longer) in the store's table: every import answers
    /// with an error (which traps the guest that sent it), never touches another file, and
    /// leaves the count of open files alone.
    #[test]
    fn a_stale_file_handle_is_an_error() {
        let runtime = Runtime::get().unwrap();
        let vfs = Arc::new(MemVfs::new());
        let mut store = runtime.new_store(vfs.clone(), SandboxLimits::default(), None);
        let state = store.data_mut();
        let file = wit::Host::open(state, "f".into(), wit::OpenMode::Create)
            .unwrap()
            .unwrap();
        let rep = file.rep();
        wit::HostFile::write_at(state, file, 0, b"kept".to_vec())
            .unwrap()
            .unwrap();
        let file = Resource::<HostFile>::new_own(rep);
        wit::HostFile::drop(state, file).unwrap();
        assert_eq!(state.open_files, 0);

        let stale = || Resource::<HostFile>::new_own(rep);
        assert!(wit::HostFile::len(state, stale()).is_err());
        assert!(wit::HostFile::read_at(state, stale(), 0, 4).is_err());
        assert!(wit::HostFile::write_at(state, stale(), 0, b"lost".to_vec()).is_err());
        assert!(wit::HostFile::set_len(state, stale(), 0).is_err());
        assert!(wit::HostFile::sync(state, stale(), wit::SyncKind::Data).is_err());
        assert!(
            wit::HostFile::drop(state, stale()).is_err(),
            "a second drop"
        );
        assert_eq!(state.open_files, 0, "no underflow");
        // A handle never issued at all.
        assert!(wit::HostFile::len(state, Resource::new_own(rep + 1000)).is_err());

        let file = vfs.open("f", OpenMode::Existing).unwrap();
        let mut bytes = [0u8; 8];
        let n = file.read_at(0, &mut bytes).unwrap();
        assert_eq!(&bytes[..n], b"kept");
    }
}
