//! Serving `stele:log/vfs` from any wasmtime store: the context, its view, and
//! `add_to_linker_sync` / `add_to_linker_async`, in the shape wasmtime-wasi uses
//! (`WasiCtx`, `WasiView`, `p2::add_to_linker_sync`).
//!
//! - [`SteleCtx`] holds what the imports need: the [`Vfs`] the guest's files live on, the
//!   bound on files it may hold open, and how async imports run their blocking work.
//! - [`SteleView`] is implemented by the embedder's store data `T`: it lends `&mut` to that
//!   context and to the embedder's [`ResourceTable`] (shared with wasmtime-wasi), as a
//!   [`SteleCtxView`].
//! - [`SteleVfs`] is the [`HasData`] marker the generated `add_to_linker` functions take.
//! - [`add_to_linker_sync`] links `stele:log/vfs` (what `stele.wasm`, `stele-wasi.wasm`'s
//!   engine and composed plugins import); [`add_to_linker_async`] links it and
//!   `stele:log/vfs-async` (what `stele-async.wasm` imports), for stores that run the
//!   component model's async ABI.
//!
//! Which calls can block the thread that drives the store: every `vfs` function is
//! synchronous and runs inline (an open's recovery reads, a rotation's new segment, a
//! checkpoint or truncation, small writes, and a non-durable commit that writes a group
//! itself); only `vfs-async`'s `write-at`, `sync` and `sync-dir`, which `stele-async.wasm` uses
//! for the syncs of a durable group and of an open and for large writes, run where
//! [`SteleCtx`] says (tokio's blocking pool by default).
//!
//! Open files live in the store's [`ResourceTable`]; a guest holds only their handles. A handle
//! that is not in the table (never issued, or already dropped) cannot reach a file: the
//! component model checks handles on entry and traps the guest, never the host. Limits:
//! [`READ_BYTES_MAX`] per read and [`SteleCtx::open_files_max`].
//!
//! What the engine needs of the embedder's wasmtime: the cargo features `component-model`
//! (and `component-model-async` plus `async` for [`add_to_linker_async`]); a [`Config`] with
//! the component model on (the default), and `wasm_component_model_async(true)` for
//! `stele-async.wasm`. The engine's components also import the `wasi:io` and `wasi:cli`
//! interfaces Rust's std links, so link `wasmtime_wasi::p2::add_to_linker_sync` (or `_async`)
//! too. Everything else (the store's limiter, epoch deadlines, fuel, the pooling allocator)
//! is the embedder's to choose.
//!
//! [`Config`]: wasmtime::Config

use std::sync::Arc;

use stele::vfs::{
    INLINE_WRITE_BYTES_MAX, OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock, VfsReservation,
};
use wasmtime::component::{Accessor, HasData, Linker, Resource, ResourceTable};

use crate::embed::bindings::engine_async::stele::log::vfs_async as wit_async;
use crate::embed::bindings::stele::log::vfs as wit;

/// The most bytes one `read-at` returns; a larger request is answered short, as a read at end
/// of file would be. Bounds the host allocation a guest can ask for in one call. 4 MiB is four
/// replay chunks; chosen, not measured.
pub const READ_BYTES_MAX: u64 = 4 << 20;

/// Default bound on files (and locks) one store may hold open at once. A WAL holds two (its
/// file and its lock); the bound only stops a misbehaving guest from exhausting the host's
/// descriptors.
pub const OPEN_FILES_MAX_DEFAULT: usize = 64;

/// Bound on the quota reservations one store may hold at once. Not descriptors, so not counted
/// against the open-files bound: an engine holds a few (a segmented WAL its checkpoint's room
/// and one per rotation its staged records need, a single-file log one, an append one while it
/// writes). The bound only stops a misbehaving guest from filling the host's table; past it,
/// `reserve` answers `too-many-handles` and the engine refuses that call, typed, unpoisoned.
pub const RESERVATIONS_MAX: usize = 1024;

/// A file a guest opened. Shared (`Arc`) so that an async import can hand it to another thread
/// while the guest's other calls keep running.
pub struct HostFile {
    file: Arc<dyn VfsFile>,
}

/// A lock a guest holds. Dropping the handle (or the store) releases it.
pub struct HostLock {
    _lock: Box<dyn VfsLock>,
}

