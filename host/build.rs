//! Builds the components the host embeds or ships, so that `cargo run` and `cargo test` need
//! no setup step of their own:
//! - `stele.wasm`: the engine, plain WASI 0.2 (world `engine`), for any component-model host;
//! - `stele-async.wasm`: the engine for the component model's async ABI (feature
//!   `component-async`, world `engine-async`), which group-commits concurrent calls on one
//!   instance;
//! - `stele-wasi.wasm`: `stele.wasm` with the WASI-filesystem adapter (`component/wasi-vfs`)
//!   plugged into its `vfs` import, so its only storage import is `wasi:filesystem`: it runs on
//!   any WASI 0.2 host that preopens a directory (wasmtime with `wasmtime-wasi` alone, Node.js
//!   through jco);
//! - `example-plugin.wasm`: the plugin of `examples/plugin_host.rs` with `stele.wasm` plugged
//!   into its `wal` import.
//!
//! How:
//! - Installs the `wasm32-wasip2` target with rustup when the toolchain lacks it.
//! - Runs nested `cargo build -p <crate> --target wasm32-wasip2 --release` with their own
//!   `--target-dir` (`target/guest`): sharing the outer target directory would wait forever on
//!   the lock the outer build holds, and cargo hides that message. The two engine builds share
//!   that directory (only the `stele` crate differs between them); each output is copied to
//!   its own name in `target/guest` before the next overwrites it.
//! - Composes with the `wac-graph` library (what `wac plug` runs), a build dependency. The
//!   `wac-cli` binary it replaced was a `cargo install` of its own on the build's critical
//!   path: 3.5 minutes of a 26.5-minute clean build on 2 cores.
//! - Set `STELE_COMPONENT_WASM` and `STELE_COMPONENT_ASYNC_WASM` to embed prebuilt engines (the
//!   composed components are then built from the prebuilt `stele.wasm`).
//!
//! What it exports to the crate's code: `STELE_COMPONENT_WASM_EMBEDDED` and
//! `STELE_COMPONENT_ASYNC_WASM_EMBEDDED` (embedded by `runtime`), and `STELE_WASI_WASM` and
//! `STELE_EXAMPLE_PLUGIN_WASM` (paths, for the tests and the examples). The same four paths go
//! to dependents' build scripts as `DEP_STELE_COMPONENTS_<NAME>` (see `export_path`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "wasm32-wasip2";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let workspace = workspace_dir();
    for watched in [
        "component/src",
        "component/Cargo.toml",
        "component/wasi-vfs",
        "host/examples/plugin",
        "wit",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    ensure_target_installed();
    let guest_dir = workspace.join("target").join("guest");

    for (env_var, file, features) in [
        ("STELE_COMPONENT_WASM", "stele.wasm", None),
        (
            "STELE_COMPONENT_ASYNC_WASM",
            "stele-async.wasm",
            Some("component-async"),
        ),
    ] {
        println!("cargo:rerun-if-env-changed={env_var}");
        let embedded = out_dir.join(file);
        if let Some(prebuilt) = env::var_os(env_var) {
            std::fs::copy(&prebuilt, &embedded)
                .unwrap_or_else(|e| panic!("{env_var}={}: {e}", Path::new(&prebuilt).display()));
        } else {
            let built = build_guest("stele", features, "stele", file);
            std::fs::copy(&built, &embedded)
                .unwrap_or_else(|e| panic!("copy {} to OUT_DIR: {e}", built.display()));
        }
        println!("cargo:rustc-env={env_var}_EMBEDDED={}", embedded.display());
        export_path(&format!("{env_var}_EMBEDDED"), &embedded);
    }

    let engine = out_dir.join("stele.wasm");
    let adapter = build_guest(
        "stele-wasi-vfs",
        None,
        "stele_wasi_vfs",
        "stele-wasi-vfs.wasm",
    );
    let plugin = build_guest(
        "stele-example-plugin",
        None,
        "stele_example_plugin",
        "stele-example-plugin.wasm",
    );
    let stele_wasi = guest_dir.join("stele-wasi.wasm");
    plug(&engine, &adapter, &stele_wasi);
    println!("cargo:rustc-env=STELE_WASI_WASM={}", stele_wasi.display());
    export_path("STELE_WASI_WASM", &stele_wasi);
    let composed_plugin = guest_dir.join("example-plugin.wasm");
    plug(&plugin, &engine, &composed_plugin);
    println!(
        "cargo:rustc-env=STELE_EXAMPLE_PLUGIN_WASM={}",
        composed_plugin.display()
    );
    export_path("STELE_EXAMPLE_PLUGIN_WASM", &composed_plugin);
}

