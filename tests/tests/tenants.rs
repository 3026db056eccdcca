//! Many logs in one process (issue 45): sandboxed logs share the process's worker threads, so
//! the threads do not grow with the logs, and nothing acknowledged is lost while few threads
//! serve many logs; the `Tenants` registry keeps 10,000 logs working under a lowered limit on
//! open files through its budget, hibernates and resumes logs without losing a record, and
//! holds its root against a second registry in this process or another. This binary makes its
//! runtime with a small worker bound, which every test here shares.

use std::sync::Arc;

use stele::journal::{JournalOp, encode_frames, replay};
use stele::vfs::Vfs;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};
use stele_host::fs::{RealFs, SubdirVfs};
use stele_host::runtime::{Runtime, RuntimeOptions};
use stele_host::tenants::{TENANT_JOURNAL_PATH, TENANT_LOG_PATH, TENANT_PUSH_LOG_PATH};
use stele_host::{
    Mode, TenantJournal, TenantPushLog, TenantState, TenantWal, Tenants, TenantsError,
    TenantsOptions, Wal, read_wal,
};
use stele_tests::{TEST_CODE_CACHE_DIR, payload, payload_id};

/// The worker bound this binary runs with: smaller than the logs by far, and than the threads
/// committing, so that a turn waiting on another would deadlock here.
const WORKERS_MAX: usize = 2;

fn runtime() -> &'static Runtime {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let options = RuntimeOptions::default()
            .with_code_cache_dir(Some(TEST_CODE_CACHE_DIR.into()))
            .with_worker_threads_max(Some(WORKERS_MAX));
        Runtime::init(options).expect("the first runtime of this process");
    });
    Runtime::get().unwrap()
}

/// The address space of this process, from `/proc/self/status`, in bytes.
fn address_space_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The most address space one sandboxed log may take (issue 45's target): wasmtime's default
/// reservation alone is 4 GiB.
const ADDRESS_SPACE_PER_LOG_MAX: u64 = 256 << 20;

/// Held by each test of this binary for its whole run: they measure the process (threads,
/// address space, descriptors), so they run one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Threads of this process whose name starts with `stele-` (the shared workers, the epoch
/// ticker; before issue 45, a `stele-sandbox` and a `stele-io` thread per log).
fn stele_threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with("stele-"))
        .count()
}

