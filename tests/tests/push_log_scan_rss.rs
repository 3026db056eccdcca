//! "Scanning is streamed": a 1 GiB push log scans with a peak RSS under 128 MiB. The log is
//! written natively on the real filesystem (1,024 pushes of 10,000 rows, about 1 MiB each), then
//! scanned with the heap counted and the peak resident set reset first (`/proc/self/clear_refs`;
//! without it, only the heap is checked, and the test says so).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use stele::push_log::{PushLog, refs};
use stele::recovery::LogEnd;
use stele_tests::alloc::{CountingAlloc, measure};
use stele_tests::{TempRoot, ci_line};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const ROWS_PER_PUSH: usize = 10_000;
const LOG_BYTES_TARGET: u64 = 1 << 30;
const RSS_BYTES_MAX: u64 = 128 << 20;

#[test]
fn a_1_gib_push_log_scans_in_bounded_memory() {
    let root = TempRoot::new();
    let target: String = "t".repeat(80);
    let batch = RecordBatch::try_new(
        refs::schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..ROWS_PER_PUSH).map(|i| format!("refs/heads/branch-{i:06}")),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..ROWS_PER_PUSH).map(|_| target.as_str()),
            )),
            Arc::new(UInt64Array::from(vec![1u64; ROWS_PER_PUSH])),
            Arc::new(Int64Array::from(vec![7i64; ROWS_PER_PUSH])),
        ],
    )
    .unwrap();
    let log = PushLog::new(root.vfs(), "big.log", refs::schema());
    let mut pushes = 0;
    let started = Instant::now();
    while std::fs::metadata(root.path("big.log")).map_or(0, |m| m.len()) < LOG_BYTES_TARGET {
        log.append(&batch).unwrap();
        pushes += 1;
    }
    let written = std::fs::metadata(root.path("big.log")).unwrap().len();
    let append_s = started.elapsed().as_secs_f64();
    drop(log);

    let rss_reset = stele_host::peak_rss::reset();
    let log = PushLog::new(root.vfs(), "big.log", refs::schema());
    let started = Instant::now();
    let ((frames, rows, end), heap) = measure(|| {
        let mut scan = log.scan().unwrap();
        let (mut frames, mut rows) = (0usize, 0usize);
        for frame in scan.by_ref() {
            rows += frame.unwrap().batch.num_rows();
            frames += 1;
        }
        (frames, rows, scan.end())
    });
    let scan_s = started.elapsed().as_secs_f64();
    let rss = stele_host::peak_rss::peak_bytes().filter(|_| rss_reset);
    ci_line(&format!(
        "push-log-1gib: {written} B in {pushes} pushes; append {:.0} MB/s; scan {:.0} MB/s; scan heap peak {} KiB; peak RSS during scan {}",
        written as f64 / append_s / 1e6,
        written as f64 / scan_s / 1e6,
        heap.peak_bytes / 1024,
        rss.map_or(
            "not measured (no /proc/self/clear_refs)".into(),
            |b| format!("{} MiB", b >> 20)
        ),
    ));
    assert_eq!(end, LogEnd::Clean);
    assert_eq!((frames, rows), (pushes, pushes * ROWS_PER_PUSH));
    assert!(
        (heap.peak_bytes as u64) < RSS_BYTES_MAX / 4,
        "the scan held {} bytes of heap at once",
        heap.peak_bytes
    );
    if let Some(rss) = rss {
        assert!(rss < RSS_BYTES_MAX, "peak RSS {rss} bytes during the scan");
    }
}
