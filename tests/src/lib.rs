//! Shared helpers for the cross-crate suites: temporary confined roots, a Vfs that fails on
//! cue, deterministic payloads, and a macro that runs one test body in both modes.

pub mod alloc;
pub mod crash;
pub mod nested_cargo;

/// `docs/EMBEDDING.md`, whose every Rust block runs as a doctest of this crate: the guide
/// cannot drift from the API it teaches. Only doctests see it.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EMBEDDING.md")]
pub mod embedding_guide {}

/// `docs/QUOTAS.md`, run the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/QUOTAS.md")]
pub mod quotas_guide {}

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use stele::vfs::{OpenMode, QuotaStats, SyncKind, Vfs, VfsError, VfsFile, VfsLock, VfsReservation};
use stele_host::fs::RealFs;

/// Prints a summary line that must reach CI's log: it writes to the process's stdout directly,
/// past libtest's capture (which only intercepts the `print!` macros), so the line shows even
/// when the test passes.
pub fn ci_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A multi-threaded tokio runtime with `workers` worker threads and every driver enabled, for
/// suites that drive the async APIs from plain `#[test]`s.
pub fn tokio_runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A fresh temporary directory and a [`RealFs`] confined to it. The directory is removed on drop.
pub struct TempRoot {
    pub dir: tempfile::TempDir,
    pub fs: Arc<RealFs>,
}

impl TempRoot {
    pub fn new() -> TempRoot {
        let dir = tempfile::Builder::new()
            .prefix("stele-test-")
            .tempdir()
            .expect("temp dir");
        let fs = Arc::new(RealFs::open_root(dir.path()).expect("open root"));
        TempRoot { dir, fs }
    }

    pub fn vfs(&self) -> Arc<dyn Vfs> {
        self.fs.clone()
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read file in root")
    }

    pub fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path(name), bytes).expect("write file in root");
    }
}

impl Default for TempRoot {
    fn default() -> Self {
        Self::new()
    }
}

/// A deterministic payload that names its writer and index, so a test can check any recovered
/// record byte for byte.
pub fn payload(writer: u64, index: u64, len: usize) -> Vec<u8> {
    assert!(len >= 16, "payload carries writer and index");
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&writer.to_le_bytes());
    p.extend_from_slice(&index.to_le_bytes());
    p.extend((16..len).map(|i| (i as u64 ^ writer.wrapping_mul(31) ^ index) as u8));
    p
}

/// Decodes `(writer, index)` from a [`payload`].
/// (writer, index): the identity a payload made by [`payload`] carries.
pub type PayloadId = (u64, u64);

/// The op code a crash workload commits a payload under: derived from its identity, so that
/// recovery can be checked for the op as well as the bytes.
pub fn op_of(id: PayloadId) -> u16 {
    (id.0 * 7 + id.1) as u16
}

pub fn payload_id(p: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(p[0..8].try_into().unwrap()),
        u64::from_le_bytes(p[8..16].try_into().unwrap()),
    )
}

/// Wraps a Vfs and fails the Nth file sync and/or the Nth write (1-based, counted over every
/// file it opened) with a chosen error. Later calls succeed again, as Linux's fsync does after
/// reporting an error: that is exactly the case a writer must not be fooled by. It can also
/// hold every file sync at a gate ([`Counters::close_gate`]), so a test can keep a group in
/// flight while it lines callers up behind it.
#[derive(Debug)]
pub struct FailingVfs {
    inner: Arc<dyn Vfs>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
pub struct Counters {
    pub syncs: AtomicU64,
    pub writes: AtomicU64,
    pub fail_sync_at: AtomicU64,
    pub fail_write_at: AtomicU64,
    pub error: std::sync::Mutex<Option<VfsError>>,
    /// `true` while file syncs must wait.
    gate_closed: std::sync::Mutex<bool>,
    gate_opened: std::sync::Condvar,
}

impl FailingVfs {
    pub fn new(inner: Arc<dyn Vfs>) -> (Arc<FailingVfs>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        (
            Arc::new(FailingVfs {
                inner,
                counters: counters.clone(),
            }),
            counters,
        )
    }
}

impl Counters {
    /// Fails the `n`th file sync from now on (1-based over all syncs so far and after).
    pub fn fail_sync_at(&self, n: u64, error: VfsError) {
        *self.error.lock().unwrap() = Some(error);
        self.fail_sync_at.store(n, Ordering::SeqCst);
    }

