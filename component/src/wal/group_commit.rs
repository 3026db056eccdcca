//! The group-commit state machine. It performs no I/O and never reads a clock: drivers (the
//! thread driver in [`super::WalWriter`], the component's async driver) feed it calls and I/O
//! results and carry out the writes and syncs it asks for.
//!
//! The life of a record:
//! 1. [`GroupCommit::stage`] encodes a caller's batch, assigns its seqs and makes it visible.
//!    It sits in `pending`.
//! 2. One caller at a time is the **leader** ([`GroupCommit::claim_leadership`]). The leader asks
//!    [`GroupCommit::poll_group`] for the next group: whole pending batches, in seq order, up to
//!    `group_bytes_max`. At most one group is in flight.
//! 3. The driver writes the group at its offset, syncs as the policy says, and reports with
//!    [`GroupCommit::handle_group_done`]. Only then does `durable_end` move, to the group's end.
//! 4. [`GroupCommit::poll_leader_step`] says whether the leader keeps going or releases.
//!
//! **Why leadership is handed off.** While a group's sync is in flight, other callers stage into
//! `pending`. When the sync returns, the callers of the finished group are woken and usually
//! commit again at once. A leader that looped "until nothing is pending" would take the next
//! group before they re-staged, so callers would split into two alternating halves and each
//! sync would carry about N/2 records. Instead, when a durable waiter needs the pending records,
//! the leader releases and marks the leadership as handed off; the next leader gathers (yields
//! until a round brings no new record, a bounded number of rounds, no timer) and so carries
//! about N records per sync. When nobody waits on the pending records (they came from
//! non-durable commits), the leader keeps draining them itself, so no visible record is
//! stranded without a leader.
//!
//! **Sealing on demand.** [`GroupCommit::request_seal`] makes the next group start a new
//! segment even when the current one has room; with nothing pending, that group holds no
//! record and only creates the segment. Every segment but the last is sealed and immutable,
//! so an archiver that ships sealed segments can bound how long a record of a quiet log stays
//! on one disk.
//!
//! **Poisoning.** A failed sync, or any failed step that is not a lack of room, sets `failure`.
//! From then on `durable_end` never moves, staging is refused, and no one can lead: a sync
//! error may have dropped dirty pages, so no later sync could prove the earlier bytes durable
//! (fsyncgate).
//!
//! **Stalling.** A group that fails for lack of room (`NoSpace` from the disk, or the quota's
//! refusal) before its first sync is not a poisoning: no sync of it ran, so the earlier groups'
//! durability stands, and whatever part of it reached the page cache is rewritten, byte for
//! byte, at the same offset by its retry ([`GroupError::retriable`]). Its batches go back to
//! the front of `pending`, still visible, and the core is **stalled**: waiters on them are told
//! so ([`WaitState::Stalled`]), no one leads, and staging is refused (memory stays bounded by
//! what was pending). A driver's next commit, flush or seal first clears the stall
//! ([`GroupCommit::retry_stalled`]) and leads the retry; once room has been freed it succeeds
//! and the writer goes on as if nothing had happened.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use bytes::Bytes;

use crate::header::HEADER_BYTES;
use crate::vfs::{SyncKind, VfsError, VfsReservation};

use super::record;
use super::{LogSeq, WalOptions, WalRetireError, WalWriteError};

pub use super::record::check_batch_bytes;
pub use super::report::{GROUP_HISTOGRAM_BUCKETS, VisibleRecord, WalRetirement, WalWriterStats};

/// A batch staged by one call: its records' encoded bytes, back to back.
#[derive(Debug)]
struct StagedBatch {
    end: LogSeq,
    records: u64,
    encoded: Bytes,
}

/// Room a batch needs under a disk quota before it may be staged: what the driver reserves
/// ([`crate::vfs::Vfs::reserve`], [`crate::vfs::VfsFile::reserve`]) in the closure it passes
/// to [`GroupCommit::stage_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskClaim {
    /// The batch starts a new segment: the file whose first seq is `first_seq`, `bytes` long
    /// (preallocated in full).
    Segment {
        /// The new segment's first seq, which names its file.
        first_seq: LogSeq,
        /// The segment size.
        bytes: u64,
    },
    /// The single-file log grows to `len` bytes.
    FileEnd {
        /// The file's length once the batch is written.
        len: u64,
    },
}

/// How far a single-file log reserves ahead of its end: a batch past the room held asks for
/// its end rounded up to this, so that a sandboxed log crosses to the host to reserve once per
/// MiB of growth, not once per commit. At the quota's edge, where that is refused, it asks for
/// its exact end instead. Chosen, not tuned: 1 MiB is a few hundred commits of the sizes a WAL
/// carries, and a small share of any quota worth setting.
pub const FILE_RESERVE_AHEAD_BYTES: u64 = 1 << 20;

/// How far ahead of the records a segmented writer writes zeros: a chunk at a time, once the
/// records come within [`ZERO_FILL_LOW_WATER_BYTES`] of the zeroed frontier. `set_len` leaves
/// the segment sparse, and on ext4 (measured here, 4 KiB records, one writer) a write into a
/// hole costs its `fdatasync` a journal commit for the block allocation: 3,300-3,900 durable
/// records/s into a sparse file, 4,300-6,500 into one whose blocks were written first. Zeroing
/// ahead moves that allocation to one sync per chunk. 1 MiB bounds the extra bytes one sync
/// carries (a few ms on this disk); chosen, not tuned.
pub const ZERO_FILL_CHUNK_BYTES: u64 = 1 << 20;

/// See [`ZERO_FILL_CHUNK_BYTES`]: half a chunk, so a group of up to that size lands in written
/// blocks.
pub const ZERO_FILL_LOW_WATER_BYTES: u64 = ZERO_FILL_CHUNK_BYTES / 2;

/// A group to write: the driver writes `chunks` back to back at `offset`, then zeros over
/// `zero_fill` (empty unless segmented), then issues `sync` (if any), then calls
/// [`GroupCommit::handle_group_done`]. When `starts_segment` is set, the
/// driver first creates the segment whose first seq is `seqs.start` (preallocated, its header
/// and name made durable per policy) and writes the group there; `offset` is then the first
/// byte after that segment's header.
#[derive(Debug)]
#[must_use = "a polled group must be written and reported with handle_group_done"]
pub struct Group {
    /// Where in the file (the current segment) the group's bytes go.
    pub offset: u64,
    /// The seqs it holds.
    pub seqs: Range<LogSeq>,
    /// How many records.
    pub records: u64,
    /// Its encoded size.
    pub bytes: usize,
    /// The encoded records, in seq order, to write back to back at `offset`.
    pub chunks: Vec<Bytes>,
    /// The sync that must follow the write, per the policy (`None` under `Skip`).
    pub sync: Option<SyncKind>,
    /// The group opens a new segment: the driver rotates before writing it.
    pub starts_segment: bool,
    /// The group carries out a [`GroupCommit::request_seal`]: it starts a segment though the
    /// current one had room, and holds no record when nothing was pending.
    pub seals: bool,
    /// Bytes after the group, still unwritten in this segment, that the driver overwrites with
    /// zeros before the sync (see [`ZERO_FILL_CHUNK_BYTES`]). They are zeros already (the
    /// preallocated tail), so a torn or lost zero fill changes nothing a reader sees.
    pub zero_fill: Range<u64>,
}

