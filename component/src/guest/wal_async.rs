//! The `stele:log/wal-async` export: the async driver of [`GroupCommit`] inside the component.
//!
//! Each export call is a task of the component. Durable calls stage their records, then either
//! lead (write one group through the async `vfs-async.write-at`, await `vfs-async.sync`) or park
//! their waker until a group completes. While a leader awaits the host's sync, the host runs
//! other calls into this instance; they stage into the next group. The rules (when to hand off,
//! when to gather, what poisons) are the core's, exactly as under the thread driver.
//!
//! Cancellation: a waiting task that the host cancels deregisters (its guard runs) and its
//! records stay staged; the next leader writes them. The Stele host never cancels a call it has
//! started: a caller that stops waiting only stops listening for the answer.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::vfs::{OpenMode, Vfs, VfsError, VfsFile, VfsLock};
use crate::wal::group_commit::{Group, GroupCommit, LeaderStep, Leadership, WaitState};
use crate::wal::segment::{self, SegmentRetention, segment_path};
use crate::wal::{
    LogSeq, Recovery, SetupMode, WalRetentionError, WalWriteError, lock_single_file, setup_log,
    setup_segments, zero_range,
};

use super::Component;
use super::exports::stele::log::wal as wal_types;
use super::exports::stele::log::wal_async as wit;
use super::stele::log::vfs as wit_vfs;
use super::stele::log::vfs_async;
use super::vfs::{WitFile, WitVfs, from_wit, open_file, wit_sync_kind};
use super::wal::{
    batch, open_error, options, range, recovery, retention_error, retire_error, retirement, stats,
    truncation, visible, write_error,
};

/// How many times at most a gathering leader yields to the host's event loop so that the
/// callers of the previous group can leave and call again. Each round lets the host start every
/// call that is ready; the core's `keep_gathering` stops at the first round that brings nothing.
/// Chosen, not tuned; bounded so that no caller waits on a timer or an unbounded loop.
const GATHER_ROUNDS_MAX: usize = 32;

/// Groups up to this size are written through the synchronous `vfs.write-at`: a page-cache
/// write of 64 KiB takes microseconds, less than a hop to the host's I/O thread and back, and
/// the sync that follows is the call worth suspending on. Larger groups are written through the
/// async import so the instance keeps serving calls meanwhile. Chosen, not tuned.
const INLINE_WRITE_BYTES_MAX: usize = 64 << 10;

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
    /// The writer lock ([`crate::wal::lock`]), held until the writer resource is dropped.
    /// Declared last, so that it is released only after the file above is closed.
    _lock: Box<dyn VfsLock>,
}

