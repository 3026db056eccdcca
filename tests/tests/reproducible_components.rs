//! The components a package carries are the ones the sources build, wherever the checkout is:
//! this checkout's files are copied to another path, `component/prebuilt/package.sh` packages
//! `stele-components` there (a second, separate build), and the package's bytes must equal
//! this workspace's own build (`stele_components::STELE_WASM` and the others). Then one byte
//! of the placed components is changed, and `package.sh --check` must refuse them.

use std::path::{Path, PathBuf};
use std::process::Command;

use stele_tests::nested_cargo::without_outer_build;

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
fn package_sh(checkout: &Path, args: &[&str]) -> std::process::Output {
    let mut command = Command::new("sh");
    command
        .arg(checkout.join("component/prebuilt/package.sh"))
        .args(args)
        .current_dir(checkout);
    without_outer_build(command).output().expect("sh runs")
}

#[test]
fn a_package_built_at_another_path_carries_this_workspaces_bytes() {
    let scratch = tempfile::tempdir().unwrap();
    // Another path, of another length, than this workspace's.
    let checkout = scratch
        .path()
        .join("a-checkout-somewhere-else")
        .join("stele");
    copy_checkout(&workspace(), &checkout);

    let packaged = package_sh(&checkout, &["--no-verify"]);
    assert!(
        packaged.status.success(),
        "package.sh: {}",
        String::from_utf8_lossy(&packaged.stderr)
    );
    let crate_file = checkout.join(format!(
        "target/package/stele-components-{}.crate",
        env!("CARGO_PKG_VERSION")
    ));
    let unpacked = scratch.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let tar = Command::new("tar")
        .arg("xzf")
        .arg(&crate_file)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(tar.success(), "tar xzf {}", crate_file.display());
    let package = unpacked.join(format!("stele-components-{}", env!("CARGO_PKG_VERSION")));
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
    let checked = package_sh(&checkout, &["--check"]);
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
    let checked = package_sh(&checkout, &["--check"]);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("wasm/stele.wasm differs from a fresh build"),
        "{stderr}"
    );
}
