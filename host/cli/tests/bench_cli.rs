//! `stele bench --workloads components` prints a row per built component, with its real size.

mod common;

#[test]
fn the_components_table_has_every_component_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let run = common::stele_run(
        None,
        &[
            "bench",
            "--workloads",
            "components",
            "--dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    let rows: Vec<Vec<&str>> = run
        .stdout
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
    assert_eq!(rows.len(), 5, "{}", run.stdout);
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