/// How carrying out a group failed, for [`GroupCommit::handle_group_done`]: the failed step's
/// error, and whether that step came before the group's first sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupError {
    /// The failed step's error.
    pub cause: VfsError,
    /// The step was a segment's creation or a write (records or zero fill), before any sync of
    /// the group was issued.
    pub before_sync: bool,
}

impl GroupError {
    /// A failed creation or write, before the group's sync.
    pub fn before_sync(cause: VfsError) -> GroupError {
        GroupError {
            cause,
            before_sync: true,
        }
    }

    /// A failed file or directory sync.
    pub fn at_sync(cause: VfsError) -> GroupError {
        GroupError {
            cause,
            before_sync: false,
        }
    }

    /// Whether the group may be retried instead of poisoning the writer: a lack of room
    /// ([`VfsError::NoSpace`], [`VfsError::QuotaExceeded`]) before any sync of it. Then no sync
    /// has reported on pages this group dirtied, so none can have been dropped as written
    /// (fsyncgate does not apply), and a retry writes the same bytes at the same offset over
    /// whatever part of them landed. Anything else (an I/O error, a failed sync) poisons.
    pub fn retriable(&self) -> bool {
        self.before_sync && matches!(self.cause, VfsError::NoSpace | VfsError::QuotaExceeded(_))
    }
}

/// Granted by [`GroupCommit::claim_leadership`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Leadership {
    /// Callers of the last group are still on their way out, or the previous leader handed
    /// leadership off so that they would be gathered: wait until they have left, then yield
    /// while rounds bring records (bounded), before polling the group. False for a lone writer.
    pub gather: bool,
}

/// How many gathering rounds a leader makes at most ([`GroupCommit::keep_gathering`] stops it
/// sooner, at the first round that brings no record while nobody of the last group is still
/// on the way out). A round is a yield: to the scheduler under the thread driver (about a
/// microsecond when nothing else is runnable), to the host's event loop in the component,
/// which starts every call that is ready. The bound caps the delay a gathering leader adds
/// while records keep trickling in, against the 100+ µs sync it amortizes. One bound for
/// every driver; chosen, not tuned.
pub const GATHER_ROUNDS_MAX: usize = 32;

/// How concurrent callers reach the core, which decides when a new leader gathers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrivals {
    /// Callers run in parallel (threads): whoever was going to stage has staged when a leader
    /// claims, so a leader gathers only after a hand-off or while the last group's callers are
    /// leaving; a lone writer never yields.
    #[default]
    Parallel,
    /// Callers enter one at a time, one per turn of an event loop (calls into a component
    /// instance): calls the host starts together have not staged yet when the first of them
    /// claims, so every leader gathers, or it would lead a group of one. A quiet round costs a
    /// turn of the host's loop.
    OnePerTurn,
}

/// What the leader does after a group completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum LeaderStep {
    /// Keep leading: poll the next group.
    Continue,
    /// Leadership is released; a waiter should claim it. Wake the waiters.
    HandOff,
    /// Leadership is released with nothing left to lead (or the writer failed).
    Release,
}

/// Where a durable waiter stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// The waited-for records are durable.
    Durable,
    /// A write or sync failed first; the writer is poisoned.
    Failed(VfsError),
    /// The group holding the waited-for records found no room before its sync: they are still
    /// visible and pending, and the next commit, flush or seal retries them
    /// ([`GroupCommit::retry_stalled`]). The writer is not poisoned.
    Stalled(VfsError),
    /// Not yet: keep waiting.
    Pending,
}

/// The sans-I/O group-commit core. See the module doc.
#[derive(Debug)]
pub struct GroupCommit {
    sync: Option<SyncKind>,
    group_bytes_max: usize,
    /// Bytes of one segment file, header included, when the log is segmented. A group never
    /// crosses it: a group that would is written at the start of a new segment instead.
    segment_bytes: Option<u64>,
    retained_bytes_max: usize,
    visible_end: LogSeq,
    durable_end: LogSeq,
    /// Offset of the next group in the current file (segment).
    write_offset: u64,
    /// In the current segment, every byte below this was written by this writer (records or
    /// zero fill), so its blocks are allocated.
    zeroed_end: u64,
    pending: VecDeque<StagedBatch>,
    pending_records: u64,
    /// Where the last staged batch ends, in the segment (or file) it will be written to: the
    /// landing of every staged batch is known at staging, because groups pack whole batches in
    /// seq order and rotate exactly when the next batch does not fit (see `poll_group`). So the
    /// disk room a batch needs is known before it is visible ([`DiskClaim`]).
    projected_end: u64,
    /// Room held for new segments, by the seq that starts the segment it was claimed for:
    /// released once a group written past that seq has made the segment, or when the writer is
    /// dropped.
    reservations: VecDeque<(LogSeq, Box<dyn VfsReservation>)>,
    /// A single-file log's room, held ahead of its end ([`FILE_RESERVE_AHEAD_BYTES`]) up to
    /// `file_reserved_end`, and replaced by a longer one when a batch needs more.
    file_reservation: Option<Box<dyn VfsReservation>>,
    file_reserved_end: u64,
    in_flight: Option<LogSeq>,
    /// The batches of the group in flight, kept until it completes: a stalled group puts
    /// them back at the front of `pending`.
    in_flight_batches: Vec<StagedBatch>,
    failure: Option<VfsError>,
    /// Set by a group that found no room before its sync (see the module doc); cleared by
    /// [`Self::retry_stalled`].
    stall: Option<VfsError>,
    leader: bool,
    handed_off: bool,
    arrivals: Arrivals,
    /// Targets of the durable waiters currently inside a call, with their counts. It answers
    /// two questions exactly: does anyone wait on pending records (hand off), and how many
    /// waiters whose records are durable have not left yet (gather until they have).
    waiters: BTreeMap<LogSeq, usize>,
    retained: VecDeque<(VisibleRecord, usize)>,
    retained_bytes: usize,
    /// A seal was requested and no group has carried it out yet.
    seal_requested: bool,
    /// The group in flight is a seal group.
    seal_in_flight: bool,
    /// Seal groups completed: a [`SealTicket`] is settled once this reaches it.
    seals_done: u64,
    stats: WalWriterStats,
}

/// What a caller of [`GroupCommit::request_seal`] waits for: see
/// [`GroupCommit::seal_wait_state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a requested seal is settled only through seal_wait_state"]
pub struct SealTicket(u64);

impl GroupCommit {
    /// A core resuming a log whose next record is `next_seq` at byte `write_offset` of the
    /// current file (the last segment, if the log is segmented).
    pub fn new(options: &WalOptions, next_seq: LogSeq, write_offset: u64) -> Self {
        GroupCommit {
            sync: options.policy.group_sync(),
            group_bytes_max: options.resolved_group_bytes_max(),
            segment_bytes: options.segment_bytes,
            retained_bytes_max: options.retained_bytes_max,
            visible_end: next_seq,
            durable_end: next_seq,
            write_offset,
            zeroed_end: write_offset,
            pending: VecDeque::new(),
            pending_records: 0,
            projected_end: write_offset,
            reservations: VecDeque::new(),
            file_reservation: None,
            file_reserved_end: 0,
            in_flight: None,
            in_flight_batches: Vec::new(),
            failure: None,
            stall: None,
            leader: false,
            handed_off: false,
            arrivals: Arrivals::Parallel,
            waiters: BTreeMap::new(),
            retained: VecDeque::new(),
            retained_bytes: 0,
            seal_requested: false,
            seal_in_flight: false,
            seals_done: 0,
            stats: WalWriterStats {
                durable_end: next_seq,
                visible_end: next_seq,
                ..Default::default()
            },
        }
    }

