//! Makes the components this crate carries available to its code, in one of two ways:
//!
//! - **From the package** (a dependent's build: crates.io, a git or path dependency on the
//!   packaged crate). The bytes are in `wasm/` inside the package, put there by
//!   `component/prebuilt/package.sh`; nothing is built, no `rustup` or nested `cargo` runs,
//!   and nothing is written outside `OUT_DIR`.
//! - **From source**, in a Stele checkout (this crate sits in `component/` beside the engine's
//!   sources), so that `cargo run` and `cargo test` need no setup step of their own:
//!   - installs the `wasm32-wasip2` target with rustup when the toolchain lacks it;
//!   - runs nested `cargo build -p <crate> --target wasm32-wasip2 --release` with their own
//!     `--target-dir` (`target/guest`): sharing the outer target directory would wait forever
//!     on the lock the outer build holds, and cargo hides that message. The two engine builds
//!     share that directory (only the `stele` crate differs between them); each output is
//!     copied to its own name in `target/guest` before the next overwrites it. `CARGO_HOME` is
//!     remapped (`--remap-path-prefix`) and cargo names the checkout's own sources relative to
//!     it, so the bytes do not depend on where the checkout is: `package.sh --check` and
//!     `tests/tests/packages.rs` hold that;
//!   - composes with `stele-compose` (`component/compose`: the `wac-graph` library, what `wac
//!     plug` runs), built by one more nested cargo, so that this crate has no build
//!     dependencies for a dependent to compile;
//!   - also builds the example plugin (`host/examples/plugin`, composed with `stele.wasm`) for
//!     the examples and the bench; it is never packaged.
//!
//! The components:
//! - `stele.wasm`: the engine, plain WASI 0.2 (world `engine`), for any component-model host;
//! - `stele-async.wasm`: the engine for the component model's async ABI (feature
//!   `component-async`, world `engine-async`), which group-commits concurrent calls on one
//!   instance;
//! - `stele-wasi.wasm`: `stele.wasm` with the WASI-filesystem adapter (`component/wasi-vfs`)
//!   plugged into its `vfs` import, so its only storage import is `wasi:filesystem`.
//!
//! What it exports: `STELE_WASM`, `STELE_ASYNC_WASM` and `STELE_WASI_WASM` (paths, embedded by
//! `src/lib.rs`), and the same paths to dependents' build scripts as
//! `DEP_STELE_COMPONENTS_<NAME>` (`links`), with `STELE_EXAMPLE_PLUGIN_WASM` from source only.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "wasm32-wasip2";

/// The components this crate carries: (export name, file name).
const CARRIED: [(&str, &str); 3] = [
    ("STELE_WASM", "stele.wasm"),
    ("STELE_ASYNC_WASM", "stele-async.wasm"),
    ("STELE_WASI_WASM", "stele-wasi.wasm"),
];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    match workspace_of(&manifest_dir) {
        Some(workspace) => from_source(&workspace, &out_dir),
        None => from_package(&manifest_dir, &out_dir),
    }
}

/// The checkout this crate is built in, if it is one: the engine's sources sit beside it.
/// A packaged crate (in a registry, or unpacked by `cargo package`) has no `../src/guest`.
fn workspace_of(manifest_dir: &Path) -> Option<PathBuf> {
    let engine = manifest_dir.parent()?;
    let is_checkout = engine.join("src/guest/mod.rs").is_file()
        && engine.join("Cargo.toml").is_file()
        && engine.parent()?.join("wit").is_dir();
    is_checkout.then(|| engine.parent().map(Path::to_path_buf))?
}

/// The bytes `package.sh` put in the package's `wasm/`, copied to `OUT_DIR`.
fn from_package(manifest_dir: &Path, out_dir: &Path) {
    for (name, file) in CARRIED {
        let packaged = manifest_dir.join("wasm").join(file);
        println!("cargo:rerun-if-changed={}", packaged.display());
        let embedded = out_dir.join(file);
        std::fs::copy(&packaged, &embedded).unwrap_or_else(|e| {
            panic!(
                "stele-components: {} is missing from this package ({e}); a package is made \
                 by component/prebuilt/package.sh, which builds the components first",
                packaged.display()
            )
        });
        export(name, &embedded);
    }
}