/// Hands a built component's path to the build scripts of crates that depend on this one
/// (`links = "stele-components"`: they read it as `DEP_STELE_COMPONENTS_<KEY>`, and cargo runs
/// this script before theirs). The CLI crate embeds the adapter and the plugin for its bench
/// this way; the library itself embeds only the two engines.
fn export_path(key: &str, path: &Path) {
    println!("cargo::metadata={key}={}", path.display());
}

fn workspace_dir() -> PathBuf {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf()
}

/// A cargo command for a nested build, with the outer build's flags removed: they are meant
/// for the host, not for the guest or a tool.
fn nested_cargo() -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Builds `package` for the guest target and copies its `<artifact>.wasm` to
/// `target/guest/<file>`, which it returns.
fn build_guest(package: &str, features: Option<&str>, artifact: &str, file: &str) -> PathBuf {
    let workspace = workspace_dir();
    let target_dir = workspace.join("target").join("guest");
    let mut cmd = nested_cargo();
    cmd.current_dir(&workspace)
        .args([
            "build",
            "-p",
            package,
            "--release",
            "--target",
            GUEST_TARGET,
            "--target-dir",
        ])
        .arg(&target_dir)
        .args(features.map(|f| vec!["--features", f]).unwrap_or_default())
        // Components are shipped: no debug info (it only bloats them), names kept so traps
        // still show guest function names.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("run nested cargo build for {package}: {e}"));
    assert!(
        status.success(),
        "building {package} for {GUEST_TARGET} failed"
    );
    let wasm = target_dir
        .join(GUEST_TARGET)
        .join("release")
        .join(format!("{artifact}.wasm"));
    assert!(
        wasm.exists(),
        "guest build did not produce {}",
        wasm.display()
    );
    let kept = target_dir.join(file);
    std::fs::copy(&wasm, &kept).unwrap_or_else(|e| panic!("copy {}: {e}", wasm.display()));
    kept
}

/// `wac plug socket --plug plug -o out`: the plug's exports satisfy the socket's imports.
fn plug(socket: &Path, plug: &Path, out: &Path) {
    let bytes = compose(socket, plug)
        .unwrap_or_else(|e| panic!("plug {} into {}: {e:#}", plug.display(), socket.display()));
    std::fs::write(out, bytes).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
}

/// The composition `plug` writes. The packages are named as `wac plug` names them, so the
/// output is the same, byte for byte.
fn compose(socket: &Path, plug: &Path) -> anyhow::Result<Vec<u8>> {
    use wac_graph::types::Package;
    use wac_graph::{CompositionGraph, EncodeOptions};
    let stem = plug
        .file_stem()
        .ok_or_else(|| anyhow::anyhow!("a plug is a file"))?
        .to_string_lossy();
    let mut graph = CompositionGraph::new();
    let socket_package = Package::from_file("socket", None, socket, graph.types_mut())?;
    let socket_id = graph.register_package(socket_package)?;
    let plug_package = Package::from_file(&format!("plug:{stem}"), None, plug, graph.types_mut())?;
    let plug_id = graph.register_package(plug_package)?;
    wac_graph::plug(&mut graph, vec![plug_id], socket_id)?;
    Ok(graph.encode(EncodeOptions::default())?)
}

fn ensure_target_installed() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(sysroot) = &sysroot
        && sysroot.join("lib/rustlib").join(GUEST_TARGET).exists()
    {
        return;
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", GUEST_TARGET]);
    if let Some(toolchain) = sysroot.as_ref().and_then(|s| s.file_name()) {
        // Install into the toolchain that is building us, whatever the default is.
        cmd.arg("--toolchain").arg(toolchain);
    }
    let status = cmd
        .status()
        .expect("the wasm32-wasip2 target is missing and rustup is not on PATH");
    assert!(status.success(), "rustup target add {GUEST_TARGET} failed");
}
