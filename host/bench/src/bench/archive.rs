//! `stele bench --workloads archive`: the archiver beside a durable writer, in one run with the
//! writer alone and the disk's limit (raw write + fdatasync, [`super::common::limit`]).
//!
//! Stores measured: a local directory (`file://`, on the bench's own disk), `object_store`'s
//! `InMemory` (no store cost: what the archiver itself costs) and a real S3 server on loopback (`stele_archive::loopback_s3`: s3s-fs
//! in this process, its objects on the bench's disk, every request signed and sent over TCP
//! through object_store's S3 client). Each figure is the median of [`ROUNDS`] rounds.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use stele::vfs::Vfs;
use stele::wal::record::encoded_len;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions};
use stele_archive::object_store::memory::InMemory;
use stele_archive::restore::FETCHES_IN_FLIGHT_DEFAULT;
use stele_archive::{ArchiveLocation, ArchiveOptions, Archiver, RestoreOptions};
use stele_host::fs::RealFs;
use stele_host::{Mode, Wal};

use super::common::{BenchArgs, percentile, progress};

/// The stores measured, in the table's order.
const STORES: [&str; 3] = ["file", "memory", "s3"];

/// Rounds per store; the table gives medians.
const ROUNDS: usize = 3;

/// Segments small enough that a run seals dozens, so that the lag has samples and the upload
/// is sustained rather than one object.
const SEGMENT_BYTES: u64 = 1 << 20;

/// Durable writers: enough that groups form, as in production.
const WRITERS: usize = 16;

/// The archiver's wait between rounds in the bench: short, so that the lag measures the
/// upload, not the poll.
const POLL: Duration = Duration::from_millis(10);

struct Round {
    /// Durable MB/s of records, writer alone.
    wal_alone_mb_s: f64,
    /// The writer's commit latencies alone, µs.
    alone_us: Vec<f64>,
    /// The same with the archiver running.
    archived_us: Vec<f64>,
    /// Archive bytes over the archiver's busy time (`ArchiverStats::upload_busy`): the rate it
    /// sustains while it has work.
    upload_mb_s: f64,
    /// Milliseconds from the last commit's return until the archive held every sealed
    /// segment.
    catch_up_ms: f64,
    /// Durable MB/s of records with the archiver running.
    wal_archived_mb_s: f64,
    lag_ms: Vec<f64>,
    restore_mb_s: f64,
    /// The store's own limit for a restore: the same objects fetched with the same
    /// parallelism, and nothing done with them.
    fetch_mb_s: f64,
    requests_per_gib: f64,
}

