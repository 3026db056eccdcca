//! Builds the engine component (`stele.wasm`, wasm32-wasip2) that the host embeds, so that
//! `cargo run` and `cargo test` need no setup step of their own.
//!
//! - Installs the `wasm32-wasip2` target with rustup when the toolchain lacks it.
//! - Runs a nested `cargo build -p stele --target wasm32-wasip2 --release` with its own
//!   `--target-dir` (`target/guest`): sharing the outer target directory would wait forever on
//!   the lock the outer build holds, and cargo hides that message.
//! - Set `STELE_COMPONENT_WASM=/path/to/stele.wasm` to embed a prebuilt component instead.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "wasm32-wasip2";

fn main() {
    println!("cargo:rerun-if-env-changed=STELE_COMPONENT_WASM");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let embedded = out_dir.join("stele.wasm");
    if let Some(prebuilt) = env::var_os("STELE_COMPONENT_WASM") {
        std::fs::copy(&prebuilt, &embedded).unwrap_or_else(|e| {
            panic!(
                "STELE_COMPONENT_WASM={}: {e}",
                Path::new(&prebuilt).display()
            )
        });
    } else {
        let built = build_guest();
        std::fs::copy(&built, &embedded)
            .unwrap_or_else(|e| panic!("copy {} to OUT_DIR: {e}", built.display()));
    }
    println!(
        "cargo:rustc-env=STELE_COMPONENT_WASM_EMBEDDED={}",
        embedded.display()
    );
}

fn build_guest() -> PathBuf {
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
    wasm
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
