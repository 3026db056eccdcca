//! The packages are what a dependent gets, and they build with nothing but cargo.
//!
//! This checkout's files are copied to another path, and `component/prebuilt/package.sh
//! --no-verify` packages the four library crates there (a second, separate build of the
//! components: every Stele crate in them is compiled again at the new path; only the
//! third-party crates are reused from this workspace's `target/guest`). Then:
//! - the components in the `stele-components` package must equal this workspace's own build
//!   (`stele_components::STELE_WASM` and the others), and `package.sh --check` must refuse them
//!   once one byte is changed;
//! - the packages are unpacked, and a crate outside any workspace is built against them alone
//!   (`[patch.crates-io]` names the unpacked directories, as if they came from a registry),
//!   with a `rustup` on `PATH` that fails when called. The build must make no `wasm32-wasip2`
//!   output, and the crate then commits one record durably in a sandboxed log and reads it
//!   back; the test reads the log natively too.
//!
//! The outside crate builds in this workspace's target directory, which `cargo test` has
//! unlocked by the time tests run, and with the features the workspace's build unified, so
//! that wasmtime and cranelift are reused and only Stele's four crates compile (CI's 30
//! minutes).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use stele_host::fs::RealFs;
use stele_host::{Mode, read_wal};
use stele_tests::nested_cargo::{cargo, stdout_of, without_outer_build};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The library crates a release packages, in the order a registry takes them.
const PACKAGED: [&str; 4] = ["stele-components", "stele", "stele-host", "stele-archive"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Copies the checkout's files (tracked or not, but not ignored: no `target/`, no `wasm/`),
/// as the working tree has them, keeping symbolic links as links.
fn copy_checkout(from: &Path, to: &Path) {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(from)
        .output()
        .expect("git runs");
    assert!(listed.status.success(), "git ls-files: {listed:?}");
    let mut copied = 0;
    for name in listed.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = std::str::from_utf8(name).unwrap();
        let (source, target) = (from.join(name), to.join(name));
        let Ok(meta) = std::fs::symlink_metadata(&source) else {
            continue; // deleted in the working tree
        };
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source).unwrap(), &target).unwrap();
        } else {
            std::fs::copy(&source, &target).unwrap();
        }
        copied += 1;
    }
    assert!(copied > 100, "copied only {copied} files");
}

/// `package.sh ARGS` in `checkout`, with the outer build's variables removed, so that the
/// copy builds as a fresh checkout would.
/// Starts the copy's guest build (`target/guest`) from a copy of this workspace's, so that
/// the third-party crates its components use are not compiled a second time (two and a half
/// minutes of CI's 2 cores). They are reused only because their flags carry no checkout path
/// (`component/prebuilt/build.rs`, `remapped_paths`): the copy's cargo decides freshness
/// itself, and the times are kept (`cp -a`) so that it can. Stele's own crates are all made
/// stale, whatever the times say, so that every byte of Stele in the copy's components is
/// compiled there.
fn seed_guest_dependencies(workspace: &Path, checkout: &Path) {
    let target = checkout.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(workspace.join("target/guest"))
        .arg(&target)
        .status()
        .expect("cp runs");
    assert!(copied.success(), "cp -a target/guest");
    let fingerprints = Command::new("find")
        .arg(target.join("guest"))
        .args(["-path", "*/.fingerprint/stele*", "-prune", "-print0"])
        .output()
        .expect("find runs");
    assert!(fingerprints.status.success(), "find: {fingerprints:?}");
    let mut made_stale = 0;
    for dir in fingerprints
        .stdout
        .split(|&b| b == 0)
        .filter(|d| !d.is_empty())
    {
        std::fs::remove_dir_all(std::str::from_utf8(dir).unwrap()).unwrap();
        made_stale += 1;
    }
    // The engine (twice), the adapter, the plugin and stele-compose at least.
    assert!(
        made_stale >= 4,
        "{made_stale} of Stele's crates found in target/guest"
    );
}

