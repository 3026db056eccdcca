//! [`WalWriter`]: the thread driver of [`GroupCommit`]. Caller threads are leader and
//! followers; there is no timer and no background thread.

use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::header::{Family, FileHeader, HEADER_BYTES};
use crate::vfs::{OpenMode, Vfs, VfsError, VfsFile, parent_dir};

use super::group_commit::{Group, GroupCommit, LeaderStep, Leadership, WaitState};
use super::replay::{Recovery, RecoveryEnd, replay};
use super::{
    DurabilityPolicy, LogSeq, WAL_VERSION, WalOpenError, WalOptions, WalRetireError, WalWriteError,
};

pub use super::group_commit::{VisibleRecord, WalRetirement, WalWriterStats};

/// Whether [`setup_log`] starts a new log or recovers an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupMode {
    /// The file must be empty (missing files are created empty by the caller's open).
    Create,
    /// Recover whatever the file holds; an empty file becomes a new log.
    Open,
}

/// Prepares `file`, opened at `path` in `vfs`, for appending, and returns the group-commit core
/// that continues it. Every driver (the thread driver here, the component's async driver)
/// starts a log through this one function, so creation and recovery behave the same in all.
///
/// A new log gets its header; under `FullSync` and `Barrier` the header is synced and then the
/// parent directory, so the empty log and its first seq survive power loss from here on. A torn
/// tail is cut (`set_len`) and, under those policies, the cut is synced before any append.
///
/// # Errors
/// [`WalOpenError::NotEmpty`] when creating over bytes; replay's errors when recovering (the
/// file is then not modified); Vfs errors.
pub fn setup_log(
    vfs: &dyn Vfs,
    path: &str,
    file: &dyn VfsFile,
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
    let sync = options.policy.group_sync();
    let core = match recovery.end {
        RecoveryEnd::NewLog => {
            let header = FileHeader {
                family: Family::Wal,
                version: WAL_VERSION,
                family_word: options.first_seq.0,
            };
            file.write_at(0, &header.encode())?;
            let mut core = GroupCommit::new(&options, options.first_seq, HEADER_BYTES as u64);
            if let Some(kind) = sync {
                // The header carries first_seq; syncing it now means a crash before the first
                // group still reopens at the right seq. The directory sync makes the new file's
                // name durable: without it a power loss can drop the file and every record in it.
                file.sync(kind)?;
                vfs.sync_dir(parent_dir(path))?;
                core.count_setup_syncs(1, 1);
            }
            core
        }
        RecoveryEnd::Clean | RecoveryEnd::TornTail => {
            let mut core = GroupCommit::new(&options, recovery.next_seq, recovery.valid_end);
            if recovery.end == RecoveryEnd::TornTail {
                // The unfinished group is cut before anything new is appended; syncing the cut
                // closes the window where a crash could bring its bytes back after records that
                // we append later.
                file.set_len(recovery.valid_end)?;
                if let Some(kind) = sync {
                    file.sync(kind)?;
                    core.count_setup_syncs(1, 0);
                }
            }
            core
        }
    };
    Ok((core, recovery))
}

/// How many times at most a gathering leader ([`Leadership::gather`]) yields, once the previous
/// group's callers have left, so that they can commit again; [`GroupCommit::keep_gathering`]
/// stops it at the first round that brings no record. It bounds the delay a gathering leader
/// adds (a yield costs about a microsecond when nothing else is runnable, against 100+ µs for
/// the sync it amortizes), and it never applies to a lone writer, which is never handed
/// leadership. Chosen, not tuned.
pub const GATHER_ROUNDS_MAX: usize = 8;

