//! Builds the two engine components the host embeds, so that `cargo run` and `cargo test` need
//! no setup step of their own:
//! - `stele.wasm`: plain WASI 0.2 (world `engine`), for any component-model host;
//! - `stele-async.wasm`: the component model's async ABI (feature `component-async`, world
//!   `engine-async`), which group-commits concurrent calls on one instance.
//!
//! - Installs the `wasm32-wasip2` target with rustup when the toolchain lacks it.
//! - Runs a nested `cargo build -p stele --target wasm32-wasip2 --release` with its own
//!   `--target-dir` (`target/guest`): sharing the outer target directory would wait forever on
//!   the lock the outer build holds, and cargo hides that message. Both builds share that
//!   directory (only the `stele` crate differs between them); each output is copied to
//!   `target/guest/stele.wasm` and `target/guest/stele-async.wasm` before the next overwrites it.
//! - Set `STELE_COMPONENT_WASM` and `STELE_COMPONENT_ASYNC_WASM` to embed prebuilt components.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "wasm32-wasip2";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
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
            let built = build_guest(features, file);
            std::fs::copy(&built, &embedded)
                .unwrap_or_else(|e| panic!("copy {} to OUT_DIR: {e}", built.display()));
        }
        println!("cargo:rustc-env={env_var}_EMBEDDED={}", embedded.display());
    }
}

fn build_guest(features: Option<&str>, file: &str) -> PathBuf {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    for watched in ["component/src", "component/Cargo.toml", "wit", "Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    ensure_target_installed();

    let target_dir = workspace.join("target").join("guest");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "build",
            "-p",
            "stele",
            "--release",
            "--target",
            GUEST_TARGET,
            "--target-dir",
        ])
        .arg(&target_dir)
        .args(features.map(|f| vec!["--features", f]).unwrap_or_default())
        // The guest is shipped: no debug info (it only bloats the component), names kept so
        // traps still show guest function names.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    // Flags meant for the host build must not leak into the guest build.
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
    let status = cmd
        .status()
        .expect("run nested cargo build for the guest component");
    assert!(
        status.success(),
        "building the stele component for {GUEST_TARGET} failed"
    );
    let wasm = target_dir
        .join(GUEST_TARGET)
        .join("release")
        .join("stele.wasm");
    assert!(
        wasm.exists(),
        "guest build did not produce {}",
        wasm.display()
    );
    // Both builds write the same output path; keep each under its own name.
    let kept = target_dir.join(file);
    std::fs::copy(&wasm, &kept).unwrap_or_else(|e| panic!("copy {}: {e}", wasm.display()));
    kept
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
