//! A platform that serves Stele from its own wasmtime: its own `Engine` and `Config`, its own
//! `Store<Platform>` holding its WASI context, resource table, limiter and state, its own
//! `Linker<Platform>` with one host function of its own (`note`) beside Stele's `vfs`, linked
//! with `stele_host::add_to_linker_sync` / `_async` as wasmtime-wasi's are.
//!
//! Two tenants share one engine. Each has its own root directory and its own limits, and runs
//! the composed example plugin (`example-plugin.wasm`: the plugin with `stele.wasm` plugged
//! into its `wal` import), which keeps a durable log through `stele:log/vfs` and nothing else.
//! The platform then checks what a platform must:
//! - each tenant's log, read back natively, holds exactly its own events, record by record;
//! - both tenants name the same log path and each reads back only its own events; a tenant
//!   that asks for `../` (its neighbour's directory, say) gets `invalid-path`;
//! - all of it in a sync store, then in an async store (`instantiate_async`, `call_async`).
//!
//! ```sh
//! cargo run --release -p stele-host --example platform [DIR]
//! ```
//!
//! `DIR` (default: a fresh temporary directory) gets one subdirectory per tenant.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow, ensure};
use stele_host::fs::RealFs;
use stele_host::wasmtime::component::{Component, Linker, ResourceTable, TypedFunc};
use stele_host::wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use stele_host::{Mode, SteleCtx, SteleCtxView, SteleView, read_wal};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The plugin composed with the engine, as `build.rs` made it.
const PLUGIN_WASM: &str = env!("STELE_EXAMPLE_PLUGIN_WASM");

/// The platform's store data: WASI, the shared resource table, Stele's context, and its own.
struct Platform {
    wasi: WasiCtx,
    table: ResourceTable,
    stele: SteleCtx,
    own_state: TenantState,
}

/// What the platform keeps per tenant, Stele aside.
struct TenantState {
    name: &'static str,
    /// What the plugin reported through the platform's `note`.
    notes: Vec<String>,
    limits: StoreLimits,
}

impl WasiView for Platform {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl SteleView for Platform {
    fn stele(&mut self) -> SteleCtxView<'_> {
        SteleCtxView {
            ctx: &mut self.stele,
            table: &mut self.table,
        }
    }
}

/// A tenant: its directory and its limits.
struct Tenant {
    name: &'static str,
    fs: Arc<RealFs>,
    memory_bytes_max: usize,
    open_files_max: usize,
}

/// `record-events(path, events) -> result<list<string>, string>`, the plugin's export.
type RecordEvents = TypedFunc<(String, Vec<String>), (Result<Vec<String>, String>,)>;

/// One plugin call's outcome: what `record-events` answered, and the notes it sent the platform.
type Outcome = (Result<Vec<String>, String>, Vec<String>);

fn store_for(engine: &Engine, tenant: &Tenant) -> Store<Platform> {
    let platform = Platform {
        // No preopens, no environment, no network: the plugin's only storage is `vfs`.
        wasi: WasiCtx::builder().build(),
        table: ResourceTable::new(),
        stele: SteleCtx::new(tenant.fs.clone()).with_open_files_max(tenant.open_files_max),
        own_state: TenantState {
            name: tenant.name,
            notes: Vec::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(tenant.memory_bytes_max)
                .instances(16)
                .build(),
        },
    };
    let mut store = Store::new(engine, platform);
    store.limiter(|platform| &mut platform.own_state.limits);
    store
}

/// The platform's own host function, linked beside Stele's imports.
fn note(platform: &mut Platform, message: String) {
    println!("  [{}] plugin notes: {message}", platform.own_state.name);
    platform.own_state.notes.push(message);
}

/// One call into the plugin on a fresh instance, in a sync store.
fn run_sync(
    engine: &Engine,
    linker: &Linker<Platform>,
    component: &Component,
    tenant: &Tenant,
    path: &str,
    events: &[String],
) -> anyhow::Result<Outcome> {
    let mut store = store_for(engine, tenant);
    let instance = linker.instantiate(&mut store, component)?;
    let record: RecordEvents = instance.get_typed_func(&mut store, "record-events")?;
    let (answer,) = record.call(&mut store, (path.to_owned(), events.to_vec()))?;
    Ok((
        answer,
        std::mem::take(&mut store.data_mut().own_state.notes),
    ))
}

/// One call into the plugin on a fresh instance, in an async store.
async fn run_async(
    engine: &Engine,
    linker: &Linker<Platform>,
    component: &Component,
    tenant: &Tenant,
    path: &str,
    events: &[String],
) -> anyhow::Result<Outcome> {
    let mut store = store_for(engine, tenant);
    let instance = linker.instantiate_async(&mut store, component).await?;
    let record: RecordEvents = instance.get_typed_func(&mut store, "record-events")?;
    let (answer,) = record
        .call_async(&mut store, (path.to_owned(), events.to_vec()))
        .await?;
    Ok((
        answer,
        std::mem::take(&mut store.data_mut().own_state.notes),
    ))
}

