//! Components written in other languages keep their log in Stele through the WIT alone: the
//! Python guest (componentize-py) and the JavaScript guest (componentize-js) in
//! `host/examples/guests/`, each built from `stele:log/wal` and composed as `wac plug` does.
//! Each runs twice:
//! - **under `stele-host`**: composed with `stele.wasm`, linked by [`Runtime::vfs_linker`] and
//!   run in a [`Runtime::vfs_store`] under [`SandboxLimits`], its `vfs` served from a confined
//!   [`RealFs`];
//! - **under wasmtime-wasi alone**: composed with `stele-wasi.wasm` instead, one directory
//!   preopened, no Stele host code at all.
//!
//! Each run commits 1,000 records from the guest, one call per record (full sync: each is
//! durable before the next), meets the two refusals a guest can cause (a payload over the WAL's
//! bound, a path that leaves the root) as its own language's typed error, reopens the log in
//! the guest and goes on, and reads its log back in the guest; then it keeps a key/value state
//! in a journal, as ops (`append-ops`: the engine frames them). Then this test reads the log
//! natively, record by record, `stele verify` checks it, and `stele journal dump` reads the
//! journal's state. Under `stele-host`, a guest then runs past a tighter memory bound: its call
//! traps, typed (`SandboxError::MemoryLimit`), and a new instance finds the log whole.
//!
//! The tools install, pinned, into `target/guests/` on the first run and the built components
//! are cached there (`host/examples/guests/build_guests.rs`); nothing is skipped: a machine
//! without `python3`, `node` or `npm` fails this test.

mod common;

#[path = "../../examples/guests/build_guests.rs"]
mod build_guests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use build_guests::{Built, Language};
use stele::wal::record::PAYLOAD_BYTES_MAX;
use stele_host::fs::RealFs;
use stele_host::runtime::Runtime;
use stele_host::{Mode, SandboxError, SandboxLimits, read_wal};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{AsContextMut, Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

mod bindings {
    wasmtime::component::bindgen!({
        world: "stele-example:guest/events-guest",
        path: ["../../wit", "../examples/guests/wit"],
    });
}

use bindings::EventsGuest;
use bindings::stele::log::wal::DurabilityPolicy;

/// Records every run commits from the guest.
const RECORDS: usize = 1_000;

/// Records per `record-events` call: each call is one guest call that commits this many, one
/// `commit-durable` each.
const RECORDS_PER_CALL: usize = 100;

/// A memory bound each guest runs under (its interpreter's heap included) but that a payload
/// past the WAL's bound does not fit: the string crosses into the guest, which copies it.
const MEMORY_TIGHT_BYTES: usize = 128 << 20;

/// The log's name, inside the directory the host gives the guest.
const LOG: &str = "events.wal";

/// The journal's name, beside it.
const JOURNAL: &str = "state.journal";

/// What the guest remembers in its journal, in order (`None`: delete), and what is left.
const REMEMBERED: [(&str, Option<&str>); 5] = [
    ("colour", Some("blue")),
    ("size", Some("10")),
    ("colour", Some("green")),
    ("size", None),
    ("shape", Some("round")),
];
const RECALLED: [(&str, &str); 2] = [("colour", "green"), ("shape", "round")];

/// The records each guest writes: payloads of several sizes, so a record spans more than one
/// length class.
fn event(i: usize) -> String {
    format!("event {i} {}", "x".repeat(i % 97))
}

/// The guest built and composed, once per test process per language.
fn built(language: Language) -> &'static Built {
    static BUILT: [OnceLock<Built>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = &BUILT[Language::ALL.iter().position(|l| *l == language).unwrap()];
    slot.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("host/cli sits two levels below the workspace root")
            .to_path_buf();
        build_guests::build(
            &workspace,
            language,
            stele_components::STELE_WASM,
            stele_components::STELE_WASI_WASM,
        )
        .unwrap_or_else(|e| panic!("building the {} guest: {e}", language.name()))
    })
}

/// What the guest said of the two refusals, for the assertions and the log.
struct Refusals {
    oversized: String,
    escaping: String,
}

