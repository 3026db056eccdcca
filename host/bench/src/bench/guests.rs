//! `stele bench --workloads guests`: components written in other languages keeping their log in
//! Stele, beside the Rust example plugin. Not in the default workloads: it needs `python3`,
//! `node` and `npm`, and builds the guests on its first run (`host/examples/guests/`; the tools
//! and the components are cached under `target/guests/`).
//!
//! For each composed component (the guest with `stele.wasm` plugged in, run by `stele-host`'s
//! `vfs_linker`): its size; the time to compile it (Cranelift, the runtime's configuration,
//! nothing cached); its cached start (the compiled code loaded from the code cache, then
//! instantiated, then its first call: a new log created and closed); and commits per second in
//! the guest's own loop, one `stele:log/wal` call per 128 B record, durable (commit-durable
//! under the barrier policy, fdatasync on Linux) and not (commit under skip, one flush), each on
//! a fresh instance, instantiation included, medians of alternated rounds.

// The guests' build, shared with host/cli/tests/foreign_guests.rs; the bench reads only the
// compositions it measures.
#[allow(dead_code)]
#[path = "../../../examples/guests/build_guests.rs"]
mod build_guests;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use build_guests::Language;
use stele_host::SandboxLimits;
use stele_host::code_cache;
use stele_host::fs::RealFs;
use stele_host::runtime::{GuestState, Runtime};
use wasmtime::Store;
use wasmtime::component::{Component, InstancePre};

use super::common::{BenchArgs, EXAMPLE_PLUGIN_WASM, percentile, println, process_cpu_seconds};
use super::sandbox::{Rate, rate};

mod bindings {
    wasmtime::component::bindgen!({
        world: "stele-example:guest/events-guest",
        path: ["../../wit", "../examples/guests/wit"],
    });
}

use bindings::stele::log::wal::DurabilityPolicy;

/// Rounds of the commit rows, components alternated within each; the table gives medians.
const ROUNDS: usize = 3;

/// Cached starts timed per component; the table gives their median.
const CACHED_STARTS: usize = 5;

/// The payload of every record, as the Rust plugin's `commit-each` commits it.
const PAYLOAD_BYTES: usize = 128;

/// One component of the table.
struct Subject {
    name: &'static str,
    bytes: Vec<u8>,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The Rust example plugin: `commit-each` loops in the guest.
    RustPlugin,
    /// A guest of world `events-guest`: `record-events` loops in the guest over the list.
    EventsGuest,
}