/// The threads of this process, from `/proc/self/task`.
fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// 400 sandboxed logs (async build), each in a confined root of its own, each with a durable
/// commit; then 8 threads commit durably round-robin across all of them, with tasks' non-durable
/// commits in between, and every log is reopened and read back. The process gains at most
/// [`WORKERS_MAX`] threads (plus the 8 it starts itself) whatever the number of logs, and every
/// acknowledged record is on disk. Each log takes at most [`ADDRESS_SPACE_PER_LOG_MAX`] of
/// address space.
#[test]
fn four_hundred_sandboxed_logs_share_two_worker_threads_and_keep_every_commit() {
    const LOGS: usize = 400;
    const COMMITTERS: u64 = 8;
    const ROUNDS: u64 = 3;
    let _alone = one_at_a_time();
    let runtime = runtime();
    let root = tempfile::tempdir().unwrap();
    let options = WalOptions::new(DurabilityPolicy::FullSync)
        .with_retained_bytes_max(0)
        .with_segment_bytes(Some(1 << 20));
    // The components compiled (or loaded) first: compiling starts wasmtime's own threads, which
    // are the process's, not the logs'.
    {
        let warm = tempfile::tempdir().unwrap();
        let vfs = Arc::new(RealFs::open_root(warm.path()).unwrap());
        Wal::create(vfs, "log", options, Mode::Sandboxed).unwrap();
    }
    let threads_before = threads_now();
    let address_space_before = address_space_now();
    let logs: Vec<Wal> = (0..LOGS)
        .map(|i| {
            let dir = root.path().join(format!("t{i}"));
            std::fs::create_dir(&dir).unwrap();
            let vfs = Arc::new(RealFs::open_root(&dir).unwrap());
            let wal = Wal::create(vfs, "log", options, Mode::Sandboxed).unwrap();
            wal.commit_durable(1, &payload(i as u64, 0, 64)).unwrap();
            wal
        })
        .collect();
    let threads_open = threads_now();
    let address_space_per_log = (address_space_now() - address_space_before) / LOGS as u64;
    assert!(
        address_space_per_log <= ADDRESS_SPACE_PER_LOG_MAX,
        "{} MiB of address space per open log",
        address_space_per_log >> 20
    );
    let (running, max) = runtime.worker_threads();
    assert_eq!(max, WORKERS_MAX);
    assert!(running <= WORKERS_MAX, "{running} workers");
    assert!(
        stele_threads_now() <= WORKERS_MAX,
        "{} of Stele's threads",
        stele_threads_now()
    );
    // The test harness may start a thread for the next test meanwhile: a little slack, far
    // below a thread per log.
    assert!(
        threads_open <= threads_before + WORKERS_MAX + 2,
        "{LOGS} open logs took the process from {threads_before} to {threads_open} threads"
    );

    // Round-robin from threads, with a task's non-durable commits (whose groups are synced by
    // the dispatcher turns, as no caller waits on them) on every fourth log.
    let logs = Arc::new(logs);
    let tokio = stele_tests::tokio_runtime(2);
    let committers: Vec<_> = (0..COMMITTERS)
        .map(|c| {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    for (i, wal) in logs.iter().enumerate() {
                        if i as u64 % COMMITTERS == c {
                            wal.commit_durable(1, &payload(i as u64, 1 + round, 64))
                                .unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    let non_durable = tokio.block_on({
        let logs = logs.clone();
        async move {
            let mut seqs = 0;
            for (i, wal) in logs.iter().enumerate().filter(|(i, _)| i % 4 == 0) {
                wal.to_async()
                    .commit(2, &payload(i as u64, 100, 64))
                    .await
                    .unwrap();
                seqs += 1;
            }
            seqs
        }
    });
    for committer in committers {
        committer.join().unwrap();
    }
    assert!(
        stele_threads_now() <= WORKERS_MAX,
        "the committers' load grew Stele's threads past the bound"
    );
    // The non-durable commits become durable with a flush (or with the close).
    for wal in logs.iter() {
        wal.flush().unwrap();
    }
    drop(tokio);
    let logs = Arc::into_inner(logs).expect("every committer has finished");
    drop(logs);
    assert_eq!(non_durable, LOGS.div_ceil(4));

    for i in 0..LOGS {
        let dir = root.path().join(format!("t{i}"));
        let vfs = Arc::new(RealFs::open_root(&dir).unwrap());
        let (records, _) = read_wal(vfs, "log", Mode::Native).unwrap();
        let mut got: Vec<(u64, u64)> = records.iter().map(|r| payload_id(&r.payload)).collect();
        got.sort();
        let mut expected: Vec<(u64, u64)> = (0..=ROUNDS).map(|r| (i as u64, r)).collect();
        if i % 4 == 0 {
            expected.push((i as u64, 100));
        }
        assert_eq!(got, expected, "log {i}");
    }
}

/// Every record of `tenant`'s log under `root`, read natively, as (writer, index) ids.
fn tenant_records(root: &std::path::Path, tenant: &str) -> Vec<(u64, u64)> {
    let root: Arc<dyn Vfs> = Arc::new(RealFs::open_root(root).unwrap());
    let vfs = Arc::new(SubdirVfs::new(root, tenant).unwrap());
    let (records, _) = read_wal(vfs, TENANT_LOG_PATH, Mode::Native).unwrap();
    records.iter().map(|r| payload_id(&r.payload)).collect()
}

fn small_segments() -> WalOptions {
    WalOptions::segmented(DurabilityPolicy::FullSync, 64 << 10).with_retained_bytes_max(0)
}

/// Lowers this process's soft limit on open files to `limit` (the hard limit stays as it is),
/// so that only the registry's budget keeps the logs below it.
fn lower_open_files_limit(limit: u64) {
    // SAFETY: getrlimit and setrlimit read and write the one struct they are given.
    unsafe {
        let mut rlimit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlimit), 0);
        rlimit.rlim_cur = limit.min(rlimit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit), 0);
    }
}

/// 10,000 sandboxed logs, each with a durable commit, through a registry whose budget is 500
/// open logs, with this process's limit on open files lowered to 4,096 (a descriptor per
/// open log: 10,000 open at once would need 10,000). The budget hibernates the least recently
/// used; the first 100, resumed after all the others, continue at seq 1; every record is on
/// disk.
#[test]
fn ten_thousand_tenants_fit_under_a_lowered_open_files_limit_through_the_budget() {
    const TENANTS: usize = 10_000;
    const BUDGET: usize = 500;
    const RESUMED: usize = 100;
    let _alone = one_at_a_time();
    lower_open_files_limit(4096);
    runtime();
    let root = tempfile::tempdir().unwrap();
    let options = TenantsOptions::default()
        .with_mode(Mode::Sandboxed)
        .with_wal(small_segments())
        .with_open_logs_max(BUDGET);
    let tenants = Tenants::open(root.path(), options).unwrap();
    for i in 0..TENANTS {
        let log = tenants.wal(&format!("t{i}")).unwrap();
        let seq = log.commit_durable(1, &payload(i as u64, 0, 64)).unwrap();
        assert_eq!(seq, LogSeq(0));
        assert!(
            tenants.open_logs() <= BUDGET,
            "{} open",
            tenants.open_logs()
        );
    }
    assert_eq!(tenants.registered(), TENANTS);
    // The registry's descriptors: the root and its lock, and one per open log (its active
    // segment; its writer lock is in the registry's table).
    let root_path = root.path().canonicalize().unwrap();
    let under_root = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|target| target.starts_with(&root_path))
        .count();
    assert!(
        under_root <= 2 + BUDGET,
        "{under_root} descriptors under the root"
    );
    assert_eq!(
        tenants.stats("t0").unwrap().state,
        TenantState::Hibernated,
        "the least recently used went first"
    );
    for i in 0..RESUMED {
        let log = tenants.wal(&format!("t{i}")).unwrap();
        let seq = log.commit_durable(1, &payload(i as u64, 1, 64)).unwrap();
        assert_eq!(seq, LogSeq(1), "tenant {i} resumed at its tail");
    }
    let t0 = tenants.stats("t0").unwrap();
    assert_eq!((t0.opens, t0.hibernations, t0.calls), (2, 1, 2));
    drop(tenants);
    for i in 0..TENANTS {
        let mut expected = vec![(i as u64, 0)];
        if i < RESUMED {
            expected.push((i as u64, 1));
        }
        assert_eq!(tenant_records(root.path(), &format!("t{i}")), expected);
    }
}

