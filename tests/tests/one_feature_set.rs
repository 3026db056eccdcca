//! One feature set: building `stele-host` alone (its examples, `cargo run --release -p
//! stele-host --example embed_sync`) after the workspace's build compiles only the example,
//! not wasmtime and cranelift a second time.
//!
//! Selected alone, a package resolves features from its own dependencies; the workspace's
//! other members turn on more in crates wasmtime and arrow sit on (`libc/extra_traits`,
//! `serde/default`, ...), and one differing feature anywhere below wasmtime gives wasmtime a
//! new hash. `host/Cargo.toml`'s dev-dependencies restate those features. This test fails
//! when that list falls behind: every crate `stele-host` is built on must have, in the
//! package's own resolution, a feature set the workspace's build also has.

use std::collections::{BTreeMap, BTreeSet};
use stele_tests::nested_cargo::{cargo, stdout_of};

/// `cargo tree ARGS -f '{p} {f}'`: each package line as (name and version, features).
fn tree(args: &[&str]) -> Vec<(String, String)> {
    stdout_of(
        cargo()
            .args(["tree", "--prefix", "none", "-f", "{p}|{f}"])
            .args(args),
    )
    .lines()
    .filter_map(|line| {
        let (package, features) = line.trim_end_matches(" (*)").split_once('|')?;
        // Path packages carry their directory: keep the name and version.
        let package = package.split(" (").next().unwrap().to_string();
        Some((package, features.to_string()))
    })
    .collect()
}

#[test]
fn stele_host_alone_resolves_the_workspace_features_below_it() {
    // The workspace's build: the default members, without dev-dependencies.
    let mut workspace: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (package, features) in tree(&["-e", "normal,no-proc-macro"]) {
        workspace.entry(package).or_default().insert(features);
    }
    // What `stele-host` is built on, and how the package alone with its dev-dependencies (an
    // example's build) resolves each.
    let below: BTreeSet<String> = tree(&["-p", "stele-host", "-e", "normal,no-proc-macro"])
        .into_iter()
        .map(|(package, _)| package)
        .filter(|package| !package.starts_with("stele-host "))
        .collect();
    let mut behind = Vec::new();
    for (package, features) in tree(&["-p", "stele-host", "-e", "normal,dev,no-proc-macro"]) {
        if below.contains(&package)
            && !workspace
                .get(&package)
                .is_some_and(|f| f.contains(&features))
        {
            behind.push(format!(
                "{package}: alone [{features}], workspace {:?}",
                workspace.get(&package)
            ));
        }
    }
    behind.sort();
    behind.dedup();
    assert!(
        behind.is_empty(),
        "restate these features in host/Cargo.toml's dev-dependencies:\n{}",
        behind.join("\n")
    );
}
