//! "Appending allocates nothing once warm", checked with a counting allocator, natively: the
//! engine's append path allocates nothing at all, and through the tokio `Writer` the only
//! allocations per append are tokio's own task bookkeeping, small and independent of the
//! payload: the caller's buffer travels to the blocking pool and back without a copy.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use stele::journal::{JournalFile, JournalOp, Writer, encode_frames};
use stele::vfs::Vfs;
use stele_tests::TempRoot;

struct CountingAlloc;

static TRACKING: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            COUNT.fetch_add(1, Ordering::Relaxed);
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            COUNT.fetch_add(1, Ordering::Relaxed);
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Counts the allocations (and the largest) made on any thread while `work` runs.
fn counted<R>(work: impl FnOnce() -> R) -> (R, usize, usize) {
    COUNT.store(0, Ordering::SeqCst);
    LARGEST.store(0, Ordering::SeqCst);
    TRACKING.store(true, Ordering::SeqCst);
    let result = work();
    TRACKING.store(false, Ordering::SeqCst);
    (
        result,
        COUNT.load(Ordering::SeqCst),
        LARGEST.load(Ordering::SeqCst),
    )
}

const APPENDS: usize = 200;

fn frames() -> Vec<u8> {
    encode_frames(&[JournalOp::Set {
        key: b"session/key".to_vec(),
        value: vec![0x5a; 16 << 10],
    }])
}

/// Both checks share the global counter, so they run in one test, one after the other.
#[test]
fn warm_appends_allocate_nothing_that_grows_with_the_payload() {
    let root = TempRoot::new();
    let vfs: Arc<dyn Vfs> = root.vfs();
    let frames = frames();

    // The engine's append, on this thread: exactly zero allocations once warm.
    let mut file = JournalFile::open_blocking(vfs.clone(), "engine.journal").unwrap();
    file.append_blocking(&frames).unwrap();
    let ((), count, _) = counted(|| {
        for _ in 0..APPENDS {
            file.append_blocking(&frames).unwrap();
        }
    });
    assert_eq!(
        count, 0,
        "JournalFile::append allocated {count} times in {APPENDS} appends"
    );

    // The tokio Writer: the buffer comes back (same pointer and capacity) and nothing the size
    // of the payload is ever allocated; what remains is tokio's per-task bookkeeping.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut writer = runtime
        .block_on(Writer::open(vfs, "tokio.journal"))
        .unwrap();
    let mut buf = frames.clone();
    runtime.block_on(writer.append(&mut buf)).unwrap();
    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
    let ((), count, largest) = counted(|| {
        runtime.block_on(async {
            for _ in 0..APPENDS {
                writer.append(&mut buf).await.unwrap();
            }
        })
    });
    assert_eq!((buf.as_ptr(), buf.capacity()), (ptr, cap));
    stele_tests::ci_line(&format!(
        "journal-alloc: engine 0 allocations/append; tokio Writer {:.2} allocations/append, largest {largest} B (payload {} B)",
        count as f64 / APPENDS as f64,
        frames.len()
    ));
    assert!(
        largest < 1024,
        "an allocation of {largest} B: something copied the {} B payload",
        frames.len()
    );
    // One per append: the task cell `spawn_blocking` allocates (384 B here). The slack covers
    // a blocking-pool thread being respawned.
    assert!(
        count <= APPENDS + 16,
        "{count} allocations in {APPENDS} appends: more than tokio's one task per call"
    );
}