/// Hibernating closes the log's files (its descriptors are gone) after making every
/// acknowledged record durable, a non-durable commit's included; the next call resumes it at
/// its tail; `idle_after` hibernates through `hibernate_idle`.
#[test]
fn a_hibernated_log_holds_no_file_and_resumes_with_every_acknowledged_record() {
    let _alone = one_at_a_time();
    runtime();
    for mode in [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain] {
        let root = tempfile::tempdir().unwrap();
        let options = TenantsOptions::default()
            .with_mode(mode)
            .with_wal(small_segments())
            .with_idle_after(Some(std::time::Duration::from_millis(50)));
        let tenants = Tenants::open(root.path(), options).unwrap();
        let log: TenantWal = tenants.wal("alice").unwrap();
        log.commit_durable(1, &payload(0, 0, 64)).unwrap();
        // Acknowledged, not yet durable: hibernation flushes it.
        log.commit(1, &payload(0, 1, 64)).unwrap();
        let dir = root.path().join("alice").canonicalize().unwrap();
        let descriptors_in = |dir: &std::path::Path| {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .filter(|target| target.starts_with(dir))
                .count()
        };
        assert!(
            descriptors_in(&dir) > 0,
            "{}: the open log's files",
            mode.name()
        );
        assert!(log.hibernate().unwrap());
        assert_eq!(
            tenants.stats("alice").unwrap().state,
            TenantState::Hibernated
        );
        assert_eq!(
            descriptors_in(&dir),
            0,
            "{}: a hibernated log's files",
            mode.name()
        );
        assert_eq!(tenant_records(root.path(), "alice"), vec![(0, 0), (0, 1)]);

        assert_eq!(
            log.commit_durable(1, &payload(0, 2, 64)).unwrap(),
            LogSeq(2)
        );
        assert_eq!(tenants.stats("alice").unwrap().state, TenantState::Open);
        std::thread::sleep(std::time::Duration::from_millis(80));
        assert_eq!(tenants.hibernate_idle().unwrap(), 1, "{}", mode.name());
        assert_eq!(tenants.open_logs(), 0);
        let stats = tenants.stats("alice").unwrap();
        assert_eq!((stats.opens, stats.hibernations), (2, 2));
        assert_eq!(stats.bytes, 3 * 64);
        drop(tenants);
        assert_eq!(
            tenant_records(root.path(), "alice"),
            vec![(0, 0), (0, 1), (0, 2)]
        );
    }
}

