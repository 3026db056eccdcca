//! Stele on wasmtime's pooling allocator ([`Runtime::pooling_config`]): both builds instantiate
//! from the pool, an instance past the pool's bound is a typed error (not a panic, and nothing
//! written), a dropped instance gives its slot back, and what was committed is on disk. Its own
//! binary: the process's runtime is made here on the pooling engine.

use std::sync::Arc;

use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::fs::RealFs;
use stele_host::runtime::{Runtime, RuntimeOptions, SandboxLimits};
use stele_host::wasmtime::Engine;
use stele_host::{Mode, SandboxError, Wal, WalError, read_wal};
use stele_tests::{TEST_CODE_CACHE_DIR, payload, payload_id};

/// The pool's bound: small, so that the test reaches it.
const INSTANCES_MAX: u32 = 6;

/// Threads calling one pooled sandboxed log at once, and the calls each makes.
const CONCURRENT_CALLERS: u64 = 16;
const CALLS_EACH: u64 = 20;

#[test]
fn the_pool_serves_both_builds_refuses_past_its_bound_and_reuses_a_freed_slot() {
    let limits = SandboxLimits::default().with_memory_bytes_max(64 << 20);
    let engine = Engine::new(&Runtime::pooling_config(&limits, INSTANCES_MAX)).unwrap();
    Runtime::init(
        RuntimeOptions::default()
            .with_engine(engine)
            .with_code_cache_dir(Some(TEST_CODE_CACHE_DIR.into())),
    )
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let options = WalOptions::new(DurabilityPolicy::FullSync).with_retained_bytes_max(0);
    let open = |i: usize| {
        let dir = root.path().join(format!("t{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let vfs = Arc::new(RealFs::open_root(&dir).unwrap());
        let mode = if i.is_multiple_of(2) {
            Mode::Sandboxed
        } else {
            Mode::SandboxedPlain
        };
        Wal::create_with_limits(vfs, "log", options, mode, limits)
    };
    let mut logs: Vec<Wal> = (0..INSTANCES_MAX as usize)
        .map(|i| {
            let wal = open(i).unwrap();
            wal.commit_durable(1, &payload(i as u64, 0, 64)).unwrap();
            wal
        })
        .collect();

    // Sixteen threads at once on one sandboxed log of the full pool: concurrent calls in one
    // instance take no slot of their own.
    let busy = logs[0].clone();
    let threads: Vec<_> = (0..CONCURRENT_CALLERS)
        .map(|t| {
            let busy = busy.clone();
            std::thread::spawn(move || {
                for i in 0..CALLS_EACH {
                    // Durable commits share a guest call; non-durable ones are guest tasks of
                    // their own, in flight beside them.
                    if t % 2 == 0 {
                        busy.commit_durable(1, &payload(100 + t, i, 64)).unwrap();
                    } else {
                        busy.commit(1, &payload(100 + t, i, 64)).unwrap();
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    busy.flush().unwrap();
    drop(busy);

    let past = INSTANCES_MAX as usize;
    match open(past) {
        Err(WalError::Sandbox(SandboxError::Instantiate(why))) => {
            assert!(why.contains("maximum"), "{why}")
        }
        Err(other) => panic!("past the pool's bound: {other:?}"),
        Ok(_) => panic!("a log opened past the pool's bound of {INSTANCES_MAX} instances"),
    }
    assert!(
        !root.path().join(format!("t{past}/log")).exists(),
        "the refused log wrote its file"
    );

    // A dropped log gives its slot back.
    drop(logs.remove(0));
    let wal = open(past).unwrap();
    wal.commit_durable(1, &payload(past as u64, 0, 64)).unwrap();
    logs.push(wal);
    drop(logs);

    for i in 0..=past {
        let vfs = Arc::new(RealFs::open_root(root.path().join(format!("t{i}"))).unwrap());
        let (records, _) = read_wal(vfs, "log", Mode::Native).unwrap();
        let mut got: Vec<(u64, u64)> = records.iter().map(|r| payload_id(&r.payload)).collect();
        got.sort();
        let mut expected = vec![(i as u64, 0)];
        if i == 0 {
            for t in 0..CONCURRENT_CALLERS {
                expected.extend((0..CALLS_EACH).map(|c| (100 + t, c)));
            }
        }
        expected.sort();
        assert_eq!(got, expected, "log {i}");
    }
}