    pub fn fail_write_at(&self, n: u64, error: VfsError) {
        *self.error.lock().unwrap() = Some(error);
        self.fail_write_at.store(n, Ordering::SeqCst);
    }

    /// From now on, file syncs wait until [`Self::open_gate`].
    pub fn close_gate(&self) {
        *self.gate_closed.lock().unwrap() = true;
    }

    pub fn open_gate(&self) {
        *self.gate_closed.lock().unwrap() = false;
        self.gate_opened.notify_all();
    }

    fn wait_at_gate(&self) {
        let mut closed = self.gate_closed.lock().unwrap();
        while *closed {
            closed = self.gate_opened.wait(closed).unwrap();
        }
    }

    fn error(&self) -> VfsError {
        self.error
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(VfsError::Io("injected".into()))
    }
}

#[derive(Debug)]
struct FailingFile {
    inner: Box<dyn VfsFile>,
    counters: Arc<Counters>,
}

impl VfsFile for FailingFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        let n = self.counters.writes.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.counters.fail_write_at.load(Ordering::SeqCst) {
            return Err(self.counters.error());
        }
        self.inner.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.inner.set_len(len)
    }
    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        self.counters.wait_at_gate();
        let n = self.counters.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.counters.fail_sync_at.load(Ordering::SeqCst) {
            return Err(self.counters.error());
        }
        self.inner.sync(kind)
    }
    fn reserve(&self, len: u64) -> Result<Box<dyn VfsReservation>, VfsError> {
        self.inner.reserve(len)
    }
}

impl Vfs for FailingVfs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        Ok(Box::new(FailingFile {
            inner: self.inner.open(path, mode)?,
            counters: self.counters.clone(),
        }))
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.inner.sync_dir(dir)
    }
    fn remove(&self, path: &str) -> Result<(), VfsError> {
        self.inner.remove(path)
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
        self.inner.reserve(path, len)
    }
    fn quota_stats(&self) -> Option<QuotaStats> {
        self.inner.quota_stats()
    }
    fn throttle_wait(&self) -> Result<std::time::Duration, VfsError> {
        self.inner.throttle_wait()
    }
}

/// Where the suites keep compiled component code between test processes: the workspace's
/// `target/`, which `cargo clean` empties.
pub const TEST_CODE_CACHE_DIR: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../target/test-code-cache");

/// Opts this test process into the compiled-code cache at [`TEST_CODE_CACHE_DIR`], as an
/// embedder would, so that each suite loads the components instead of compiling both (3.4 s
/// of CPU per process). The library keeps no cache unless told. The first call of a process
/// makes its runtime; a runtime made earlier (a test that called `Runtime::get` first) keeps
/// its own settings, which changes only the time a suite takes.
pub fn use_test_code_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let options = stele_host::runtime::RuntimeOptions::default()
            .with_code_cache_dir(Some(TEST_CODE_CACHE_DIR.into()));
        let _ = stele_host::runtime::Runtime::init(options);
    });
}

/// Runs each named test body (a `fn(Mode)`) once per mode: `native::NAME`, `sandboxed::NAME`
/// (the async-ABI component) and `sandboxed_plain::NAME` (the plain WASI 0.2 component).
#[macro_export]
macro_rules! every_mode {
    ($($name:ident),* $(,)?) => {
        mod native {
            $( #[test] fn $name() { super::$name(stele_host::Mode::Native) } )*
        }
        mod sandboxed {
            $( #[test] fn $name() {
                $crate::use_test_code_cache();
                super::$name(stele_host::Mode::Sandboxed)
            } )*
        }
        mod sandboxed_plain {
            $( #[test] fn $name() {
                $crate::use_test_code_cache();
                super::$name(stele_host::Mode::SandboxedPlain)
            } )*
        }
    };
}
