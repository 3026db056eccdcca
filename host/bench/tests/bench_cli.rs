//! `stele-bench --workloads components` prints a row per built component, with its real size.

use std::process::Command;

#[test]
fn the_components_table_has_every_component_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_stele-bench"))
        .args(["--workloads", "components", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(".wasm"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let sizes = [
        ("stele.wasm", env!("STELE_WASM")),
        ("stele-async.wasm", env!("STELE_ASYNC_WASM")),
        ("stele-wasi.wasm", env!("STELE_WASI_WASM")),
        ("example-plugin.wasm", env!("STELE_EXAMPLE_PLUGIN_WASM")),
    ];
    assert_eq!(rows.len(), 5, "{stdout}");
    for row in &rows {
        let (_, file) = sizes.iter().find(|(name, _)| *name == row[0]).unwrap();
        let bytes = std::fs::metadata(file).unwrap().len();
        assert_eq!(row[2], bytes.to_string(), "{row:?}");
        for figure in &row[3..] {
            let value: f64 = figure.parse().unwrap_or_else(|_| panic!("{row:?}"));
            assert!(value > 0.0, "{row:?}");
        }
    }
}

/// The process the cold-start table times does what `stele wal append --single-file` does: the
/// record it reports is durable in a single-file log, in the mode asked for.
#[test]
fn the_cold_start_probe_commits_one_durable_record_in_each_mode() {
    use std::sync::Arc;
    use stele_host::{Mode, fs::RealFs, read_wal};

    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    for mode in [Mode::Native, Mode::SandboxedPlain] {
        let log = dir.path().join(format!("{}.wal", mode.name()));
        let run = Command::new(env!("CARGO_BIN_EXE_stele-bench"))
            .args(["cold-start-append", mode.name()])
            .arg(&log)
            .env("STELE_CODE_CACHE", cache.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && stdout.starts_with("appended 1 records, seq 0 (durable)"),
            "{stdout}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(log.is_file(), "a single file, not a segment directory");
        let fs = Arc::new(RealFs::open_root(dir.path()).unwrap());
        let name = format!("{}.wal", mode.name());
        let (records, _) = read_wal(fs, &name, Mode::Native).unwrap();
        assert_eq!(records.len(), 1, "{mode:?}");
        assert_eq!(&records[0].payload[..], b"first");
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_stele-bench"))
        .args(["cold-start-append", "elsewhere", "x.wal"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "clap's usage error");
}
