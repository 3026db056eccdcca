//! A counting global allocator for the tests that bound allocations. A test binary installs it
//! with `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;` and measures a
//! closure with [`measure`]. The counters are process-wide: tests that measure must not run
//! concurrently within one binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub struct CountingAlloc;

static TRACKING: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn allocated(size: usize) {
    if TRACKING.load(Ordering::Relaxed) {
        COUNT.fetch_add(1, Ordering::Relaxed);
        LARGEST.fetch_max(size, Ordering::Relaxed);
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn freed(size: usize) {
    if TRACKING.load(Ordering::Relaxed) {
        // Frees of blocks allocated before tracking began must not wrap the counter.
        let _ = LIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
            Some(live.saturating_sub(size))
        });
    }
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocated(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        freed(layout.size());
        allocated(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        freed(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What [`measure`] saw while its closure ran, on every thread.
#[derive(Clone, Copy, Debug)]
pub struct Allocations {
    /// Allocations and reallocations.
    pub count: usize,
    /// The largest single request, in bytes.
    pub largest: usize,
    /// The most bytes live at once, counting only blocks allocated during the measurement.
    pub peak_bytes: usize,
}

/// Runs `work` with the counters reset and on.
pub fn measure<R>(work: impl FnOnce() -> R) -> (R, Allocations) {
    for counter in [&COUNT, &LARGEST, &LIVE, &PEAK] {
        counter.store(0, Ordering::SeqCst);
    }
    TRACKING.store(true, Ordering::SeqCst);
    let result = work();
    TRACKING.store(false, Ordering::SeqCst);
    let seen = Allocations {
        count: COUNT.load(Ordering::SeqCst),
        largest: LARGEST.load(Ordering::SeqCst),
        peak_bytes: PEAK.load(Ordering::SeqCst),
    };
    (result, seen)
}