/// Room a guest holds under its tenant's disk quota ([`Vfs::reserve`]). Dropping the handle
/// (or the store) releases it.
pub struct HostReservation {
    _held: Box<dyn VfsReservation>,
}

/// Where an async import (`vfs-async`'s `write-at`, `sync`, `sync-dir`) runs its blocking
/// work.
#[derive(Clone, Debug)]
enum AsyncIo {
    /// On tokio's blocking pool when the import runs inside a tokio runtime, else inline: the
    /// store's other calls keep running during a sync, and a tokio worker never blocks on one.
    SpawnBlocking,
    /// Inline, on the thread polling the store: for stores driven from a thread that is there
    /// to block, where a hop would only add two wake-ups.
    Inline,
    /// Posted to Stele's own driver (`crate::sandbox::store_driver`), which runs it on the
    /// driving caller's thread or on the instance's I/O lane.
    Driver(crate::embed::io_lane::IoLane),
}

/// What `stele:log/vfs` is served from in one store: the [`Vfs`], the open-files bound, and
/// the count of open handles. The handles themselves live in the embedder's
/// [`ResourceTable`], which [`SteleView`] lends alongside.
pub struct SteleCtx {
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) open_files: usize,
    open_files_max: usize,
    /// Reservations the guest holds ([`RESERVATIONS_MAX`]).
    reservations: usize,
    async_io: AsyncIo,
    /// Bumped on every import call (and by Stele's own drivers on every call into the guest):
    /// a busy deadline's sign that the guest is not stuck.
    pub(crate) import_calls: u64,
}

impl std::fmt::Debug for SteleCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteleCtx")
            .field("open_files", &self.open_files)
            .field("open_files_max", &self.open_files_max)
            .field("async_io", &self.async_io)
            .finish_non_exhaustive()
    }
}

impl SteleCtx {
    /// A context whose guest's files live on `vfs` (a [`crate::fs::RealFs`] confined to one
    /// directory, say), with at most [`OPEN_FILES_MAX_DEFAULT`] open at once. Async imports run
    /// their writes and syncs on tokio's blocking pool when called inside a tokio runtime.
    pub fn new(vfs: Arc<dyn Vfs>) -> SteleCtx {
        SteleCtx {
            vfs,
            open_files: 0,
            open_files_max: OPEN_FILES_MAX_DEFAULT,
            reservations: 0,
            async_io: AsyncIo::SpawnBlocking,
            import_calls: 0,
        }
    }

    /// Bounds the files and locks the guest may hold open at once. Past it, `open` and
    /// `lock-exclusive` answer `too-many-handles`.
    pub fn with_open_files_max(mut self, open_files_max: usize) -> SteleCtx {
        self.open_files_max = open_files_max;
        self
    }

    /// Runs the async imports' writes and syncs inline, on the thread polling the store, as
    /// wasmtime-wasi's `allow_blocking_current_thread` does: for a store driven from a thread
    /// that may block. The store serves no other call during a sync then.
    pub fn allow_blocking_current_thread(mut self, allow: bool) -> SteleCtx {
        self.async_io = if allow {
            AsyncIo::Inline
        } else {
            AsyncIo::SpawnBlocking
        };
        self
    }

    pub(crate) fn with_io_lane(mut self, io: crate::embed::io_lane::IoLane) -> SteleCtx {
        self.async_io = AsyncIo::Driver(io);
        self
    }

    pub(crate) fn io_lane(&self) -> Option<&crate::embed::io_lane::IoLane> {
        match &self.async_io {
            AsyncIo::Driver(io) => Some(io),
            _ => None,
        }
    }

    /// The bound set by [`Self::with_open_files_max`].
    pub fn open_files_max(&self) -> usize {
        self.open_files_max
    }

    /// How many files and locks the guest holds open now.
    pub fn open_files(&self) -> usize {
        self.open_files
    }

    /// How many `vfs` import calls the guest has made (wrapping): for a busy deadline of the
    /// embedder's own, a count that moves is a guest that is not stuck.
    pub fn import_calls(&self) -> u64 {
        self.import_calls
    }

    /// Notes a call across the boundary: the busy deadline restarts.
    pub(crate) fn touch(&mut self) {
        self.import_calls = self.import_calls.wrapping_add(1);
    }
}

