//! The `stele:log/wal-async` export: the async driver of [`GroupCommit`] inside the component.
//!
//! Each export call is a task of the component. Durable calls stage their records, then either
//! lead or park their waker until a group completes. A leader carries out groups through the
//! same executor as the thread driver ([`crate::wal::executor`]), over [`WitIo::Async`]: its
//! sync awaits `vfs-async.sync`, and while it does, the host runs other calls into this
//! instance; they stage into the next group. The rules (when to hand off, when to gather and for
//! how long, what poisons) are the core's, as under the thread driver; this driver tells the
//! core that its callers arrive one per turn ([`Arrivals::OnePerTurn`]). What stays here is only
//! waiting and waking.
//!
//! Cancellation: a waiting task that the host cancels deregisters (its guard runs) and its
//! records stay staged; the next leader writes them. The Stele host never cancels a call it has
//! started: a caller that stops waiting only stops listening for the answer.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::vfs::{DeviceIo, OpenMode, VfsError, VfsLock, VfsReservation, complete_now};
use crate::wal::executor::{ClaimSite, SegmentSite, write_group, write_segmented_group};
use crate::wal::group_commit::{
    Arrivals, DiskClaim, Group, GroupCommit, GroupError, LeaderStep, Leadership, WaitState,
};
use crate::wal::segment::SegmentRetention;
use crate::wal::{
    LogSeq, Recovery, SetupMode, WalRetentionError, WalWriteError, lock_single_file, setup_log,
    setup_segments,
};

use super::Component;
use super::exports::stele::log::wal as wal_types;
use super::exports::stele::log::wal_async as wit;
use super::vfs::{WitFile, WitVfs};
use super::wal::{
    batch, open_error, options, range, recovery, retention_error, retire_error, retirement, stats,
    truncation, visible, write_error,
};
use super::wit_io::WitIo;

pub struct AsyncWriter {
    /// The file groups go to. Replaced by a rotation; an `Rc` so the leader can hold it across
    /// an await without holding the cell's borrow.
    file: RefCell<Rc<WitFile>>,
    /// Set for a segmented log.
    segments: Option<AsyncSegments>,
    core: RefCell<GroupCommit>,
    /// Wakers of tasks waiting for a group to complete or for leadership to be released.
    parked: RefCell<Vec<Waker>>,
    /// Bumped after every group and every release of leadership; a parked task re-checks when it
    /// changed.
    generation: Cell<u64>,
    /// Where the executor assembles a multi-batch group. Only the leader uses it; it takes the
    /// buffer out for the group's duration, across the awaits.
    group_scratch: RefCell<Vec<u8>>,
    /// The writer lock ([`crate::wal::lock`]), held until the writer resource is dropped.
    /// Declared last, so that it is released only after the file above is closed.
    _lock: Box<dyn VfsLock>,
}

struct AsyncSegments {
    dir: String,
    segment_bytes: u64,
    retention: RefCell<SegmentRetention>,
    /// Held for its drop: the room a checkpoint needs under a disk quota.
    _checkpoint_room: Vec<Box<dyn VfsReservation>>,
}

/// Deregisters a durable waiter however its task ends (returned, failed or cancelled), and wakes
/// the others: a gathering leader counts departures.
struct WaitGuard<'a> {
    writer: &'a AsyncWriter,
    target: LogSeq,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.writer
            .core
            .borrow_mut()
            .deregister_durable_wait(self.target);
        self.writer.wake_all();
    }
}