/// Commits `per_writer` records from each of [`WRITERS`] threads; returns each commit's
/// latency in µs and the seconds it took.
fn commit_load(wal: &Wal, per_writer: usize, payload: usize) -> Result<(Vec<f64>, f64)> {
    let body = vec![0xA5u8; payload];
    let started = Instant::now();
    let latencies = std::thread::scope(|scope| -> Result<Vec<f64>> {
        let threads: Vec<_> = (0..WRITERS)
            .map(|_| {
                let (wal, body) = (wal, &body);
                scope.spawn(move || -> Result<Vec<f64>> {
                    let mut own = Vec::with_capacity(per_writer);
                    for _ in 0..per_writer {
                        let t = Instant::now();
                        wal.commit_durable(1, body)?;
                        own.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(own)
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            all.extend(
                t.join()
                    .map_err(|_| anyhow::anyhow!("a writer panicked"))??,
            );
        }
        Ok(all)
    })?;
    Ok((latencies, started.elapsed().as_secs_f64()))
}

fn options() -> WalOptions {
    WalOptions::segmented(DurabilityPolicy::FullSync, SEGMENT_BYTES).with_retained_bytes_max(0)
}

/// The loopback S3 server a round of the `s3` store runs.
type Server = stele_archive::loopback_s3::LoopbackS3;

/// `store`'s archive location, its objects (if it keeps them on disk) under `store_dir`.
fn open_store(store: &str, store_dir: &Path) -> Result<(ArchiveLocation, Option<Server>)> {
    Ok(match store {
        "file" => (
            ArchiveLocation::open(&format!("file://{}", store_dir.display()))?,
            None,
        ),
        "s3" => {
            let server = Server::start(store_dir)?;
            (server.location("stele-bench", "bench")?, Some(server))
        }
        _ => (
            ArchiveLocation::new(Arc::new(InMemory::new()), "bench", "memory://"),
            None,
        ),
    })
}

/// One round. `alone_first`: whether the writer-alone phase runs before the phase with the
/// archiver or after it; the rounds alternate, so that a drift across a round (the disk's
/// state after a phase's writes) does not count for or against the archiver.
fn round(
    dir: &Path,
    store: &str,
    per_writer: usize,
    payload: usize,
    alone_first: bool,
) -> Result<Round> {
    let record_bytes = (WRITERS * per_writer * encoded_len(payload)) as f64;
    let fs: Arc<dyn Vfs> = Arc::new(RealFs::open_root(dir)?);
    for name in [
        "bench-archive-alone",
        "bench-archive-on",
        "bench-archive-restored",
    ] {
        let _ = std::fs::remove_dir_all(dir.join(name));
    }
    let store_dir = dir.join("bench-archive-store");
    let _ = std::fs::remove_dir_all(&store_dir);

    let writer_alone = || -> Result<(Vec<f64>, f64)> {
        let (alone, _) = Wal::open(fs.clone(), "bench-archive-alone", options(), Mode::Native)?;
        commit_load(&alone, per_writer, payload)
    };
    let alone_before = alone_first.then(writer_alone).transpose()?;

    // The server, if the store has one, serves to the end of the round.
    let (location, _server) = open_store(store, &store_dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (wal, _) = Wal::open(fs.clone(), "bench-archive-on", options(), Mode::Native)?;
    let archive_options = ArchiveOptions::default()
        .with_poll_interval(POLL)
        .with_truncate_local(false);
    let running = rt
        .block_on(Archiver::attach(
            location.clone(),
            fs.clone(),
            "bench-archive-on",
            wal.clone(),
            archive_options,
        ))?
        .spawn()?;
    let requests_before = location.requests();
    let started = Instant::now();
    let (archived_us, archived_s) = commit_load(&wal, per_writer, payload)?;
    let sealed_end = stele::wal::segment::list_segments(&*fs, "bench-archive-on")?
        .last()
        .copied()
        .unwrap_or(LogSeq(0));
    anyhow::ensure!(
        running.wait_archived(sealed_end, Duration::from_secs(120)),
        "the archiver did not catch up: {:?}",
        running.status()
    );
    let catch_up_ms = (started.elapsed().as_secs_f64() - archived_s) * 1e3;
    let archiver = running.stop();
    let status = archiver.status();
    let bytes = status.stats.bytes_archived as f64;
    let busy_s = status.stats.upload_busy.as_secs_f64();
    let requests = (location.requests() - requests_before) as f64;
    let keys: Vec<String> = archiver
        .manifest()
        .segments
        .iter()
        .map(|s| s.key.clone())
        .collect();
    drop(archiver);
    drop(wal);
    let (alone_us, alone_s) = match alone_before {
        Some(ran) => ran,
        None => writer_alone()?,
    };
    let fetch_mb_s = rt.block_on(fetch_rate(&location, &keys))?;

    let restore_started = Instant::now();
    let report = rt.block_on(stele_archive::restore(
        &location,
        fs.clone(),
        "bench-archive-restored",
        RestoreOptions::default(),
    ))?;
    let restore_s = restore_started.elapsed().as_secs_f64();
    for name in [
        "bench-archive-alone",
        "bench-archive-on",
        "bench-archive-restored",
    ] {
        let _ = std::fs::remove_dir_all(dir.join(name));
    }
    let _ = std::fs::remove_dir_all(&store_dir);
    Ok(Round {
        wal_alone_mb_s: record_bytes / alone_s / 1e6,
        alone_us,
        archived_us,
        upload_mb_s: bytes / busy_s / 1e6,
        catch_up_ms,
        wal_archived_mb_s: record_bytes / archived_s / 1e6,
        lag_ms: status
            .stats
            .seal_to_archived_ms
            .iter()
            .map(|&ms| ms as f64)
            .collect(),
        restore_mb_s: report.bytes as f64 / restore_s / 1e6,
        fetch_mb_s,
        requests_per_gib: requests / (bytes / (1u64 << 30) as f64),
    })
}

/// MB/s of fetching `keys` from `location`, [`FETCHES_IN_FLIGHT_DEFAULT`] at a time, as a
/// restore does, without checking or writing them.
async fn fetch_rate(location: &ArchiveLocation, keys: &[String]) -> Result<f64> {
    use futures::StreamExt;
    use stele_archive::object_store::ObjectStoreExt;
    let started = Instant::now();
    let mut fetches = futures::stream::iter(keys)
        .map(|key| async move {
            let object = location.store().get(&location.path(key)).await?;
            object.bytes().await.map(|b| b.len() as u64)
        })
        .buffered(FETCHES_IN_FLIGHT_DEFAULT);
    let mut bytes = 0;
    while let Some(fetched) = fetches.next().await {
        bytes += fetched?;
    }
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The archive table; see the module doc.
pub fn archive_table(
    dir: &Path,
    args: &BenchArgs,
    mut json: Option<&mut std::fs::File>,
) -> Result<()> {
    let payload = args.payload_bytes.first().copied().unwrap_or(4096).max(1);
    let per_writer = (args.records / WRITERS).max(16);
    let limit = super::common::limit(dir, args.records, payload, true)?;
    let limit_mb_s = limit.records as f64 * payload as f64 / limit.seconds / 1e6;
    std::println!();
    progress().suspend(|| {
        std::println!(
            "Archive: {WRITERS} durable writers × {per_writer} records of {payload} B, \
             FullSync, {} KiB segments, archiver polling every {} ms; medians of {ROUNDS} rounds. \
             The disk's limit (one writer, raw write + fdatasync): {limit_mb_s:.1} MB/s. \
             upload = archived bytes over the archiver's busy time (from each round's first \
             segment read to its manifest's publication), the rate it sustains while it has \
             work; keeps up = upload × the writer's durable MB/s in the same round (≥ 1: its \
             backlog does not grow); catch-up = from the last commit's return until the \
             archive holds every sealed segment; lag = a segment's seal to the manifest that \
             names it. store fetch = the same objects fetched from the store with a restore's \
             parallelism and nothing done with them: the store's own limit for a restore, \
             which restore × fetch compares it with. p99 with = commit p99 with the archiver running, × the writer alone (the rounds \
             alternate which of the two runs first). \
             Stores: file = a local directory on this disk; memory = object_store's InMemory; \
             s3 = a real S3 server on loopback (s3s-fs in this process, its objects on this \
             disk, each request signed and sent over TCP).\n",
            SEGMENT_BYTES >> 10,
            POLL.as_millis()
        );
        std::println!(
            "| store | writer alone MB/s | writer + archiver MB/s | upload MB/s | keeps up × | \
             catch-up ms | lag p50 ms | lag p99 ms | restore MB/s | store fetch MB/s | \
             restore × fetch | commit p99 alone µs | p99 with µs | \
             p99 × | requests/GiB |"
        );
        std::println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    });
    for store in STORES {
        let mut rounds = Vec::new();
        for i in 0..ROUNDS {
            rounds.push(
                round(dir, store, per_writer, payload, i % 2 == 0)
                    .with_context(|| format!("archive bench, {store}"))?,
            );
        }
        let m = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
        let alone_p99 = m(&|r| percentile(&r.alone_us, 0.99));
        let with_p99 = m(&|r| percentile(&r.archived_us, 0.99));
        let keeps_up = m(&|r| r.upload_mb_s / r.wal_archived_mb_s);
        let wal_alone = m(&|r| r.wal_alone_mb_s);
        let wal_archived = m(&|r| r.wal_archived_mb_s);
        let upload = m(&|r| r.upload_mb_s);
        let catch_up = m(&|r| r.catch_up_ms);
        let lag_p50 = m(&|r| percentile(&r.lag_ms, 0.5));
        let lag_p99 = m(&|r| percentile(&r.lag_ms, 0.99));
        let restore = m(&|r| r.restore_mb_s);
        let fetch = m(&|r| r.fetch_mb_s);
        let requests = m(&|r| r.requests_per_gib);
        progress().suspend(|| {
            std::println!(
                "| {store} | {wal_alone:.1} | {wal_archived:.1} | {upload:.1} | {keeps_up:.2} | \
                 {catch_up:.0} | {lag_p50:.0} | {lag_p99:.0} | {restore:.0} | {fetch:.0} | \
                 {:.2} | {alone_p99:.0} | \
                 {with_p99:.0} | {:.2} | {requests:.0} |",
                restore / fetch,
                with_p99 / alone_p99,
            );
        });
        if let Some(out) = json.as_mut() {
            writeln!(
                out,
                "{}",
                serde_json::json!({
                    "workload": "archive", "store": store, "writers": WRITERS,
                    "payload_bytes": payload, "wal_alone_mb_per_s": wal_alone,
                    "wal_with_archiver_mb_per_s": wal_archived, "upload_mb_per_s": upload,
                    "keeps_up_ratio": keeps_up, "catch_up_ms": catch_up,
                    "lag_p50_ms": lag_p50, "lag_p99_ms": lag_p99,
                    "restore_mb_per_s": restore, "store_fetch_mb_per_s": fetch,
                    "commit_p99_alone_us": alone_p99,
                    "commit_p99_with_archiver_us": with_p99, "requests_per_gib": requests,
                    "limit_mb_per_s": limit_mb_s,
                })
            )?;
        }
    }
    Ok(())
}
