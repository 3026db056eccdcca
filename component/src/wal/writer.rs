//! [`WalWriter`]: the thread driver of [`GroupCommit`]. Caller threads are leader and
//! followers; there is no timer and no background thread. Its task driver ([`tasks`]) lets
//! tokio tasks wait and lead on the same writer.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use crate::header::{Family, FileHeader, HEADER_BYTES};
use crate::vfs::{
    DeviceIo, OpenMode, ReadyIo, Vfs, VfsError, VfsFile, VfsLock, complete_now, parent_dir,
    write_zeros,
};

use super::executor::{SegmentSite, start_segment, write_group, write_segmented_group};
use super::group_commit::{Group, GroupCommit, LeaderStep, Leadership, WaitState};
use super::lock::lock_writer;
use super::replay::{Recovery, replay};
use super::segment::{
    self, SEGMENT_BYTES_MIN, SegmentRetention, SegmentedRecovery, WalTruncation, join,
    segment_file_name,
};
use super::{
    DurabilityPolicy, LogSeq, WAL_VERSION, WalOpenError, WalOptions, WalRetentionError,
    WalRetireError, WalWriteError,
};
use crate::recovery::LogEnd;

pub use super::group_commit::{VisibleRecord, WalRetirement, WalWriterStats};

#[cfg(not(target_arch = "wasm32"))]
mod tasks;

/// Whether [`setup_log`] starts a new log or recovers an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupMode {
    /// The file must be empty (missing files are created empty by the caller's open).
    Create,
    /// Recover whatever the file holds; an empty file becomes a new log.
    Open,
}

/// The writer lock of a single-file log, from [`lock_single_file`]: for [`setup_log`], the
/// proof that no other writer holds the log and that the options ask for no segments.
#[derive(Debug)]
pub struct SingleFileLock {
    /// Held for its drop, which releases the lock.
    _held: Box<dyn VfsLock>,
}

impl VfsLock for SingleFileLock {}

/// The first step of starting a single-file log, before its file is opened: refuses options that
/// ask for segments (the caller meant a segment directory), then takes the writer lock
/// `<path>.lock` ([`lock_writer`]). A refused call touches nothing.
///
/// # Errors
/// [`WalOpenError::SegmentOptionsForSingleFile`]; [`WalOpenError::Locked`] if another writer
/// holds the log; a Vfs error if the lock file cannot be created.
pub fn lock_single_file(
    vfs: &dyn Vfs,
    path: &str,
    options: &WalOptions,
) -> Result<SingleFileLock, WalOpenError> {
    if let Some(segment_bytes) = options.segment_bytes {
        return Err(WalOpenError::SegmentOptionsForSingleFile { segment_bytes });
    }
    lock_writer(vfs, path, false).map(|held| SingleFileLock { _held: held })
}

/// Prepares `file`, opened at `path` through `io` after `lock` was taken, for appending, and
/// returns the group-commit core that continues it. Every driver (the thread driver here, the
/// component's async driver) starts a log through this one function, so creation and recovery
/// behave the same in all; its syncs are `io`'s futures, so an async driver's open suspends on
/// them as its groups do. The caller holds `lock` as long as the core is used.
///
/// A new log gets its header; under `FullSync` and `Barrier` the header is synced and then the
/// parent directory, so the empty log and its first seq survive power loss from here on. A torn
/// tail is cut (`set_len`) and, under those policies, the cut is synced before any append.
/// Recovering an existing log under those policies syncs the parent directory too: the writer
/// that created the file may have failed (or crashed) before its directory sync returned, and
/// nothing may be acknowledged in a file whose name a power loss can take.
///
/// # Errors
/// [`WalOpenError::NotEmpty`] when creating over bytes; replay's errors when recovering (the
/// file is then not modified); Vfs errors.
pub async fn setup_log<Io: DeviceIo>(
    io: &Io,
    path: &str,
    _lock: &SingleFileLock,
    file: &Io::File,
    options: WalOptions,
    mode: SetupMode,
) -> Result<(GroupCommit, Recovery), WalOpenError> {
    let recovery = match mode {
        SetupMode::Create => {
            let len = file.len()?;
            if len != 0 {
                return Err(WalOpenError::NotEmpty { len });
            }
            Recovery::new_log(options.first_seq, 0)
        }
        SetupMode::Open => replay(file, options.first_seq, |_| {})?,
    };
    tracing::info!(
        path,
        end = ?recovery.end,
        records = recovery.records,
        next_seq = recovery.next_seq.0,
        bytes_read = recovery.valid_end,
        file_len = recovery.file_len,
        "wal recovered"
    );
    let sync = options.policy.group_sync();
    let core = match recovery.end {
        LogEnd::Empty => {
            let header = FileHeader {
                family: Family::Wal,
                version: WAL_VERSION,
                family_word: options.first_seq.0,
            };
            io.write_at(file, 0, &header.encode()).await?;
            let mut core = GroupCommit::new(&options, options.first_seq, HEADER_BYTES as u64);
            if let Some(kind) = sync {
                // The header carries first_seq; syncing it now means a crash before the first
                // group still reopens at the right seq. The directory sync makes the new file's
                // name durable: without it a power loss can drop the file and every record in it.
                io.sync(file, kind).await?;
                io.sync_dir(parent_dir(path)).await?;
                core.count_setup_syncs(1, 1);
            }
            core
        }
        LogEnd::Corrupt { .. } => unreachable!("replay refuses corruption with an error"),
        LogEnd::Clean | LogEnd::TornTail { .. } => {
            let mut core = GroupCommit::new(&options, recovery.next_seq, recovery.valid_end);
            if recovery.end.is_torn() {
                // The unfinished group is cut before anything new is appended; syncing the cut
                // closes the window where a crash could bring its bytes back after records that
                // we append later.
                file.set_len(recovery.valid_end)?;
                if let Some(kind) = sync {
                    io.sync(file, kind).await?;
                    core.count_setup_syncs(1, 0);
                }
            }
            if sync.is_some() {
                io.sync_dir(parent_dir(path)).await?;
                core.count_setup_syncs(0, 1);
            }
            core
        }
    };
    Ok((core, recovery))
}