/// Drives one guest instance through the run the module doc describes; returns the guest's
/// own text for each refusal.
fn exercise<S: AsContextMut>(mut store: S, guest: &EventsGuest) -> Refusals {
    let trap = |e: wasmtime::Error| -> String { format!("{e:?}") };
    let open = |store: &mut S, path: &str| {
        guest
            .call_open_log(store.as_context_mut(), path, DurabilityPolicy::FullSync)
            .unwrap_or_else(|e| panic!("open-log trapped: {}", trap(e)))
    };
    let record = |store: &mut S, range: std::ops::Range<usize>| {
        let events: Vec<String> = range.clone().map(event).collect();
        let last = guest
            .call_record_events(store.as_context_mut(), &events)
            .unwrap_or_else(|e| panic!("record-events trapped: {}", trap(e)))
            .unwrap_or_else(|e| panic!("record-events {range:?}: {e}"));
        assert_eq!(last, range.end as u64, "the seq of event {}", range.end - 1);
    };

    assert_eq!(open(&mut store, LOG), Ok(1), "a new log starts at seq 1");
    for start in (0..RECORDS / 2).step_by(RECORDS_PER_CALL) {
        record(&mut store, start..start + RECORDS_PER_CALL);
    }

    // One payload past the WAL's bound: refused, typed, before anything is written.
    let oversized = guest
        .call_record_events(store.as_context_mut(), &["z".repeat(PAYLOAD_BYTES_MAX + 1)])
        .unwrap_or_else(|e| panic!("an oversized payload trapped the guest: {}", trap(e)))
        .expect_err("a payload past PAYLOAD_BYTES_MAX is refused");
    assert!(
        oversized.contains(&(PAYLOAD_BYTES_MAX + 1).to_string())
            && oversized.contains(&PAYLOAD_BYTES_MAX.to_string()),
        "the refusal carries the sizes: {oversized}"
    );

    // A path that leaves the root: refused, typed; the guest's writer is gone (open-log drops
    // it first), so the guest reopens its log, which recovery finds whole.
    let escaping = open(&mut store, "../escape.wal").expect_err("an escaping path is refused");
    assert_eq!(
        open(&mut store, LOG),
        Ok(RECORDS as u64 / 2 + 1),
        "the reopened log recovers every event committed before"
    );
    for start in (RECORDS / 2..RECORDS).step_by(RECORDS_PER_CALL) {
        record(&mut store, start..start + RECORDS_PER_CALL);
    }

    let read = |store: &mut S, first_seq: u64| {
        guest
            .call_read_events(store.as_context_mut(), first_seq)
            .unwrap_or_else(|e| panic!("read-events trapped: {}", trap(e)))
            .unwrap_or_else(|e| panic!("read-events from {first_seq}: {e}"))
    };
    let expected: Vec<String> = (0..RECORDS).map(event).collect();
    assert_eq!(read(&mut store, 1), expected, "what the guest reads back");
    assert_eq!(
        read(&mut store, 901),
        expected[900..],
        "what the guest reads from seq 901"
    );
    guest
        .call_close_log(store.as_context_mut())
        .unwrap_or_else(|e| panic!("close-log trapped: {}", trap(e)));

    // The journal, ops as data: no frame or checksum code in the guest.
    for (key, value) in REMEMBERED {
        guest
            .call_remember(store.as_context_mut(), JOURNAL, key, value)
            .unwrap_or_else(|e| panic!("remember trapped: {}", trap(e)))
            .unwrap_or_else(|e| panic!("remember {key}: {e}"));
    }
    let recalled = guest
        .call_recall(store.as_context_mut(), JOURNAL)
        .unwrap_or_else(|e| panic!("recall trapped: {}", trap(e)))
        .unwrap_or_else(|e| panic!("recall: {e}"));
    let expected: Vec<(String, String)> = RECALLED
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(recalled, expected, "what the guest recalls");
    Refusals {
        oversized,
        escaping,
    }
}