#[test]
fn journals_and_push_logs_share_the_budget_hibernate_and_resume_whole() {
    let _alone = one_at_a_time();
    runtime();
    let executor = stele_tests::tokio_runtime(2);
    let schema = indexed_schema();
    let op = |n: u8| JournalOp::Set {
        key: vec![b'k', n % 3],
        value: vec![n; 100 + n as usize],
    };
    for mode in [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain] {
        let root = tempfile::tempdir().unwrap();
        let options = TenantsOptions::default()
            .with_mode(mode)
            .with_wal(small_segments())
            .with_open_logs_max(2);
        let tenants = Tenants::open(root.path(), options).unwrap();
        let names = ["alice", "bob"];
        let wals: Vec<TenantWal> = names.iter().map(|n| tenants.wal(n).unwrap()).collect();
        let journals: Vec<_> = names.iter().map(|n| tenants.journal(n).unwrap()).collect();
        let pushes: Vec<_> = names
            .iter()
            .map(|n| tenants.push_log(n, schema.clone()).unwrap())
            .collect();
        // Six logs through a budget of two: nearly every call resumes one and hibernates one.
        for round in 0..6u8 {
            for t in 0..names.len() {
                wals[t]
                    .commit(1, &payload(t as u64, round as u64, 80))
                    .unwrap();
                let mut frames = encode_frames(&[op(round)]);
                executor.block_on(journals[t].append(&mut frames)).unwrap();
                pushes[t].append(&indexed_batch(u64::from(round))).unwrap();
                assert!(
                    tenants.open_logs() <= 2,
                    "{}: {}",
                    mode.name(),
                    tenants.open_logs()
                );
            }
        }
        for t in 0..names.len() {
            let stats = tenants.stats(names[t]).unwrap();
            assert!(stats.hibernations >= 12, "{}: {stats:?}", mode.name());
            assert_eq!(stats.calls, 18, "{}", mode.name());
            // Read through the handle: what the journal holds, the writer open or not.
            let (ops, _) = executor.block_on(journals[t].replay()).unwrap();
            assert_eq!(ops, (0..6).map(op).collect::<Vec<_>>(), "{}", mode.name());
        }
        let wrong = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "m",
            arrow_schema::DataType::Utf8,
            true,
        )]));
        assert!(matches!(
            tenants.push_log("alice", wrong),
            Err(TenantsError::PushLogSchema { .. })
        ));
        drop((wals, journals, pushes, tenants));

        // On disk, read natively: every facet's every acknowledged write, in order.
        for (t, name) in names.iter().enumerate() {
            assert_eq!(
                tenant_records(root.path(), name),
                (0..6).map(|i| (t as u64, i)).collect::<Vec<_>>()
            );
            let (ops, pushed) = journal_and_pushes_on_disk(root.path(), name);
            assert_eq!(ops, (0..6).map(op).collect::<Vec<_>>(), "{}", mode.name());
            assert_eq!(pushed, (0..6).collect::<Vec<u64>>(), "{}", mode.name());
        }
    }
}

/// The environment variable that makes this test binary the second process of
/// [`a_second_registry_is_refused_while_a_log_is_hibernated`]: the root it tries.
const SECOND_PROCESS_ROOT: &str = "STELE_TEST_TENANTS_SECOND_PROCESS_ROOT";

