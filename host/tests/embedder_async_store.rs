//! An embedder's own async store runs the async-ABI engine (`stele-async.wasm`) itself: its own
//! `Engine`, `Store<Host>` and `Linker<Host>`, Stele's imports linked with
//! `stele_host::add_to_linker_async` and run where `SteleCtx` runs them by default (tokio's
//! blocking pool, since the store is driven inside a tokio runtime). Concurrent durable commits
//! on one instance, inside the embedder's `run_concurrent`, must share syncs and each record
//! must be on disk afterwards.

use std::sync::Arc;

use stele::wal::LogSeq;
use stele_host::bindings::engine_async::EngineAsync;
// The async build has its own generated types (`bindings::engine_async`).
use stele_host::bindings::engine_async::exports::stele::log::wal::{DurabilityPolicy, WalOptions};
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

#[test]
fn concurrent_durable_commits_in_the_embedders_async_store_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (seqs, stats) = runtime.block_on(async {
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
                stele: SteleCtx::new(fs.clone()),
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
                    max_group_bytes: None,
                    retained_bytes_max: 0,
                    segment_bytes: None,
                };
                let (writer, _) = api
                    .call_open(acc, "log.wal".to_owned(), options)
                    .await
                    .unwrap()
                    .unwrap();
                let commits = (0..CALLERS)
                    .map(|caller| api.call_commit_durable(acc, writer, 1, payload(caller)));
                let seqs: Vec<u64> = futures::future::join_all(commits)
                    .await
                    .into_iter()
                    .map(|answer| answer.unwrap().unwrap())
                    .collect();
                let stats = api.call_stats(acc, writer).await.unwrap();
                (seqs, stats)
            })
            .await
            .unwrap()
    });

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
        "{} groups for {CALLERS} concurrent durable commits: the imports serialized them",
        stats.groups
    );

    // Every acknowledged record is in the file, with the payload its caller gave.
    let (records, _) = read_wal(fs, "log.wal", Mode::Native).unwrap();
    assert_eq!(records.len() as u64, CALLERS);
    for (caller, seq) in seqs.iter().enumerate() {
        let record = &records[*seq as usize];
        assert_eq!(record.seq, LogSeq(*seq));
        assert_eq!(&record.payload[..], payload(caller as u64));
    }
}