/// Reads `root/events.wal` natively, record by record, and has `stele verify` check it; and
/// nothing was written beside `root`.
fn assert_log_on_disk(root: &Path) {
    let fs = Arc::new(RealFs::open_root(root).unwrap());
    let (records, recovery) = read_wal(fs, LOG, Mode::Native).unwrap();
    assert_eq!(records.len(), RECORDS, "records read natively");
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.seq.0, i as u64 + 1, "record {i}'s seq");
        assert_eq!(record.op, 1, "record {i}'s op");
        assert_eq!(
            String::from_utf8_lossy(&record.payload),
            event(i),
            "record {i}'s payload"
        );
    }
    assert_eq!(recovery.next_seq.0, RECORDS as u64 + 1);
    let path = root.join(LOG);
    let run = common::stele_run(None, &["verify", path.to_str().unwrap()]);
    assert_eq!(
        run.code,
        Some(0),
        "stele verify: {}{}",
        run.stdout,
        run.stderr
    );
    assert!(
        !root.parent().unwrap().join("escape.wal").exists(),
        "nothing was written outside the guest's root"
    );

    let journal = root.join(JOURNAL);
    let run = common::stele_run(
        None,
        &["journal", "dump", "--json", journal.to_str().unwrap()],
    );
    assert_eq!(run.code, Some(0), "stele journal dump: {}", run.stderr);
    let state = common::json_lines(&run.stdout)
        .into_iter()
        .find(|row| row.get("state").is_some())
        .unwrap_or_else(|| panic!("no state line: {}", run.stdout));
    let expected: serde_json::Map<String, serde_json::Value> = RECALLED
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    assert_eq!(
        state["state"],
        serde_json::Value::Object(expected),
        "{}",
        run.stdout
    );
}

/// The refusals as each language shows them: the typed `wal-error`, in the guest's own words.
fn assert_typed(language: Language, refusals: &Refusals) {
    let (oversized, escaping) = match language {
        // componentize-py raises `componentize_py_types.Err` whose `value` is the variant's
        // class; the guest puts its repr in the message.
        Language::Python => ("WalError_PayloadTooLarge(", "VfsError_InvalidPath("),
        // componentize-js throws an error whose `payload` is the variant, `{ tag, val }`.
        Language::JavaScript => ("\"tag\":\"payload-too-large\"", "\"tag\":\"invalid-path\""),
    };
    assert!(
        refusals.oversized.contains(oversized),
        "{}: {}",
        language.name(),
        refusals.oversized
    );
    assert!(
        refusals.escaping.contains(escaping),
        "{}: {}",
        language.name(),
        refusals.escaping
    );
    // What the note quotes: each language's text for the two refusals.
    println!(
        "{} guest, payload over the bound: {}\n{} guest, escaping path: {}",
        language.name(),
        refusals.oversized,
        language.name(),
        refusals.escaping
    );
}

/// A directory for the guest (`root`) inside one the test owns, so that an escape would land
/// beside `root` where the test looks for it.
fn roots() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    (dir, root)
}