/// While a registry holds a root (its log hibernated, so the log itself holds nothing), a
/// second registry on that root is refused, in this process and in another; a bad tenant
/// name is refused before anything is made.
#[test]
fn a_second_registry_is_refused_while_a_log_is_hibernated() {
    if let Ok(root) = std::env::var(SECOND_PROCESS_ROOT) {
        // The second process: report what opening the root did.
        match Tenants::open(&root, TenantsOptions::default()) {
            Err(TenantsError::RootLocked(_)) => println!("second process: refused"),
            Err(other) => println!("second process: failed otherwise: {other}"),
            Ok(_) => println!("second process: opened"),
        }
        return;
    }
    let _alone = one_at_a_time();
    runtime();
    let root = tempfile::tempdir().unwrap();
    let options = TenantsOptions::default().with_wal(small_segments());
    let tenants = Tenants::open(root.path(), options).unwrap();
    let log = tenants.wal("bob").unwrap();
    log.commit_durable(1, &payload(1, 0, 64)).unwrap();
    assert!(log.hibernate().unwrap());

    assert!(matches!(
        Tenants::open(root.path(), options),
        Err(TenantsError::RootLocked(_))
    ));
    let second = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_second_registry_is_refused_while_a_log_is_hibernated",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(SECOND_PROCESS_ROOT, root.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{stdout}");
    assert!(stdout.contains("second process: refused"), "{stdout}");

    for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(129)] {
        assert!(
            matches!(tenants.wal(bad), Err(TenantsError::BadName { .. })),
            "{bad:?}"
        );
    }
    assert_eq!(
        log.commit_durable(1, &payload(1, 1, 64)).unwrap(),
        LogSeq(1)
    );
    drop((log, tenants));
    // Released with the registry: a new one opens the root and finds the log.
    let tenants = Tenants::open(root.path(), options).unwrap();
    let log = tenants.wal("bob").unwrap();
    assert_eq!(log.stats().unwrap().visible_end, LogSeq(2));
}

/// The environment variable that makes this test binary the killed process of
/// [`a_registry_killed_amid_resumes_keeps_every_acknowledged_record`]: the root it writes.
const KILLED_PROCESS_ROOT: &str = "STELE_TEST_TENANTS_KILLED_PROCESS_ROOT";

/// Tenants of the killed process, and the budget it runs them under: four open logs for
/// sixteen tenants, so that nearly every call resumes a log and hibernates another.
const KILLED_TENANTS: u64 = 16;
const KILLED_OPEN_LOGS_MAX: usize = 4;