impl AsyncWriter {
    /// Sets up the log through the same functions as the thread driver, over [`WitIo::Async`]:
    /// the open's syncs suspend this call as a group's do, and the instance serves other calls
    /// meanwhile.
    async fn start(
        path: &str,
        wit_options: wal_types::WalOptions,
        mode: SetupMode,
    ) -> Result<(AsyncWriter, Recovery), wal_types::WalError> {
        let options = options(wit_options)?;
        let io = WitIo::Async;
        let (file, segments, mut core, recovery, lock) = if options.segment_bytes.is_some() {
            let setup = setup_segments(&io, path, options, mode)
                .await
                .map_err(open_error)?;
            let segments = AsyncSegments {
                dir: path.to_owned(),
                segment_bytes: setup.segment_bytes,
                retention: RefCell::new(SegmentRetention {
                    live: setup.live,
                    checkpoint: setup.recovery.checkpoint,
                }),
                _checkpoint_room: setup.checkpoint_room,
            };
            (
                setup.current,
                Some(segments),
                setup.core,
                setup.recovery.recovery,
                setup.lock,
            )
        } else {
            let lock = lock_single_file(&WitVfs, path, &options).map_err(open_error)?;
            let file = io
                .open(path, OpenMode::Create)
                .map_err(|e| open_error(e.into()))?;
            let (core, recovery) = setup_log(&io, path, &lock, &file, options, mode)
                .await
                .map_err(open_error)?;
            let lock: Box<dyn VfsLock> = Box::new(lock);
            (file, None, core, recovery, lock)
        };
        // Calls enter this instance one per turn of the host's event loop.
        core.set_arrivals(Arrivals::OnePerTurn);
        let writer = AsyncWriter {
            file: RefCell::new(Rc::new(file)),
            segments,
            core: RefCell::new(core),
            parked: RefCell::new(Vec::new()),
            generation: Cell::new(0),
            group_scratch: RefCell::new(Vec::new()),
            _lock: lock,
        };
        Ok((writer, recovery))
    }