    /// The first seq not yet durable.
    pub fn durable_end(&self) -> LogSeq {
        self.durable_end
    }

    /// The seq the next committed record gets.
    pub fn visible_end(&self) -> LogSeq {
        self.visible_end
    }

    /// The error that poisoned the writer, if one did.
    pub fn failure(&self) -> Option<&VfsError> {
        self.failure.as_ref()
    }

    /// Why the writer is stalled, if it is (see the module doc).
    pub fn stalled(&self) -> Option<&VfsError> {
        self.stall.as_ref()
    }

    /// Clears a stall, so that the caller can lead the stalled records' retry: returns whether
    /// there was one. A driver calls it at the start of a commit, flush or seal; if the retry
    /// finds no room again, the group stalls again.
    pub fn retry_stalled(&mut self) -> bool {
        self.stall.take().is_some()
    }

    /// Records staged but not yet taken into a group: what a gathering leader watches grow.
    pub fn pending_records(&self) -> u64 {
        self.pending_records
    }

    /// The group bound in effect.
    pub fn group_bytes_max(&self) -> usize {
        self.group_bytes_max
    }

    /// Says how callers reach this core (default [`Arrivals::Parallel`]): a driver whose
    /// callers enter one per turn of an event loop sets [`Arrivals::OnePerTurn`].
    pub fn set_arrivals(&mut self, arrivals: Arrivals) {
        self.arrivals = arrivals;
    }

    /// Counts a sync issued outside groups (the creation sync, a directory sync).
    pub fn count_setup_syncs(&mut self, file_syncs: u64, dir_syncs: u64) {
        self.stats.syncs += file_syncs;
        self.stats.dir_syncs += dir_syncs;
    }

    /// Encodes `records`, assigns them the next seqs in input order and makes them visible.
    ///
    /// A refused batch consumes no seq and changes nothing. An empty batch returns the empty
    /// range at the next seq.
    ///
    /// Encoding happens here, under the driver's lock, because each record's checksum covers its
    /// seq; for the payload sizes a WAL carries this is well under a microsecond per record.
    ///
    /// This asks for no disk room: a driver over a backend with a disk quota stages with
    /// [`Self::stage_with`].
    pub fn stage(&mut self, records: &[(u16, &[u8])]) -> Result<Range<LogSeq>, WalWriteError> {
        self.stage_with(records, |_| Ok(Box::new(crate::vfs::Unbounded)))
    }

    /// [`Self::stage`], holding disk room first: when the batch needs room (a new segment, or a
    /// longer single file: [`DiskClaim`]), `reserve` is called with the claim after every other
    /// check has passed and before anything is visible, and the reservation it returns is held
    /// until a group has written past the batch.
    ///
    /// # Errors
    /// As [`Self::stage`]; and [`WalWriteError::QuotaExceeded`] (or
    /// [`WalWriteError::Unreserved`] for any other error of `reserve`): nothing is staged and no
    /// seq consumed, and the writer stays healthy, so a smaller batch that fits, or this one
    /// after room is freed (`truncate_through`), succeeds.
    pub fn stage_with(
        &mut self,
        records: &[(u16, &[u8])],
        mut reserve: impl FnMut(DiskClaim) -> Result<Box<dyn VfsReservation>, VfsError>,
    ) -> Result<Range<LogSeq>, WalWriteError> {
        self.check_accepting()?;
        let start = self.visible_end;
        if records.is_empty() {
            return Ok(start..start);
        }
        let encoded_bytes = check_batch_bytes(records, self.group_bytes_max)?;
        let retain = self.retained_bytes_max > 0;
        if retain && self.retained_bytes + encoded_bytes > self.retained_bytes_max {
            return Err(WalWriteError::RetentionFull {
                batch_bytes: encoded_bytes,
                retained_bytes: self.retained_bytes,
                retained_bytes_max: self.retained_bytes_max,
            });
        }
        let (claim, projected_end) = self.claim_for(start, encoded_bytes as u64);
        match claim {
            None => {}
            Some(claim @ DiskClaim::Segment { .. }) => {
                let reservation = reserve(claim).map_err(WalWriteError::unreserved)?;
                self.reservations.push_back((start, reservation));
            }
            Some(DiskClaim::FileEnd { len }) => {
                let ahead = len.next_multiple_of(FILE_RESERVE_AHEAD_BYTES);
                let (reservation, reserved_end) = match reserve(DiskClaim::FileEnd { len: ahead }) {
                    Ok(reservation) => (reservation, ahead),
                    Err(VfsError::QuotaExceeded(_)) if ahead > len => (
                        reserve(DiskClaim::FileEnd { len }).map_err(WalWriteError::unreserved)?,
                        len,
                    ),
                    Err(cause) => return Err(WalWriteError::unreserved(cause)),
                };
                // The longer end covers every shorter one held before.
                self.file_reservation = Some(reservation);
                self.file_reserved_end = reserved_end;
            }
        }
        self.projected_end = projected_end;

        let mut buf = Vec::with_capacity(encoded_bytes);
        let mut seq = start;
        for (op, payload) in records {
            record::encode_into(&mut buf, seq, *op, payload);
            seq = seq.next();
        }
        debug_assert_eq!(buf.len(), encoded_bytes);
        let encoded = Bytes::from(buf);
        if retain {
            let mut offset = 0;
            let mut seq = start;
            for (op, payload) in records {
                let len = record::encoded_len(payload.len());
                let range = record::payload_range(payload.len());
                let payload = encoded.slice(offset + range.start..offset + range.end);
                self.retained.push_back((
                    VisibleRecord {
                        seq,
                        op: *op,
                        payload,
                    },
                    len,
                ));
                offset += len;
                seq = seq.next();
            }
            self.retained_bytes += encoded_bytes;
        }
        let count = records.len() as u64;
        self.pending.push_back(StagedBatch {
            end: seq,
            records: count,
            encoded,
        });
        self.pending_records += count;
        self.visible_end = seq;
        Ok(start..seq)
    }

