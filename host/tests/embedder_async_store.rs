//! An embedder's own async store runs the async-ABI engine (`stele-async.wasm`) itself: its own
//! `Engine`, `Store<Host>` and `Linker<Host>`, Stele's imports linked with
//! `stele_host::add_to_linker_async` and run where `SteleCtx` runs them by default: the
//! `vfs-async` calls (a durable group's write and sync, and an open's syncs) on tokio's
//! blocking pool, since the store is driven inside a tokio runtime, so the thread that drives
//! the store does not block on an fsync of a commit or of an open. The synchronous `vfs` calls
//! (an open's recovery reads, a rotation's new segment, a checkpoint) run inline, on that
//! thread, as `vfs_host`'s module doc says. Concurrent durable commits on one instance, inside the embedder's
//! `run_concurrent`, must share syncs and each record must be on disk afterwards.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use stele::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock};
use stele::wal::LogSeq;
use stele_host::bindings::engine_async::EngineAsync;
// The async build has its own generated types (`bindings::engine_async`).
use stele_host::bindings::engine_async::exports::stele::log::wal::{
    DurabilityPolicy, WalOptions, WalStats,
};
use stele_host::fs::RealFs;
use stele_host::runtime::COMPONENT_ASYNC_WASM;
use stele_host::wasmtime::component::{Component, Linker, ResourceTable};
use stele_host::wasmtime::{Config, Engine, Store};
use stele_host::{Mode, SteleCtx, SteleCtxView, SteleView, read_wal};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Concurrent callers in the one store: enough that, at one fsync per group, groups of more
/// than one record are certain unless the imports serialize the callers.
const CALLERS: u64 = 64;

struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
    stele: SteleCtx,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl SteleView for Host {
    fn stele(&mut self) -> SteleCtxView<'_> {
        SteleCtxView {
            ctx: &mut self.stele,
            table: &mut self.table,
        }
    }
}

fn payload(caller: u64) -> Vec<u8> {
    format!("caller {caller:02}").into_bytes()
}

/// A `Vfs` that records the thread each file sync and directory sync ran on.
#[derive(Debug)]
struct SyncThreads {
    inner: Arc<RealFs>,
    threads: Arc<Mutex<Vec<ThreadId>>>,
}

#[derive(Debug)]
struct SyncThreadsFile {
    inner: Box<dyn VfsFile>,
    threads: Arc<Mutex<Vec<ThreadId>>>,
}

impl VfsFile for SyncThreadsFile {
    fn len(&self) -> Result<u64, VfsError> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        self.inner.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        self.inner.set_len(len)
    }
    fn sync(&self, kind: SyncKind) -> Result<(), VfsError> {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.inner.sync(kind)
    }
}

impl Vfs for SyncThreads {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        Ok(Box::new(SyncThreadsFile {
            inner: self.inner.open(path, mode)?,
            threads: self.threads.clone(),
        }))
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
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
}

/// What one run of `CALLERS` concurrent durable commits gave: each caller's seq, the writer's
/// stats, and the threads the syncs ran on, during the open and during the commits.
struct Run {
    seqs: Vec<u64>,
    stats: WalStats,
    open_sync_threads: Vec<ThreadId>,
    commit_sync_threads: Vec<ThreadId>,
}

