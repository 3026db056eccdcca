//! `stele-wasi.wasm` (the engine with the WASI-filesystem adapter plugged in, built by
//! `build.rs`) on hosts that are not Stele's:
//! - wasmtime with `wasmtime-wasi` alone linked and one preopened directory: no Stele host
//!   code serves anything;
//! - Node.js, through `jco transpile` and `@bytecodealliance/preview2-shim`, installed from npm
//!   into `target/jco` on first use. Without `node` and `npm` on PATH that test fails.
//!
//! Either way the log lands in a real directory, and Stele's own reader and the `stele` CLI
//! must read it back: the same records, and the same bytes as a native writer makes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use stele::wal::{DurabilityPolicy, LogSeq, WalWriter};
use stele_host::fs::RealFs;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

mod bindings {
    // The engine's exports only: the composed component imports no `vfs`, so the test links
    // nothing but wasmtime-wasi.
    wasmtime::component::bindgen!({
        world: "engine",
        path: "../../wit",
    });
}

use bindings::exports::stele::log::wal::{
    DurabilityPolicy as WitPolicy, RecoveryEnd, WalError as WitWalError, WalOptions,
};

use stele_components::STELE_WASI_WASM;

/// The records every foreign host writes: payloads of several sizes, so a record spans more
/// than one length class.
fn payload(i: usize) -> Vec<u8> {
    format!("record {i} {}", "x".repeat(i % 97)).into_bytes()
}

/// The same log written natively, one durable commit per record: what the foreign host's file
/// must equal byte for byte.
fn native_bytes(records: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let fs = RealFs::open_root(dir.path()).unwrap();
    let writer = WalWriter::create(&fs, "log.wal", LogSeq(1), DurabilityPolicy::FullSync).unwrap();
    for i in 0..records {
        writer.commit_durable(1, &payload(i)).unwrap();
    }
    drop(writer);
    std::fs::read(dir.path().join("log.wal")).unwrap()
}