    /// Refuses new work from a poisoned or a stalled writer.
    fn check_accepting(&self) -> Result<(), WalWriteError> {
        if let Some(cause) = &self.failure {
            return Err(WalWriteError::Poisoned {
                cause: cause.clone(),
            });
        }
        if let Some(cause) = &self.stall {
            return Err(WalWriteError::StalledRefused {
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    /// The room a batch of `bytes` encoded bytes starting at `start` needs, and where it will
    /// end: see `projected_end`.
    fn claim_for(&self, start: LogSeq, bytes: u64) -> (Option<DiskClaim>, u64) {
        match self.segment_bytes {
            Some(segment_bytes) if self.projected_end + bytes > segment_bytes => (
                Some(DiskClaim::Segment {
                    first_seq: start,
                    bytes: segment_bytes,
                }),
                HEADER_BYTES as u64 + bytes,
            ),
            Some(_) => (None, self.projected_end + bytes),
            None => {
                let len = self.projected_end + bytes;
                let claim = (len > self.file_reserved_end).then_some(DiskClaim::FileEnd { len });
                (claim, len)
            }
        }
    }

    /// Registers a caller that will wait until `target` (exclusive) is durable. Every
    /// registration must be paired with [`Self::deregister_durable_wait`] when the caller leaves,
    /// whatever the outcome (a cancelled async caller included).
    pub fn register_durable_wait(&mut self, target: LogSeq) {
        *self.waiters.entry(target).or_default() += 1;
    }

    /// The caller waiting for `target` has left.
    pub fn deregister_durable_wait(&mut self, target: LogSeq) {
        let count = self
            .waiters
            .get_mut(&target)
            .expect("deregistering a registered waiter");
        *count -= 1;
        if *count == 0 {
            self.waiters.remove(&target);
        }
    }

    /// Registered waiters whose records are durable but who have not deregistered yet: callers
    /// of the last group, woken and on their way out. A gathering leader waits for them, because
    /// they usually commit again at once.
    ///
    /// This is the `departing` count that [`Self::claim_leadership`] and
    /// [`Self::keep_gathering`] take, for a driver whose waiters deregister themselves. A driver
    /// that deregisters its waiters as it wakes them (the thread driver) counts their departure
    /// itself and passes its own count.
    pub fn departing_waiters(&self) -> usize {
        self.waiters
            .range(..=self.durable_end)
            .map(|(_, n)| n)
            .sum()
    }

    fn someone_waits_on_pending(&self) -> bool {
        self.waiters
            .last_key_value()
            .is_some_and(|(target, _)| *target > self.durable_end)
    }

    /// Gathering round `round` (from 0) ended, with `pending_records()` at `pending_before`
    /// when it began and `departing` callers of the last group still on their way out (see
    /// [`Self::departing_waiters`]). Keep gathering while any are, or while the round brought
    /// new records, for at most [`GATHER_ROUNDS_MAX`] rounds; stop at the first quiet round.
    /// No clock is involved.
    pub fn keep_gathering(&self, round: usize, departing: usize, pending_before: u64) -> bool {
        round + 1 < GATHER_ROUNDS_MAX && (departing > 0 || self.pending_records > pending_before)
    }

    /// Where a caller waiting for `target` (exclusive) stands.
    pub fn durable_wait_state(&self, target: LogSeq) -> WaitState {
        self.wait_state(self.durable_end >= target)
    }

    fn wait_state(&self, settled: bool) -> WaitState {
        if settled {
            WaitState::Durable
        } else if let Some(cause) = &self.failure {
            WaitState::Failed(cause.clone())
        } else if let Some(cause) = &self.stall {
            WaitState::Stalled(cause.clone())
        } else {
            WaitState::Pending
        }
    }

    /// Asks that the current segment be sealed: the next group starts a new segment, with the
    /// records pending when it is polled, or none. Once the ticket is settled
    /// ([`Self::seal_wait_state`]), every record durable when that group was polled, so every
    /// record durable now, lies in a segment that is no longer the last: sealed for good.
    ///
    /// Returns `None`, and asks for nothing, when there is nothing to seal: a single-file log,
    /// or a current segment that holds no record and has no group in flight. A second request
    /// before the first is carried out shares its ticket.
    ///
    /// # Errors
    /// [`WalWriteError::Poisoned`] if the writer has failed.
    pub fn request_seal(&mut self) -> Result<Option<SealTicket>, WalWriteError> {
        self.request_seal_with(|_| Ok(Box::new(crate::vfs::Unbounded)))
    }

    /// [`Self::request_seal`], holding the new segment's room first (see [`Self::stage_with`]):
    /// a seal the quota has no room for is refused with [`WalWriteError::QuotaExceeded`] and
    /// asks for nothing.
    pub fn request_seal_with(
        &mut self,
        reserve: impl FnOnce(DiskClaim) -> Result<Box<dyn VfsReservation>, VfsError>,
    ) -> Result<Option<SealTicket>, WalWriteError> {
        self.check_accepting()?;
        if self.seal_in_flight && !self.seal_requested {
            // Every record durable now was durable when that group was polled (it is the one
            // group in flight), so it seals them: no second, empty segment after it.
            return Ok(Some(SealTicket(self.seals_done + 1)));
        }
        let holds_records = self.write_offset > HEADER_BYTES as u64 || self.in_flight.is_some();
        let Some(segment_bytes) = self.segment_bytes else {
            return Ok(None);
        };
        if !(holds_records || self.seal_requested) {
            return Ok(None);
        }
        if !self.seal_requested {
            // The seal group starts with the records pending when it is polled: those pending
            // now, and later ones after them.
            let first_seq = self.pending.front().map_or(self.visible_end, |batch| {
                LogSeq(batch.end.0 - batch.records)
            });
            let reservation = reserve(DiskClaim::Segment {
                first_seq,
                bytes: segment_bytes,
            })
            .map_err(WalWriteError::unreserved)?;
            self.reservations.push_back((first_seq, reservation));
            self.reproject_after_seal(segment_bytes);
        }
        self.seal_requested = true;
        // Settled by the next seal group to complete, which is polled after this call.
        Ok(Some(SealTicket(
            self.seals_done + 1 + u64::from(self.seal_in_flight),
        )))
    }

    /// Where a caller waiting for `ticket` stands: [`WaitState::Durable`] once its seal group
    /// has been written and synced per the policy (under a syncing policy, the new segment's
    /// name too).
    pub fn seal_wait_state(&self, ticket: SealTicket) -> WaitState {
        self.wait_state(self.seals_done >= ticket.0)
    }

    /// The pending batches now land in the seal's new segment, not the current one: where
    /// they end there. A pending batch that no longer fits that segment would start one more,
    /// which was not claimed when it was staged; the group that starts it then meets the
    /// quota unreserved (it fails, as a failed write does, if the room is gone by then).
    fn reproject_after_seal(&mut self, segment_bytes: u64) {
        let mut end = HEADER_BYTES as u64;
        for batch in &self.pending {
            let bytes = batch.encoded.len() as u64;
            if end + bytes > segment_bytes {
                tracing::debug!(
                    first_seq = batch.end.0 - batch.records,
                    "a sealed segment's pending batches overflow it: rotation without a reservation"
                );
                end = HEADER_BYTES as u64;
            }
            end += bytes;
        }
        self.projected_end = end;
    }

    /// Makes the caller leader if no one leads, the writer is healthy, and there is work.
    /// `departing` is how many callers of the last group are still on their way out (see
    /// [`Self::departing_waiters`]).
    pub fn claim_leadership(&mut self, departing: usize) -> Option<Leadership> {
        if self.leader || self.failure.is_some() || self.stall.is_some() || !self.has_work() {
            return None;
        }
        self.leader = true;
        let handed_off = std::mem::take(&mut self.handed_off);
        // Without the departing check, a full group that left nothing pending would be followed
        // by a group of one: the first of its callers back would lead alone while the others
        // were still on their way. Measured: 16 threads alternated groups of 16 and of 1.
        Some(Leadership {
            gather: handed_off || departing > 0 || self.arrivals == Arrivals::OnePerTurn,
        })
    }

    fn has_work(&self) -> bool {
        !self.pending.is_empty() || self.seal_requested
    }

    /// The next group for the leader to write, or `None` if one is in flight or there is no
    /// work (nothing pending, no seal requested).
    #[must_use]
    pub fn poll_group(&mut self) -> Option<Group> {
        assert!(self.leader, "only the leader polls groups");
        if self.in_flight.is_some() || self.failure.is_some() || self.stall.is_some() {
            return None;
        }
        let seals = std::mem::take(&mut self.seal_requested);
        self.seal_in_flight = seals;
        let Some(first) = self.pending.front() else {
            return seals.then(|| self.empty_seal_group());
        };
        let start = LogSeq(first.end.0 - first.records);
        // Staging bounded every batch by group_bytes_max, which resolved_group_bytes_max keeps
        // within one segment's record space, so a batch that does not fit this segment fits an
        // empty one: records never straddle segments.
        let (offset, room, starts_segment) = match self.segment_bytes {
            Some(segment_bytes) => {
                let room = segment_bytes.saturating_sub(self.write_offset);
                if !seals && first.encoded.len() as u64 <= room {
                    (self.write_offset, room, false)
                } else {
                    let header = HEADER_BYTES as u64;
                    (header, segment_bytes - header, true)
                }
            }
            None => (self.write_offset, u64::MAX, false),
        };
        let bound = (self.group_bytes_max as u64).min(room);
        let mut bytes = 0usize;
        let mut records = 0u64;
        let mut chunks = Vec::new();
        while let Some(batch) = self.pending.front() {
            // Whole batches only; the first always fits because staging bounded it.
            if !chunks.is_empty() && (bytes + batch.encoded.len()) as u64 > bound {
                break;
            }
            let batch = self.pending.pop_front().expect("front exists");
            bytes += batch.encoded.len();
            records += batch.records;
            chunks.push(batch.encoded.clone());
            self.in_flight_batches.push(batch);
        }
        self.pending_records -= records;
        let end = LogSeq(start.0 + records);
        self.in_flight = Some(end);
        Some(Group {
            offset,
            seqs: start..end,
            records,
            bytes,
            chunks,
            sync: self.sync,
            starts_segment,
            seals,
            zero_fill: self.zero_fill_after(starts_segment, offset + bytes as u64),
        })
    }

    /// A seal with nothing pending: a group of no record that only starts the segment whose
    /// first seq is the next one. Its zero fill allocates the blocks the next group lands in,
    /// as any group's does.
    fn empty_seal_group(&mut self) -> Group {
        let header = HEADER_BYTES as u64;
        let at = self.durable_end;
        self.in_flight = Some(at);
        Group {
            offset: header,
            seqs: at..at,
            records: 0,
            bytes: 0,
            chunks: Vec::new(),
            sync: self.sync,
            starts_segment: true,
            seals: true,
            zero_fill: self.zero_fill_after(true, header),
        }
    }

    /// The zeros to write after a group that ends at `group_end` (see
    /// [`ZERO_FILL_CHUNK_BYTES`]).
    fn zero_fill_after(&self, starts_segment: bool, group_end: u64) -> Range<u64> {
        let Some(segment_bytes) = self.segment_bytes else {
            return 0..0;
        };
        let written = if starts_segment {
            HEADER_BYTES as u64
        } else {
            self.zeroed_end
        };
        let frontier = written.max(group_end);
        if frontier < group_end + ZERO_FILL_LOW_WATER_BYTES {
            frontier..segment_bytes.min(frontier + ZERO_FILL_CHUNK_BYTES)
        } else {
            frontier..frontier
        }
    }

    /// Reports the outcome of writing and syncing `group`. A failure that
    /// [`GroupError::retriable`] allows stalls the writer (the group's batches go back to
    /// `pending`); any other poisons it.
    pub fn handle_group_done(&mut self, group: &Group, result: Result<(), GroupError>) {
        assert_eq!(
            self.in_flight.take(),
            Some(group.seqs.end),
            "completed group was not in flight"
        );
        self.seal_in_flight = false;
        match result {
            Err(error) if error.retriable() => {
                // As if never polled: the batches lead `pending` again, in seq order, and a
                // seal is asked again. `write_offset`, the projection and the reservations
                // were made for exactly this landing, so they stand.
                self.pending_records += group.records;
                for batch in self.in_flight_batches.drain(..).rev() {
                    self.pending.push_front(batch);
                }
                self.seal_requested |= group.seals;
                tracing::debug!(
                    first_seq = group.seqs.start.0,
                    records = group.records,
                    cause = %error.cause,
                    "wal group found no room before its sync: stalled, to be retried"
                );
                self.stall = Some(error.cause);
            }
            Ok(()) => {
                // Cleared, not taken: the vector's room serves the next group, so a group
                // allocates nothing here.
                self.in_flight_batches.clear();
                assert_eq!(
                    group.seqs.start, self.durable_end,
                    "groups complete in seq order"
                );
                self.durable_end = group.seqs.end;
                self.write_offset = group.offset + group.bytes as u64;
                let written_before = if group.starts_segment {
                    HEADER_BYTES as u64
                } else {
                    self.zeroed_end
                };
                self.zeroed_end = written_before
                    .max(self.write_offset)
                    .max(group.zero_fill.end);
                if group.starts_segment {
                    self.stats.segments_started += 1;
                    if group.sync.is_some() {
                        // The executor synced the directory after the group: counted here, on
                        // success only, so every driver counts the same.
                        self.stats.dir_syncs += 1;
                    }
                }
                if group.seals {
                    self.seals_done += 1;
                }
                if group.sync.is_some() {
                    self.stats.syncs += 1;
                }
                // The group made its file at least as long as every claim before its end.
                // (An empty seal group starts its segment at `durable_end` itself.)
                let started = group.starts_segment.then_some(group.seqs.start);
                let durable_end = self.durable_end;
                self.reservations
                    .retain(|(seq, _)| *seq >= durable_end && Some(*seq) != started);
                // A seal of no record is a rotation, not a group: the group figures describe
                // what commits share.
                if group.records > 0 {
                    self.stats.groups += 1;
                    self.stats.records += group.records;
                    self.stats.bytes += group.bytes as u64;
                    let bucket = (group.records.ilog2() as usize).min(GROUP_HISTOGRAM_BUCKETS - 1);
                    self.stats.group_records_histogram[bucket] += 1;
                }
            }
            Err(GroupError { cause, .. }) => {
                self.in_flight_batches.clear();
                self.failure = Some(cause);
                // A poisoned writer writes nothing more: the room it held is free.
                self.reservations.clear();
                self.file_reservation = None;
            }
        }
    }

    /// After `handle_group_done`: does the leader continue, hand off, or release?
    pub fn poll_leader_step(&mut self) -> LeaderStep {
        assert!(self.leader, "only the leader steps");
        // A stalled leader releases rather than retry at once: the room is not back yet.
        if self.failure.is_some() || self.stall.is_some() || !self.has_work() {
            self.leader = false;
            return LeaderStep::Release;
        }
        if self.someone_waits_on_pending() {
            self.leader = false;
            self.handed_off = true;
            return LeaderStep::HandOff;
        }
        LeaderStep::Continue
    }

    /// Releases leadership without a group (a leader that found nothing to do, or a driver
    /// whose leader was cancelled). Pending work goes to the next claimant.
    pub fn release_leadership(&mut self) {
        assert!(
            self.in_flight.is_none(),
            "cannot release with a group in flight"
        );
        self.leader = false;
    }

    /// At most `limit` retained records at or after `first_seq`, in seq order.
    pub fn visible_records(&self, first_seq: LogSeq, limit: usize) -> Vec<VisibleRecord> {
        let Some((front, _)) = self.retained.front() else {
            return Vec::new();
        };
        let skip = usize::try_from(first_seq.0.saturating_sub(front.seq.0)).unwrap_or(usize::MAX);
        self.retained
            .iter()
            .skip(skip)
            .take(limit)
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Releases retained records through `absorbed_through` (inclusive), which must be durable.
    pub fn retire_visible_through(
        &mut self,
        absorbed_through: LogSeq,
    ) -> Result<WalRetirement, WalRetireError> {
        if absorbed_through >= self.durable_end {
            return Err(WalRetireError::BeyondDurable {
                requested: absorbed_through,
                durable_end: self.durable_end,
            });
        }
        let mut released = WalRetirement::default();
        while let Some((front, _)) = self.retained.front() {
            if front.seq > absorbed_through {
                break;
            }
            let (_, bytes) = self.retained.pop_front().expect("front exists");
            released.records += 1;
            released.bytes += bytes as u64;
            self.retained_bytes -= bytes;
        }
        released.retained_bytes = self.retained_bytes as u64;
        Ok(released)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WalWriterStats {
        WalWriterStats {
            durable_end: self.durable_end,
            visible_end: self.visible_end,
            retained_bytes: self.retained_bytes as u64,
            retained_records: self.retained.len() as u64,
            ..self.stats.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::DurabilityPolicy;

    fn core() -> GroupCommit {
        GroupCommit::new(
            &WalOptions::single_file(DurabilityPolicy::FullSync),
            LogSeq(10),
            32,
        )
    }

    #[test]
    fn stage_assigns_contiguous_seqs_and_refuses_without_consuming() {
        let mut c = core();
        assert_eq!(c.stage(&[(1, b"a"), (2, b"b")]), Ok(LogSeq(10)..LogSeq(12)));
        assert_eq!(c.stage(&[]), Ok(LogSeq(12)..LogSeq(12)));
        let big = vec![0u8; GROUP_BYTES_MAX];
        assert!(matches!(
            c.stage(&[(1, &big)]),
            Err(WalWriteError::GroupTooLarge { .. })
        ));
        assert_eq!(c.stage(&[(3, b"c")]), Ok(LogSeq(12)..LogSeq(13)));
        assert_eq!(c.visible_end(), LogSeq(13));
        assert_eq!(c.durable_end(), LogSeq(10));
    }

    const GROUP_BYTES_MAX: usize = crate::wal::GROUP_BYTES_MAX_FULL_SYNC;

    /// Polls and completes one group of the staged records.
    fn write_one(c: &mut GroupCommit) -> Group {
        assert!(c.claim_leadership(c.departing_waiters()).is_some());
        let g = c.poll_group().unwrap();
        c.handle_group_done(&g, Ok(()));
        let _ = c.poll_leader_step();
        g
    }

    #[test]
    fn a_segmented_core_rotates_before_overflow_and_zero_fills_ahead_once_per_chunk() {
        let segment = 4 * ZERO_FILL_CHUNK_BYTES;
        let options = WalOptions::segmented(DurabilityPolicy::FullSync, segment);
        let mut c = GroupCommit::new(&options, LogSeq(0), HEADER_BYTES as u64);
        let payload = vec![1u8; 64 << 10];
        let record = record::encoded_len(payload.len()) as u64;
        c.stage(&[(1, &payload)]).unwrap();
        let first = write_one(&mut c);
        let end = HEADER_BYTES as u64 + record;
        assert_eq!(first.zero_fill, end..end + ZERO_FILL_CHUNK_BYTES);
        // Until the records come within the low-water mark, no more zeros.
        let mut fills = vec![first.zero_fill.clone()];
        let mut rotations = 0;
        for _ in 0..200 {
            c.stage(&[(1, &payload)]).unwrap();
            let g = write_one(&mut c);
            assert!(
                g.offset + g.bytes as u64 <= segment,
                "never past the segment"
            );
            if g.starts_segment {
                rotations += 1;
                assert_eq!(g.offset, HEADER_BYTES as u64);
            }
            if !g.zero_fill.is_empty() {
                assert!(g.zero_fill.start >= g.offset + g.bytes as u64);
                assert!(g.zero_fill.end <= segment);
                fills.push(g.zero_fill.clone());
            }
        }
        assert!(rotations >= 3, "{rotations}");
        // About one fill per chunk of records: 200 records of 64 KiB fill ~13 MiB.
        let filled: u64 = fills.iter().map(|r| r.end - r.start).sum();
        assert!(
            filled <= 200 * record + 4 * ZERO_FILL_CHUNK_BYTES,
            "{filled}"
        );
        assert!(fills.len() >= 10, "{}", fills.len());
        // A single-file core never zero-fills.
        let mut single = core();
        single.stage(&[(1, b"x")]).unwrap();
        assert!(write_one(&mut single).zero_fill.is_empty());
    }

    #[test]
    fn group_moves_durable_end_only_when_done_ok() {
        let mut c = core();
        c.stage(&[(1, b"a")]).unwrap();
        c.stage(&[(1, b"b")]).unwrap();
        assert!(c.claim_leadership(c.departing_waiters()).is_some());
        let g = c.poll_group().unwrap();
        assert_eq!(g.seqs, LogSeq(10)..LogSeq(12));
        assert_eq!(g.offset, 32);
        assert_eq!(g.sync, Some(SyncKind::Full));
        assert!(c.poll_group().is_none(), "one group in flight at a time");
        assert_eq!(c.durable_end(), LogSeq(10));
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.durable_end(), LogSeq(12));
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);
        assert_eq!(c.stats().group_records_histogram[1], 1);
    }

    #[test]
    fn hand_off_when_a_durable_waiter_needs_pending_records() {
        let mut c = core();
        c.stage(&[(1, b"a")]).unwrap();
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        c.register_durable_wait(LogSeq(11)); // the leader's own wait
        let r = c.stage(&[(1, b"b")]).unwrap();
        c.register_durable_wait(r.end);
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.poll_leader_step(), LeaderStep::HandOff);
        assert_eq!(
            c.departing_waiters(),
            1,
            "the first group's caller has not left yet"
        );
        assert!(c.keep_gathering(0, c.departing_waiters(), 1));
        c.deregister_durable_wait(LogSeq(11));
        assert!(
            !c.keep_gathering(0, c.departing_waiters(), 1),
            "a quiet round with nobody departing ends gathering"
        );
        assert!(
            c.keep_gathering(0, c.departing_waiters(), 0),
            "a round that brought records continues"
        );
        assert_eq!(
            c.claim_leadership(c.departing_waiters()),
            Some(Leadership { gather: true })
        );
        c.deregister_durable_wait(r.end);
        assert_eq!(c.poll_group().unwrap().seqs, LogSeq(11)..LogSeq(12));
        assert!(!c.someone_waits_on_pending());
    }

    #[test]
    fn claim_gathers_while_the_last_groups_callers_are_leaving() {
        let mut c = core();
        c.register_durable_wait(LogSeq(11));
        c.register_durable_wait(LogSeq(12));
        c.stage(&[(1, b"a"), (1, b"b")]).unwrap();
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.poll_leader_step(), LeaderStep::Release, "nothing pending");
        c.deregister_durable_wait(LogSeq(11));
        // One caller is back before the other has left: it must not lead a group of one.
        c.stage(&[(1, b"c")]).unwrap();
        assert_eq!(
            c.claim_leadership(c.departing_waiters()),
            Some(Leadership { gather: true })
        );
        c.release_leadership();
        c.deregister_durable_wait(LogSeq(12));
        assert_eq!(
            c.claim_leadership(c.departing_waiters()),
            Some(Leadership { gather: false }),
            "lone writer"
        );
    }

    #[test]
    fn gathering_stops_at_the_round_bound_even_while_records_arrive() {
        let mut c = core();
        c.stage(&[(1, b"a")]).unwrap();
        assert!(c.keep_gathering(0, 0, 0), "a round that brought records");
        assert!(c.keep_gathering(GATHER_ROUNDS_MAX - 2, 1, 0));
        assert!(
            !c.keep_gathering(GATHER_ROUNDS_MAX - 1, 1, 0),
            "the last round ends gathering whatever it brought"
        );
    }

    #[test]
    fn one_per_turn_arrivals_gather_even_for_a_lone_writer() {
        let mut c = core();
        c.set_arrivals(Arrivals::OnePerTurn);
        c.stage(&[(1, b"a")]).unwrap();
        assert_eq!(
            c.claim_leadership(c.departing_waiters()),
            Some(Leadership { gather: true })
        );
    }

    #[test]
    fn a_rotations_directory_sync_is_counted_only_when_its_group_succeeds() {
        let options = WalOptions {
            segment_bytes: Some(64 << 10),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        };
        let full = (64 << 10) - 4;
        let mut ok = GroupCommit::new(&options, LogSeq(0), full);
        ok.stage(&[(1, b"a")]).unwrap();
        let _lead = ok.claim_leadership(0).unwrap();
        let g = ok.poll_group().unwrap();
        assert!(g.starts_segment);
        ok.handle_group_done(&g, Ok(()));
        assert_eq!((ok.stats().syncs, ok.stats().dir_syncs), (1, 1));

        let mut failed = GroupCommit::new(&options, LogSeq(0), full);
        failed.stage(&[(1, b"a")]).unwrap();
        let _lead = failed.claim_leadership(0).unwrap();
        let g = failed.poll_group().unwrap();
        failed.handle_group_done(
            &g,
            Err(GroupError::at_sync(VfsError::Io("dir sync failed".into()))),
        );
        assert_eq!((failed.stats().syncs, failed.stats().dir_syncs), (0, 0));
    }

    fn segmented(segment_bytes: u64) -> WalOptions {
        WalOptions {
            segment_bytes: Some(segment_bytes),
            ..WalOptions::single_file(DurabilityPolicy::FullSync)
        }
    }

    #[test]
    fn a_seal_with_nothing_pending_starts_an_empty_segment_at_the_next_seq() {
        let header = HEADER_BYTES as u64;
        let mut c = GroupCommit::new(&segmented(64 << 10), LogSeq(5), header);
        assert_eq!(
            c.request_seal().unwrap(),
            None,
            "an empty segment: nothing to seal"
        );
        c.stage(&[(1, b"a"), (1, b"b")]).unwrap();
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        assert!(!g.seals && !g.starts_segment);
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);

        let ticket = c.request_seal().unwrap().expect("two records to seal");
        assert_eq!(c.request_seal().unwrap(), Some(ticket), "one seal for both");
        assert_eq!(c.seal_wait_state(ticket), WaitState::Pending);
        let _lead = c.claim_leadership(0).expect("a seal is work");
        let g = c.poll_group().unwrap();
        assert!(g.seals && g.starts_segment);
        assert_eq!(
            (g.seqs.clone(), g.records, g.bytes),
            (LogSeq(7)..LogSeq(7), 0, 0)
        );
        assert_eq!(g.offset, header);
        assert!(g.chunks.is_empty());
        assert_eq!(g.sync, Some(SyncKind::Full));
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.seal_wait_state(ticket), WaitState::Durable);
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);
        let stats = c.stats();
        assert_eq!(
            (stats.groups, stats.records),
            (1, 2),
            "a seal is not a group"
        );
        assert_eq!(
            (stats.segments_started, stats.syncs, stats.dir_syncs),
            (1, 2, 1)
        );
        assert_eq!(
            c.request_seal().unwrap(),
            None,
            "the new segment holds nothing"
        );

        // The next record lands in the new segment, right after its header.
        c.stage(&[(1, b"c")]).unwrap();
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        assert_eq!((g.offset, g.starts_segment), (header, false));
        assert_eq!(g.seqs, LogSeq(7)..LogSeq(8));
    }

    #[test]
    fn a_seal_with_records_pending_rotates_them_into_the_new_segment() {
        let mut c = GroupCommit::new(&segmented(64 << 10), LogSeq(0), 1000);
        c.stage(&[(1, b"pending")]).unwrap();
        let ticket = c
            .request_seal()
            .unwrap()
            .expect("the segment holds records");
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        assert!(g.seals && g.starts_segment, "rotated though it had room");
        assert_eq!(
            (g.seqs.clone(), g.offset),
            (LogSeq(0)..LogSeq(1), HEADER_BYTES as u64)
        );
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.seal_wait_state(ticket), WaitState::Durable);
        assert_eq!(c.stats().groups, 1);
    }