/// The view an embedder's store data gives the `vfs` imports: its [`SteleCtx`] and its
/// [`ResourceTable`].
pub struct SteleCtxView<'a> {
    /// The store's Stele context.
    pub ctx: &'a mut SteleCtx,
    /// The store's resource table, where open files and locks live.
    pub table: &'a mut ResourceTable,
}

/// Implemented by the embedder's store data to serve `stele:log/vfs`:
///
/// ```
/// use std::sync::Arc;
/// use stele_host::{SteleCtx, SteleCtxView, SteleView};
/// use stele_host::wasmtime::component::ResourceTable;
///
/// struct Tenant {
///     table: ResourceTable,
///     stele: SteleCtx,
/// }
///
/// impl SteleView for Tenant {
///     fn stele(&mut self) -> SteleCtxView<'_> {
///         SteleCtxView { ctx: &mut self.stele, table: &mut self.table }
///     }
/// }
/// # let _ = Tenant { table: ResourceTable::new(), stele: SteleCtx::new(Arc::new(stele_host::stele::vfs::MemVfs::new())) };
/// ```
pub trait SteleView: Send {
    /// The store's Stele context and resource table.
    fn stele(&mut self) -> SteleCtxView<'_>;
}

/// The [`HasData`] marker for `stele:log/vfs`: its data is a [`SteleCtxView`]. For linking one
/// interface at a time with the generated `add_to_linker` functions of [`crate::embed::bindings`].
pub struct SteleVfs;

impl HasData for SteleVfs {
    type Data<'a> = SteleCtxView<'a>;
}

/// Links `stele:log/vfs` into `linker`, served from each store's [`SteleView`]. Enough for
/// `stele.wasm`, and for any component composed with it (a plugin); link WASI as well (see the
/// module doc). Usable in sync and in async stores: the imports are synchronous functions.
pub fn add_to_linker_sync<T: SteleView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, SteleVfs>(linker, T::stele)
}

/// Links `stele:log/vfs` and `stele:log/vfs-async` into `linker`: what `stele-async.wasm`
/// imports. The engine must run the component model's async ABI
/// (`Config::wasm_component_model_async(true)`), and the guest's calls must run inside
/// `run_concurrent` for concurrent durable commits to share syncs. The async imports' writes and
/// syncs run as [`SteleCtx::allow_blocking_current_thread`] chose.
pub fn add_to_linker_async<T: SteleView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, SteleVfs>(linker, T::stele)?;
    wit_async::add_to_linker::<T, SteleVfs>(linker, T::stele)
}

stele::vfs_error_wit_conversions!(wit::VfsError, wit::QuotaExceeded);

type Answer<T> = wasmtime::Result<Result<T, wit::VfsError>>;