struct AsyncSegments {
    dir: String,
    segment_bytes: u64,
    retention: RefCell<SegmentRetention>,
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
    fn start(
        path: &str,
        wit_options: wal_types::WalOptions,
        mode: SetupMode,
    ) -> Result<(AsyncWriter, Recovery), wal_types::WalError> {
        let options = options(wit_options)?;
        if options.segment_bytes.is_some() {
            let setup = setup_segments(&WitVfs, path, options, mode).map_err(open_error)?;
            let current = *setup.live.last().expect("a set-up log has a segment");
            // setup_segments hands back a boxed file; the async imports need the handle itself.
            drop(setup.current);
            let file = open_file(&segment_path(path, current), OpenMode::Existing)
                .map_err(|e| open_error(e.into()))?;
            let writer = AsyncWriter {
                file: RefCell::new(Rc::new(file)),
                segments: Some(AsyncSegments {
                    dir: path.to_owned(),
                    segment_bytes: setup.segment_bytes,
                    retention: RefCell::new(SegmentRetention {
                        live: setup.live,
                        checkpoint: setup.recovery.checkpoint,
                    }),
                }),
                core: RefCell::new(setup.core),
                parked: RefCell::new(Vec::new()),
                generation: Cell::new(0),
                _lock: setup.lock,
            };
            return Ok((writer, setup.recovery.recovery));
        }
        let lock = lock_single_file(&WitVfs, path, &options).map_err(open_error)?;
        let file = wit_vfs::open(path, wit_vfs::OpenMode::Create)
            .map_err(|e| open_error(from_wit(e).into()))?;
        let file = WitFile(file);
        let (core, rec) =
            setup_log(&WitVfs, path, &lock, &file, options, mode).map_err(open_error)?;
        let writer = AsyncWriter {
            file: RefCell::new(Rc::new(file)),
            segments: None,
            core: RefCell::new(core),
            parked: RefCell::new(Vec::new()),
            generation: Cell::new(0),
            _lock: Box::new(lock),
        };
        Ok((writer, rec))
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
                WaitState::Pending => {}
            }
            let leadership = self.claim_leadership();
            match leadership {
                Some(leadership) => self.lead(leadership).await,
                None => self.park().await,
            }
        }
    }

    async fn lead(&self, _leadership: Leadership) {
        // Always gather here, not only when the core asks (after a hand-off, or while callers
        // of the last group are leaving): calls the host starts together enter the instance
        // one per turn of its event loop, so a leader that did not yield would see only
        // itself, and lead a group of one. A quiet round costs a few microseconds.
        {
            for _ in 0..GATHER_ROUNDS_MAX {
                let before = self.core.borrow().pending_records();
                wit_bindgen::yield_async().await;
                let core = self.core.borrow();
                if !core.keep_gathering(core.departing_waiters(), before) {
                    break;
                }
            }
        }
        loop {
            let Some(group) = self.next_group() else {
                return;
            };
            let file = match self.group_file(&group) {
                Ok(file) => file,
                Err(cause) => {
                    // A failed rotation poisons the writer as a failed write does.
                    let step = self.finish_group(&group, Err(cause));
                    debug_assert_eq!(step, LeaderStep::Release);
                    return;
                }
            };
            let data: Vec<u8> = group.chunks.concat();
            let mut result = if data.len() <= INLINE_WRITE_BYTES_MAX {
                file.write_at(group.offset, &data)
            } else {
                vfs_async::write_at(&file.0, group.offset, data)
                    .await
                    .map_err(from_wit)
            };
            let zero_fill = group.zero_fill.clone();
            if result.is_ok() && !zero_fill.is_empty() {
                let zeros = vec![0u8; (zero_fill.end - zero_fill.start) as usize];
                result = vfs_async::write_at(&file.0, zero_fill.start, zeros)
                    .await
                    .map_err(from_wit);
            }
            if let (Ok(()), Some(kind)) = (&result, group.sync) {
                result = vfs_async::sync(&file.0, wit_sync_kind(kind))
                    .await
                    .map_err(from_wit);
            }
            if result.is_ok() && self.rotation_dir_sync_needed(&group) {
                result = vfs_async::sync_dir(self.segmented().dir.clone())
                    .await
                    .map_err(from_wit);
                // Counted once it succeeded, as the thread driver counts it.
                if result.is_ok() {
                    self.core.borrow_mut().count_setup_syncs(0, 1);
                }
            }
            if self.finish_group(&group, result) != LeaderStep::Continue {
                return;
            }
        }
    }

    /// The file `group` goes to: the current segment, or, when the group starts a segment, a new
    /// one (header and size written, nothing synced: see [`Self::finish_rotation`]).
    fn group_file(&self, group: &Group) -> Result<Rc<WitFile>, VfsError> {
        if group.starts_segment {
            let segments = self.segmented();
            let path = segment_path(&segments.dir, group.seqs.start);
            let file = open_file(&path, OpenMode::Truncate)?;
            segment::prepare_segment(&file, group.seqs.start, segments.segment_bytes)?;
            segments.retention.borrow_mut().live.push(group.seqs.start);
            *self.file.borrow_mut() = Rc::new(file);
        }
        Ok(self.file.borrow().clone())
    }

    fn segmented(&self) -> &AsyncSegments {
        self.segments
            .as_ref()
            .expect("only a segmented core starts segments")
    }

    /// After a group that started a segment was written and synced: the sync made header, size
    /// and records durable; the directory sync makes the new name durable, before any record in
    /// it is acknowledged.
    fn rotation_dir_sync_needed(&self, group: &Group) -> bool {
        group.starts_segment && group.sync.is_some()
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
    fn finish_group(&self, group: &Group, result: Result<(), VfsError>) -> LeaderStep {
        let step = {
            let mut core = self.core.borrow_mut();
            core.handle_group_done(group, result);
            core.poll_leader_step()
        };
        self.wake_all();
        step
    }

    /// A non-durable commit that finds no leader writes the pending groups itself, through the
    /// synchronous imports: it is a synchronous export and cannot await.
    fn lead_blocking(&self) {
        loop {
            let Some(group) = self.next_group() else {
                return;
            };
            let data: Vec<u8> = group.chunks.concat();
            let mut result = self.group_file(&group).and_then(|file| {
                file.write_at(group.offset, &data)?;
                zero_range(&*file, group.zero_fill.start, group.zero_fill.end)?;
                Ok(file)
            });
            if let (Ok(file), Some(kind)) = (&result, group.sync) {
                result = file.sync(kind).map(|()| file.clone());
            }
            let mut result = result.map(drop);
            if result.is_ok() && self.rotation_dir_sync_needed(&group) {
                result = WitVfs.sync_dir(&self.segmented().dir);
                if result.is_ok() {
                    self.core.borrow_mut().count_setup_syncs(0, 1);
                }
            }
            if self.finish_group(&group, result) != LeaderStep::Continue {
                return;
            }
        }
    }

    fn commit_many(
        &self,
        records: &[(u16, &[u8])],
    ) -> Result<std::ops::Range<LogSeq>, WalWriteError> {
        let range = self.core.borrow_mut().stage(records)?;
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
        let range = self.core.borrow_mut().stage(records)?;
        if range.is_empty() {
            return Ok(range);
        }
        self.wait_durable(range.end).await?;
        Ok(range)
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
        let mut outcomes: Vec<_> = batches
            .iter()
            .map(|records| self.core.borrow_mut().stage(records))
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
                && let WaitState::Failed(cause) = core.durable_wait_state(range.end)
            {
                *outcome = Err(WalWriteError::Failed { cause });
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
        let (writer, _) = AsyncWriter::start(&path, options, SetupMode::Create)?;
        Ok(wit::Writer::new(writer))
    }

    async fn open(
        path: String,
        options: wal_types::WalOptions,
    ) -> Result<(wit::Writer, wal_types::Recovery), wal_types::WalError> {
        let (writer, rec) = AsyncWriter::start(&path, options, SetupMode::Open)?;
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
            let core = self.core.borrow();
            if let Some(cause) = core.failure() {
                return Err(write_error(WalWriteError::Poisoned {
                    cause: cause.clone(),
                }));
            }
            core.visible_end()
        };
        self.wait_durable(target).await.map_err(write_error)
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
