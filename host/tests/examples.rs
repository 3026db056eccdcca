//! The embedding examples in `host/examples/` run, and do what they print. `cargo test` builds
//! every example next to the test binaries; this runs them.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile_dir = deps.parent().unwrap().parent().unwrap();
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built; `cargo test` builds the examples",
        path.display()
    );
    path
}

fn run(name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(example(name))
        .arg(dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed:\n{text}");
    text
}

#[test]
fn embed_sync_commits_and_recovers_in_every_mode() {
    let text = run("embed_sync");
    for mode in ["native", "sandboxed", "sandboxed-plain"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{mode} ")))
            .unwrap_or_else(|| panic!("no line for {mode}:\n{text}"));
        assert!(line.contains("800 durable commits"), "{line}");
        assert!(line.contains("reopened: 800 records"), "{line}");
    }
}

#[test]
fn embed_tokio_commits_from_64_tasks_in_every_mode() {
    let text = run("embed_tokio");
    for mode in ["native", "sandboxed", "sandboxed-plain"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{mode} ")))
            .unwrap_or_else(|| panic!("no line for {mode}:\n{text}"));
        assert!(
            line.contains("1280 durable commits from 64 tasks"),
            "{line}"
        );
    }
}

#[test]
fn plugin_host_runs_a_composed_plugin_that_logs_through_the_engine() {
    let text = run("plugin_host");
    assert!(text.contains("it imports"), "{text}");
    assert!(
        text.contains("plugin notes: events.wal: 2 events durable, seqs 3..5"),
        "the plugin called the host's own function: {text}"
    );
    assert!(
        text.contains(r#"second run, a fresh instance: the plugin's log holds ["started", "loaded 3 rules", "rule fired: disk-usage", "stopped"]"#),
        "{text}"
    );
    assert!(
        text.contains("host reads events.wal natively: 4 records, next seq 5, Clean"),
        "{text}"
    );
    assert!(
        text.contains("plugin asks for ../escape.wal: Err("),
        "{text}"
    );
    assert!(text.ends_with("plugin_host: ok\n"), "{text}");
}

#[test]
fn platform_serves_two_tenants_from_its_own_engine_in_sync_and_async_stores() {
    let text = run("platform");
    for store in ["sync", "async"] {
        for tenant in ["tenant-a", "tenant-b"] {
            assert!(
                text.contains(&format!(
                    "{store}: {tenant}'s events-{store}.wal read natively: 6 records, each its own, Clean"
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "[{tenant}] plugin notes: events-{store}.wal: 3 events durable, seqs 4..7"
                )),
                "the platform's own function served {tenant}: {text}"
            );
        }
        assert!(
            text.contains(&format!(
                "{store}: `../` is invalid-path for both tenants; neither reaches the other"
            )),
            "{text}"
        );
    }
    assert!(
        text.contains("read_wal") && text.contains("time.busy"),
        "the platform's subscriber shows Stele's spans: {text}"
    );
    assert!(text.contains("\nplatform: ok\n"), "{text}");
}
