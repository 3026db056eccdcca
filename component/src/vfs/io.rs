//! The calls a writer waits on, as futures: what lets one writer's code run under every driver.
//!
//! A writer (the WAL's group executor, the journal's [`crate::journal::JournalFile`]) is
//! written once, as `async` code over [`FileIo`] and [`DeviceIo`]. A driver picks the I/O:
//! - [`ReadyIo`] over a [`Vfs`]: every future is ready when it is created, so
//!   [`complete_now`] runs the same code synchronously. The thread driver, tokio's blocking
//!   pool and the plain component run it that way.
//! - The async component's I/O over the `vfs-async` imports: its writes and syncs suspend the
//!   calling task while the host works, and the instance serves other calls meanwhile.
//!
//! Only the calls that wait on the device (a write, a sync, a directory sync) are futures.
//! The rest (open, rename, remove, a lock) are rare or cheap and stay synchronous, on
//! [`DeviceIo::vfs`].

use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::{OpenMode, SyncKind, Vfs, VfsError, VfsFile};

/// Writes and syncs of open files.
pub trait FileIo {
    /// An open file.
    type File: VfsFile;
    /// [`VfsFile::write_at`], as a future.
    fn write_at(
        &self,
        file: &Self::File,
        offset: u64,
        data: &[u8],
    ) -> impl Future<Output = Result<(), VfsError>>;
    /// [`VfsFile::sync`], as a future.
    fn sync(&self, file: &Self::File, kind: SyncKind)
    -> impl Future<Output = Result<(), VfsError>>;
}

/// [`FileIo`] plus the namespace: opening files of [`FileIo::File`]'s type, and syncing a
/// directory.
pub trait DeviceIo: FileIo {
    /// The synchronous calls: rename, remove, locks, listing, reads during recovery.
    fn vfs(&self) -> &dyn Vfs;
    /// [`Vfs::open`], as the file type the futures take.
    fn open(&self, path: &str, mode: OpenMode) -> Result<Self::File, VfsError>;
    /// [`Vfs::sync_dir`], as a future.
    fn sync_dir(&self, dir: &str) -> impl Future<Output = Result<(), VfsError>>;
}

/// [`FileIo`] (for any `V`) and [`DeviceIo`] (over `Arc<dyn Vfs>` or `&dyn Vfs`) whose every
/// future is ready when it is created. `ReadyIo(())` serves a writer that never opens a file: a single-file
/// WAL, whose file was opened at setup.
#[derive(Clone, Debug)]
pub struct ReadyIo<V = Arc<dyn Vfs>>(pub V);

impl<V> FileIo for ReadyIo<V> {
    type File = Box<dyn VfsFile>;
    fn write_at(
        &self,
        file: &Self::File,
        offset: u64,
        data: &[u8],
    ) -> impl Future<Output = Result<(), VfsError>> {
        std::future::ready(file.write_at(offset, data))
    }
    fn sync(
        &self,
        file: &Self::File,
        kind: SyncKind,
    ) -> impl Future<Output = Result<(), VfsError>> {
        std::future::ready(file.sync(kind))
    }
}

impl DeviceIo for ReadyIo<Arc<dyn Vfs>> {
    fn vfs(&self) -> &dyn Vfs {
        &*self.0
    }
    fn open(&self, path: &str, mode: OpenMode) -> Result<Self::File, VfsError> {
        self.0.open(path, mode)
    }
    fn sync_dir(&self, dir: &str) -> impl Future<Output = Result<(), VfsError>> {
        std::future::ready(self.0.sync_dir(dir))
    }
}

impl DeviceIo for ReadyIo<&dyn Vfs> {
    fn vfs(&self) -> &dyn Vfs {
        self.0
    }
    fn open(&self, path: &str, mode: OpenMode) -> Result<Self::File, VfsError> {
        self.0.open(path, mode)
    }
    fn sync_dir(&self, dir: &str) -> impl Future<Output = Result<(), VfsError>> {
        std::future::ready(self.0.sync_dir(dir))
    }
}

/// Runs a future that never suspends (one built only from [`ReadyIo`] calls, or from an I/O
/// whose futures are all ready when created) to its end.
///
/// # Panics
/// If the future suspends: that is a driver bug (an I/O that waits, driven where nothing can
/// wake it), not something input can cause.
pub fn complete_now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("complete_now: a future that had to be ready suspended"),
    }
}

/// Bytes of [`ZERO_BLOCK`]: one block of zeros serves every zero write, written repeatedly, so
/// zeroing allocates nothing. 64 KiB keeps each write within
/// [`INLINE_WRITE_BYTES_MAX`], the size the component writes without suspending.
pub const ZERO_BLOCK_BYTES: usize = INLINE_WRITE_BYTES_MAX;

/// The zeros [`write_zeros`] writes from, in `.bss` rather than `.rodata`: an immutable
/// `static` of zeros is stored in the binary as 64 KiB of zero bytes, and in the component
/// those bytes are part of the memory image every instance maps, where the kernel's
/// fault-around (64 KiB per read fault on a file mapping) counts them in every instance's RSS
/// once a neighbouring constant is read. A static with interior mutability is placed in `.bss`
/// instead, which a component's image leaves out: its pages are fresh zero pages, and an
/// instance that never zeroes anything never touches them. Read through [`zero_block`].
struct ZeroBlock(UnsafeCell<[u8; ZERO_BLOCK_BYTES]>);

// SAFETY: nothing ever writes through the cell (only `zero_block` reads it, as a shared
// reference), so sharing it between threads shares immutable zeros.
unsafe impl Sync for ZeroBlock {}

static ZERO_BLOCK: ZeroBlock = ZeroBlock(UnsafeCell::new([0; ZERO_BLOCK_BYTES]));

/// [`ZERO_BLOCK`]'s zeros.
fn zero_block() -> &'static [u8; ZERO_BLOCK_BYTES] {
    // SAFETY: the cell is never written (see `ZeroBlock`), so no `&mut` to it can exist while
    // this shared reference lives.
    unsafe { &*ZERO_BLOCK.0.get() }
}

/// Writes up to this size are made without suspending: a page-cache write of 64 KiB costs
/// microseconds, less than a hop to the host's I/O thread and back, and the sync that follows
/// is the call worth suspending on. The async component writes larger ones through the async
/// import, so that the instance serves calls meanwhile; the host runs async writes up to this
/// size inline too. Chosen, not tuned.
pub const INLINE_WRITE_BYTES_MAX: usize = 64 << 10;

/// Zeroes `[from, to)` of `file`, [`ZERO_BLOCK_BYTES`] at a time: how a segment's torn tail is
/// cleared (cutting the file would undo its preallocation), and how a group's zero fill is
/// written.
pub async fn write_zeros<Io: FileIo>(
    io: &Io,
    file: &Io::File,
    from: u64,
    to: u64,
) -> Result<(), VfsError> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZERO_BLOCK_BYTES as u64) as usize;
        io.write_at(file, at, &zero_block()[..n]).await?;
        at += n as u64;
    }
    Ok(())
}