/// The guests' runs take turns. Under `stele-host` a guest's log and journal are locked with
/// flock(2) on an open file; a process another test spawns at the moment a guest drops a lock
/// and takes it again (`stele verify`, a tool of the build) holds a copy of that file between
/// its fork and its exec, and the second take is refused `locked`. Seen twice in full runs of
/// this file, never when the runs took turns.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_run_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn under_stele_host(language: Language) {
    let runtime = Runtime::get().unwrap();
    let _turn = one_run_at_a_time();
    let component = Component::from_file(runtime.engine(), &built(language).with_engine)
        .unwrap_or_else(|e| panic!("compile the {} guest: {e:?}", language.name()));
    let imports: Vec<String> = component
        .component_type()
        .imports(runtime.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    assert!(
        imports.iter().any(|name| name.starts_with("stele:log/vfs"))
            && !imports.iter().any(|name| name.starts_with("stele:log/wal")),
        "the composed guest imports vfs; its wal is served inside it: {imports:?}"
    );
    let linker = runtime.vfs_linker().unwrap();
    let (_dir, root) = roots();
    let fs = Arc::new(RealFs::open_root(&root).unwrap());
    // The oversized payload crosses the guest's memory and the engine's once each; a bound on
    // each memory that holds it (the interpreter keeps the string and its UTF-8 bytes).
    let limits = SandboxLimits::default()
        .with_memory_bytes_max(512 << 20)
        .with_open_files_max(8)
        .with_busy_deadline(Some(Duration::from_secs(60)));
    let mut store = runtime.vfs_store(fs, limits);
    let guest = EventsGuest::instantiate(&mut store, &component, &linker)
        .unwrap_or_else(|e| panic!("instantiate: {:?}", Runtime::trap_error(e)));
    let refusals = exercise(&mut store, &guest);
    assert_typed(language, &refusals);
    drop(store);
    assert_log_on_disk(&root);

    // Past its memory bound the guest traps, typed, and only its instance is lost: a new
    // instance of the same component, in a new store, finds the log whole.
    let fs = Arc::new(RealFs::open_root(&root).unwrap());
    let tight = SandboxLimits::default()
        .with_memory_bytes_max(MEMORY_TIGHT_BYTES)
        .with_open_files_max(8);
    let mut store = runtime.vfs_store(fs.clone(), tight);
    let guest = EventsGuest::instantiate(&mut store, &component, &linker)
        .unwrap_or_else(|e| panic!("instantiate: {:?}", Runtime::trap_error(e)));
    let next = guest
        .call_open_log(&mut store, LOG, DurabilityPolicy::FullSync)
        .unwrap();
    assert_eq!(next, Ok(RECORDS as u64 + 1));
    let trap = guest
        .call_record_events(&mut store, &["z".repeat(PAYLOAD_BYTES_MAX + 1)])
        .expect_err("a payload that does not fit the guest's memory bound traps");
    match Runtime::trap_error(trap) {
        SandboxError::MemoryLimit {
            limit_bytes,
            requested_bytes,
        } => assert!(
            limit_bytes == MEMORY_TIGHT_BYTES && requested_bytes > limit_bytes,
            "{limit_bytes} {requested_bytes}"
        ),
        other => panic!("a trap past the memory bound is typed: {other:?}"),
    }
    assert!(
        guest.call_close_log(&mut store).is_err(),
        "the trapped instance refuses later calls"
    );
    drop(store); // its handles, and the log's lock, go with it
    let mut store = runtime.vfs_store(fs, SandboxLimits::default());
    let guest = EventsGuest::instantiate(&mut store, &component, &linker).unwrap();
    let next = guest
        .call_open_log(&mut store, LOG, DurabilityPolicy::FullSync)
        .unwrap();
    assert_eq!(
        next,
        Ok(RECORDS as u64 + 1),
        "nothing of the trapped call landed"
    );
    let events = guest.call_read_events(&mut store, 1).unwrap().unwrap();
    assert_eq!(events.len(), RECORDS);
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

fn under_wasmtime_wasi(language: Language) {
    let engine = Engine::default();
    let _turn = one_run_at_a_time();
    let component = Component::from_file(&engine, &built(language).with_wasi)
        .unwrap_or_else(|e| panic!("compile the {} guest: {e:?}", language.name()));
    let imports: Vec<String> = component
        .component_type()
        .imports(&engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    assert!(
        !imports.iter().any(|name| name.starts_with("stele:")),
        "composed with stele-wasi.wasm, the guest imports WASI only: {imports:?}"
    );
    let mut linker = Linker::<WasiOnly>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    let (_dir, root) = roots();
    let mut ctx = WasiCtx::builder();
    ctx.preopened_dir(&root, "/", FsPerms::ReadWrite).unwrap();
    let mut store = Store::new(
        &engine,
        WasiOnly {
            ctx: ctx.build(),
            table: ResourceTable::new(),
        },
    );
    let guest = EventsGuest::instantiate(&mut store, &component, &linker)
        .unwrap_or_else(|e| panic!("instantiate with wasmtime-wasi alone: {e:?}"));
    let refusals = exercise(&mut store, &guest);
    assert_typed(language, &refusals);
    assert_log_on_disk(&root);
}

#[test]
fn python_guest_under_stele_host() {
    under_stele_host(Language::Python);
}

#[test]
fn python_guest_under_wasmtime_wasi_alone() {
    under_wasmtime_wasi(Language::Python);
}

#[test]
fn javascript_guest_under_stele_host() {
    under_stele_host(Language::JavaScript);
}

#[test]
fn javascript_guest_under_wasmtime_wasi_alone() {
    under_wasmtime_wasi(Language::JavaScript);
}

/// A second build finds everything cached: the tools, the guest and both compositions.
#[test]
fn a_second_build_rebuilds_nothing() {
    for language in Language::ALL {
        let _turn = one_run_at_a_time();
        let first = built(language);
        let workspace = first.guest.ancestors().nth(4).unwrap();
        let again = build_guests::build(
            workspace,
            language,
            stele_components::STELE_WASM,
            stele_components::STELE_WASI_WASM,
        )
        .unwrap();
        assert_eq!(again.build_seconds, None, "{} rebuilt", language.name());
        assert_eq!(
            std::fs::read(&again.with_engine).unwrap(),
            std::fs::read(&first.with_engine).unwrap()
        );
    }
}