/// A process writes round-robin across 16 sandboxed tenants' WALs, journals and push logs
/// (48 logs) through a registry that keeps four open, so that it is nearly always resuming or
/// hibernating one, and is killed (SIGKILL) mid-run; three times over the same root, each run
/// carrying on the logs the last left. After each kill, each of every tenant's logs is
/// exactly its writes in the order made (no gap, nothing torn) and holds every write the
/// process reported acknowledged; a new registry then opens the root the dead one held.
#[test]
fn a_registry_killed_amid_resumes_keeps_every_acknowledged_record() {
    if let Ok(root) = std::env::var(KILLED_PROCESS_ROOT) {
        run_until_killed(std::path::Path::new(&root));
        return;
    }
    let _alone = one_at_a_time();
    runtime();
    let root = tempfile::tempdir().unwrap();
    let mut acked_total = 0;
    for (run, acks_before_kill) in [120usize, 200, 160].into_iter().enumerate() {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_registry_killed_amid_resumes_keeps_every_acknowledged_record",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(KILLED_PROCESS_ROOT, root.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // (tenant, index) of each durable commit the child reported as returned, and of each
        // journal append and push.
        let mut acked: Vec<(u64, u64)> = Vec::new();
        let (mut appended, mut pushed) = (Vec::new(), Vec::new());
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        for line in std::io::BufRead::lines(stdout) {
            let line = line.unwrap();
            let Some((kind, ack)) = line.split_once(' ') else {
                continue;
            };
            let into = match kind {
                "durable" => &mut acked,
                "appended" => &mut appended,
                "pushed" => &mut pushed,
                _ => continue,
            };
            let (tenant, index) = ack.split_once(' ').unwrap();
            into.push((tenant.parse().unwrap(), index.parse().unwrap()));
            if acked.len() == acks_before_kill {
                break;
            }
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "run {run}: the child ended before it was killed ({} acks)",
            acked.len()
        );
        assert_eq!(acked.len(), acks_before_kill, "run {run}");
        acked_total += acked.len();

        for tenant in 0..KILLED_TENANTS {
            let name = format!("t{tenant}");
            let records = if root.path().join(&name).join(TENANT_LOG_PATH).exists() {
                tenant_records(root.path(), &name)
            } else {
                Vec::new()
            };
            let in_order: Vec<(u64, u64)> =
                (0..records.len() as u64).map(|i| (tenant, i)).collect();
            assert_eq!(records, in_order, "run {run}: {name}'s log");
            for &(_, index) in acked.iter().filter(|(t, _)| *t == tenant) {
                assert!(
                    index < records.len() as u64,
                    "run {run}: {name}'s record {index} was acknowledged durable and is lost \
                     ({} records recovered)",
                    records.len()
                );
            }
            let (ops, pushes) = killed_journal_and_pushes(root.path(), &name);
            assert_eq!(
                ops,
                (0..ops.len() as u64).collect::<Vec<_>>(),
                "run {run}: {name}"
            );
            assert_eq!(
                pushes,
                (0..pushes.len() as u64).collect::<Vec<_>>(),
                "run {run}: {name}"
            );
            for &(_, index) in appended.iter().filter(|(t, _)| *t == tenant) {
                assert!(
                    index < ops.len() as u64,
                    "run {run}: {name}'s journal append {index} was acknowledged and is lost"
                );
            }
            for &(_, index) in pushed.iter().filter(|(t, _)| *t == tenant) {
                assert!(
                    index < pushes.len() as u64,
                    "run {run}: {name}'s push {index} was acknowledged and is lost"
                );
            }
        }
        // One append or push per durable commit or so (each fourth commit is not durable).
        assert!(
            appended.len() + pushed.len() >= acks_before_kill / 2
                && !appended.is_empty()
                && !pushed.is_empty(),
            "run {run}: the child must append and push ({} and {})",
            appended.len(),
            pushed.len()
        );
    }
    // The dead process's root lock went with it.
    let tenants = Tenants::open(root.path(), killed_options()).unwrap();
    let recovered: u64 = (0..KILLED_TENANTS)
        .map(|t| {
            let wal = tenants.wal(&format!("t{t}")).unwrap();
            wal.stats().unwrap().visible_end.0
        })
        .sum();
    assert!(
        recovered >= acked_total as u64,
        "{recovered} < {acked_total}"
    );
}

fn killed_options() -> TenantsOptions {
    TenantsOptions::default()
        .with_mode(Mode::Sandboxed)
        .with_wal(small_segments())
        .with_open_logs_max(KILLED_OPEN_LOGS_MAX)
}