fn from_source(workspace: &Path, out_dir: &Path) {
    for watched in [
        "component/src",
        "component/Cargo.toml",
        "component/wasi-vfs",
        "component/compose",
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

    for (name, file, features) in [
        ("STELE_WASM", "stele.wasm", None),
        (
            "STELE_ASYNC_WASM",
            "stele-async.wasm",
            Some("component-async"),
        ),
    ] {
        let built = build_guest(workspace, "stele", features, "stele", file);
        let embedded = out_dir.join(file);
        std::fs::copy(&built, &embedded)
            .unwrap_or_else(|e| panic!("copy {} to OUT_DIR: {e}", built.display()));
        export(name, &embedded);
    }

    let engine = out_dir.join("stele.wasm");
    let adapter = build_guest(
        workspace,
        "stele-wasi-vfs",
        None,
        "stele_wasi_vfs",
        "stele-wasi-vfs.wasm",
    );
    let stele_wasi = guest_dir.join("stele-wasi.wasm");
    let composer = compose_tool(workspace, &guest_dir);
    // Re-exported: the adapter's `vfs`, so that a guest plugged with stele-wasi.wasm has its
    // `vfs` import (the types `wal` uses) satisfied too (component/compose/src/main.rs).
    plug(&composer, &engine, &adapter, &stele_wasi, true);
    let embedded = out_dir.join("stele-wasi.wasm");
    std::fs::copy(&stele_wasi, &embedded)
        .unwrap_or_else(|e| panic!("copy {} to OUT_DIR: {e}", stele_wasi.display()));
    export("STELE_WASI_WASM", &embedded);

    let plugin = build_guest(
        workspace,
        "stele-example-plugin",
        None,
        "stele_example_plugin",
        "stele-example-plugin.wasm",
    );
    let composed_plugin = guest_dir.join("example-plugin.wasm");
    plug(&composer, &plugin, &engine, &composed_plugin, false);
    export("STELE_EXAMPLE_PLUGIN_WASM", &composed_plugin);
}

/// Hands a component's path to this crate's code (`env!`) and to the build scripts of crates
/// that depend on this one (`links = "stele-components"`: they read it as
/// `DEP_STELE_COMPONENTS_<KEY>`, and cargo runs this script before theirs).
fn export(key: &str, path: &Path) {
    println!("cargo:rustc-env={key}={}", path.display());
    println!("cargo::metadata={key}={}", path.display());
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
fn build_guest(
    workspace: &Path,
    package: &str,
    features: Option<&str>,
    artifact: &str,
    file: &str,
) -> PathBuf {
    let target_dir = workspace.join("target").join("guest");
    let mut cmd = nested_cargo();
    cmd.current_dir(workspace)
        // `rustc --crate-type cdylib`, not `build`: the engine's manifest says rlib only, so
        // that a native build makes no shared library (a cdylib's file carries no feature
        // hash, so two feature sets of the engine would rebuild over each other).
        .args([
            "rustc",
            "-p",
            package,
            "--lib",
            "--crate-type",
            "cdylib",
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
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        // Whole-program LTO in one codegen unit: what every instance of a component costs
        // scales with what the module holds, not with what it runs. Measured on the engine
        // (async build): the function table 2,666 -> 1,088 entries (wasmtime keeps a 32-byte
        // `VMFuncRef` per entry in each instance's context), the data image every instance
        // maps 148 -> 94 KiB, the module 3.08 -> 2.60 MB; about 40 s more per build here.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_ENCODED_RUSTFLAGS", remapped_paths());
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

/// Rust flags that take `CARGO_HOME` out of the bytes (panic locations, the names of sources),
/// so that two machines build the same components. The checkout's own crates need no flag:
/// cargo names a workspace member's sources relative to the workspace root (`component/src/..`),
/// so the checkout's path never reaches the bytes, and the flags, which are part of every
/// crate's fingerprint, are the same in every checkout. That lets a second checkout start from
/// a copy of this one's `target/guest` (`tests/tests/packages.rs` does) and compile only its
/// own crates. The standard library's paths are already `/rustc/<commit>` in a rustup toolchain.
fn remapped_paths() -> String {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    // CARGO_ENCODED_RUSTFLAGS separates flags with 0x1f (one flag here), so paths with spaces
    // stay whole.
    cargo_home
        .map(|cargo_home| format!("--remap-path-prefix={}=/cargo", cargo_home.display()))
        .unwrap_or_default()
}

/// `wac plug socket --plug plug -o out`: the plug's exports satisfy the socket's imports; with
/// `re_export`, the composition also exports what the plug gave. Runs `stele-compose`
/// (`component/compose`, the `wac-graph` library), which `compose_tool` built.
fn plug(tool: &Path, socket: &Path, plug: &Path, out: &Path, re_export: bool) {
    let status = Command::new(tool)
        .arg(socket)
        .arg(plug)
        .arg(out)
        .args(re_export.then_some("--re-export"))
        .status()
        .unwrap_or_else(|e| panic!("run {}: {e}", tool.display()));
    assert!(
        status.success(),
        "plug {} into {} failed",
        plug.display(),
        socket.display()
    );
}

/// Builds `stele-compose` for the machine building (not the guest), in the guests' target
/// directory `guest_dir`, and returns its path. The dev profile (its dependencies at the
/// workspace's opt-level 1) without debug info: it runs twice, on small inputs, and its output
/// does not depend on how it was built.
fn compose_tool(workspace: &Path, guest_dir: &Path) -> PathBuf {
    let status = nested_cargo()
        .current_dir(workspace)
        .args(["build", "-p", "stele-compose", "--target-dir"])
        .arg(guest_dir)
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .status()
        .unwrap_or_else(|e| panic!("run nested cargo build for stele-compose: {e}"));
    assert!(status.success(), "building stele-compose failed");
    let tool = guest_dir
        .join("debug")
        .join(format!("stele-compose{}", env::consts::EXE_SUFFIX));
    assert!(tool.exists(), "no {}", tool.display());
    tool
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