fn package_sh(checkout: &Path, args: &[&str]) -> std::process::Output {
    let mut command = Command::new("sh");
    command
        .arg(checkout.join("component/prebuilt/package.sh"))
        .args(args)
        .current_dir(checkout);
    without_outer_build(command).output().expect("sh runs")
}

/// The target directory this test binary was built in (`<target>/release/deps/<exe>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// A copy of this checkout at another path (of another length), packaged there once for both
/// tests: (the copy, the directory holding the unpacked packages).
fn packaged() -> &'static (PathBuf, PathBuf) {
    static PACKAGED_ONCE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PACKAGED_ONCE.get_or_init(|| {
        // Under the target directory rather than /tmp: a static is never dropped, and
        // `cargo clean` takes this with the rest.
        let scratch = target_dir().join("packages-test");
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch).unwrap();
        }
        let checkout = scratch.join("a-checkout-somewhere-else").join("stele");
        copy_checkout(&workspace(), &checkout);
        seed_guest_dependencies(&workspace(), &checkout);

        let packaged = package_sh(&checkout, &["--no-verify"]);
        assert!(
            packaged.status.success(),
            "package.sh: {}",
            String::from_utf8_lossy(&packaged.stderr)
        );
        let unpacked = scratch.join("unpacked");
        std::fs::create_dir(&unpacked).unwrap();
        for name in PACKAGED {
            let crate_file = checkout.join(format!("target/package/{name}-{VERSION}.crate"));
            // `m`: the files get the time of extraction, not the package's recorded one, so
            // that a target directory that built an earlier package (same version, same path)
            // sees them as changed and rebuilds, instead of reusing the old bytes.
            let tar = Command::new("tar")
                .arg("xzmf")
                .arg(&crate_file)
                .arg("-C")
                .arg(&unpacked)
                .status()
                .unwrap();
            assert!(tar.success(), "tar xzf {}", crate_file.display());
        }
        (checkout, unpacked)
    })
}

#[test]
fn a_package_built_at_another_path_carries_this_workspaces_bytes() {
    let (checkout, unpacked) = packaged();
    let checkout = checkout.as_path();
    let package = unpacked.join(format!("stele-components-{VERSION}"));
    for (file, here) in [
        ("stele.wasm", stele_components::STELE_WASM),
        ("stele-async.wasm", stele_components::STELE_ASYNC_WASM),
        ("stele-wasi.wasm", stele_components::STELE_WASI_WASM),
    ] {
        let there = std::fs::read(package.join("wasm").join(file)).unwrap();
        assert!(
            there == here,
            "{file}: the package built at {} differs from this workspace's build ({} bytes against {})",
            checkout.display(),
            there.len(),
            here.len()
        );
    }
    // The WIT travels with them.
    for (name, text) in stele_components::WIT_FILES {
        assert_eq!(
            std::fs::read_to_string(package.join("wit").join(name)).unwrap(),
            *text
        );
    }

    // The check passes on what was placed, and refuses it once one byte changes.
    let checked = package_sh(checkout, &["--check"]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let placed = checkout.join("component/prebuilt/wasm/stele.wasm");
    let mut bytes = std::fs::read(&placed).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&placed, &bytes).unwrap();
    let checked = package_sh(checkout, &["--check"]);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("wasm/stele.wasm differs from a fresh build"),
        "{stderr}"
    );
}

/// The dependencies `host/Cargo.toml` restates so that a build of stele-host alone asks for
/// the features the workspace's build unified (the lines after its own self dev-dependency):
/// the outside crate states them too, or wasmtime would compile again for it.
fn workspace_feature_set() -> String {
    let manifest = std::fs::read_to_string(workspace().join("host/Cargo.toml")).unwrap();
    let dev = manifest
        .split("[dev-dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("host/Cargo.toml has [dev-dependencies]");
    let restated: Vec<&str> = dev
        .lines()
        .skip_while(|line| !line.starts_with("stele-host = { path = \".\""))
        .skip(1)
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    assert!(
        restated.len() > 10,
        "host/Cargo.toml's restated features not found: {restated:?}"
    );
    restated.join("\n")
}

/// What a newcomer's crate does with the packages: a sandboxed log, one durable commit, read
/// back through the plain component. It names stele-archive too, so that it links.
const OUTSIDE_MAIN: &str = r#"
use std::sync::Arc;

use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, SandboxLimits, Wal, read_wal};