/// What [`setup_segments`] hands a driver of a segmented log, with the current segment open
/// as the file type of the driver's I/O.
#[derive(Debug)]
pub struct SegmentedSetup<F = Box<dyn VfsFile>> {
    /// The group-commit core, continuing after the last recovered record.
    pub core: GroupCommit,
    /// What recovery found.
    pub recovery: SegmentedRecovery,
    /// The segment that groups are appended to.
    pub current: F,
    /// First seqs of the live segments, `current`'s last.
    pub live: Vec<LogSeq>,
    /// The segment size in effect.
    pub segment_bytes: u64,
    /// The writer lock (`<dir>/LOCK`), taken before recovery read anything. Whoever drives the
    /// core holds it until the writer is dropped.
    pub lock: Box<dyn VfsLock>,
}

/// [`setup_log`] for a segmented log in directory `dir` (created if missing), with
/// `options.segment_bytes` (default [`super::segment::SEGMENT_BYTES_DEFAULT`]).
///
/// The writer lock (`<dir>/LOCK`, [`lock_writer`]) is taken once the directory exists, before
/// anything in it is read. Recovery runs over every segment first
/// ([`segment::replay_segments`]); on an error nothing is modified. Then, before the first
/// append: an unfinished rotation's residue is removed, a torn tail in the last segment is
/// zeroed, and a log with no segment gets its first one. Under `FullSync` and `Barrier` each of
/// these is synced, and then the directory and its parent are, whatever recovery found: a
/// writer that failed (or crashed) before its rotation's or its creation's directory sync
/// returned may have left a segment, or the directory itself, whose name is not durable, and
/// nothing may be acknowledged in it until it is.
///
/// # Errors
/// [`WalOpenError::SingleFileLog`] if `dir` is a file; [`WalOpenError::SegmentTooSmall`];
/// [`WalOpenError::Locked`] if another writer holds the log; [`WalOpenError::NotEmpty`] when
/// creating over segments; recovery's errors; Vfs errors.
pub async fn setup_segments<Io: DeviceIo>(
    io: &Io,
    dir: &str,
    options: WalOptions,
    mode: SetupMode,
) -> Result<SegmentedSetup<Io::File>, WalOpenError> {
    let vfs = io.vfs();
    let segment_bytes = options
        .segment_bytes
        .unwrap_or(segment::SEGMENT_BYTES_DEFAULT);
    if segment_bytes < SEGMENT_BYTES_MIN {
        return Err(WalOpenError::SegmentTooSmall {
            bytes: segment_bytes,
            bytes_min: SEGMENT_BYTES_MIN,
        });
    }
    let options = WalOptions {
        segment_bytes: Some(segment_bytes),
        ..options
    };
    if !dir.is_empty() {
        if vfs.open(dir, OpenMode::Existing).is_ok() {
            return Err(WalOpenError::SingleFileLog {
                path: dir.to_owned(),
            });
        }
        vfs.create_dir(dir)?;
    }
    let lock = lock_writer(vfs, dir, true)?;
    let recovery = segment::replay_segments(vfs, dir, options.first_seq, |_| {})?;
    if mode == SetupMode::Create && recovery.usable_segments().next().is_some() {
        return Err(WalOpenError::NotEmpty {
            len: recovery.usable_segments().map(|s| s.file_len).sum(),
        });
    }
    let sync = options.policy.group_sync();
    let (mut file_syncs, mut dir_syncs) = (0, 0);
    if let Some(unfinished) = recovery.unfinished_segment() {
        // Made durable by the directory sync below, before the first append.
        vfs.remove(&join(dir, &segment_file_name(unfinished.first_seq)))?;
    }
    let mut live: Vec<LogSeq> = recovery.usable_segments().map(|s| s.first_seq).collect();
    let (current, core) = match recovery.usable_segments().last() {
        None => {
            let first_seq = recovery.recovery.first_seq;
            let file = start_segment(io, dir, first_seq, segment_bytes)?;
            if let Some(kind) = sync {
                // The empty log and its first seq survive power loss once the names below are
                // durable too.
                io.sync(&file, kind).await?;
                file_syncs += 1;
            }
            live.push(first_seq);
            let core = GroupCommit::new(&options, first_seq, HEADER_BYTES as u64);
            (file, core)
        }
        Some(last) => {
            let path = join(dir, &segment_file_name(last.first_seq));
            let file = io.open(&path, OpenMode::Existing)?;
            if let LogEnd::TornTail { torn_end, .. } = last.end {
                // The cleared tail must be durable before anything is appended after it, or a
                // crash could bring the torn bytes back behind new records. Zeroed, not cut:
                // cutting would undo the preallocation.
                write_zeros(io, &file, last.valid_end, torn_end).await?;
                if let Some(kind) = sync {
                    io.sync(&file, kind).await?;
                    file_syncs += 1;
                }
            }
            let core = GroupCommit::new(&options, last.next_seq, last.valid_end);
            (file, core)
        }
    };
    if sync.is_some() {
        // The segments' names, and the directory's own entry in its parent (it may be new, or
        // an earlier creator's sync of it may have failed): without them a power loss could
        // drop a segment, or the directory with every segment in it.
        io.sync_dir(dir).await?;
        dir_syncs += 1;
        if !dir.is_empty() {
            io.sync_dir(parent_dir(dir)).await?;
            dir_syncs += 1;
        }
    }
    let mut core = core;
    core.count_setup_syncs(file_syncs, dir_syncs);
    tracing::info!(
        dir,
        end = ?recovery.recovery.end,
        records = recovery.recovery.records,
        next_seq = recovery.recovery.next_seq.0,
        segments = live.len(),
        "wal recovered"
    );
    Ok(SegmentedSetup {
        core,
        recovery,
        current,
        live,
        segment_bytes,
        lock,
    })
}