/// Opens `log.wal` in `dir` in a fresh store of the embedder's own, on a current-thread tokio
/// runtime (so the store is driven on this thread), and commits from `CALLERS` concurrent
/// calls inside `run_concurrent`. `configure` sets up the `SteleCtx`.
fn run(dir: &std::path::Path, configure: impl FnOnce(SteleCtx) -> SteleCtx) -> Run {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let vfs = Arc::new(SyncThreads {
        inner: Arc::new(RealFs::open_root(dir).unwrap()),
        threads: threads.clone(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (seqs, stats, open_sync_threads) = runtime.block_on(async {
        let mut config = Config::new();
        config.wasm_component_model_async(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, COMPONENT_ASYNC_WASM).unwrap();
        let mut linker = Linker::<Host>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        stele_host::add_to_linker_async(&mut linker).unwrap();
        let mut store = Store::new(
            &engine,
            Host {
                wasi: WasiCtx::builder().build(),
                table: ResourceTable::new(),
                stele: configure(SteleCtx::new(vfs)),
            },
        );
        let bindings = EngineAsync::instantiate_async(&mut store, &component, &linker)
            .await
            .unwrap();
        store
            .run_concurrent(async |acc| {
                let api = bindings.stele_log_wal_async().writer();
                let options = WalOptions {
                    policy: DurabilityPolicy::FullSync,
                    first_seq: 0,
                    group_bytes_max: None,
                    retained_bytes_max: 0,
                    segment_bytes: None,
                };
                let (writer, _) = api
                    .call_open(acc, "log.wal".to_owned(), options)
                    .await
                    .unwrap()
                    .unwrap();
                let open_sync_threads = std::mem::take(&mut *threads.lock().unwrap());
                let commits = (0..CALLERS)
                    .map(|caller| api.call_commit_durable(acc, writer, 1, payload(caller)));
                let seqs: Vec<u64> = futures::future::join_all(commits)
                    .await
                    .into_iter()
                    .map(|answer| answer.unwrap().unwrap())
                    .collect();
                let stats = api.call_stats(acc, writer).await.unwrap();
                (seqs, stats, open_sync_threads)
            })
            .await
            .unwrap()
    });
    let commit_sync_threads = threads.lock().unwrap().clone();
    Run {
        seqs,
        stats,
        open_sync_threads,
        commit_sync_threads,
    }
}

#[test]
fn concurrent_durable_commits_in_the_embedders_async_store_share_syncs_off_its_thread() {
    let dir = tempfile::tempdir().unwrap();
    let Run {
        seqs,
        stats,
        open_sync_threads,
        commit_sync_threads,
    } = run(dir.path(), |ctx| ctx);

    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..CALLERS).collect::<Vec<_>>(), "one seq each");
    assert_eq!(stats.records, CALLERS);
    println!(
        "{CALLERS} durable commits: {} groups, {} syncs",
        stats.groups, stats.syncs
    );
    assert!(
        stats.groups < CALLERS,
        "{} groups for {CALLERS} concurrent durable commits",
        stats.groups
    );
    // The store runs on this thread (a current-thread runtime). The groups' syncs ran
    // elsewhere, and so did the open's (a new file's sync, its directory's sync): the engine's
    // open awaits them through `vfs-async`, as a group does.
    let store_thread = std::thread::current().id();
    assert!(!commit_sync_threads.is_empty());
    assert!(
        commit_sync_threads.iter().all(|&t| t != store_thread),
        "a group's sync blocked the thread that drives the store"
    );
    assert!(!open_sync_threads.is_empty());
    assert!(
        open_sync_threads.iter().all(|&t| t != store_thread),
        "an open's sync blocked the thread that drives the store"
    );

    // Every acknowledged record is in the file, with the payload its caller gave.
    let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let (records, _) = read_wal(fs, "log.wal", Mode::Native).unwrap();
    assert_eq!(records.len() as u64, CALLERS);
    for (caller, seq) in seqs.iter().enumerate() {
        let record = &records[*seq as usize];
        assert_eq!(record.seq, LogSeq(*seq));
        assert_eq!(&record.payload[..], payload(caller as u64));
    }
}

/// The contrast that shows the check above can fail: with
/// `allow_blocking_current_thread(true)` the groups' syncs run inline, on the store's thread.
#[test]
fn allow_blocking_current_thread_runs_the_syncs_on_the_stores_thread() {
    let dir = tempfile::tempdir().unwrap();
    let Run {
        seqs,
        commit_sync_threads,
        ..
    } = run(dir.path(), |ctx| ctx.allow_blocking_current_thread(true));
    assert_eq!(seqs.len() as u64, CALLERS);
    let store_thread = std::thread::current().id();
    assert!(!commit_sync_threads.is_empty());
    assert!(commit_sync_threads.iter().all(|&t| t == store_thread));
}

/// A guest in another language keeps its journal with the ops as data (`append-ops`,
/// `compact-ops`): the async build frames them as the engine frames its own, and the native
/// replay reads exactly the state they make.
#[test]
fn the_async_journal_takes_ops_as_data_and_frames_them_as_the_engine_does() {
    use stele_host::bindings::engine_async::exports::stele::log::journal::{JournalOp, SetOp};
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut config = Config::new();
        config.wasm_component_model_async(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, COMPONENT_ASYNC_WASM).unwrap();
        let mut linker = Linker::<Host>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        stele_host::add_to_linker_async(&mut linker).unwrap();
        let mut store = Store::new(
            &engine,
            Host {
                wasi: WasiCtx::builder().build(),
                table: ResourceTable::new(),
                stele: SteleCtx::new(vfs.clone()),
            },
        );
        let bindings = EngineAsync::instantiate_async(&mut store, &component, &linker)
            .await
            .unwrap();
        store
            .run_concurrent(async |acc| {
                let put = |key: &str, value: &str| {
                    JournalOp::Set(SetOp {
                        key: key.into(),
                        value: value.into(),
                    })
                };
                let api = bindings.stele_log_journal_async().writer();
                let writer = api.call_open(acc, "j".to_owned()).await.unwrap().unwrap();
                let ops = vec![
                    put("a", "1"),
                    put("b", "2"),
                    JournalOp::Clear,
                    put("c", "3"),
                ];
                api.call_append_ops(acc, writer, ops)
                    .await
                    .unwrap()
                    .unwrap();
                let snapshot = vec![put("c", "3"), put("d", "4")];
                api.call_compact_ops(acc, writer, snapshot)
                    .await
                    .unwrap()
                    .unwrap();
                let delete = vec![JournalOp::Delete(b"c".to_vec())];
                api.call_append_ops(acc, writer, delete)
                    .await
                    .unwrap()
                    .unwrap();
            })
            .await
            .unwrap();
    });
    let (ops, _) = stele::journal::replay(&*vfs, "j").unwrap();
    let state = stele::journal::SessionState::fold(&ops);
    let expected = stele::journal::SessionState::fold(&[stele::journal::JournalOp::Set {
        key: b"d".to_vec(),
        value: b"4".to_vec(),
    }]);
    assert_eq!(state, expected);
    // Framed by the engine: the bytes are the ones a native writer makes for the same ops.
    let bytes = std::fs::read(dir.path().join("j")).unwrap();
    let native = stele::journal::encode_frames(&[
        stele::journal::JournalOp::Set {
            key: b"c".to_vec(),
            value: b"3".to_vec(),
        },
        stele::journal::JournalOp::Set {
            key: b"d".to_vec(),
            value: b"4".to_vec(),
        },
    ]);
    assert!(
        bytes.windows(native.len()).any(|w| w == native),
        "the compacted snapshot's frames, byte for byte"
    );
}