/// The killed process: carries every tenant's log on from where it ends, committing
/// round-robin (each fourth commit not durable) and printing `durable T I` after each durable
/// commit of tenant `T`'s record `I` returns, until it is killed.
fn run_until_killed(root: &std::path::Path) {
    runtime();
    let tenants = Tenants::open(root, killed_options()).unwrap();
    let logs: Vec<TenantWal> = (0..KILLED_TENANTS)
        .map(|t| tenants.wal(&format!("t{t}")).unwrap())
        .collect();
    let mut next: Vec<u64> = logs
        .iter()
        .map(|log| log.stats().unwrap().visible_end.0)
        .collect();
    let executor = stele_tests::tokio_runtime(1);
    let journals: Vec<TenantJournal> = (0..KILLED_TENANTS)
        .map(|t| tenants.journal(&format!("t{t}")).unwrap())
        .collect();
    let pushes: Vec<TenantPushLog> = (0..KILLED_TENANTS)
        .map(|t| {
            tenants
                .push_log(&format!("t{t}"), indexed_schema())
                .unwrap()
        })
        .collect();
    let mut next_op: Vec<u64> = journals
        .iter()
        .map(|journal| executor.block_on(journal.replay()).unwrap().0.len() as u64)
        .collect();
    let mut next_push: Vec<u64> = pushes
        .iter()
        .map(|log| log.frame_count().unwrap() as u64)
        .collect();
    let mut out = std::io::stdout().lock();
    let mut report = |line: String| {
        std::io::Write::write_all(&mut out, line.as_bytes()).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    };
    for round in 0u64.. {
        for (tenant, log) in logs.iter().enumerate() {
            if round % 2 == 0 {
                let index = next_op[tenant];
                let mut frames = encode_frames(&[killed_op(index)]);
                executor
                    .block_on(journals[tenant].append(&mut frames))
                    .unwrap();
                report(format!("appended {tenant} {index}\n"));
                next_op[tenant] += 1;
            } else {
                let index = next_push[tenant];
                pushes[tenant].append(&indexed_batch(index)).unwrap();
                report(format!("pushed {tenant} {index}\n"));
                next_push[tenant] += 1;
            }
            let index = next[tenant];
            let record = payload(tenant as u64, index, 64 + (index % 7) as usize * 100);
            if (round + tenant as u64) % 4 == 3 {
                log.commit(1, &record).unwrap();
            } else {
                log.commit_durable(1, &record).unwrap();
                report(format!("durable {tenant} {index}\n"));
            }
            next[tenant] += 1;
        }
    }
}

/// The killed process's journal op number `index`.
fn killed_op(index: u64) -> JournalOp {
    JournalOp::Set {
        key: b"n".to_vec(),
        value: index.to_le_bytes().to_vec(),
    }
}

/// The schema of the pushes these tests make: one row holding its push's number.
fn indexed_schema() -> arrow_schema::SchemaRef {
    Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "n",
        arrow_schema::DataType::UInt64,
        false,
    )]))
}

/// Push number `index`: one row holding it.
fn indexed_batch(index: u64) -> arrow_array::RecordBatch {
    arrow_array::RecordBatch::try_new(
        indexed_schema(),
        vec![Arc::new(arrow_array::UInt64Array::from(vec![index]))],
    )
    .unwrap()
}

/// `tenant`'s journal ops and push numbers ([`indexed_batch`]), read natively in the order on
/// disk; none for a log not made yet.
fn journal_and_pushes_on_disk(root: &std::path::Path, tenant: &str) -> (Vec<JournalOp>, Vec<u64>) {
    if !root.join(tenant).exists() {
        return (Vec::new(), Vec::new());
    }
    let dir: Arc<dyn Vfs> =
        Arc::new(SubdirVfs::new(Arc::new(RealFs::open_root(root).unwrap()), tenant).unwrap());
    let ops = if dir.exists(TENANT_JOURNAL_PATH).unwrap() {
        replay(&*dir, TENANT_JOURNAL_PATH).unwrap().0
    } else {
        Vec::new()
    };
    let pushes = if dir.exists(TENANT_PUSH_LOG_PATH).unwrap() {
        let log = stele::push_log::PushLog::new(dir, TENANT_PUSH_LOG_PATH, indexed_schema());
        let mut scan = log.scan().unwrap();
        let pushes = scan
            .by_ref()
            .flat_map(|frame| {
                let batch = frame.unwrap().batch;
                let column = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::UInt64Array>()
                    .unwrap()
                    .clone();
                column.values().to_vec()
            })
            .collect();
        assert!(
            !matches!(scan.end(), stele::recovery::LogEnd::Corrupt { .. }),
            "{tenant}: {:?}",
            scan.end()
        );
        pushes
    } else {
        Vec::new()
    };
    (ops, pushes)
}

/// The killed process's journal op numbers, from `tenant`'s journal and push log on disk.
fn killed_journal_and_pushes(root: &std::path::Path, tenant: &str) -> (Vec<u64>, Vec<u64>) {
    let (ops, pushes) = journal_and_pushes_on_disk(root, tenant);
    let indexes = ops
        .iter()
        .map(|op| match op {
            JournalOp::Set { key, value } if key == b"n" => {
                u64::from_le_bytes(value[..].try_into().unwrap())
            }
            other => panic!("{tenant}: an op the process never appended: {other:?}"),
        })
        .collect();
    (indexes, pushes)
}