    fn wake_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        for waker in self.parked.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    /// Parks until the generation changes.
    async fn park(&self) {
        let seen = self.generation.get();
        poll_fn(|cx| {
            if self.generation.get() != seen {
                Poll::Ready(())
            } else {
                self.parked.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// This driver's waiters deregister themselves (see `WaitGuard`), so the core counts who
    /// is still on the way out.
    fn claim_leadership(&self) -> Option<Leadership> {
        let mut core = self.core.borrow_mut();
        let departing = core.departing_waiters();
        core.claim_leadership(departing)
    }

    async fn wait_durable(&self, target: LogSeq) -> Result<(), WalWriteError> {
        self.core.borrow_mut().register_durable_wait(target);
        let _guard = WaitGuard {
            writer: self,
            target,
        };
        loop {
            let state = self.core.borrow().durable_wait_state(target);
            match state {
                WaitState::Durable => return Ok(()),
                WaitState::Failed(cause) => return Err(WalWriteError::Failed { cause }),
                WaitState::Stalled(cause) => return Err(WalWriteError::Stalled { cause }),
                WaitState::Pending => {}
            }
            let leadership = self.claim_leadership();
            match leadership {
                Some(leadership) => self.lead(leadership.gather, WitIo::Async).await,
                None => self.park().await,
            }
        }
    }

    /// Leads until the core says to stop: gathers if `gather` (see [`Arrivals::OnePerTurn`]:
    /// under this driver the core asks for it at every claim), then carries out one group at a
    /// time through the executor over `io`, and wakes every parked task after each.
    async fn lead(&self, gather: bool, io: WitIo) {
        if gather {
            for round in 0.. {
                let before = self.core.borrow().pending_records();
                wit_bindgen::yield_async().await;
                let core = self.core.borrow();
                if !core.keep_gathering(round, core.departing_waiters(), before) {
                    break;
                }
            }
        }
        loop {
            let Some(group) = self.next_group() else {
                return;
            };
            let result = self.write_group(&group, io).await;
            if self.finish_group(&group, result) != LeaderStep::Continue {
                return;
            }
        }
    }

    /// Carries out `group` through the one executor; a segment it starts becomes current.
    async fn write_group(&self, group: &Group, io: WitIo) -> Result<(), GroupError> {
        // Cloned out of the cell, so that no borrow is held across the awaits below.
        let current = self.file.borrow().clone();
        let mut scratch = self.group_scratch.take();
        let result = match &self.segments {
            None => write_group(&io, &*current, group, &mut scratch).await,
            Some(segments) => {
                let site = SegmentSite {
                    dir: &segments.dir,
                    segment_bytes: segments.segment_bytes,
                };
                let written =
                    write_segmented_group(&io, &*current, site, group, &mut scratch).await;
                written.adopt(
                    group.seqs.start,
                    || segments.retention.borrow_mut(),
                    |started| *self.file.borrow_mut() = Rc::new(started),
                )
            }
        };
        self.group_scratch.replace(scratch);
        result
    }

    /// The next group to write, or `None` after releasing leadership (nothing pending).
    fn next_group(&self) -> Option<Group> {
        let group = self.core.borrow_mut().poll_group();
        if group.is_none() {
            self.core.borrow_mut().release_leadership();
            self.wake_all();
        }
        group
    }

    /// Reports a written (or failed) group, wakes every parked task, and says whether this
    /// leader goes on.
    fn finish_group(&self, group: &Group, result: Result<(), GroupError>) -> LeaderStep {
        let step = {
            let mut core = self.core.borrow_mut();
            core.handle_group_done(group, result);
            core.poll_leader_step()
        };
        self.wake_all();
        step
    }

    /// A non-durable commit that finds no leader carries out the pending groups itself, through
    /// the synchronous imports ([`WitIo::Blocking`]), without gathering: it does not wait for
    /// durability, so it has no reason to suspend.
    fn lead_blocking(&self) {
        complete_now(self.lead(false, WitIo::Blocking));
    }

    /// Reserves what a batch or a seal claims ([`ClaimSite::reserve`]).
    fn reserve(&self, claim: DiskClaim) -> Result<Box<dyn VfsReservation>, VfsError> {
        match &self.segments {
            Some(segments) => ClaimSite::Segments {
                vfs: &WitVfs,
                dir: &segments.dir,
            }
            .reserve(claim),
            None => ClaimSite::File(&**self.file.borrow()).reserve(claim),
        }
    }

    fn commit_many(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<std::ops::Range<LogSeq>, WalWriteError> {
        self.retry_stalled_blocking()?;
        let range = self
            .core
            .borrow_mut()
            .stage_with(records, |claim| self.reserve(claim))?;
        if range.is_empty() {
            return Ok(range);
        }
        let leadership = self.claim_leadership();
        if leadership.is_some() {
            self.lead_blocking();
            let core = self.core.borrow();
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

    async fn commit_many_durable(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<std::ops::Range<LogSeq>, WalWriteError> {
        self.retry_stalled().await?;
        let range = self
            .core
            .borrow_mut()
            .stage_with(records, |claim| self.reserve(claim))?;
        if range.is_empty() {
            return Ok(range);
        }
        self.wait_durable(range.end).await?;
        Ok(range)
    }

    /// A stalled writer's records are retried before any new work (see
    /// [`crate::wal::group_commit`]'s module doc): clears the stall and waits until everything
    /// visible is durable. The retry's error if it failed, [`WalWriteError::StalledRefused`]
    /// if it found no room again.
    async fn retry_stalled(&self) -> Result<(), WalWriteError> {
        let target = {
            let mut core = self.core.borrow_mut();
            if !core.retry_stalled() {
                return Ok(());
            }
            core.visible_end()
        };
        self.wait_durable(target)
            .await
            .map_err(WalWriteError::before_staging)
    }

    /// [`Self::retry_stalled`] for a caller that does not suspend: it leads the retry through
    /// the blocking imports, or, when a leader is already suspended in a write, leaves the
    /// stalled records to it (they lead `pending`, so they go before anything staged next).
    fn retry_stalled_blocking(&self) -> Result<(), WalWriteError> {
        if !self.core.borrow_mut().retry_stalled() {
            return Ok(());
        }
        if self.claim_leadership().is_some() {
            self.lead_blocking();
        }
        let core = self.core.borrow();
        match (core.failure(), core.stalled()) {
            (Some(cause), _) => Err(WalWriteError::Poisoned {
                cause: cause.clone(),
            }),
            (None, Some(cause)) => Err(WalWriteError::StalledRefused {
                cause: cause.clone(),
            }),
            (None, None) => Ok(()),
        }
    }

    /// Stages each batch as [`Self::commit_many_durable`] would, in order, then waits once,
    /// for the last: one task instead of one per batch. Each batch gets its own outcome:
    /// refused at staging (nothing of it staged), empty (the empty range at its place),
    /// durable, or failed. A batch in a group that became durable before a later group failed
    /// is durable. The call returns when the last staged batch is durable or failed, so a
    /// batch whose group synced first waits for the later group's sync too.
    async fn commit_batches_durable(
        &self,
        batches: &[Vec<(u16, &[u8])>],
    ) -> Vec<Result<std::ops::Range<LogSeq>, WalWriteError>> {
        if let Err(refused) = self.retry_stalled().await {
            return batches.iter().map(|_| Err(refused.clone())).collect();
        }
        let mut outcomes: Vec<_> = batches
            .iter()
            .map(|records| {
                self.core
                    .borrow_mut()
                    .stage_with(records, |claim| self.reserve(claim))
            })
            .collect();
        let last_end = outcomes
            .iter()
            .filter_map(|outcome| outcome.as_ref().ok())
            .filter(|range| !range.is_empty())
            .map(|range| range.end)
            .max();
        let Some(last_end) = last_end else {
            return outcomes;
        };
        if self.wait_durable(last_end).await.is_ok() {
            return outcomes;
        }
        let core = self.core.borrow();
        for outcome in &mut outcomes {
            if let Ok(range) = outcome
                && !range.is_empty()
            {
                match core.durable_wait_state(range.end) {
                    WaitState::Failed(cause) => *outcome = Err(WalWriteError::Failed { cause }),
                    WaitState::Stalled(cause) => *outcome = Err(WalWriteError::Stalled { cause }),
                    WaitState::Durable | WaitState::Pending => {}
                }
            }
        }
        outcomes
    }
}

impl wit::Guest for Component {
    type Writer = AsyncWriter;
}

impl wit::GuestWriter for AsyncWriter {
    async fn create(
        path: String,
        options: wal_types::WalOptions,
    ) -> Result<wit::Writer, wal_types::WalError> {
        let (writer, _) = AsyncWriter::start(&path, options, SetupMode::Create).await?;
        Ok(wit::Writer::new(writer))
    }

    async fn open(
        path: String,
        options: wal_types::WalOptions,
    ) -> Result<(wit::Writer, wal_types::Recovery), wal_types::WalError> {
        let (writer, rec) = AsyncWriter::start(&path, options, SetupMode::Open).await?;
        Ok((wit::Writer::new(writer), recovery(rec)))
    }

    async fn commit(&self, op: u16, payload: Vec<u8>) -> Result<u64, wal_types::WalError> {
        self.commit_many(&[(op, &payload)])
            .map(|r| r.start.0)
            .map_err(write_error)
    }

    async fn commit_durable(&self, op: u16, payload: Vec<u8>) -> Result<u64, wal_types::WalError> {
        self.commit_many_durable(&[(op, &payload)])
            .await
            .map(|r| r.start.0)
            .map_err(write_error)
    }

    async fn commit_many(
        &self,
        records: Vec<wal_types::CommitRecord>,
    ) -> Result<wal_types::SeqRange, wal_types::WalError> {
        AsyncWriter::commit_many(self, &batch(&records))
            .map(range)
            .map_err(write_error)
    }

    async fn commit_many_durable(
        &self,
        records: Vec<wal_types::CommitRecord>,
    ) -> Result<wal_types::SeqRange, wal_types::WalError> {
        AsyncWriter::commit_many_durable(self, &batch(&records))
            .await
            .map(range)
            .map_err(write_error)
    }

    async fn commit_batches_durable(
        &self,
        batches: Vec<Vec<wal_types::CommitRecord>>,
    ) -> Vec<Result<wal_types::SeqRange, wal_types::WalError>> {
        let batches: Vec<_> = batches.iter().map(|records| batch(records)).collect();
        AsyncWriter::commit_batches_durable(self, &batches)
            .await
            .into_iter()
            .map(|outcome| outcome.map(range).map_err(write_error))
            .collect()
    }

    async fn flush(&self) -> Result<(), wal_types::WalError> {
        let target = {
            let mut core = self.core.borrow_mut();
            if let Some(cause) = core.failure() {
                return Err(write_error(WalWriteError::Poisoned {
                    cause: cause.clone(),
                }));
            }
            core.retry_stalled();
            core.visible_end()
        };
        self.wait_durable(target).await.map_err(write_error)
    }

    async fn seal_active_segment(&self) -> Result<bool, wal_types::WalError> {
        self.retry_stalled().await.map_err(write_error)?;
        let Some(ticket) = self
            .core
            .borrow_mut()
            .request_seal_with(|claim| self.reserve(claim))
            .map_err(write_error)?
        else {
            return Ok(false);
        };
        loop {
            let state = self.core.borrow().seal_wait_state(ticket);
            match state {
                WaitState::Durable => return Ok(true),
                WaitState::Failed(cause) => {
                    return Err(write_error(WalWriteError::Failed { cause }));
                }
                WaitState::Stalled(cause) => {
                    return Err(write_error(WalWriteError::Stalled { cause }));
                }
                WaitState::Pending => {}
            }
            // Every group's end wakes the parked (finish_group), a seal group's included.
            let leadership = self.claim_leadership();
            match leadership {
                Some(leadership) => self.lead(leadership.gather, WitIo::Async).await,
                None => self.park().await,
            }
        }
    }

    async fn visible_records(
        &self,
        first_seq: u64,
        limit: u32,
    ) -> Result<Vec<wal_types::VisibleRecord>, wal_types::WalError> {
        Ok(visible(
            self.core
                .borrow()
                .visible_records(LogSeq(first_seq), limit as usize),
        ))
    }

    async fn retire_visible_through(
        &self,
        absorbed_through: u64,
    ) -> Result<wal_types::Retirement, wal_types::WalError> {
        let r = self
            .core
            .borrow_mut()
            .retire_visible_through(LogSeq(absorbed_through))
            .map_err(retire_error)?;
        Ok(retirement(r))
    }

    async fn stats(&self) -> wal_types::WalStats {
        stats(self.core.borrow().stats())
    }

    async fn checkpoint(&self, absorbed_through: u64) -> Result<(), wal_types::WalError> {
        let Some(segments) = &self.segments else {
            return Err(retention_error(WalRetentionError::NotSegmented));
        };
        let durable_end = self.core.borrow().durable_end();
        segments
            .retention
            .borrow_mut()
            .checkpoint(
                &WitVfs,
                &segments.dir,
                LogSeq(absorbed_through),
                durable_end,
            )
            .map_err(retention_error)
    }

    async fn truncate_through(
        &self,
        through: u64,
    ) -> Result<wal_types::Truncation, wal_types::WalError> {
        let Some(segments) = &self.segments else {
            return Err(retention_error(WalRetentionError::NotSegmented));
        };
        let t = segments
            .retention
            .borrow_mut()
            .truncate_through(&WitVfs, &segments.dir, LogSeq(through))
            .map_err(retention_error)?;
        if t.segments_removed > 0 {
            self.core.borrow_mut().count_setup_syncs(0, 1);
        }
        Ok(truncation(t))
    }

    async fn segments(&self) -> Vec<u64> {
        self.segments.as_ref().map_or_else(Vec::new, |s| {
            s.retention.borrow().live.iter().map(|seq| seq.0).collect()
        })
    }
}
