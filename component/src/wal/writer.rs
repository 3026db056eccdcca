//! [`WalWriter`]: the thread driver of [`GroupCommit`]. Caller threads are leader and
//! followers; there is no timer and no background thread. Its task driver ([`tasks`]) lets
//! tokio tasks wait and lead on the same writer.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use crate::vfs::{
    DeviceIo, OpenMode, ReadyIo, Vfs, VfsFile, VfsLock, VfsReservation, complete_now,
};

use super::executor::{ClaimSite, SegmentSite, write_group, write_segmented_group};
use super::group_commit::{Group, GroupCommit, GroupError, LeaderStep, Leadership, WaitState};
use super::replay::Recovery;
use super::segment::{SegmentRetention, SegmentedRecovery};
use super::setup::{SegmentedSetup, SetupMode, lock_single_file, setup_log, setup_segments};
use super::{DurabilityPolicy, LogSeq, WalOpenError, WalOptions, WalWriteError};

pub use super::group_commit::{VisibleRecord, WalRetirement, WalWriterStats};

mod retention;
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
mod tasks;
mod wake;

use wake::{ASLEEP, ParkedWaiter, Verdict, WakeSlot, lock};

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

impl Storage {
    /// Where this log's disk claims are reserved.
    fn claim_site(&self) -> ClaimSite<'_> {
        match self {
            Storage::SingleFile(file) => ClaimSite::File(&**file),
            Storage::Segments(segments) => ClaimSite::Segments {
                vfs: segments.io.vfs(),
                dir: &segments.dir,
            },
        }
    }
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
    /// Held for its drop: the room a checkpoint needs under a disk quota.
    _checkpoint_room: Vec<Box<dyn VfsReservation>>,
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
            _checkpoint_room: setup.checkpoint_room,
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
    /// Typed refusals (payload, group, retention bounds; poisoned writer;
    /// [`WalWriteError::StalledRefused`] when a stalled writer's retry still finds no room)
    /// stage nothing and consume no seq. [`WalWriteError::Failed`] means the record is visible
    /// but this caller, leading, saw a write or sync fail: the writer is poisoned. A group that
    /// found no room before its sync is not an error here: the record is visible and pending,
    /// and the next flush or commit retries it (see [`super`]'s module doc).
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
    /// the writer is poisoned. On `Err(Stalled)` its group found no room before its sync: the
    /// record is visible, pending, and not durable; the writer is not poisoned, and the next
    /// [`Self::flush`] (or commit) retries it: do not commit it again. On
    /// `Err(StalledRefused)` nothing was staged.
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
    /// visible, and this call returns [`WalWriteError::Failed`] if it was leading. A lack of
    /// room before the sync stalls it instead (the records stay pending; `Ok`).
    pub fn commit_many(&self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalWriteError> {
        let mut core = self.retry_stalled(lock(&self.core))?;
        let range = core.stage_with(records, |claim| self.storage.claim_site().reserve(claim))?;
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
    /// leaves the records visible, returns [`WalWriteError::Failed`], and poisons the writer;
    /// a lack of room before the sync returns [`WalWriteError::Stalled`] and leaves them
    /// pending for the next flush (see [`Self::commit_durable`]).
    pub fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<Range<LogSeq>, WalWriteError> {
        let mut core = self.retry_stalled(lock(&self.core))?;
        let range = core.stage_with(records, |claim| self.storage.claim_site().reserve(claim))?;
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
    /// if a write or sync fails while this call waits; [`WalWriteError::Stalled`] if a group
    /// found no room before its sync. A stalled writer's flush is its retry: it writes the
    /// stalled records again, and returns `Ok` once room was freed.
    pub fn flush(&self) -> Result<(), WalWriteError> {
        let mut core = lock(&self.core);
        if let Some(cause) = core.failure() {
            return Err(WalWriteError::Poisoned {
                cause: cause.clone(),
            });
        }
        core.retry_stalled();
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
        let mut core = self.retry_stalled(lock(&self.core))?;
        let Some(ticket) =
            core.request_seal_with(|claim| self.storage.claim_site().reserve(claim))?
        else {
            return Ok(false);
        };
        loop {
            match core.seal_wait_state(ticket) {
                WaitState::Durable => return Ok(true),
                WaitState::Failed(cause) => return Err(WalWriteError::Failed { cause }),
                WaitState::Stalled(cause) => return Err(WalWriteError::Stalled { cause }),
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
                WaitState::Stalled(cause) => {
                    core.deregister_durable_wait(target);
                    return Err(WalWriteError::Stalled { cause });
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

    /// A stalled writer's records are retried before any new work (see
    /// [`super::group_commit`]'s module doc): clears the stall and waits until everything
    /// visible is durable, leading the retry if no one else does. Returns the lock; the
    /// retry's error if it failed, [`WalWriteError::StalledRefused`] if it found no room
    /// again.
    fn retry_stalled<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
    ) -> Result<MutexGuard<'a, GroupCommit>, WalWriteError> {
        if !core.retry_stalled() {
            return Ok(core);
        }
        let target = core.visible_end();
        self.wait_durable(core, target)
            .map_err(WalWriteError::before_staging)?;
        Ok(lock(&self.core))
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
    #[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
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
        let stalled = core.stalled().is_some();
        let mut parked = lock(&self.parked);
        let mut woken = Vec::new();
        let mut rechecks = Vec::new();
        parked.retain(|waiter| {
            let verdict = if waiter.target <= durable_end {
                Verdict::Durable
            } else if failed {
                Verdict::Failed
            } else if stalled {
                // Still registered: it learns of the stall under the lock (or finds a retry
                // under way, and waits on).
                rechecks.push((Arc::clone(&waiter.slot), Verdict::Recheck));
                return false;
            } else {
                return true;
            };
            core.deregister_durable_wait(waiter.target);
            woken.push((Arc::clone(&waiter.slot), verdict));
            false
        });
        // Counted before any of them can run, so a departure never finds the count at 0.
        self.departing.fetch_add(woken.len(), Ordering::SeqCst);
        woken.append(&mut rechecks);
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
    fn write_group(&self, group: &Group) -> Result<(), GroupError> {
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
                written.adopt(
                    group.seqs.start,
                    || lock(&segments.retention),
                    |started| *current = started,
                )
            }
        }
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

fn trace_group(group: &Group, took: std::time::Duration, result: &Result<(), GroupError>) {
    let bytes: usize = group.chunks.iter().map(|chunk| chunk.len()).sum();
    tracing::debug!(
        first_seq = group.seqs.start.0,
        records = group.seqs.end.0 - group.seqs.start.0,
        bytes,
        sync = ?group.sync,
        starts_segment = group.starts_segment,
        micros = took.as_micros() as u64,
        error = result
            .as_ref()
            .err()
            .map(|error| tracing::field::display(&error.cause)),
        "wal group written"
    );
}