/// The value of the Prometheus line `name{tenant="<tenant>"} value`, or `None`.
fn scraped(text: &str, name: &str, tenant: &str) -> Option<f64> {
    let prefix = format!("{name}{{tenant=\"{tenant}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().parse().unwrap())
}

#[test]
fn a_tenants_figures_reach_a_prometheus_scrape_across_a_hibernation() {
    let _alone = one_at_a_time();
    runtime();
    for mode in [Mode::Native, Mode::Sandboxed] {
        // A recorder of this thread's own, so that no other test's figures mix in: every
        // handle the registry makes is made on this thread, at a call.
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let scrape = recorder.handle();
        let root = tempfile::tempdir().unwrap();
        let quota = stele::vfs::QuotaLimits::unbounded().with_disk_bytes_max(64 << 20);
        let options = TenantsOptions::default()
            .with_mode(mode)
            .with_wal(small_segments())
            .with_limits(stele_host::SandboxLimits::default().with_quota(quota));
        let tenants = Tenants::open(root.path(), options).unwrap();
        let (groups_before, records) = metrics::with_local_recorder(&recorder, || {
            let log = tenants.wal("carol").unwrap();
            for i in 0..10 {
                log.commit_durable(1, &payload(0, i, 100)).unwrap();
            }
            log.commit_many(&[(1, &payload(0, 10, 100)), (1, &payload(0, 11, 100))])
                .unwrap();
            log.flush().unwrap();
            let groups_before = log.stats().unwrap().groups;
            assert!(log.hibernate().unwrap());
            // A new writer, whose own stats start from zero: the tenant's sums go on.
            for i in 12..15 {
                log.commit_durable(1, &payload(0, i, 100)).unwrap();
            }
            // Publishes the new writer's figures (they are read at most once a second as
            // calls come, on `stats()`, and at hibernation).
            log.stats().unwrap();
            (groups_before, 15u64)
        });
        let text = scrape.render();
        let value = |name: &str| {
            scraped(&text, name, "carol")
                .unwrap_or_else(|| panic!("{}: no {name} for carol in:\n{text}", mode.name()))
        };
        let name = mode.name();
        assert_eq!(
            value("stele_tenant_records_total"),
            records as f64,
            "{name}"
        );
        assert_eq!(
            value("stele_tenant_commit_seconds_count"),
            14.0,
            "{name}: 14 commits"
        );
        assert_eq!(value("stele_tenant_bytes_total"), 15.0 * 100.0, "{name}");
        assert_eq!(value("stele_tenant_hibernations_total"), 1.0, "{name}");
        assert_eq!(value("stele_tenant_resumes_total"), 2.0, "{name}");
        // 10 durable commits one at a time are 10 groups; the batch and the flush one or two
        // more; then 3 after the resume, counted on top of the first writer's.
        let groups = value("stele_tenant_wal_groups_total");
        assert_eq!(groups, groups_before as f64 + 3.0, "{name}");
        assert!(groups_before >= 11, "{name}: {groups_before}");
        assert!(value("stele_tenant_wal_syncs_total") >= groups, "{name}");
        // Every group is in the histogram once, whichever writer wrote it; each holds one or
        // two records (bucket floors 1 and 2).
        assert_eq!(
            value("stele_tenant_wal_group_records_count"),
            groups,
            "{name}"
        );
        let sum = value("stele_tenant_wal_group_records_sum");
        assert!(
            (groups..=groups + 1.0).contains(&sum),
            "{name}: {sum} for {groups}"
        );
        assert!(value("stele_tenant_disk_used_bytes") > 0.0, "{name}");
        assert_eq!(
            value("stele_tenant_disk_limit_bytes"),
            (64 << 20) as f64,
            "{name}"
        );
        println!(
            "{name}: {records} records, {groups} groups in two writers, scraped as Prometheus text"
        );
    }
}
