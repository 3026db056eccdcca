//! `stele-compose SOCKET PLUG OUT [--re-export]`: what `wac plug SOCKET --plug PLUG -o OUT`
//! does, with the `wac-graph` library, so that nothing needs installing.
//!
//! `--re-export` also exports each interface the plug gave the socket (under its own name),
//! beside the socket's exports. `stele-wasi.wasm` is made so, and exports the adapter's
//! `stele:log/vfs`: a guest that imports `stele:log/wal` also imports `stele:log/vfs` for the
//! types `wal` uses (`vfs-error`, `quota-exceeded`), and that import must be satisfied too when
//! the guest is plugged with `stele-wasi.wasm` (`wac plug guest.wasm --plug stele-wasi.wasm`),
//! or the composition still imports `stele:log/vfs` and a WASI-only host cannot instantiate it.
//!
//! `component/prebuilt/build.rs` runs it in a Stele checkout to make `stele-wasi.wasm` (the
//! engine with the WASI-filesystem adapter plugged into its `vfs` import) and the example
//! plugin (with the engine plugged into its `wal` import). It lives in a crate of its own,
//! built by that script's nested cargo, so that `wac-graph` is not a build dependency of
//! `stele-components`: a dependent of the packaged crate compiles nothing for it.
//!
//! The output depends only on the two inputs' bytes: the packages are named as `wac plug`
//! names them, so the result is the same, byte for byte.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use wac_graph::types::Package;
use wac_graph::{CompositionGraph, EncodeOptions, NodeId};

fn main() -> anyhow::Result<()> {
    let mut args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let re_export = args
        .last()
        .is_some_and(|arg| arg.as_os_str() == "--re-export");
    if re_export {
        args.pop();
    }
    let [socket, plug, out] = args.as_slice() else {
        bail!("usage: stele-compose SOCKET PLUG OUT [--re-export]");
    };
    let bytes = compose(socket, plug, re_export)
        .with_context(|| format!("plug {} into {}", plug.display(), socket.display()))?;
    std::fs::write(out, bytes).with_context(|| format!("write {}", out.display()))
}

/// The plug's exports satisfy the socket's imports; with `re_export`, the plug's exports that
/// did are exported too.
fn compose(socket: &Path, plug: &Path, re_export: bool) -> anyhow::Result<Vec<u8>> {
    let stem = plug
        .file_stem()
        .context("a plug is a file")?
        .to_string_lossy();
    let mut graph = CompositionGraph::new();
    let socket_package = Package::from_file("socket", None, socket, graph.types_mut())?;
    let socket_id = graph.register_package(socket_package)?;
    let plug_package = Package::from_file(&format!("plug:{stem}"), None, plug, graph.types_mut())?;
    let plug_id = graph.register_package(plug_package)?;
    wac_graph::plug(&mut graph, vec![plug_id], socket_id)?;
    if re_export {
        // `plug` made one instance of the plug, and aliased each export it used.
        let plugged: Vec<(NodeId, String)> = graph
            .node_ids()
            .filter_map(|node| {
                let (source, name) = graph.get_alias_source(node)?;
                let from_plug = graph[source].package() == Some(plug_id);
                from_plug.then(|| (node, name.to_owned()))
            })
            .collect();
        for (node, name) in plugged {
            if graph.get_export(&name).is_none() {
                graph.export(node, &name)?;
            }
        }
    }
    Ok(graph.encode(EncodeOptions::default())?)
}