impl wit::Host for SteleCtxView<'_> {
    fn open(&mut self, path: String, mode: wit::OpenMode) -> Answer<Resource<HostFile>> {
        self.ctx.touch();
        if self.ctx.open_files >= self.ctx.open_files_max {
            return Ok(Err(wit::VfsError::TooManyHandles));
        }
        let mode = match mode {
            wit::OpenMode::Existing => OpenMode::Existing,
            wit::OpenMode::Create => OpenMode::Create,
            wit::OpenMode::CreateNew => OpenMode::CreateNew,
            wit::OpenMode::Truncate => OpenMode::Truncate,
        };
        match self.ctx.vfs.open(&path, mode) {
            Ok(file) => {
                let handle = self.table.push(HostFile {
                    file: Arc::from(file),
                })?;
                self.ctx.open_files += 1;
                Ok(Ok(handle))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }

    fn lock_exclusive(&mut self, path: String) -> Answer<Resource<HostLock>> {
        self.ctx.touch();
        if self.ctx.open_files >= self.ctx.open_files_max {
            return Ok(Err(wit::VfsError::TooManyHandles));
        }
        match self.ctx.vfs.lock_exclusive(&path) {
            Ok(lock) => {
                let handle = self.table.push(HostLock { _lock: lock })?;
                self.ctx.open_files += 1;
                Ok(Ok(handle))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }

    fn reserve(&mut self, path: String, len: u64) -> Answer<Resource<HostReservation>> {
        self.ctx.touch();
        let held = self.ctx.vfs.reserve(&path, len);
        self.hold(held)
    }

    fn rename(&mut self, source: String, destination: String) -> Answer<()> {
        self.ctx.touch();
        Ok(self.ctx.vfs.rename(&source, &destination).map_err(to_wit))
    }

    fn sync_dir(&mut self, path: String) -> Answer<()> {
        self.ctx.touch();
        Ok(self.ctx.vfs.sync_dir(&path).map_err(to_wit))
    }

    fn remove(&mut self, path: String) -> Answer<()> {
        self.ctx.touch();
        Ok(self.ctx.vfs.remove(&path).map_err(to_wit))
    }

    fn create_dir(&mut self, path: String) -> Answer<()> {
        self.ctx.touch();
        Ok(self.ctx.vfs.create_dir(&path).map_err(to_wit))
    }

    fn exists(&mut self, path: String) -> Answer<bool> {
        self.ctx.touch();
        Ok(self.ctx.vfs.exists(&path).map_err(to_wit))
    }

    fn list_dir(&mut self, path: String) -> Answer<Vec<String>> {
        self.ctx.touch();
        Ok(self.ctx.vfs.list(&path).map_err(to_wit))
    }

    /// The CPU's CRC instruction where it has one (SSE 4.2, ARMv8 CRC), through `crc32c`:
    /// about 20 GB/s here, where the guest's table-driven loop managed about 1 GB/s.
    fn crc32c_append(&mut self, crc: u32, data: Vec<u8>) -> wasmtime::Result<u32> {
        self.ctx.touch();
        Ok(crc32c::crc32c_append(crc, &data))
    }
}

impl wit::HostFile for SteleCtxView<'_> {
    fn len(&mut self, file: Resource<HostFile>) -> Answer<u64> {
        self.ctx.touch();
        Ok(self.table.get(&file)?.file.len().map_err(to_wit))
    }

    fn read_at(&mut self, file: Resource<HostFile>, offset: u64, len: u64) -> Answer<Vec<u8>> {
        self.ctx.touch();
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
        self.ctx.touch();
        Ok(self
            .table
            .get(&file)?
            .file
            .write_at(offset, &data)
            .map_err(to_wit))
    }

    fn set_len(&mut self, file: Resource<HostFile>, len: u64) -> Answer<()> {
        self.ctx.touch();
        Ok(self.table.get(&file)?.file.set_len(len).map_err(to_wit))
    }

    fn sync(&mut self, file: Resource<HostFile>, kind: wit::SyncKind) -> Answer<()> {
        self.ctx.touch();
        Ok(self
            .table
            .get(&file)?
            .file
            .sync(sync_kind(kind))
            .map_err(to_wit))
    }

    fn reserve(&mut self, file: Resource<HostFile>, len: u64) -> Answer<Resource<HostReservation>> {
        self.ctx.touch();
        let held = self.table.get(&file)?.file.reserve(len);
        self.hold(held)
    }

    fn drop(&mut self, file: Resource<HostFile>) -> wasmtime::Result<()> {
        self.ctx.touch();
        self.table.delete(file)?;
        self.ctx.open_files -= 1;
        Ok(())
    }
}

impl SteleCtxView<'_> {
    /// A granted reservation, as a handle the guest holds, within [`RESERVATIONS_MAX`]: past
    /// it the reservation is released at once and the guest told `too-many-handles`.
    fn hold(
        &mut self,
        held: Result<Box<dyn VfsReservation>, VfsError>,
    ) -> Answer<Resource<HostReservation>> {
        if self.ctx.reservations >= RESERVATIONS_MAX {
            return Ok(Err(wit::VfsError::TooManyHandles));
        }
        match held {
            Ok(held) => {
                let handle = self.table.push(HostReservation { _held: held })?;
                self.ctx.reservations += 1;
                Ok(Ok(handle))
            }
            Err(e) => Ok(Err(to_wit(e))),
        }
    }
}

impl wit::HostReservation for SteleCtxView<'_> {
    fn drop(&mut self, reservation: Resource<HostReservation>) -> wasmtime::Result<()> {
        self.ctx.touch();
        self.table.delete(reservation)?;
        self.ctx.reservations -= 1;
        Ok(())
    }
}