/// What the `stele` CLI reads from `path`: (seq, payload text) per record, and the end line.
fn cli_dump(path: &Path) -> (Vec<(u64, String)>, serde_json::Value) {
    let run = common::stele_run(None, &["wal", "dump", "--json", path.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "stele wal dump: {}", run.stderr);
    let mut rows = common::json_lines(&run.stdout);
    let end = rows.pop().expect("dump prints an end line");
    let records = rows
        .iter()
        .map(|r| {
            (
                r["seq"].as_u64().unwrap(),
                r["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (records, end)
}

fn assert_read_back_by_stele(path: &Path, records: usize) {
    let (read, end) = cli_dump(path);
    let expected: Vec<(u64, String)> = (0..records)
        .map(|i| (i as u64 + 1, String::from_utf8(payload(i)).unwrap()))
        .collect();
    assert_eq!(read, expected, "the records the stele CLI reads");
    assert_eq!(end["end"], "Clean", "{end}");
    assert_eq!(
        std::fs::read(path).unwrap(),
        native_bytes(records),
        "the file equals, byte for byte, what a native writer makes"
    );
}

struct WasiOnly {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for WasiOnly {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// An instance of `stele-wasi.wasm` with wasmtime-wasi alone, `dir` preopened as `/`.
fn instantiate(
    engine: &Engine,
    component: &Component,
    dir: &Path,
) -> (Store<WasiOnly>, bindings::Engine) {
    let mut linker = Linker::<WasiOnly>::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    let mut ctx = WasiCtx::builder();
    ctx.preopened_dir(dir, "/", FsPerms::ReadWrite).unwrap();
    let mut store = Store::new(
        engine,
        WasiOnly {
            ctx: ctx.build(),
            table: ResourceTable::new(),
        },
    );
    let instance = bindings::Engine::instantiate(&mut store, component, &linker)
        .expect("stele-wasi.wasm instantiates with wasmtime-wasi alone");
    (store, instance)
}

fn wit_options() -> WalOptions {
    WalOptions {
        policy: WitPolicy::FullSync,
        first_seq: 1,
        group_bytes_max: None,
        retained_bytes_max: 0,
        segment_bytes: None,
    }
}

#[test]
fn the_composed_component_imports_only_wasi() {
    let engine = Engine::default();
    let component = Component::new(&engine, STELE_WASI_WASM).unwrap();
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(&engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    assert!(
        imports.iter().all(|name| name.starts_with("wasi:")),
        "only WASI imports: {imports:?}"
    );
    let storage: Vec<&String> = imports
        .iter()
        .filter(|name| !name.starts_with("wasi:io/") && !name.starts_with("wasi:cli/"))
        .filter(|name| !name.starts_with("wasi:clocks/") && !name.starts_with("wasi:random/"))
        .collect();
    assert!(
        !storage.is_empty()
            && storage
                .iter()
                .all(|name| name.starts_with("wasi:filesystem/")),
        "wasi:filesystem is the only storage import: {imports:?}"
    );
    let exports: Vec<String> = ty
        .exports(&engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    // `vfs` too, the adapter's: a guest that imports `wal` imports `vfs` for its types, and
    // plugged with this component that import is satisfied (tests/foreign_guests.rs).
    for facet in [
        "stele:log/wal",
        "stele:log/journal",
        "stele:log/push-log",
        "stele:log/vfs",
    ] {
        assert!(
            exports.iter().any(|name| name.starts_with(facet)),
            "{facet} is exported: {exports:?}"
        );
    }
}

#[test]
fn wasmtime_wasi_alone_appends_and_recovers() {
    const RECORDS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new();
    config.wasm_component_model(true);
    let engine = Engine::new(&config).unwrap();
    let component = Component::new(&engine, STELE_WASI_WASM).unwrap();

    let (mut store, instance) = instantiate(&engine, &component, dir.path());
    let wal = instance.stele_log_wal().writer();
    let writer = wal
        .call_create(&mut store, "log.wal", wit_options())
        .unwrap()
        .expect("create log.wal under the preopen");
    // One writer per log: the adapter's lock excludes a second writer within its instance.
    let second = wal.call_open(&mut store, "log.wal", wit_options()).unwrap();
    assert!(
        matches!(
            &second,
            Err(WitWalError::Locked(path)) if path == "log.wal.lock"
        ),
        "{second:?}"
    );
    for i in 0..RECORDS {
        let seq = wal
            .call_commit_durable(&mut store, writer, 1, &payload(i))
            .unwrap()
            .unwrap();
        assert_eq!(seq, i as u64 + 1);
    }
    writer.resource_drop(&mut store).unwrap();
    // A path out of the preopen is refused by the adapter, before the host sees it.
    let escaped = wal
        .call_create(&mut store, "../escaped.wal", wit_options())
        .unwrap();
    assert!(escaped.is_err(), "{escaped:?}");
    drop(store);

    // A fresh instance recovers what the first one made durable.
    let (mut store, instance) = instantiate(&engine, &component, dir.path());
    let wal = instance.stele_log_wal().writer();
    let (writer, recovery) = wal
        .call_open(&mut store, "log.wal", wit_options())
        .unwrap()
        .unwrap();
    assert_eq!(recovery.records, RECORDS as u64);
    assert_eq!(recovery.next_seq, RECORDS as u64 + 1);
    assert_eq!(recovery.end, RecoveryEnd::Clean);
    let visible = wal.call_visible_records(&mut store, writer, 1, 10).unwrap();
    assert!(visible.is_ok(), "{visible:?}");
    writer.resource_drop(&mut store).unwrap();
    let reader_api = instance.stele_log_wal().reader();
    let reader = reader_api
        .call_open(&mut store, "log.wal")
        .unwrap()
        .unwrap();
    let mut payloads = Vec::new();
    loop {
        let batch = reader_api
            .call_next_batch(&mut store, reader, 64)
            .unwrap()
            .unwrap();
        if batch.is_empty() {
            break;
        }
        payloads.extend(batch.into_iter().map(|r| r.payload));
    }
    assert_eq!(payloads, (0..RECORDS).map(payload).collect::<Vec<_>>());
    assert!(
        !dir.path().parent().unwrap().join("escaped.wal").exists(),
        "nothing was written beside the preopen"
    );

    assert_read_back_by_stele(&dir.path().join("log.wal"), RECORDS);
}

#[test]
fn wasmtime_wasi_alone_runs_segments_and_the_journal() {
    const RECORDS: usize = 300;
    const ABSORBED: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::default();
    let component = Component::new(&engine, STELE_WASI_WASM).unwrap();
    let (mut store, instance) = instantiate(&engine, &component, dir.path());

    // A segmented WAL exercises the rest of the adapter: create-dir, list-dir, set-len (the
    // preallocation), the checkpoint's rename and remove (truncation), and sync-dir.
    let options = WalOptions {
        segment_bytes: Some(8192),
        ..wit_options()
    };
    let wal = instance.stele_log_wal().writer();
    let writer = wal
        .call_create(&mut store, "seg", options)
        .unwrap()
        .unwrap();
    let second = wal.call_open(&mut store, "seg", options).unwrap();
    assert!(
        matches!(
            &second,
            Err(WitWalError::Locked(path)) if path == "seg/LOCK"
        ),
        "{second:?}"
    );
    for i in 0..RECORDS {
        wal.call_commit_durable(&mut store, writer, 1, &payload(i))
            .unwrap()
            .unwrap();
    }
    let segments = wal.call_segments(&mut store, writer).unwrap();
    // About 110 records fit in an 8 KiB segment: three segments, two rotations.
    assert!(segments.len() >= 3, "8 KiB segments rotated: {segments:?}");
    wal.call_checkpoint(&mut store, writer, ABSORBED)
        .unwrap()
        .unwrap();
    let truncation = wal
        .call_truncate_through(&mut store, writer, ABSORBED)
        .unwrap()
        .unwrap();
    assert!(truncation.segments_removed > 0, "{truncation:?}");
    writer.resource_drop(&mut store).unwrap();
    let (writer, recovery) = wal.call_open(&mut store, "seg", options).unwrap().unwrap();
    assert_eq!(recovery.next_seq, RECORDS as u64 + 1);
    writer.resource_drop(&mut store).unwrap();
    // Stele's own reader agrees, from the first kept record on.
    let (read, end) = cli_dump(&dir.path().join("seg"));
    let first_kept = truncation.first_kept_seq;
    let expected: Vec<(u64, String)> = (first_kept..=RECORDS as u64)
        .map(|seq| (seq, String::from_utf8(payload(seq as usize - 1)).unwrap()))
        .collect();
    assert_eq!(read, expected, "the segments the stele CLI reads");
    assert_eq!(end["next_seq"], RECORDS as u64 + 1, "{end}");

    // The journal: its lock is the adapter's in-instance exclusion.
    let journal = instance.stele_log_journal().writer();
    let set = |key: &str, value: &str| {
        stele::journal::encode_frames(&[stele::journal::JournalOp::Set {
            key: key.into(),
            value: value.into(),
        }])
    };
    let first = journal.call_open(&mut store, "j").unwrap().unwrap();
    let second = journal.call_open(&mut store, "j").unwrap();
    assert!(
        matches!(
            second,
            Err(bindings::exports::stele::log::journal::JournalError::Locked(_))
        ),
        "a second writer in the same instance: {second:?}"
    );
    for (key, value) in [("colour", "red"), ("size", "9"), ("colour", "blue")] {
        journal
            .call_append(&mut store, first, &set(key, value))
            .unwrap()
            .unwrap();
    }
    journal
        .call_compact(&mut store, first, &set("colour", "blue"))
        .unwrap()
        .unwrap();
    journal
        .call_append(&mut store, first, &set("shape", "round"))
        .unwrap()
        .unwrap();
    // The ops as data, as a guest in another language passes them: the engine frames them.
    use bindings::exports::stele::log::journal::{
        JournalError as WitJournalError, JournalOp, SetOp,
    };
    let put = |key: &str, value: &str| {
        JournalOp::Set(SetOp {
            key: key.into(),
            value: value.into(),
        })
    };
    let ops = [
        put("size", "10"),
        JournalOp::Delete(b"shape".to_vec()),
        put("mood", "calm"),
    ];
    journal
        .call_append_ops(&mut store, first, &ops)
        .unwrap()
        .unwrap();
    let snapshot = [
        put("colour", "blue"),
        put("mood", "calm"),
        put("size", "10"),
    ];
    journal
        .call_compact_ops(&mut store, first, &snapshot)
        .unwrap()
        .unwrap();
    journal
        .call_append_ops(&mut store, first, &[JournalOp::Delete(b"mood".to_vec())])
        .unwrap()
        .unwrap();
    // Past a frame's bound: refused typed, nothing written, the writer goes on.
    let end = journal.call_clean_end(&mut store, first).unwrap();
    let huge = JournalOp::Set(SetOp {
        key: b"huge".to_vec(),
        value: vec![0; stele::frame::BODY_BYTES_MAX],
    });
    let refused = journal
        .call_append_ops(&mut store, first, std::slice::from_ref(&huge))
        .unwrap();
    assert!(
        matches!(refused, Err(WitJournalError::AppendTooLarge(_))),
        "{refused:?}"
    );
    assert_eq!(journal.call_clean_end(&mut store, first).unwrap(), end);
    first.resource_drop(&mut store).unwrap();
    let reopened = journal.call_open(&mut store, "j").unwrap();
    assert!(
        reopened.is_ok(),
        "the lock went with the writer: {reopened:?}"
    );
    reopened.unwrap().resource_drop(&mut store).unwrap();
    drop(store);

    let run = common::stele_run(
        None,
        &[
            "journal",
            "dump",
            "--json",
            dir.path().join("j").to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let state = common::json_lines(&run.stdout)
        .into_iter()
        .find(|row| row.get("state").is_some())
        .unwrap_or_else(|| panic!("no state line: {}", run.stdout));
    assert_eq!(
        state["state"],
        serde_json::json!({"colour": "blue", "size": "10"}),
        "{}",
        run.stdout
    );
}

/// `node` and `npm` on PATH, or a failure that says which is missing: the test needs both and
/// does not skip itself (a skipped host is an untested one).
fn require_node_and_npm() {
    for cmd in ["node", "npm"] {
        let works = Command::new(cmd)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            works,
            "the Node.js host test needs `{cmd}` on PATH (Node.js 18 or later, with npm)"
        );
    }
}

/// The jco tools, installed by npm into `target/jco` (exact versions) on first use.
const NPM_PACKAGES: [&str; 2] = [
    "@bytecodealliance/jco@1.35.0",
    "@bytecodealliance/preview2-shim@0.26.1",
];

/// `target/` at the workspace root: this crate sits at `host/cli`.
fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("host/cli sits two levels below the workspace root")
        .join("target")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn node_through_jco_appends_and_reads_back() {
    const RECORDS: usize = 200;
    require_node_and_npm();
    let tools = workspace_target().join("jco");
    std::fs::create_dir_all(&tools).unwrap();
    let installed = NPM_PACKAGES.iter().all(|spec| {
        let (name, version) = spec.rsplit_once('@').unwrap();
        std::fs::read_to_string(tools.join("node_modules").join(name).join("package.json"))
            .is_ok_and(|manifest| manifest.contains(&format!("\"version\": \"{version}\"")))
    });
    if !installed {
        run(Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--save-exact",
                "--prefix",
            ])
            .arg(&tools)
            .args(NPM_PACKAGES));
    }
    // One output folder per test process: a rebuilt component is transpiled anew.
    let out = tools.join(format!("stele-wasi.{}", std::process::id()));
    let component = tools.join(format!("stele-wasi.{}.wasm", std::process::id()));
    std::fs::write(&component, STELE_WASI_WASM).unwrap();
    run(Command::new(tools.join("node_modules/.bin/jco"))
        .arg("transpile")
        .arg(&component)
        .args(["--name", "stele-wasi", "--quiet", "-o"])
        .arg(&out));
    // The runner sits beside node_modules, so it and the transpiled module share one
    // preview2-shim, and with it the preopen the runner sets.
    let runner = tools.join("stele_wasi_runner.mjs");
    std::fs::write(&runner, include_str!("node/stele_wasi_runner.mjs")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let output = Command::new("node")
        .arg(&runner)
        .arg(out.join("stele-wasi.js"))
        .arg(dir.path())
        .arg(RECORDS.to_string())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_file(&component);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["recovered_records"], RECORDS as u64, "{report}");
    assert_eq!(report["recovery_end"], "clean", "{report}");
    let read: Vec<String> = report["payloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..RECORDS)
        .map(|i| String::from_utf8(payload(i)).unwrap())
        .collect();
    assert_eq!(read, expected, "what Node read back");
    assert_read_back_by_stele(&dir.path().join("log.wal"), RECORDS);
}