/// WAL writer, over one file or a directory of segments, using caller threads as leader and
/// followers.
///
/// There is no timer and no background flusher. An idle arrival becomes leader at once and
/// writes what is pending as one group. Arrivals while a group is in flight stage into the next
/// group, which is bounded in encoded bytes ([`WalOptions::group_bytes_max`]). When that group's
/// callers are waiting durably, the leader hands leadership to one of them (see
/// [`super::group_commit`] for why).
///
/// A segmented writer (see [`Self::open_segmented`]) rotates inside the group commit: a group
/// that would overflow the current segment is written at the start of a new one, which the
/// leader creates and preallocates first. Under a syncing policy the new segment's name is
/// made durable (a directory sync) before any record in it is acknowledged; if that sync
/// fails, the group fails as a failed write does and the writer is poisoned.
/// [`Self::checkpoint`] and [`Self::truncate_through`] then let the log's owner delete what it
/// has absorbed.
///
/// `WalWriter` is `Send + Sync`: share it with `Arc` across threads.
#[derive(Debug)]
pub struct WalWriter {
    storage: Storage,
    core: Mutex<GroupCommit>,
    /// Durable waiters asleep, in arrival order. Locked only with `core` held (so it is never
    /// contended), and only in that order.
    parked: Mutex<Vec<ParkedWaiter>>,
    /// Waiters that the leader woke with their outcome and that have not returned yet. A
    /// gathering leader waits for them before it counts quiet rounds, because they usually
    /// commit again at once.
    departing: AtomicUsize,
    /// A gathering leader asleep until `departing` falls to 0; the waiter that brings it there
    /// wakes it.
    gatherer: Mutex<Option<Thread>>,
    /// Where a multi-batch group is assembled for one write. Only the leader touches it, so it
    /// is never contended; the mutex only proves that to the compiler.
    group_scratch: Mutex<Vec<u8>>,
    /// Callers of [`Self::seal_active_segment`] that another leader serves, asleep on `core`
    /// until a seal group completes or a group fails. Rare (an archiver's seal every
    /// `seal_age_max`), so one condvar for all of them.
    sealed: Condvar,
    /// The writer lock ([`super::lock`]). Declared last, so that it is released only after the
    /// files above are closed.
    _lock: Box<dyn VfsLock>,
}

/// Where groups go.
#[derive(Debug)]
enum Storage {
    /// The foundation's format: one file that grows.
    SingleFile(Box<dyn VfsFile>),
    Segments(Segments),
}

#[derive(Debug)]
struct Segments {
    io: ReadyIo,
    dir: String,
    segment_bytes: u64,
    /// The segment that groups go to. Only the leader locks it, for a whole group write
    /// (rotation included), so it is never contended.
    current: Mutex<Box<dyn VfsFile>>,
    /// Checkpoint and truncation state. Held while segments are deleted, so that truncations
    /// and checkpoints are serialized; a rotation takes it only to record its new segment.
    retention: Mutex<SegmentRetention>,
}

/// A durable waiter asleep until the leader settles its wait or hands it leadership.
///
/// Why not one condvar for all: waking every waiter of a group at once makes each of them take
/// the writer's lock only to learn its outcome and deregister. At 64 writers on two cores that
/// convoy, one lock handoff after another, cost several times the group's sync. The leader
/// knows each waiter's outcome already, so it deregisters the settled ones under the lock it
/// holds and wakes each with its verdict; they leave without touching the lock.
#[derive(Debug)]
struct ParkedWaiter {
    target: LogSeq,
    slot: Arc<WakeSlot>,
}

/// Where the leader leaves one waiter's verdict. The waiter resets it, with `core` held, before
/// it parks; the leader that takes it off `parked` is then the only one to write it.
#[derive(Debug)]
struct WakeSlot {
    sleeper: Sleeper,
    verdict: AtomicU8,
}

/// Who waits on a [`WakeSlot`]: a parked thread (the thread driver) or a task (the task
/// driver, [`tasks`]), woken through its waker.
#[derive(Debug)]
enum Sleeper {
    Thread(Thread),
    /// The waker of the task's latest poll; the leader takes it to wake. Native only: the
    /// component drives its own waits (`guest::wal_async`).
    #[cfg(not(target_arch = "wasm32"))]
    Task(Mutex<Option<std::task::Waker>>),
}

/// What a parked waiter is woken with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Verdict {
    /// Its records are durable; the leader deregistered it.
    Durable = 1,
    /// The writer failed before its records were durable; the leader deregistered it.
    Failed = 2,
    /// Leadership is free and its records are still pending: it re-checks under the lock. It
    /// is still registered.
    Recheck = 3,
}

/// A [`WakeSlot`] with no verdict yet.
const ASLEEP: u8 = 0;