    #[test]
    fn a_seal_requested_while_a_group_is_in_flight_waits_for_a_later_group() {
        let mut c = GroupCommit::new(&segmented(64 << 10), LogSeq(0), HEADER_BYTES as u64);
        c.stage(&[(1, b"a")]).unwrap();
        let _lead = c.claim_leadership(0).unwrap();
        let first = c.poll_group().unwrap();
        // The segment is empty on disk, but a group is on its way into it.
        let ticket = c.request_seal().unwrap().expect("records on their way");
        c.handle_group_done(&first, Ok(()));
        assert_eq!(c.seal_wait_state(ticket), WaitState::Pending);
        assert_eq!(
            c.poll_leader_step(),
            LeaderStep::Continue,
            "the seal keeps the leader"
        );
        let seal = c.poll_group().unwrap();
        assert!(seal.seals);
        // A request while the seal group is in flight is settled by it: no second segment.
        let late = c
            .request_seal()
            .unwrap()
            .expect("settled by the seal in flight");
        c.handle_group_done(&seal, Ok(()));
        assert_eq!(c.seal_wait_state(ticket), WaitState::Durable);
        assert_eq!(c.seal_wait_state(late), WaitState::Durable);
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);
    }

    #[test]
    fn a_failed_seal_poisons_and_a_single_file_log_has_nothing_to_seal() {
        let mut c = GroupCommit::new(&segmented(64 << 10), LogSeq(0), 1000);
        let ticket = c.request_seal().unwrap().unwrap();
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        c.handle_group_done(
            &g,
            Err(GroupError::before_sync(VfsError::Io("no space".into()))),
        );
        assert!(matches!(c.seal_wait_state(ticket), WaitState::Failed(_)));
        assert!(matches!(
            c.request_seal(),
            Err(WalWriteError::Poisoned { .. })
        ));
        assert_eq!(c.stats().segments_started, 0);

        let mut single = core();
        single.stage(&[(1, b"a")]).unwrap();
        assert_eq!(single.request_seal().unwrap(), None);
    }

    #[test]
    fn non_durable_pending_work_keeps_the_leader() {
        let mut c = core();
        c.stage(&[(1, b"a")]).unwrap();
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        c.stage(&[(1, b"b")]).unwrap();
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.poll_leader_step(), LeaderStep::Continue);
    }

    #[test]
    fn failure_poisons_and_freezes_durable_end() {
        let mut c = core();
        c.stage(&[(1, b"a")]).unwrap();
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        c.stage(&[(1, b"b")]).unwrap();
        c.handle_group_done(&g, Err(GroupError::at_sync(VfsError::Io("boom".into()))));
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);
        assert_eq!(c.durable_end(), LogSeq(10));
        assert_eq!(
            c.durable_wait_state(LogSeq(11)),
            WaitState::Failed(VfsError::Io("boom".into()))
        );
        assert!(c.claim_leadership(c.departing_waiters()).is_none());
        assert!(matches!(
            c.stage(&[(1, b"c")]),
            Err(WalWriteError::Poisoned { .. })
        ));
        assert_eq!(
            c.visible_records(LogSeq(0), 10).len(),
            2,
            "staged records stay visible"
        );
    }

    #[test]
    fn no_room_before_the_sync_stalls_and_the_retry_writes_the_same_group() {
        let mut c = core();
        c.stage(&[(1, b"a"), (2, b"b")]).unwrap();
        c.stage(&[(3, b"c")]).unwrap();
        c.register_durable_wait(LogSeq(13));
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        assert_eq!(g.seqs, LogSeq(10)..LogSeq(13));
        c.handle_group_done(&g, Err(GroupError::before_sync(VfsError::NoSpace)));
        assert_eq!(
            c.poll_leader_step(),
            LeaderStep::Release,
            "no spin on a full disk"
        );
        assert_eq!(c.failure(), None, "not poisoned");
        assert_eq!(c.stalled(), Some(&VfsError::NoSpace));
        assert_eq!(
            c.durable_wait_state(LogSeq(13)),
            WaitState::Stalled(VfsError::NoSpace)
        );
        assert!(
            c.claim_leadership(0).is_none(),
            "no one leads while stalled"
        );
        assert_eq!(
            c.stage(&[(4, b"d")]),
            Err(WalWriteError::StalledRefused {
                cause: VfsError::NoSpace
            }),
            "refused, nothing staged"
        );
        assert_eq!(c.visible_end(), LogSeq(13));
        assert_eq!(c.visible_records(LogSeq(0), 10).len(), 3, "still visible");
        assert_eq!(c.pending_records(), 3);

        // The retry: the same records, at the same offset, in one group.
        assert!(c.retry_stalled());
        assert_eq!(c.durable_wait_state(LogSeq(13)), WaitState::Pending);
        let _lead = c.claim_leadership(0).unwrap();
        let again = c.poll_group().unwrap();
        assert_eq!(
            (again.seqs.clone(), again.offset),
            (g.seqs.clone(), g.offset)
        );
        assert_eq!(again.chunks, g.chunks);
        c.handle_group_done(&again, Ok(()));
        assert_eq!(c.durable_wait_state(LogSeq(13)), WaitState::Durable);
        c.deregister_durable_wait(LogSeq(13));
        assert_eq!(c.stage(&[(4, b"d")]), Ok(LogSeq(13)..LogSeq(14)));
        assert_eq!(c.stats().groups, 1);
    }

    #[test]
    fn only_a_lack_of_room_before_the_sync_is_retriable() {
        let quota = VfsError::QuotaExceeded(crate::vfs::QuotaExceeded {
            limit: 1,
            used: 1,
            requested: 1,
        });
        assert!(GroupError::before_sync(VfsError::NoSpace).retriable());
        assert!(GroupError::before_sync(quota.clone()).retriable());
        assert!(
            !GroupError::at_sync(VfsError::NoSpace).retriable(),
            "fsyncgate"
        );
        assert!(!GroupError::at_sync(quota).retriable());
        assert!(!GroupError::before_sync(VfsError::Io("eio".into())).retriable());
    }

    #[test]
    fn a_stalled_seal_is_asked_again_and_keeps_its_room() {
        let mut c = GroupCommit::new(&segmented(64 << 10), LogSeq(0), 1000);
        let ticket = c.request_seal().unwrap().unwrap();
        let _lead = c.claim_leadership(0).unwrap();
        let g = c.poll_group().unwrap();
        assert!(g.seals);
        c.handle_group_done(&g, Err(GroupError::before_sync(VfsError::NoSpace)));
        assert_eq!(c.poll_leader_step(), LeaderStep::Release);
        assert!(matches!(c.seal_wait_state(ticket), WaitState::Stalled(_)));
        assert!(c.retry_stalled());
        let _lead = c.claim_leadership(0).unwrap();
        let again = c.poll_group().unwrap();
        assert!(again.seals && again.starts_segment);
        c.handle_group_done(&again, Ok(()));
        assert_eq!(c.seal_wait_state(ticket), WaitState::Durable);
        assert_eq!(c.stats().segments_started, 1);
    }

    #[test]
    fn groups_are_byte_bounded_at_batch_boundaries() {
        let mut opts = WalOptions::single_file(DurabilityPolicy::Skip);
        opts.group_bytes_max = Some(100);
        let mut c = GroupCommit::new(&opts, LogSeq(0), 32);
        for _ in 0..5 {
            c.stage(&[(0, &[7u8; 22])]).unwrap(); // 40 encoded bytes each
        }
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        assert_eq!((g.records, g.bytes, g.sync), (2, 80, None));
        c.handle_group_done(&g, Ok(()));
        assert_eq!(c.poll_leader_step(), LeaderStep::Continue);
        let g2 = c.poll_group().unwrap();
        assert_eq!(g2.offset, 32 + 80);
        assert_eq!(g2.seqs, LogSeq(2)..LogSeq(4));
    }

    #[test]
    fn retire_never_clamps_and_releases_bytes() {
        let mut c = core();
        c.stage(&[(1, b"a"), (1, b"b")]).unwrap();
        assert!(matches!(
            c.retire_visible_through(LogSeq(10)),
            Err(WalRetireError::BeyondDurable { .. })
        ));
        let _lead = c.claim_leadership(c.departing_waiters()).unwrap();
        let g = c.poll_group().unwrap();
        c.handle_group_done(&g, Ok(()));
        let before = c.stats().retained_bytes;
        let r = c.retire_visible_through(LogSeq(10)).unwrap();
        assert_eq!(r.records, 1);
        assert_eq!(r.retained_bytes, before - r.bytes);
        assert!(c.retire_visible_through(LogSeq(12)).is_err());
        assert_eq!(c.visible_records(LogSeq(0), 10)[0].seq, LogSeq(11));
    }

    #[test]
    fn retention_bound_refuses_without_consuming_a_seq() {
        let mut opts = WalOptions::single_file(DurabilityPolicy::Skip);
        opts.retained_bytes_max = 50;
        let mut c = GroupCommit::new(&opts, LogSeq(0), 32);
        c.stage(&[(0, &[0u8; 20])]).unwrap(); // 38 bytes
        assert!(matches!(
            c.stage(&[(0, &[0u8; 20])]),
            Err(WalWriteError::RetentionFull { .. })
        ));
        assert_eq!(c.visible_end(), LogSeq(1));
    }
}