fn main() {
    let dir = std::env::args_os().nth(1).expect("usage: outside-embedder DIR");
    let fs = Arc::new(RealFs::open_root(&dir).expect("open the root"));
    let options = WalOptions::new(DurabilityPolicy::FullSync);
    let (wal, _) = Wal::open_with_limits(fs.clone(), "events", options, Mode::Sandboxed, SandboxLimits::default())
        .expect("open the sandboxed log");
    let seq = wal.commit_durable(7, b"from outside the workspace").expect("durable commit");
    drop(wal);
    let (records, _) = read_wal(fs, "events", Mode::SandboxedPlain).expect("read back");
    assert_eq!(records.len(), 1);
    println!(
        "seq {} op {} payload {} seal-age {:?}",
        seq.0,
        records[0].op,
        String::from_utf8_lossy(&records[0].payload),
        stele_archive::SEAL_AGE_MAX_DEFAULT,
    );
}
"#;

#[test]
fn a_crate_outside_the_workspace_builds_against_the_packages_with_no_toolchain_work() {
    let (_, unpacked) = packaged();
    let scratch = unpacked.parent().unwrap().join("outside");
    std::fs::create_dir_all(scratch.join("app/src")).unwrap();
    let app = scratch.join("app");

    let patches: String = PACKAGED
        .iter()
        .map(|name| {
            let path = unpacked.join(format!("{name}-{VERSION}"));
            format!("{name} = {{ path = {:?} }}\n", path.to_str().unwrap())
        })
        .collect();
    let manifest = format!(
        r#"[package]
name = "outside-embedder"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
stele = "{VERSION}"
stele-host = "{VERSION}"
# `aws`, as the workspace's CLI asks: the same features below wasmtime, so the same build.
stele-archive = {{ version = "{VERSION}", features = ["aws"] }}
anyhow = "1"
{features}

# The unpacked packages stand in for the registry's.
[patch.crates-io]
{patches}
# The workspace's release profile, so that its dependencies' builds are reused.
[profile.release]
debug = "line-tables-only"
[profile.release.package."*"]
debug = false

# Not a member of any workspace above it.
[workspace]
"#,
        features = workspace_feature_set(),
    );
    std::fs::write(app.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(app.join("src/main.rs"), OUTSIDE_MAIN).unwrap();
    // The workspace's lock file: the same versions, so the same builds.
    std::fs::copy(workspace().join("Cargo.lock"), app.join("Cargo.lock")).unwrap();

    // A rustup that fails, and says so, if anything calls it.
    let fake_bin = scratch.join("bin");
    std::fs::create_dir_all(&fake_bin).unwrap();
    let rustup_called = scratch.join("rustup-was-called");
    let rustup = fake_bin.join("rustup");
    std::fs::write(
        &rustup,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\necho 'rustup must not run' >&2\nexit 1\n",
            rustup_called.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(fake_bin.clone()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();

    let target = target_dir();
    let guest_dirs_before = wasm32_dirs(&target);
    let mut build = cargo();
    build
        .args([
            "build",
            "--release",
            "--offline",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(&app)
        .env("PATH", &path)
        .env("CARGO_TARGET_DIR", &target);
    let built = build.output().unwrap();
    let log = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "cargo build: {log}");
    assert!(
        !rustup_called.exists(),
        "the build called rustup: {}",
        std::fs::read_to_string(&rustup_called).unwrap_or_default()
    );
    assert_eq!(
        wasm32_dirs(&target),
        guest_dirs_before,
        "the build made wasm32-wasip2 output"
    );
    // Every unit the build used, fresh (reused) or compiled, by package id: wasmtime and
    // cranelift came from the workspace's build, and Stele's crates from the unpacked packages
    // (compiled now, or by an earlier run of this test at the same path).
    let units: Vec<(String, bool)> = String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter(|line| line.contains(r#""reason":"compiler-artifact""#))
        .map(|line| {
            let id = line
                .split(r#""package_id":""#)
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_owned();
            (id, line.contains(r#""fresh":true"#))
        })
        .collect();
    let recompiled: Vec<&String> = units
        .iter()
        .filter(|(id, fresh)| !fresh && (id.contains("#wasmtime@") || id.contains("#cranelift")))
        .map(|(id, _)| id)
        .collect();
    let compiled: Vec<&String> = units
        .iter()
        .filter(|(_, fresh)| !fresh)
        .map(|(id, _)| id)
        .collect();
    assert!(
        recompiled.is_empty(),
        "wasmtime compiled a second time: {recompiled:?}; every unit compiled: {compiled:?}"
    );
    let unpacked_url = format!("path+file://{}/", unpacked.display());
    for name in PACKAGED {
        assert!(
            units
                .iter()
                .any(|(id, _)| id.starts_with(&format!("{unpacked_url}{name}-{VERSION}#"))),
            "{name} not built from its package: {units:?}"
        );
    }
    // A dependent compiles nothing to build stele-components: no build dependencies (the
    // composer is a tool of the checkout's), no toolchain.
    let manifest =
        std::fs::read_to_string(unpacked.join(format!("stele-components-{VERSION}/Cargo.toml")))
            .unwrap();
    assert!(
        !manifest.contains("build-dependencies"),
        "the packaged stele-components has build dependencies:\n{manifest}"
    );
    // stele-components took the packaged bytes: its build script watched them, not sources.
    let watched = build_script_outputs(&target, "stele-components")
        .into_iter()
        .find(|output| output.contains(unpacked.to_str().unwrap()))
        .expect("the packaged stele-components' build script ran");
    let reruns: Vec<&str> = watched
        .lines()
        .filter_map(|line| line.strip_prefix("cargo:rerun-if-changed="))
        .collect();
    assert_eq!(reruns.len(), 3, "{watched}");
    assert!(
        reruns
            .iter()
            .all(|path| path.starts_with(unpacked.to_str().unwrap()) && path.ends_with(".wasm")),
        "{watched}"
    );

    let data = tempfile::tempdir().unwrap();
    let ran = stdout_of(Command::new(target.join("release/outside-embedder")).arg(data.path()));
    assert!(
        ran.starts_with("seq 0 op 7 payload from outside the workspace"),
        "{ran}"
    );
    let fs = Arc::new(RealFs::open_root(data.path()).unwrap());
    let (records, _) = read_wal(fs, "events", Mode::Native).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].op, 7);
    assert_eq!(&records[0].payload[..], b"from outside the workspace");
}

/// Every directory named `wasm32-wasip2` under `target`, as a set of paths: a guest build
/// makes one.
fn wasm32_dirs(target: &Path) -> Vec<PathBuf> {
    let found = stdout_of(
        Command::new("find")
            .arg(target)
            .args(["-name", "wasm32-wasip2", "-type", "d", "-prune"])
            .args(["-not", "-path", "*/packages-test/*"]),
    );
    let mut dirs: Vec<PathBuf> = found.lines().map(PathBuf::from).collect();
    dirs.sort();
    dirs
}

/// The `output` files of `name`'s build-script runs in `target`'s release build.
fn build_script_outputs(target: &Path, name: &str) -> Vec<String> {
    let build = target.join("release/build");
    std::fs::read_dir(&build)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(name))
                .is_some_and(|rest| rest.starts_with('-') && rest[1..].len() == 16)
        })
        .filter_map(|dir| std::fs::read_to_string(dir.join("output")).ok())
        .collect()
}