impl WakeSlot {
    fn for_current_thread() -> Arc<Self> {
        Arc::new(WakeSlot {
            sleeper: Sleeper::Thread(thread::current()),
            verdict: AtomicU8::new(ASLEEP),
        })
    }

    /// A slot for a task of the task driver, woken through the waker its wait stores.
    #[cfg(not(target_arch = "wasm32"))]
    fn for_task() -> Arc<Self> {
        Arc::new(WakeSlot {
            sleeper: Sleeper::Task(Mutex::new(None)),
            verdict: AtomicU8::new(ASLEEP),
        })
    }

    /// The verdict, once the leader has set one.
    fn verdict(&self) -> Option<Verdict> {
        match self.verdict.load(Ordering::Acquire) {
            v if v == Verdict::Durable as u8 => Some(Verdict::Durable),
            v if v == Verdict::Failed as u8 => Some(Verdict::Failed),
            v if v == Verdict::Recheck as u8 => Some(Verdict::Recheck),
            _ => None,
        }
    }

    /// Sleeps until a verdict is set. `park` may return spuriously or for an earlier `unpark`,
    /// hence the loop.
    #[expect(
        clippy::disallowed_methods,
        reason = "the thread driver parks its waiters"
    )]
    fn wait(&self) -> Verdict {
        loop {
            match self.verdict() {
                Some(verdict) => return verdict,
                None => thread::park(),
            }
        }
    }

    fn wake(&self, verdict: Verdict) {
        self.verdict.store(verdict as u8, Ordering::Release);
        match &self.sleeper {
            Sleeper::Thread(thread) => thread.unpark(),
            #[cfg(not(target_arch = "wasm32"))]
            Sleeper::Task(waker) => {
                if let Some(waker) = lock(waker).take() {
                    waker.wake();
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in one caller's thread must not wedge every other caller; the core's invariants
    // hold between statements that can panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WalWriter {
    /// Creates a writer over a new log at `path` (missing or zero bytes), starting at
    /// `first_seq`, with the policy's default group bound (16 MiB under `FullSync`, 1 MiB
    /// otherwise).
    ///
    /// Durability: under `FullSync` and `Barrier`, when this returns `Ok` the header is synced and
    /// so is the parent directory, so the empty log and its `first_seq` survive power loss.
    /// Under `Skip` nothing is synced.
    pub fn create(
        vfs: &dyn Vfs,
        path: &str,
        first_seq: LogSeq,
        policy: DurabilityPolicy,
    ) -> Result<Self, WalOpenError> {
        Self::create_with(
            vfs,
            path,
            WalOptions {
                first_seq,
                ..WalOptions::single_file(policy)
            },
        )
    }

    /// [`Self::create`] with an explicit encoded-byte group bound.
    pub fn create_with_group_bytes_max(
        vfs: &dyn Vfs,
        path: &str,
        first_seq: LogSeq,
        policy: DurabilityPolicy,
        group_bytes_max: usize,
    ) -> Result<Self, WalOpenError> {
        let options = WalOptions {
            first_seq,
            group_bytes_max: Some(group_bytes_max),
            ..WalOptions::single_file(policy)
        };
        Self::create_with(vfs, path, options)
    }

    /// [`Self::create`] with every option.
    ///
    /// One writer per log: before it touches the log, this takes the advisory lock
    /// `<path>.lock` ([`super::lock`]) and holds it until the writer is dropped.
    ///
    /// # Errors
    /// [`WalOpenError::Locked`] if another writer holds the log (nothing was written);
    /// [`WalOpenError::NotEmpty`] if the file holds bytes; a Vfs error otherwise.
    pub fn create_with(
        vfs: &dyn Vfs,
        path: &str,
        options: WalOptions,
    ) -> Result<Self, WalOpenError> {
        Self::start_single_file(vfs, path, options, SetupMode::Create).map(|(writer, _)| writer)
    }

    fn start_single_file(
        vfs: &dyn Vfs,
        path: &str,
        options: WalOptions,
        mode: SetupMode,
    ) -> Result<(Self, Recovery), WalOpenError> {
        let lock = lock_single_file(vfs, path, &options)?;
        let io = ReadyIo(vfs);
        let file = io.open(path, OpenMode::Create)?;
        let (core, recovery) = complete_now(setup_log(&io, path, &lock, &file, options, mode))?;
        Ok((
            Self::from_parts(Storage::SingleFile(file), core, Box::new(lock)),
            recovery,
        ))
    }

    /// Recovers the log at `path` and resumes appending after its last valid record. A missing
    /// or zero-byte file becomes a new log starting at seq 0.
    pub fn open(
        vfs: &dyn Vfs,
        path: &str,
        policy: DurabilityPolicy,
    ) -> Result<(Self, Recovery), WalOpenError> {
        Self::open_with(vfs, path, WalOptions::single_file(policy))
    }

    /// [`Self::open`] with every option; `options.first_seq` applies only to a new log.
    ///
    /// One writer per log: before it reads the log, this takes the advisory lock `<path>.lock`
    /// ([`super::lock`]) and holds it until the writer is dropped.
    ///
    /// A torn tail is cut off (`set_len`) and, under `FullSync` and `Barrier`, the cut is synced
    /// before this returns, so no later append can land after unfinished bytes; so is the
    /// parent directory, so that no record is acknowledged in a file whose name an earlier
    /// writer's failed directory sync left undurable.
    ///
    /// # Errors
    /// [`WalOpenError::Locked`] if another writer holds the log; a bad header, corruption
    /// followed by valid records, a malformed record or a seq gap (all with byte offsets), or a
    /// Vfs error. The file is not modified when an error is returned.
    pub fn open_with(
        vfs: &dyn Vfs,
        path: &str,
        options: WalOptions,
    ) -> Result<(Self, Recovery), WalOpenError> {
        Self::start_single_file(vfs, path, options, SetupMode::Open)
    }

    /// Creates a segmented log in directory `dir` (created if missing; it must hold no
    /// segment), with segments of `options.segment_bytes` (64 MiB unless set).
    ///
    /// One writer per log: once the directory exists, this takes the advisory lock
    /// `<dir>/LOCK` ([`super::lock`]) before anything else, and holds it until the writer is
    /// dropped.
    ///
    /// Durability: under `FullSync` and `Barrier`, on `Ok` the first segment (header and
    /// preallocated size), its name and the directory's own name are synced, so the empty log
    /// and its first seq survive power loss. Under `Skip` nothing is synced.
    ///
    /// # Errors
    /// As [`setup_segments`] says; [`WalOpenError::Locked`] if another writer holds the log.
    pub fn create_segmented(
        vfs: Arc<dyn Vfs>,
        dir: &str,
        options: WalOptions,
    ) -> Result<Self, WalOpenError> {
        let io = ReadyIo(vfs);
        let setup = complete_now(setup_segments(&io, dir, options, SetupMode::Create))?;
        Ok(Self::from_segmented(io, dir, setup))
    }

    /// Recovers the segmented log in `dir` (a missing or empty directory becomes a new log at
    /// `options.first_seq`) and resumes after its last valid record.
    ///
    /// One writer per log: once the directory exists, this takes the advisory lock
    /// `<dir>/LOCK` ([`super::lock`]) before it reads anything, and holds it until the writer
    /// is dropped.
    ///
    /// Before this returns, under `FullSync` and `Barrier`, an unfinished rotation's residue has
    /// been removed and a torn tail zeroed, each durably, so no later append can land after
    /// unfinished bytes; and the directory and its parent are synced, so that no record is
    /// acknowledged in a segment whose name an earlier writer's failed directory sync left
    /// undurable.
    ///
    /// # Errors
    /// [`WalOpenError::Locked`] if another writer holds the log; a bad header or checkpoint,
    /// corruption, a seq gap inside or between segments, a first
    /// segment that starts after the checkpoint's next seq, or a Vfs error. Nothing is modified
    /// when recovery fails.
    pub fn open_segmented(
        vfs: Arc<dyn Vfs>,
        dir: &str,
        options: WalOptions,
    ) -> Result<(Self, SegmentedRecovery), WalOpenError> {
        let io = ReadyIo(vfs);
        let setup = complete_now(setup_segments(&io, dir, options, SetupMode::Open))?;
        let recovery = setup.recovery.clone();
        Ok((Self::from_segmented(io, dir, setup), recovery))
    }

    fn from_segmented(io: ReadyIo, dir: &str, setup: SegmentedSetup) -> Self {
        let lock = setup.lock;
        let storage = Storage::Segments(Segments {
            io,
            dir: dir.to_owned(),
            segment_bytes: setup.segment_bytes,
            current: Mutex::new(setup.current),
            retention: Mutex::new(SegmentRetention {
                live: setup.live,
                checkpoint: setup.recovery.checkpoint,
            }),
        });
        Self::from_parts(storage, setup.core, lock)
    }

    fn from_parts(storage: Storage, core: GroupCommit, lock: Box<dyn VfsLock>) -> Self {
        WalWriter {
            storage,
            core: Mutex::new(core),
            parked: Mutex::new(Vec::new()),
            departing: AtomicUsize::new(0),
            gatherer: Mutex::new(None),
            group_scratch: Mutex::new(Vec::new()),
            sealed: Condvar::new(),
            _lock: lock,
        }
    }

    /// Makes one record visible and returns its seq, without waiting when another caller already
    /// leads the in-flight group. An idle caller becomes leader and writes (and, per policy,
    /// syncs) the pending records before returning.
    ///
    /// Durability: none promised on `Ok`. Use [`Self::flush`] or a durable commit to wait.
    ///
    /// # Errors
    /// Typed refusals (payload, group, retention bounds; poisoned writer) stage nothing and
    /// consume no seq. [`WalWriteError::Failed`] means the record is visible but this caller,
    /// leading, saw a write or sync fail: the writer is poisoned.
    pub fn commit(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalWriteError> {
        self.commit_many(&[(op, payload)]).map(|r| r.start)
    }

    /// Makes one record visible, then waits until a group containing it has been written and
    /// synced as the policy says.
    ///
    /// Durability on `Ok`: under `FullSync` the record survives power loss (fsync returned);
    /// under `Barrier`, on Linux, the same (fdatasync returned), on macOS it is ordered before
    /// later records; under `Skip` it has been written to the OS (survives a process crash).
    ///
    /// On `Err(Failed)` the record may or may not be on disk; it is not reported durable, and
    /// the writer is poisoned.
    pub fn commit_durable(&self, op: u16, payload: &[u8]) -> Result<LogSeq, WalWriteError> {
        self.commit_many_durable(&[(op, payload)]).map(|r| r.start)
    }

    /// Makes every record of one batch visible, in input order, with contiguous seqs.
    ///
    /// Returns after every record is visible. As with [`Self::commit`], an idle caller that
    /// becomes leader writes the pending records before returning. An empty batch returns the
    /// empty range at the next seq and performs no I/O.
    ///
    /// If staging fails, the batch consumes no sequence and publishes no visibility. After
    /// staging succeeds, a write or sync failure poisons the writer: the staged records remain
    /// visible, and this call returns [`WalWriteError::Failed`] if it was leading.
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalWriteError> {
        let mut core = lock(&self.core);
        let range = core.stage(records)?;
        if range.is_empty() {
            return Ok(range);
        }
        let departing = self.departing_count(&core);
        if let Some(leadership) = core.claim_leadership(departing) {
            core = self.lead(core, leadership);
            return led_commit_outcome(&core, range);
        }
        Ok(range)
    }

    /// Makes every record of one batch visible in input order, then waits until the group
    /// holding the final record has been written and synced as the policy says (see
    /// [`Self::commit_durable`] for what that promises per policy).
    ///
    /// An empty batch returns the empty range at the next seq and performs no I/O. If staging
    /// fails, the batch consumes no sequence. After staging succeeds, a write or sync failure
    /// leaves the records visible, returns [`WalWriteError::Failed`], and poisons the writer.
    pub fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalWriteError> {
        let mut core = lock(&self.core);
        let range = core.stage(records)?;
        if range.is_empty() {
            return Ok(range);
        }
        self.wait_durable(core, range.end)?;
        Ok(range)
    }

    /// Waits until every record visible when this call observes the writer is durable (per
    /// policy, as [`Self::commit_durable`] says).
    ///
    /// No record is appended solely to force progress. If pending records have no current
    /// leader, this caller assumes leadership and drains them.
    ///
    /// # Errors
    /// [`WalWriteError::Poisoned`] if the writer had already failed; [`WalWriteError::Failed`]
    /// if a write or sync fails while this call waits.
    pub fn flush(&self) -> Result<(), WalWriteError> {
        let core = lock(&self.core);
        if let Some(cause) = core.failure() {
            return Err(WalWriteError::Poisoned {
                cause: cause.clone(),
            });
        }
        let target = core.visible_end();
        self.wait_durable(core, target)
    }

    /// Seals the active segment: starts a new one, so that every record durable when this is
    /// called lies in a sealed segment (every segment but the last), immutable from here on and
    /// ready to be archived. Pending records go to the new segment, with the group that starts
    /// it; with none pending, that group holds no record.
    ///
    /// Returns `false`, and writes nothing, when there is nothing to seal: a single-file log,
    /// or an active segment that holds no record. If no one leads, this caller leads.
    ///
    /// Durability: under a syncing policy, on `Ok(true)` the new segment (header, size and
    /// name: a file and a directory sync) is durable, so a crash after this returns recovers
    /// the sealed segment as sealed. Under `Skip` nothing is synced. The cost: one segment
    /// preallocated and a file and a directory sync per call.
    ///
    /// # Errors
    /// [`WalWriteError::Poisoned`] if the writer had already failed; [`WalWriteError::Failed`]
    /// if creating or syncing the new segment fails, which poisons the writer as a failed
    /// group does.
    pub fn seal_active_segment(&self) -> Result<bool, WalWriteError> {
        let mut core = lock(&self.core);
        let Some(ticket) = core.request_seal()? else {
            return Ok(false);
        };
        loop {
            match core.seal_wait_state(ticket) {
                WaitState::Durable => return Ok(true),
                WaitState::Failed(cause) => return Err(WalWriteError::Failed { cause }),
                WaitState::Pending => {}
            }
            let departing = self.departing_count(&core);
            core = match core.claim_leadership(departing) {
                Some(leadership) => self.lead(core, leadership),
                None => self
                    .sealed
                    .wait(core)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Registers as a durable waiter for `target`, leads or sleeps until it is durable or the
    /// writer failed, and leaves registered by no one.
    fn wait_durable<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
        target: LogSeq,
    ) -> Result<(), WalWriteError> {
        core.register_durable_wait(target);
        let mut slot = None;
        loop {
            match core.durable_wait_state(target) {
                WaitState::Durable => {
                    core.deregister_durable_wait(target);
                    return Ok(());
                }
                WaitState::Failed(cause) => {
                    core.deregister_durable_wait(target);
                    return Err(WalWriteError::Failed { cause });
                }
                WaitState::Pending => {}
            }
            let departing = self.departing_count(&core);
            if let Some(leadership) = core.claim_leadership(departing) {
                core = self.lead(core, leadership);
                continue;
            }
            let slot = slot.get_or_insert_with(WakeSlot::for_current_thread);
            slot.verdict.store(ASLEEP, Ordering::Relaxed);
            lock(&self.parked).push(ParkedWaiter {
                target,
                slot: Arc::clone(slot),
            });
            drop(core);
            match slot.wait() {
                Verdict::Durable => {
                    self.departed();
                    return Ok(());
                }
                Verdict::Failed => {
                    self.departed();
                    return Err(self.failure_behind_verdict());
                }
                Verdict::Recheck => core = lock(&self.core),
            }
        }
    }

    /// The error for a waiter woken with [`Verdict::Failed`]: the failure that poisoned the
    /// writer.
    fn failure_behind_verdict(&self) -> WalWriteError {
        let core = lock(&self.core);
        let cause = core.failure().expect("a failed verdict follows a failure");
        WalWriteError::Failed {
            cause: cause.clone(),
        }
    }

    /// One leader's turn from a caller that holds no lock ([`Self::lead`], then the lock is
    /// let go): the task driver's, wherever it may block.
    #[cfg(not(target_arch = "wasm32"))]
    fn lead_turn(&self, leadership: Leadership) {
        drop(self.lead(lock(&self.core), leadership));
    }

    /// Callers of a completed group still on their way out: those woken with their verdict, and
    /// any that learnt it under the lock and have not deregistered yet.
    fn departing_count(&self, core: &GroupCommit) -> usize {
        self.departing.load(Ordering::SeqCst) + core.departing_waiters()
    }

    /// A woken waiter is out of the writer. The last one out wakes a gathering leader.
    fn departed(&self) {
        if self.departing.fetch_sub(1, Ordering::SeqCst) == 1
            && let Some(gatherer) = lock(&self.gatherer).take()
        {
            gatherer.unpark();
        }
    }

    /// Sleeps, without the lock, until every waiter woken with its verdict has left.
    #[expect(
        clippy::disallowed_methods,
        reason = "the thread driver parks its gathering leader"
    )]
    fn wait_for_departures<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
    ) -> MutexGuard<'a, GroupCommit> {
        if self.departing.load(Ordering::SeqCst) == 0 {
            return core;
        }
        // Published before the re-check below, and `departed` decrements before it looks, so
        // one of the two sees the other: the last departure cannot slip between them unseen.
        *lock(&self.gatherer) = Some(thread::current());
        drop(core);
        while self.departing.load(Ordering::SeqCst) > 0 {
            thread::park();
        }
        core = lock(&self.core);
        lock(&self.gatherer).take();
        core
    }

    /// Under the lock, after the leader's group completed or it released: deregisters every
    /// parked waiter whose wait is settled, and, if leadership was handed off, picks the
    /// earliest parked waiter on pending records to take it, for [`Self::wake_settled`] to wake.
    fn take_woken(
        &self,
        core: &mut GroupCommit,
        step: LeaderStep,
    ) -> Vec<(Arc<WakeSlot>, Verdict)> {
        let durable_end = core.durable_end();
        let failed = core.failure().is_some();
        let mut parked = lock(&self.parked);
        let mut woken = Vec::new();
        parked.retain(|waiter| {
            let verdict = if waiter.target <= durable_end {
                Verdict::Durable
            } else if failed {
                Verdict::Failed
            } else {
                return true;
            };
            core.deregister_durable_wait(waiter.target);
            woken.push((Arc::clone(&waiter.slot), verdict));
            false
        });
        // Counted before any of them can run, so a departure never finds the count at 0.
        self.departing.fetch_add(woken.len(), Ordering::SeqCst);
        if step == LeaderStep::HandOff && !parked.is_empty() {
            // Woken last, below: by the time it has the lock and gathers, most of the group's
            // callers are on their way back.
            woken.push((parked.remove(0).slot, Verdict::Recheck));
        }
        woken
    }

    /// After a leader's step: wakes, without the lock, the waiters [`Self::take_woken`] settles,
    /// in its order, and takes the lock back. A spread of the wakes over the woken (each waking
    /// two more) cut the leader's share but not the cycle, on two cores: measured within noise,
    /// so the leader wakes them all.
    fn wake_settled<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
        step: LeaderStep,
    ) -> MutexGuard<'a, GroupCommit> {
        let woken = self.take_woken(&mut core, step);
        drop(core);
        for (slot, verdict) in woken {
            slot.wake(verdict);
        }
        lock(&self.core)
    }

    /// Leads until the core says to stop: writes one group at a time, outside the lock, and
    /// wakes the settled waiters after each.
    #[expect(
        clippy::disallowed_methods,
        clippy::disallowed_types,
        reason = "the thread driver yields to gather, and times groups for tracing"
    )]
    fn lead<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
        leadership: Leadership,
    ) -> MutexGuard<'a, GroupCommit> {
        if leadership.gather {
            // The previous group's callers are awake and need no lock to leave, so this wait is
            // bounded by their count, not by time. Yielding instead would spin a core that, on a
            // small machine, those very callers need.
            core = self.wait_for_departures(core);
            for round in 0.. {
                let before = core.pending_records();
                drop(core);
                thread::yield_now();
                core = lock(&self.core);
                if !core.keep_gathering(round, self.departing_count(&core), before) {
                    break;
                }
            }
        }
        loop {
            let Some(group) = core.poll_group() else {
                core.release_leadership();
                return self.wake_settled(core, LeaderStep::Release);
            };
            drop(core);
            // Timed only when someone listens: a clock read per group is cheap, but not free.
            let started = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
            let result = self.write_group(&group);
            if let Some(started) = started {
                trace_group(&group, started.elapsed(), &result);
            }
            core = lock(&self.core);
            let sealing_callers_settled = group.seals || result.is_err();
            core.handle_group_done(&group, result);
            if sealing_callers_settled {
                self.sealed.notify_all();
            }
            let step = core.poll_leader_step();
            core = self.wake_settled(core, step);
            if step != LeaderStep::Continue {
                return core;
            }
        }
    }

    /// Carries out `group` through the one executor ([`super::executor`]), whose futures are
    /// ready at once over [`ReadyIo`].
    fn write_group(&self, group: &Group) -> Result<(), VfsError> {
        let mut scratch = lock(&self.group_scratch);
        match &self.storage {
            Storage::SingleFile(file) => {
                complete_now(write_group(&ReadyIo(()), file, group, &mut scratch))
            }
            Storage::Segments(segments) => {
                let mut current = lock(&segments.current);
                let site = SegmentSite {
                    dir: &segments.dir,
                    segment_bytes: segments.segment_bytes,
                };
                let written = complete_now(write_segmented_group(
                    &segments.io,
                    &current,
                    site,
                    group,
                    &mut scratch,
                ));
                if let Some(started) = written.started {
                    *current = started;
                    lock(&segments.retention).live.push(group.seqs.start);
                }
                written.result
            }
        }
    }

    /// Durably records that the owner has absorbed every record through `absorbed_through`
    /// (inclusive), which allows [`Self::truncate_through`] to delete them.
    ///
    /// Durability: on `Ok` the checkpoint survives power loss, whatever the policy (it is
    /// staged, fsynced, renamed into place and the directory fsynced). A checkpoint equal to
    /// the current one returns `Ok` and writes nothing.
    ///
    /// # Errors
    /// [`WalRetentionError::BeyondDurable`] unless `absorbed_through` is durable (never
    /// clamped); [`WalRetentionError::Regressed`] below the current checkpoint;
    /// [`WalRetentionError::NotSegmented`] for a single-file log; `Io` if writing failed, after
    /// which the old checkpoint is still the one in effect for this writer, even when the
    /// failure was the directory sync after the rename (a crash may then bring back either):
    /// [`Self::truncate_through`] relies only on a checkpoint whose call returned `Ok`. Calling
    /// `checkpoint` again writes it again.
    pub fn checkpoint(&self, absorbed_through: LogSeq) -> Result<(), WalRetentionError> {
        let Storage::Segments(segments) = &self.storage else {
            return Err(WalRetentionError::NotSegmented);
        };
        let durable_end = self.durable_end();
        let done = lock(&segments.retention).checkpoint(
            segments.io.vfs(),
            &segments.dir,
            absorbed_through,
            durable_end,
        );
        tracing::info!(dir = %segments.dir, absorbed_through = absorbed_through.0, ok = done.is_ok(), "wal checkpoint");
        done
    }

    /// Deletes the segments whose records all lie at or below `through`, oldest first, then
    /// syncs the directory. The segment being appended to is never deleted.
    ///
    /// Durability: on `Ok` the deletions survive power loss. A crash midway leaves a suffix of
    /// the segments (deletion is oldest first), so a reopen never sees a gap.
    ///
    /// # Errors
    /// [`WalRetentionError::BeyondCheckpoint`] unless a checkpoint covers `through`;
    /// [`WalRetentionError::NotSegmented`]; `Io` if a delete or the directory sync failed (the
    /// segments deleted so far stay deleted; the call can be repeated). No acknowledgement
    /// depends on a deletion: if its directory sync failed, a crash may bring back a prefix of
    /// the deleted segments, whose records the checkpoint covers.
    pub fn truncate_through(&self, through: LogSeq) -> Result<WalTruncation, WalRetentionError> {
        let Storage::Segments(segments) = &self.storage else {
            return Err(WalRetentionError::NotSegmented);
        };
        let truncation = lock(&segments.retention).truncate_through(
            segments.io.vfs(),
            &segments.dir,
            through,
        )?;
        tracing::info!(
            dir = %segments.dir,
            through = through.0,
            segments_removed = truncation.segments_removed,
            "wal truncated"
        );
        if truncation.segments_removed > 0 {
            lock(&self.core).count_setup_syncs(0, 1);
        }
        Ok(truncation)
    }

    /// The first seqs of the live segments, in order (empty for a single-file log).
    pub fn segments(&self) -> Vec<LogSeq> {
        match &self.storage {
            Storage::SingleFile(_) => Vec::new(),
            Storage::Segments(segments) => lock(&segments.retention).live.clone(),
        }
    }

    /// The durable checkpoint: the seq the owner has absorbed through, if one was recorded.
    pub fn checkpointed_through(&self) -> Option<LogSeq> {
        match &self.storage {
            Storage::SingleFile(_) => None,
            Storage::Segments(segments) => lock(&segments.retention).checkpoint,
        }
    }

    /// Returns at most `limit` retained records at or after `first_seq`, in seq order.
    ///
    /// Clones share the encoded WAL allocations. Records are retained from the moment they are
    /// visible until [`Self::retire_visible_through`] releases them, so this includes records not
    /// yet durable (and, after a failure, records that never will be).
    pub fn visible_records(&self, first_seq: LogSeq, limit: usize) -> Vec<VisibleRecord> {
        lock(&self.core).visible_records(first_seq, limit)
    }

    /// Releases retained records through `absorbed_through` (inclusive), which the caller has
    /// incorporated into its own state.
    ///
    /// # Errors
    /// [`WalRetireError::BeyondDurable`] if `absorbed_through` is not durable yet: the request is
    /// never clamped, and nothing is released.
    pub fn retire_visible_through(
        &self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalRetireError> {
        lock(&self.core).retire_visible_through(absorbed_through)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WalWriterStats {
        lock(&self.core).stats()
    }

    /// The first seq not yet durable.
    pub fn durable_end(&self) -> LogSeq {
        lock(&self.core).durable_end()
    }

    /// The seq the next record will get.
    pub fn visible_end(&self) -> LogSeq {
        lock(&self.core).visible_end()
    }
}

/// The event for one group carried out: its records, bytes, sync and how long it took.
/// What a `commit_many` that led returns: its range, unless a write or sync failed before its
/// last record was durable.
fn led_commit_outcome(
    core: &GroupCommit,
    range: Range<LogSeq>,
) -> Result<Range<LogSeq>, WalWriteError> {
    match core.failure() {
        Some(cause) if core.durable_end() < range.end => Err(WalWriteError::Failed {
            cause: cause.clone(),
        }),
        _ => Ok(range),
    }
}

fn trace_group(group: &Group, took: std::time::Duration, result: &Result<(), VfsError>) {
    let bytes: usize = group.chunks.iter().map(|chunk| chunk.len()).sum();
    tracing::debug!(
        first_seq = group.seqs.start.0,
        records = group.seqs.end.0 - group.seqs.start.0,
        bytes,
        sync = ?group.sync,
        starts_segment = group.starts_segment,
        micros = took.as_micros() as u64,
        error = result.as_ref().err().map(tracing::field::display),
        "wal group written"
    );
}