fn linker(engine: &Engine, asynchronous: bool) -> anyhow::Result<Linker<Platform>> {
    let mut linker = Linker::<Platform>::new(engine);
    if asynchronous {
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        stele_host::add_to_linker_async(&mut linker)?;
    } else {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        stele_host::add_to_linker_sync(&mut linker)?;
    }
    linker
        .root()
        .func_wrap("note", |mut store, (message,): (String,)| {
            note(store.data_mut(), message);
            Ok(())
        })?;
    Ok(linker)
}

fn events(tenant: &Tenant, store_kind: &str, round: usize) -> Vec<String> {
    (0..3)
        .map(|i| format!("{} {store_kind} round {round} event {i}", tenant.name))
        .collect()
}

/// Serves both tenants through one engine, in sync or in async stores, and checks what each
/// one can and cannot reach.
fn serve(engine: &Engine, tenants: &[Tenant], asynchronous: bool) -> anyhow::Result<()> {
    let store_kind = if asynchronous { "async" } else { "sync" };
    let linker = linker(engine, asynchronous)?;
    let component = Component::from_file(engine, PLUGIN_WASM)
        .map_err(|e| anyhow!("compile {PLUGIN_WASM}: {e:#}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let call = |tenant: &Tenant, path: &str, events: &[String]| {
        if asynchronous {
            runtime.block_on(run_async(engine, &linker, &component, tenant, path, events))
        } else {
            run_sync(engine, &linker, &component, tenant, path, events)
        }
    };
    let log = format!("events-{store_kind}.wal");

    // Two rounds per tenant, interleaved, each on a fresh instance: the second round sees the
    // first round's records, which only the log kept. Both tenants name the same path, and each
    // reads back only its own events: a path resolves inside the caller's root.
    let mut sent: Vec<Vec<String>> = vec![Vec::new(); tenants.len()];
    for round in 0..2 {
        for (tenant, sent) in tenants.iter().zip(&mut sent) {
            let events = events(tenant, store_kind, round);
            sent.extend(events.iter().cloned());
            let (answer, notes) = call(tenant, &log, &events)?;
            let seen = answer.map_err(|e| anyhow!("{}: {e}", tenant.name))?;
            ensure!(
                seen == *sent,
                "{} {store_kind}: the plugin read back {seen:?}, not {sent:?}",
                tenant.name
            );
            ensure!(
                notes.len() == 1 && notes[0].contains("3 events durable"),
                "{}: the platform's note: {notes:?}",
                tenant.name
            );
        }
    }

    for (tenant, sent) in tenants.iter().zip(&sent) {
        // The host reads the tenant's log natively, record by record.
        let (records, recovery) = read_wal(tenant.fs.clone(), &log, Mode::Native)?;
        let payloads: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8(r.payload.to_vec()).context("payload is UTF-8"))
            .collect::<anyhow::Result<_>>()?;
        ensure!(
            payloads == *sent,
            "{}'s {log}, read natively: {payloads:?}",
            tenant.name
        );
        println!(
            "{store_kind}: {}'s {log} read natively: {} records, each its own, {:?}",
            tenant.name,
            records.len(),
            recovery.end
        );

        // `../` leaves the tenant's root: refused, as a value the plugin sees.
        for escape in ["../escape.wal", "../tenant-b/events-sync.wal"] {
            let (answer, _) = call(tenant, escape, &["x".to_owned()])?;
            ensure!(
                answer.as_ref().is_err_and(|e| e.contains("InvalidPath")),
                "{} asked for {escape}: {answer:?}",
                tenant.name
            );
        }
    }
    println!("{store_kind}: `../` is invalid-path for both tenants; neither reaches the other");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // The platform's subscriber sees Stele's spans and events beside its own: each public call
    // (`read_wal` here, with its time when it closes), recoveries, groups and syncs, and at
    // TRACE every `vfs` import a tenant's plugin makes. `RUST_LOG` overrides the filter.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "stele=debug,stele_host=debug".into()),
        )
        .init();
    let temp = tempfile::tempdir()?;
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| temp.path().to_owned(), Into::into);
    let tenant = |name: &'static str, memory_bytes_max: usize, open_files_max: usize| {
        let root = Path::new(&dir).join(name);
        std::fs::create_dir_all(&root)?;
        let fs = Arc::new(RealFs::open_root(&root).with_context(|| root.display().to_string())?);
        anyhow::Ok(Tenant {
            name,
            fs,
            memory_bytes_max,
            open_files_max,
        })
    };
    let tenants = [
        tenant("tenant-a", 64 << 20, 8)?,
        tenant("tenant-b", 32 << 20, 4)?,
    ];

    // The platform's engine, configured as it likes: Stele needs only the component model.
    let engine = Engine::new(&Config::new())?;
    serve(&engine, &tenants, false)?;
    serve(&engine, &tenants, true)?;
    println!("platform: ok");
    Ok(())
}
