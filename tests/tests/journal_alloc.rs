//! "Appending allocates nothing once warm", checked with a counting allocator, natively: the
//! engine's append path allocates nothing at all, and through the tokio `Writer` the only
//! allocations per append are tokio's own task bookkeeping, small and independent of the
//! payload: the caller's buffer travels to the blocking pool and back without a copy.

use std::sync::Arc;

use stele::journal::{JournalFile, JournalOp, Writer, encode_frames};
use stele::vfs::Vfs;
use stele_tests::TempRoot;
use stele_tests::alloc::{CountingAlloc, measure};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const APPENDS: usize = 200;

/// Three ops: the writer carries them in one batch frame (built in its reused scratch buffer),
/// the path with the most to allocate.
fn frames() -> Vec<u8> {
    encode_frames(&[
        JournalOp::Set {
            key: b"session/key".to_vec(),
            value: vec![0x5a; 16 << 10],
        },
        JournalOp::Delete {
            key: b"old".to_vec(),
        },
        JournalOp::Set {
            key: b"session/other".to_vec(),
            value: vec![0xa5; 100],
        },
    ])
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
    let ((), seen) = measure(|| {
        for _ in 0..APPENDS {
            file.append_blocking(&frames).unwrap();
        }
    });
    let count = seen.count;
    assert_eq!(
        count, 0,
        "JournalFile::append allocated {count} times in {APPENDS} appends"
    );

    // The tokio Writer: the buffer comes back (same pointer and capacity) and nothing the size
    // of the payload is ever allocated; what remains is tokio's per-task bookkeeping.
    // One blocking thread: with more, a call that arrives while the last one's thread is still
    // on its way back to idle spawns another thread, and that thread's own allocations (a few
    // dozen under load, seen on a clean-clone CI run) would count against the appends.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    let mut writer = runtime
        .block_on(Writer::open(vfs, "tokio.journal"))
        .unwrap();
    let mut buf = frames.clone();
    runtime.block_on(writer.append(&mut buf)).unwrap();
    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
    let ((), seen) = measure(|| {
        runtime.block_on(async {
            for _ in 0..APPENDS {
                writer.append(&mut buf).await.unwrap();
            }
        })
    });
    let (count, largest) = (seen.count, seen.largest);
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
    // the blocking thread being respawned once (it idles out after tokio's keep-alive).
    assert!(
        count <= APPENDS + 16,
        "{count} allocations in {APPENDS} appends: more than tokio's one task per call"
    );
}
