//! A host that runs an untrusted plugin which keeps its own durable log.
//!
//! The plugin (`host/examples/plugin`, world `example-plugin`) imports `stele:log/wal`. The
//! build plugs the engine component into that import (`wac plug plugin.wasm --plug
//! stele.wasm`), so the log component serves the plugin inside one composed component, and the
//! host only sees `stele:log/vfs` (and the WASI interfaces std links) as its imports. The host
//! serves `vfs` from one directory it chose, with limits on memory, open files and busy time.
//!
//! ```sh
//! cargo run --release -p stele-host --example plugin_host [DIR]
//! ```
//!
//! `DIR` (default: a fresh temporary directory) is the only directory the plugin can reach.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use stele_host::fs::RealFs;
use stele_host::runtime::{GuestState, Runtime};
use stele_host::{Mode, SandboxLimits, read_wal};
use wasmtime::Store;
use wasmtime::component::{Component, Linker};

mod bindings {
    wasmtime::component::bindgen!({
        world: "stele-example:plugin/example-plugin",
        path: ["../wit", "examples/plugin/wit"],
    });
}

/// The plugin composed with the engine, as `build.rs` made it.
const PLUGIN_WASM: &str = env!("STELE_EXAMPLE_PLUGIN_WASM");

/// One call into the plugin, on a fresh instance: nothing survives between calls but what the
/// log made durable.
fn run_plugin(
    runtime: &Runtime,
    component: &Component,
    linker: &Linker<GuestState>,
    fs: &Arc<RealFs>,
    path: &str,
    events: &[String],
) -> anyhow::Result<Result<Vec<String>, String>> {
    let limits = SandboxLimits::default()
        .with_memory_bytes_max(64 << 20)
        .with_open_files_max(8)
        .with_busy_deadline(Some(Duration::from_secs(1)));
    let mut store: Store<GuestState> = runtime.vfs_store(fs.clone(), limits);
    let plugin = bindings::ExamplePlugin::instantiate(&mut store, component, linker)?;
    plugin
        .call_record_events(&mut store, path, events)
        .map_err(|trap| Runtime::trap_error(trap).into())
}

fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| temp.path().to_owned(), Into::into);
    let fs = Arc::new(RealFs::open_root(&dir).with_context(|| format!("{}", dir.display()))?);

    let runtime = Runtime::get()?;
    let started = Instant::now();
    let component = Component::from_file(runtime.engine(), PLUGIN_WASM)
        .map_err(|e| anyhow::anyhow!("compile {PLUGIN_WASM}: {e:#}"))?;
    let imports: Vec<String> = component
        .component_type()
        .imports(runtime.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    ensure!(
        imports.iter().any(|name| name.starts_with("stele:log/vfs"))
            && !imports.iter().any(|name| name.starts_with("stele:log/wal")),
        "the composed plugin imports vfs, and its wal import is served inside it: {imports:?}"
    );
    ensure!(
        !imports
            .iter()
            .any(|name| name.starts_with("wasi:filesystem")),
        "the plugin has no file access but vfs: {imports:?}"
    );
    println!(
        "plugin compiled in {:.0?}; it imports {}",
        started.elapsed(),
        imports.join(", ")
    );
    let mut linker = runtime.vfs_linker()?;
    // The plugin's one import besides vfs: this host's own function.
    linker
        .root()
        .func_wrap("note", |_, (message,): (String,)| {
            println!("plugin notes: {message}");
            Ok(())
        })
        .map_err(|e| anyhow::anyhow!("link note: {e:#}"))?;

    let first: Vec<String> = ["started", "loaded 3 rules"].map(String::from).to_vec();
    let second: Vec<String> = ["rule fired: disk-usage", "stopped"]
        .map(String::from)
        .to_vec();
    let seen = run_plugin(runtime, &component, &linker, &fs, "events.wal", &first)?
        .map_err(anyhow::Error::msg)?;
    println!("first run: the plugin's log holds {seen:?}");
    ensure!(seen == first, "first run read back {seen:?}");
    let seen = run_plugin(runtime, &component, &linker, &fs, "events.wal", &second)?
        .map_err(anyhow::Error::msg)?;
    println!("second run, a fresh instance: the plugin's log holds {seen:?}");
    ensure!(
        seen == [first, second].concat(),
        "second run read back {seen:?}"
    );

    // The host reads the plugin's log natively: same file, same format.
    let (records, recovery) = read_wal(fs.clone(), "events.wal", Mode::Native)?;
    println!(
        "host reads events.wal natively: {} records, next seq {}, {:?}",
        records.len(),
        recovery.next_seq.0,
        recovery.end
    );
    ensure!(
        records.len() == 4,
        "the host read {} records",
        records.len()
    );

    // The plugin cannot leave its directory: the host's Vfs refuses the path, and the plugin
    // gets the typed error as a value; the host carries on.
    let escaped = run_plugin(runtime, &component, &linker, &fs, "../escape.wal", &[])?;
    println!("plugin asks for ../escape.wal: {escaped:?}");
    ensure!(
        escaped.as_ref().is_err_and(|e| e.contains("InvalidPath")),
        "escaping path: {escaped:?}"
    );
    ensure!(
        !dir.parent()
            .is_some_and(|parent| parent.join("escape.wal").exists()),
        "nothing was written outside {}",
        dir.display()
    );
    println!("plugin_host: ok");
    Ok(())
}