/// Single-file WAL writer using caller threads as leader and followers.
///
/// There is no timer and no background flusher. An idle arrival becomes leader at once and
/// writes what is pending as one group. Arrivals while a group is in flight stage into the next
/// group, which is bounded in encoded bytes ([`WalOptions::max_group_bytes`]). When that group's
/// callers are waiting durably, the leader hands leadership to one of them (see
/// [`super::group_commit`] for why).
///
/// `WalWriter` is `Send + Sync`: share it with `Arc` across threads.
#[derive(Debug)]
pub struct WalWriter {
    file: Box<dyn VfsFile>,
    core: Mutex<GroupCommit>,
    /// Signalled after every group: its waiters re-check, and a waiter may take leadership.
    group_done: Condvar,
    /// Signalled when a durable waiter leaves: a gathering leader waits here for the callers of
    /// the previous group to be out of the writer before it counts quiet rounds.
    waiter_left: Condvar,
    /// Where a multi-batch group is assembled for one write. Only the leader touches it, so it
    /// is never contended; the mutex only proves that to the compiler.
    group_buf: Mutex<Vec<u8>>,
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
                ..WalOptions::new(policy)
            },
        )
    }

    /// [`Self::create`] with an explicit encoded-byte group bound.
    pub fn create_with_max_group_bytes(
        vfs: &dyn Vfs,
        path: &str,
        first_seq: LogSeq,
        policy: DurabilityPolicy,
        max_group_bytes: usize,
    ) -> Result<Self, WalOpenError> {
        let options = WalOptions {
            first_seq,
            max_group_bytes: Some(max_group_bytes),
            ..WalOptions::new(policy)
        };
        Self::create_with(vfs, path, options)
    }

    /// [`Self::create`] with every option.
    ///
    /// # Errors
    /// [`WalOpenError::NotEmpty`] if the file holds bytes; a Vfs error otherwise.
    pub fn create_with(
        vfs: &dyn Vfs,
        path: &str,
        options: WalOptions,
    ) -> Result<Self, WalOpenError> {
        let file = vfs.open(path, OpenMode::Create)?;
        let (core, _) = setup_log(vfs, path, &*file, options, SetupMode::Create)?;
        Ok(Self::from_parts(file, core))
    }

    /// Recovers the log at `path` and resumes appending after its last valid record. A missing
    /// or zero-byte file becomes a new log starting at seq 0.
    pub fn open(
        vfs: &dyn Vfs,
        path: &str,
        policy: DurabilityPolicy,
    ) -> Result<(Self, Recovery), WalOpenError> {
        Self::open_with(vfs, path, WalOptions::new(policy))
    }

    /// [`Self::open`] with every option; `options.first_seq` applies only to a new log.
    ///
    /// A torn tail is cut off (`set_len`) and, under `FullSync` and `Barrier`, the cut is synced
    /// before this returns, so no later append can land after unfinished bytes.
    ///
    /// # Errors
    /// A bad header, corruption followed by valid records, a malformed record or a seq gap (all
    /// with byte offsets), or a Vfs error. The file is not modified when an error is returned.
    pub fn open_with(
        vfs: &dyn Vfs,
        path: &str,
        options: WalOptions,
    ) -> Result<(Self, Recovery), WalOpenError> {
        let file = vfs.open(path, OpenMode::Create)?;
        let (core, recovery) = setup_log(vfs, path, &*file, options, SetupMode::Open)?;
        Ok((Self::from_parts(file, core), recovery))
    }

    fn from_parts(file: Box<dyn VfsFile>, core: GroupCommit) -> Self {
        WalWriter {
            file,
            core: Mutex::new(core),
            group_done: Condvar::new(),
            waiter_left: Condvar::new(),
            group_buf: Mutex::new(Vec::new()),
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
        if let Some(leadership) = core.claim_leadership() {
            core = self.lead(core, leadership);
            if let Some(cause) = core.failure()
                && core.durable_end() < range.end
            {
                return Err(WalWriteError::Failed {
                    cause: cause.clone(),
                });
            }
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

    /// Registers as a durable waiter for `target`, leads or sleeps until it is durable or the
    /// writer failed, and deregisters.
    fn wait_durable<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
        target: LogSeq,
    ) -> Result<(), WalWriteError> {
        core.register_durable_wait(target);
        loop {
            let outcome = match core.durable_wait_state(target) {
                WaitState::Durable => Ok(()),
                WaitState::Failed(cause) => Err(WalWriteError::Failed { cause }),
                WaitState::Pending => {
                    core = match core.claim_leadership() {
                        Some(leadership) => self.lead(core, leadership),
                        None => self
                            .group_done
                            .wait(core)
                            .unwrap_or_else(PoisonError::into_inner),
                    };
                    continue;
                }
            };
            core.deregister_durable_wait(target);
            self.waiter_left.notify_all();
            return outcome;
        }
    }

    /// Leads until the core says to stop: writes one group at a time, outside the lock, and
    /// wakes waiters after each.
    fn lead<'a>(
        &'a self,
        mut core: MutexGuard<'a, GroupCommit>,
        leadership: Leadership,
    ) -> MutexGuard<'a, GroupCommit> {
        if leadership.gather {
            // The previous group's callers are awake and need only the lock to leave, so this
            // wait is bounded by their count, not by time. Yielding instead would spin a core
            // that, on a small machine, those very callers need.
            while core.departing_waiters() > 0 {
                core = self
                    .waiter_left
                    .wait(core)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            for _ in 0..GATHER_ROUNDS_MAX {
                let before = core.pending_records();
                drop(core);
                std::thread::yield_now();
                core = lock(&self.core);
                if !core.keep_gathering(before, core.pending_records()) {
                    break;
                }
            }
        }
        loop {
            let Some(group) = core.poll_group() else {
                core.release_leadership();
                self.group_done.notify_all();
                return core;
            };
            drop(core);
            let result = self.write_group(&group);
            core = lock(&self.core);
            core.handle_group_done(&group, result);
            let step = core.poll_leader_step();
            self.group_done.notify_all();
            if step != LeaderStep::Continue {
                return core;
            }
        }
    }

    fn write_group(&self, group: &Group) -> Result<(), VfsError> {
        if let [only] = group.chunks.as_slice() {
            self.file.write_at(group.offset, only)?;
        } else {
            let mut buf = lock(&self.group_buf);
            buf.clear();
            for chunk in &group.chunks {
                buf.extend_from_slice(chunk);
            }
            self.file.write_at(group.offset, &buf)?;
        }
        match group.sync {
            Some(kind) => self.file.sync(kind),
            None => Ok(()),
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