pub(crate) fn guests_table(dir: &Path, args: &BenchArgs) -> Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .ok_or_else(|| anyhow!("host/bench sits two levels below the workspace root"))?
        .to_path_buf();
    let mut subjects = vec![Subject {
        name: "Rust (example plugin)",
        bytes: EXAMPLE_PLUGIN_WASM.to_vec(),
        kind: Kind::RustPlugin,
    }];
    for language in Language::ALL {
        let built = build_guests::build(
            &workspace,
            language,
            stele_components::STELE_WASM,
            stele_components::STELE_WASI_WASM,
        )
        .map_err(|e| anyhow!("building the {} guest: {e}", language.name()))?;
        subjects.push(Subject {
            name: match language {
                Language::Python => "Python (componentize-py)",
                Language::JavaScript => "JavaScript (componentize-js)",
            },
            bytes: std::fs::read(&built.with_engine)?,
            kind: Kind::EventsGuest,
        });
    }

    let runtime = Runtime::get()?;
    let engine = runtime.engine();
    let wasmtime_err = |e: wasmtime::Error| anyhow!("{e:#}");
    let mut linker = runtime.vfs_linker()?;
    // The Rust plugin's platform import; `commit-each` does not call it.
    linker
        .root()
        .func_wrap("note", |_, (_message,): (String,)| Ok(()))
        .map_err(wasmtime_err)?;
    let fs = Arc::new(RealFs::open_root(dir)?);
    let cache = tempfile::tempdir_in(dir)?;

    // Size, compile, cached start.
    let mut pres = Vec::new();
    let mut starts = Vec::new();
    for subject in &subjects {
        let started = Instant::now();
        let component = Component::new(engine, &subject.bytes).map_err(wasmtime_err)?;
        let compile_s = started.elapsed().as_secs_f64();
        let pre = linker.instantiate_pre(&component).map_err(wasmtime_err)?;
        // Fill the cache (untimed), then time loads from it.
        code_cache::load_or_compile(engine, subject.name, &subject.bytes, Some(cache.path()))
            .map_err(wasmtime_err)?;
        let mut samples = Vec::with_capacity(CACHED_STARTS);
        for k in 0..CACHED_STARTS {
            let log = format!("bench-guest-start-{k}.wal");
            let _ = std::fs::remove_file(dir.join(&log));
            let started = Instant::now();
            let (component, outcome) = code_cache::load_or_compile(
                engine,
                subject.name,
                &subject.bytes,
                Some(cache.path()),
            )
            .map_err(wasmtime_err)?;
            anyhow::ensure!(outcome == code_cache::CacheOutcome::Hit, "{outcome:?}");
            let pre = linker.instantiate_pre(&component).map_err(wasmtime_err)?;
            commit_loop(runtime, &pre, &fs, subject.kind, &log, &[], true)?;
            samples.push(started.elapsed().as_secs_f64() * 1e3);
            let _ = std::fs::remove_file(dir.join(&log));
        }
        starts.push((compile_s, percentile(&samples, 0.5)));
        pres.push(pre);
    }

    // Commits, alternated.
    let durable_records = args.records.min(2000);
    let non_durable_records = args.records * 5;
    let payload = "Z".repeat(PAYLOAD_BYTES);
    // [subject][durable, non-durable]
    let mut rounds: Vec<[Vec<Rate>; 2]> = subjects.iter().map(|_| Default::default()).collect();
    for _ in 0..ROUNDS {
        for (k, subject) in subjects.iter().enumerate() {
            for (d, (records, durable)) in [(durable_records, true), (non_durable_records, false)]
                .into_iter()
                .enumerate()
            {
                let log = "bench-guest.wal";
                let _ = std::fs::remove_file(dir.join(log));
                let events = vec![payload.clone(); records];
                let cpu_started = process_cpu_seconds();
                let started = Instant::now();
                commit_loop(runtime, &pres[k], &fs, subject.kind, log, &events, durable)?;
                rounds[k][d].push(rate(records, started, cpu_started));
            }
        }
    }
    let _ = std::fs::remove_file(dir.join("bench-guest.wal"));

    println!(
        "\nGuests in other languages: each component composed with stele.wasm (wac plug) and run \
         by stele-host's vfs_linker. Compile: Cranelift, nothing cached. Cached start: the \
         compiled code loaded from the code cache, instantiated, and a first call that creates \
         a new log (barrier policy: a header, a file sync and a directory sync) and closes it; \
         median of {CACHED_STARTS}. Commits: {PAYLOAD_BYTES} B records in the guest's own loop, one \
         `stele:log/wal` call each (the Rust plugin's commit-each; the others' record-events \
         over a list the host passes in), durable: {durable_records} commit-durable under the \
         barrier policy (fdatasync); non-durable: {non_durable_records} commit under skip, then \
         one flush; each on a fresh instance, instantiation included. Medians of {ROUNDS} \
         alternated rounds.\n"
    );
    println!(
        "| guest | size MB | compile s | cached start ms | durable rec/s | non-durable rec/s | \
         CPU µs/rec non-durable | × Rust durable | × Rust non-durable |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let median = |rates: &[Rate], pick: fn(&Rate) -> f64| {
        let values: Vec<f64> = rates.iter().map(pick).collect();
        percentile(&values, 0.5)
    };
    let per_s = |k: usize, d: usize| median(&rounds[k][d], |r| r.records_per_s);
    for (k, subject) in subjects.iter().enumerate() {
        let (compile_s, start_ms) = starts[k];
        println!(
            "| {} | {:.1} | {compile_s:.1} | {start_ms:.1} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
            subject.name,
            subject.bytes.len() as f64 / 1e6,
            per_s(k, 0),
            per_s(k, 1),
            median(&rounds[k][1], |r| r.cpu_us_per_record),
            per_s(k, 0) / per_s(0, 0),
            per_s(k, 1) / per_s(0, 1),
        );
    }
    Ok(())
}

/// One fresh instance commits `events` to a new log `log` and closes it: the Rust plugin through
/// `commit-each` (its own payloads, as many as `events`), a guest through `open-log`,
/// `record-events` and `close-log`.
fn commit_loop(
    runtime: &Runtime,
    pre: &InstancePre<GuestState>,
    fs: &Arc<RealFs>,
    kind: Kind,
    log: &str,
    events: &[String],
    durable: bool,
) -> Result<()> {
    let wasmtime_err = |e: wasmtime::Error| anyhow!("{:?}", Runtime::trap_error(e));
    let mut store: Store<GuestState> = runtime.vfs_store(
        fs.clone(),
        SandboxLimits::default().with_memory_bytes_max(512 << 20),
    );
    match kind {
        Kind::RustPlugin => {
            let instance = pre.instantiate(&mut store).map_err(wasmtime_err)?;
            let commit_each = instance
                .get_typed_func::<(&str, u32, u32, bool), (Result<u64, String>,)>(
                    &mut store,
                    "commit-each",
                )
                .map_err(wasmtime_err)?;
            let (last,) = commit_each
                .call(
                    &mut store,
                    (log, events.len() as u32, PAYLOAD_BYTES as u32, durable),
                )
                .map_err(wasmtime_err)?;
            let last = last.map_err(|e| anyhow!("commit-each: {e}"))?;
            anyhow::ensure!(last == events.len() as u64, "last seq {last}");
        }
        Kind::EventsGuest => {
            let guest = bindings::EventsGuestPre::new(pre.clone())
                .map_err(wasmtime_err)?
                .instantiate(&mut store)
                .map_err(wasmtime_err)?;
            let policy = if durable {
                DurabilityPolicy::Barrier
            } else {
                DurabilityPolicy::Skip
            };
            guest
                .call_open_log(&mut store, log, policy)
                .map_err(wasmtime_err)?
                .map_err(|e| anyhow!("open-log: {e}"))?;
            if !events.is_empty() {
                let last = guest
                    .call_record_events(&mut store, events)
                    .map_err(wasmtime_err)?
                    .map_err(|e| anyhow!("record-events: {e}"))?;
                anyhow::ensure!(last == events.len() as u64, "last seq {last}");
            }
            guest.call_close_log(&mut store).map_err(wasmtime_err)?;
        }
    }
    Ok(())
}
