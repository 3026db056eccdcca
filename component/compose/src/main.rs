//! `stele-compose SOCKET PLUG OUT`: what `wac plug SOCKET --plug PLUG -o OUT` does, with the
//! `wac-graph` library, so that nothing needs installing.
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
use wac_graph::{CompositionGraph, EncodeOptions};

fn main() -> anyhow::Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [socket, plug, out] = args.as_slice() else {
        bail!("usage: stele-compose SOCKET PLUG OUT");
    };
    let bytes = compose(socket, plug)
        .with_context(|| format!("plug {} into {}", plug.display(), socket.display()))?;
    std::fs::write(out, bytes).with_context(|| format!("write {}", out.display()))
}

/// The plug's exports satisfy the socket's imports.
fn compose(socket: &Path, plug: &Path) -> anyhow::Result<Vec<u8>> {
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
    Ok(graph.encode(EncodeOptions::default())?)
}