impl wit::HostFileLock for SteleCtxView<'_> {
    fn drop(&mut self, lock: Resource<HostLock>) -> wasmtime::Result<()> {
        self.ctx.touch();
        self.table.delete(lock)?;
        self.ctx.open_files -= 1;
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

/// Runs an async import's blocking work where the store's context chose (see [`AsyncIo`]).
async fn run_io<R: Send + 'static>(
    io: AsyncIo,
    work: impl FnOnce() -> R + Send + 'static,
) -> wasmtime::Result<R> {
    match io {
        AsyncIo::Driver(io) => Ok(io.run(work).await?),
        AsyncIo::SpawnBlocking => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Ok(runtime.spawn_blocking(work).await?),
            Err(_) => Ok(work()),
        },
        AsyncIo::Inline => Ok(work()),
    }
}

/// Takes what an async import needs out of the store: the file (shared) and where to run the
/// work. Nothing is held across the await.
fn file_and_io<T>(
    accessor: &Accessor<T, SteleVfs>,
    file: &Resource<HostFile>,
) -> wasmtime::Result<(Arc<dyn VfsFile>, AsyncIo)> {
    accessor.with(|mut access| {
        let view = access.get();
        view.ctx.touch();
        Ok((
            view.table.get(file)?.file.clone(),
            view.ctx.async_io.clone(),
        ))
    })
}

/// An async import finished: the guest resumes, and the busy deadline restarts (the time the
/// host spent serving the import is not the guest's).
fn touch<T>(accessor: &Accessor<T, SteleVfs>) {
    accessor.with(|mut access| access.get().ctx.touch());
}

impl wit_async::Host for SteleCtxView<'_> {}

/// The async imports really suspend (unless the context allows blocking): the write or sync
/// runs elsewhere while the store runs the guest's other calls, which stage into the next
/// group. (An import that completed on its first poll would serialize the calls: one record
/// per sync.)
impl<T: Send + 'static> wit_async::HostWithStore<T> for SteleVfs {
    fn write_at(
        accessor: &Accessor<T, Self>,
        file: Resource<HostFile>,
        offset: u64,
        data: Vec<u8>,
    ) -> impl Future<Output = wasmtime::Result<Result<(), wit::VfsError>>> + Send {
        let taken = file_and_io(accessor, &file);
        async move {
            let (file, io) = taken?;
            // A buffered write this small is a copy into the page cache (microseconds), where
            // a worker thread's round trip costs two thread wake-ups (77 µs on this 2-core VM);
            // larger writes are posted, so the instance keeps serving calls meanwhile.
            let io = if data.len() > INLINE_WRITE_BYTES_MAX {
                io
            } else {
                AsyncIo::Inline
            };
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
            let view = access.get();
            view.ctx.touch();
            (view.ctx.vfs.clone(), view.ctx.async_io.clone())
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

    /// A file handle that is not (or no longer) in the store's table: every import answers
    /// with an error (which traps the guest that sent it), never touches another file, and
    /// leaves the count of open files alone.
    #[test]
    fn a_stale_file_handle_is_an_error() {
        let vfs = Arc::new(MemVfs::new());
        let mut ctx = SteleCtx::new(vfs.clone());
        let mut table = ResourceTable::new();
        let state = &mut SteleCtxView {
            ctx: &mut ctx,
            table: &mut table,
        };
        let file = wit::Host::open(state, "f".into(), wit::OpenMode::Create)
            .unwrap()
            .unwrap();
        let rep = file.rep();
        wit::HostFile::write_at(state, file, 0, b"kept".to_vec())
            .unwrap()
            .unwrap();
        let file = Resource::<HostFile>::new_own(rep);
        wit::HostFile::drop(state, file).unwrap();
        assert_eq!(state.ctx.open_files, 0);

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
        assert_eq!(state.ctx.open_files, 0, "no underflow");
        // A handle never issued at all.
        assert!(wit::HostFile::len(state, Resource::new_own(rep + 1000)).is_err());

        let file = vfs.open("f", OpenMode::Existing).unwrap();
        let mut bytes = [0u8; 8];
        let n = file.read_at(0, &mut bytes).unwrap();
        assert_eq!(&bytes[..n], b"kept");
    }
}
