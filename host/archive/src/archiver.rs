//! [`Archiver`]: ships a running log's sealed segments to an archive, beside its writer.
//!
//! It reads the segments through the host's own [`Vfs`] on the log's root, never through the
//! engine, so a sandboxed guest's capabilities do not change. Each round
//! ([`Archiver::archive_round`]):
//! 1. re-puts, byte for byte, a manifest whose put failed last round (its reply may have been
//!    lost after it landed: identical bytes then count as done);
//! 2. lists the log's directory; every segment but the last is sealed and immutable. If the
//!    last, the active segment, has held durable records for [`ArchiveOptions::seal_age_max`],
//!    it asks the writer to seal it first ([`Wal::seal_active_segment`]), so that they ship
//!    this round;
//! 3. uploads each sealed segment past the archive's end, trimmed to its records, create-only
//!    under a deterministic key, a few at a time;
//! 4. publishes manifest `n + 1` naming them, create-only: the commit point. Only then does the
//!    [`ArchiveGate`] move, so a crash between the two puts leaves the records counted as
//!    unarchived and the next writer re-puts the same objects;
//! 5. asks the log to truncate through its checkpoint; the gate keeps every segment not yet
//!    archived and the newest [`ArchiveOptions::local_segments_kept`].
//!
//! What it promises:
//! - Once [`ArchiverStatus::archived_next`] passes a seq, that record is in an object that
//!   a manifest names, with the CRC32C the manifest gives: it survives the loss of this machine.
//! - Two writers never both extend one archive: attaching publishes a manifest with the next
//!   epoch, and a writer whose next manifest number is taken by other bytes stops with
//!   [`ArchiveError::Fenced`].
//! - No record is dropped: while the store is unreachable the backlog grows to
//!   [`ArchiveOptions::unarchived_bytes_max`], and then commits fail with
//!   [`stele_host::archive_gate::ArchiveBacklog`].
//!
//! A clean shutdown ships the active segment too ([`Archiver::close`], [`RunningArchiver::close`]
//! and its drop): the log is flushed and sealed and rounds run until the archive covers
//! everything acknowledged, within [`ArchiveOptions::close_timeout`].
//!
//! The RPO (what a machine loss can take) is the records of the active segment plus any
//! sealed ones not yet uploaded. In size, it is bounded by the segment size and the backlog
//! bound; in time, by `seal_age_max`: a record durable at time t is in an object named by a
//! manifest by about t + `seal_age_max` + the poll interval + one round's uploads, while the
//! store is reachable. The age is counted from the first round that saw the active segment
//! hold a durable record, so it is late by up to one poll interval, never early.
//!
//! What `seal_age_max` costs, per seal of a segment that is not full: a new segment created
//! and preallocated (its unused tail stays allocated on the local disk until truncation; the
//! upload is trimmed), a file and a directory sync on the writer's path (a commit in flight
//! waits for them, as for any rotation), one segment put and one manifest put (two requests),
//! and one more entry in every later manifest. A log that gets a record every few seconds
//! with a 60 s bound makes one small segment a minute: 2,880 requests a day. A log that is
//! idle makes none, because an active segment without records is never sealed.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use stele::header::HEADER_BYTES;
use stele::vfs::{OpenMode, Vfs};
use stele::wal::record::encoded_len;
use stele::wal::segment::{SegmentReader, list_segments, read_checkpoint};
use stele::wal::{LogSeq, WalTruncation};
use stele_host::Wal;
use stele_host::archive_gate::{ArchiveGate, CompactionListener};

use crate::image::{SegmentImage, read_local_segment};
use crate::layout::{file_generation_key, manifest_key, segment_key};
use crate::manifest::{FileEntry, MANIFEST_FORMAT, Manifest, SegmentEntry, archived_through};
use crate::objects::{PutOutcome, Taken, latest_manifest, put_create_only, put_or_read};
use crate::{ArchiveError, ArchiveLocation};

/// The backlog bound unless configured: 1 GiB, sixteen default segments. Large enough to ride
/// out a store outage of minutes at this disk's durable write rate; small enough that the disk
/// never fills behind a store that is down for good. Chosen, not measured.
pub const UNARCHIVED_BYTES_MAX_DEFAULT: u64 = 1 << 30;

/// Sealed segments kept locally after they are archived, unless configured: local readers
/// (a tail, a replica catching up) can read the recent past without the store.
pub const LOCAL_SEGMENTS_KEPT_DEFAULT: usize = 2;

/// Uploads in flight at once, unless configured. Segment puts are independent; a few in flight
/// hide the store's latency without holding many segments in memory (each is read whole).
pub const UPLOADS_IN_FLIGHT_DEFAULT: usize = 4;

/// How a [`RunningArchiver`] waits between rounds, unless configured.
pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_millis(100);

/// How long the active segment may hold a durable record before it is sealed, unless
/// configured: a minute of records at most on one disk, at a cost of at most one small
/// segment, two requests and two syncs a minute (see the module doc). Chosen, not tuned:
/// Litestream ships every second, pgBackRest's `archive_timeout` is often a minute.
pub const SEAL_AGE_MAX_DEFAULT: Duration = Duration::from_secs(60);

/// How long a close ([`Archiver::close`], [`RunningArchiver::close`], a dropped
/// [`RunningArchiver`]) may spend shipping the log's tail, unless configured: long enough for
/// one segment (64 MiB at most) to a remote store at tens of MB/s with retries, short enough
/// that a shutdown does not hang on a store that is down.
pub const CLOSE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The longest a close waits between rounds that did not reach the end: a retry of a failed
/// request should not wait a whole poll interval when the close's bound is short.
const CLOSE_RETRY_PAUSE_MAX: Duration = Duration::from_millis(50);

/// How an [`Archiver`] behaves. `#[non_exhaustive]`: start from `ArchiveOptions::default()`
/// and change what you need with the `with_*` setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ArchiveOptions {
    /// Encoded record bytes written but not archived at which commits are refused.
    pub unarchived_bytes_max: u64,
    /// Sealed segments kept locally once archived (the local retention window).
    pub local_segments_kept: usize,
    /// Whether each round asks the log to truncate through its checkpoint (within what the
    /// gate allows). Off, the owner's own `truncate_through` calls are still gated.
    pub truncate_local: bool,
    /// Uploads in flight at once.
    pub uploads_in_flight: usize,
    /// A [`RunningArchiver`]'s wait between rounds.
    pub poll_interval: Duration,
    /// Seal the active segment once it has held a durable record this long (see the module
    /// doc for the cost); `None` ships a segment only when it fills.
    pub seal_age_max: Option<Duration>,
    /// The bound on a close's shipping of the log's tail (see [`Archiver::close`]).
    pub close_timeout: Duration,
}

impl Default for ArchiveOptions {
    fn default() -> Self {
        ArchiveOptions {
            unarchived_bytes_max: UNARCHIVED_BYTES_MAX_DEFAULT,
            local_segments_kept: LOCAL_SEGMENTS_KEPT_DEFAULT,
            truncate_local: true,
            uploads_in_flight: UPLOADS_IN_FLIGHT_DEFAULT,
            poll_interval: POLL_INTERVAL_DEFAULT,
            seal_age_max: Some(SEAL_AGE_MAX_DEFAULT),
            close_timeout: CLOSE_TIMEOUT_DEFAULT,
        }
    }
}

impl ArchiveOptions {
    /// These options with another bound on a close's shipping of the tail.
    pub fn with_close_timeout(mut self, close_timeout: Duration) -> Self {
        self.close_timeout = close_timeout;
        self
    }

    /// These options refusing commits at another unarchived backlog.
    pub fn with_unarchived_bytes_max(mut self, unarchived_bytes_max: u64) -> Self {
        self.unarchived_bytes_max = unarchived_bytes_max;
        self
    }

    /// These options keeping another number of archived segments locally.
    pub fn with_local_segments_kept(mut self, local_segments_kept: usize) -> Self {
        self.local_segments_kept = local_segments_kept;
        self
    }

    /// These options with each round truncating the local log (`true`) or not.
    pub fn with_truncate_local(mut self, truncate_local: bool) -> Self {
        self.truncate_local = truncate_local;
        self
    }

    /// These options with another number of uploads in flight.
    pub fn with_uploads_in_flight(mut self, uploads_in_flight: usize) -> Self {
        self.uploads_in_flight = uploads_in_flight;
        self
    }

    /// These options with another wait between a running archiver's rounds.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// These options sealing the active segment after another age (`None`: only when full).
    pub fn with_seal_age_max(mut self, seal_age_max: Option<Duration>) -> Self {
        self.seal_age_max = seal_age_max;
        self
    }
}

/// Counters since attach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiverStats {
    /// Segments uploaded and named by a published manifest.
    pub segments_archived: u64,
    /// Their bytes.
    pub bytes_archived: u64,
    /// Segment puts that found identical bytes already there.
    pub already_there: u64,
    /// Manifests published (the attach's included).
    pub manifests_published: u64,
    /// File generations archived.
    pub files_archived: u64,
    /// Segments deleted locally by the archiver's truncations.
    pub segments_truncated: u64,
    /// For each archived segment, milliseconds from when it was first seen sealed to when its
    /// manifest was published.
    pub seal_to_archived_ms: Vec<u64>,
    /// Active segments sealed because of `seal_age_max`.
    pub segments_sealed_by_age: u64,
    /// Time spent shipping segments: in each round that archived one, from its first segment
    /// read to its manifest's publication. `bytes_archived` over it is the rate the archiver
    /// sustains while it has work, whatever the poll interval and however much the writer
    /// gives it.
    pub upload_busy: Duration,
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Segments archived this round.
    pub segments_archived: u64,
    /// Their bytes.
    pub bytes_archived: u64,
    /// The manifest published, if one was.
    pub manifest: Option<u64>,
    /// The archive's end after the round.
    pub archived_next: LogSeq,
    /// What the truncation after it deleted, if one ran.
    pub truncation: Option<WalTruncation>,
}

/// A snapshot of an archiver's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiverStatus {
    /// Every record before this seq is archived.
    pub archived_next: LogSeq,
    /// The newest manifest this writer published.
    pub manifest: u64,
    /// This writer's epoch.
    pub epoch: u64,
    /// Encoded bytes written and not yet archived.
    pub unarchived_bytes: u64,
    /// Counters since attach.
    pub stats: ArchiverStats,
    /// The last round's error, if it failed (a transient one is retried).
    pub last_error: Option<String>,
    /// Why the archiver stopped for good, if it did.
    pub stopped: Option<String>,
}

/// Ships one log's sealed segments; see the module doc.
#[derive(Debug)]
pub struct Archiver {
    location: ArchiveLocation,
    vfs: Arc<dyn Vfs>,
    dir: String,
    wal: Wal,
    gate: Arc<ArchiveGate>,
    options: ArchiveOptions,
    /// The newest manifest this writer published (or, before its first, the one it took over).
    manifest: Manifest,
    /// A manifest whose put failed: the next round puts these exact bytes again first.
    pending: Option<Manifest>,
    /// When each sealed segment (by first seq) was first seen sealed, for the lag figures.
    sealed_seen_ms: BTreeMap<u64, u64>,
    /// The active segment (by first seq) and when a round first saw it hold a durable record:
    /// what `seal_age_max` is counted from.
    active_holding_since_ms: Option<(LogSeq, u64)>,
    stats: ArchiverStats,
    last_error: Option<String>,
    stopped: Option<String>,
    /// Files a compaction replaced since the last round: their new generations are due.
    files_due: Arc<FilesDue>,
}

/// The names [`Archiver::compaction_listener`] hears of, until a round archives them.
#[derive(Debug, Default)]
struct FilesDue(Mutex<std::collections::BTreeSet<String>>);

impl FilesDue {
    fn queue(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CompactionListener for FilesDue {
    fn compacted(&self, path: &str) {
        self.queue().insert(path.to_owned());
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// 32 hex digits, different for every call: std's `RandomState` is seeded from the operating
/// system's randomness once per process and advanced per instance; time and pid separate
/// processes.
pub(crate) fn fresh_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut id = String::with_capacity(32);
    for half in 0u8..2 {
        let mut hasher = std::hash::RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.write_u8(half);
        id.push_str(&format!("{:016x}", hasher.finish()));
    }
    id
}

impl Archiver {
    /// Attaches an archiver to `wal`, the log at `dir` on `vfs` (the same filesystem the log
    /// was opened on), archiving to `location`.
    ///
    /// It takes the archive over: reads the newest manifest (none: a new archive starting at
    /// the log's first segment), checks that the log continues it, publishes a manifest with
    /// the next epoch, counts the records on disk past the archive's end, and attaches the
    /// gate. Call it right after opening the log, before committing: a commit made while it
    /// runs is not counted against the backlog.
    ///
    /// # Errors
    /// [`ArchiveError::Fenced`] if another writer published first; [`ArchiveError::Gap`] or
    /// [`ArchiveError::Diverged`] if the log is not the archive's; a store, filesystem or
    /// log error.
    pub async fn attach(
        location: ArchiveLocation,
        vfs: Arc<dyn Vfs>,
        dir: &str,
        wal: Wal,
        options: ArchiveOptions,
    ) -> Result<Archiver, ArchiveError> {
        let local = list_segments(&*vfs, dir).map_err(ArchiveError::local(dir))?;
        let previous = latest_manifest(&location, None).await?;
        let writer_id = fresh_id();
        let first_manifest = match &previous {
            Some(previous) => Manifest {
                manifest: previous.manifest + 1,
                epoch: previous.epoch + 1,
                writer_id,
                published_at_ms: now_ms(),
                ..previous.clone()
            },
            None => {
                let first_seq = match local.first() {
                    Some(&first) => first,
                    None => wal.stats()?.visible_end,
                };
                Manifest {
                    format: MANIFEST_FORMAT,
                    log_id: fresh_id(),
                    manifest: 0,
                    epoch: 1,
                    writer_id,
                    published_at_ms: now_ms(),
                    first_seq: first_seq.0,
                    next_seq: first_seq.0,
                    archived_through: None,
                    checkpoint: None,
                    segments: Vec::new(),
                    files: Vec::new(),
                }
            }
        };
        check_log_continues_archive(&*vfs, dir, &local, &first_manifest)?;
        let archived_next = first_manifest.archived_next();
        let unarchived_bytes = unarchived_bytes_on_disk(&*vfs, dir, archived_next)?;
        let gate = Arc::new(ArchiveGate::new(
            archived_next,
            unarchived_bytes,
            options.unarchived_bytes_max,
            options.local_segments_kept,
        ));
        let mut archiver = Archiver {
            location,
            vfs,
            dir: dir.to_owned(),
            wal,
            gate: gate.clone(),
            options,
            manifest: previous.unwrap_or_else(|| first_manifest.clone()),
            pending: None,
            sealed_seen_ms: BTreeMap::new(),
            active_holding_since_ms: None,
            stats: ArchiverStats::default(),
            last_error: None,
            stopped: None,
            files_due: Arc::default(),
        };
        archiver.publish(first_manifest).await?;
        archiver.wal.attach_archive_gate(gate)?;
        Ok(archiver)
    }

    /// A listener to attach to a journal or push log on the same filesystem
    /// ([`stele_host::Journal::set_compaction_listener`],
    /// [`stele_host::PushLog::set_compaction_listener`]): after each compaction, the next round
    /// archives the file's new generation.
    pub fn compaction_listener(&self) -> Arc<dyn CompactionListener> {
        self.files_due.clone()
    }

    /// The gate this archiver moves.
    pub fn gate(&self) -> &Arc<ArchiveGate> {
        &self.gate
    }

    /// Where it archives to.
    pub fn location(&self) -> &ArchiveLocation {
        &self.location
    }

    /// The newest manifest this writer published.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Its progress.
    pub fn status(&self) -> ArchiverStatus {
        ArchiverStatus {
            archived_next: self.gate.archived_next(),
            manifest: self.manifest.manifest,
            epoch: self.manifest.epoch,
            unarchived_bytes: self.gate.unarchived_bytes(),
            stats: self.stats.clone(),
            last_error: self.last_error.clone(),
            stopped: self.stopped.clone(),
        }
    }

    /// One round: see the module doc.
    ///
    /// # Errors
    /// A terminal error ([`ArchiveError::is_terminal`]: fenced, diverged, a gap) stops the
    /// archiver, and every later round returns [`ArchiveError::Stopped`]; the gate then
    /// reports itself stopped, and the backlog only grows. Any other error leaves everything
    /// to be retried by the next round.
    pub async fn archive_round(&mut self) -> Result<RoundReport, ArchiveError> {
        if let Some(reason) = &self.stopped {
            return Err(ArchiveError::Stopped {
                reason: reason.clone(),
            });
        }
        let result = self.round().await;
        match &result {
            Ok(_) => self.last_error = None,
            Err(error) => {
                self.last_error = Some(error.to_string());
                if error.is_terminal() {
                    self.stop(error.to_string());
                }
            }
        }
        result
    }

    /// Ships the log's tail, for a clean shutdown: flushes the log (a non-durable commit
    /// becomes durable), seals its active segment so that every durable record lies in a
    /// sealed one, and runs rounds until the archive's manifest covers every record before the
    /// new active segment, within [`ArchiveOptions::close_timeout`]. Returns that end: after
    /// `Ok`, every record the log acknowledged before the close is in the archive. The log
    /// stays open and the archiver attached; commits after the close go to the new segment.
    ///
    /// # Errors
    /// [`ArchiveError::CloseTimedOut`] if the rounds did not get there in time (the store is
    /// down, say: they are retried until the bound); the log's error if the flush or the seal
    /// failed (a poisoned writer); [`ArchiveError::Stopped`] or a terminal error if the
    /// archiver stopped.
    pub async fn close(&mut self) -> Result<LogSeq, ArchiveError> {
        let timeout = self.options.close_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        self.wal.flush()?;
        self.wal.seal_active_segment()?;
        let end = self.wal.stats()?.durable_end;
        let mut rounds_run = 0u32;
        loop {
            if self.gate.archived_next() >= end {
                return Ok(end);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ArchiveError::CloseTimedOut {
                    timeout,
                    archived_next: self.gate.archived_next().0,
                    end: end.0,
                    last_error: self.last_error.clone(),
                });
            }
            if rounds_run > 0 {
                // A round ran and fell short (a transient failure, kept as `last_error`): wait
                // a little before the next, as the running archiver does.
                let pause = self.options.poll_interval.min(CLOSE_RETRY_PAUSE_MAX);
                tokio::time::sleep_until(deadline.min(now + pause)).await;
            }
            rounds_run += 1;
            // A transient error is retried until the deadline; a terminal one ends the close.
            if let Ok(Err(error)) = tokio::time::timeout_at(deadline, self.archive_round()).await
                && error.is_terminal()
            {
                return Err(error);
            }
        }
    }

    /// Seals the active segment (the last of `live`) if it has held a durable record for
    /// `seal_age_max`; says whether it did.
    fn seal_if_aged(&mut self, live: &[LogSeq], now: u64) -> Result<bool, ArchiveError> {
        let (Some(age_max), Some(&active)) = (self.options.seal_age_max, live.last()) else {
            return Ok(false);
        };
        if self.wal.stats()?.durable_end <= active {
            self.active_holding_since_ms = None;
            return Ok(false);
        }
        let since = match self.active_holding_since_ms {
            Some((first, since)) if first == active => since,
            _ => {
                self.active_holding_since_ms = Some((active, now));
                now
            }
        };
        if now.saturating_sub(since) < age_max.as_millis() as u64 {
            return Ok(false);
        }
        let sealed = self.wal.seal_active_segment()?;
        self.active_holding_since_ms = None;
        if sealed {
            self.stats.segments_sealed_by_age += 1;
            tracing::debug!(first_seq = active.0, "active segment sealed by age");
        }
        Ok(sealed)
    }

    fn stop(&mut self, reason: String) {
        tracing::warn!(%reason, "archiver stopped");
        self.gate.stop();
        self.stopped.get_or_insert(reason);
    }

    async fn round(&mut self) -> Result<RoundReport, ArchiveError> {
        if let Some(pending) = self.pending.take() {
            self.publish(pending).await?;
        }
        let mut live =
            list_segments(&*self.vfs, &self.dir).map_err(ArchiveError::local(&self.dir))?;
        let now = now_ms();
        if self.seal_if_aged(&live, now)? {
            live = list_segments(&*self.vfs, &self.dir).map_err(ArchiveError::local(&self.dir))?;
        }
        let sealed = &live[..live.len().saturating_sub(1)];
        for first in sealed {
            self.sealed_seen_ms.entry(first.0).or_insert(now);
        }
        let archived_next = self.manifest.archived_next();
        let to_archive: Vec<LogSeq> = sealed
            .iter()
            .copied()
            .filter(|&first| first >= archived_next)
            .collect();
        if let Some(&first) = to_archive.first()
            && first != archived_next
        {
            return Err(ArchiveError::Gap {
                reason: format!(
                    "the archive ends before seq {archived_next}, the next local segment \
                     starts at {first}"
                ),
            });
        }

        let upload_started = Instant::now();
        let (vfs, dir, location) = (self.vfs.clone(), self.dir.clone(), self.location.clone());
        let (vfs, dir, location) = (&vfs, &dir, &location);
        let mut uploads = Box::pin(
            futures::stream::iter(to_archive)
                .map(|first| async move {
                    let image = read_local_segment(&**vfs, dir, first)?;
                    let key = segment_key(image.first_seq, image.next_seq);
                    let outcome = put_create_only(location, &key, image.bytes.clone()).await?;
                    Ok::<_, ArchiveError>((image, key, outcome))
                })
                .buffered(self.options.uploads_in_flight.max(1)),
        );
        let mut landed: Vec<(SegmentImage, String)> = Vec::new();
        let mut expected = archived_next;
        let mut failure = None;
        while let Some(upload) = uploads.next().await {
            match upload {
                Ok((image, key, outcome)) => {
                    if image.first_seq != expected {
                        failure = Some(ArchiveError::Gap {
                            reason: format!(
                                "local segment {} follows one that ends at {expected}",
                                image.first_seq
                            ),
                        });
                        break;
                    }
                    expected = image.next_seq;
                    if outcome == PutOutcome::AlreadyThere {
                        self.stats.already_there += 1;
                    }
                    landed.push((image, key));
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        // Uploads past a failure are abandoned unpolled; their segments go up next round.
        drop(uploads);

        // The segments that landed in order are published even when a later one failed: the
        // manifest names a contiguous prefix, and the failed one is retried next round.
        let checkpoint = read_checkpoint(&*self.vfs, &self.dir)
            .map_err(|e| ArchiveError::LocalSegment {
                path: self.dir.clone(),
                source: e,
            })?
            .map(|seq| seq.0);
        let mut report = RoundReport {
            archived_next,
            ..RoundReport::default()
        };
        if !landed.is_empty() || checkpoint != self.manifest.checkpoint {
            let mut next = self.manifest.clone();
            next.manifest += 1;
            next.writer_id.clone_from(&self.manifest.writer_id);
            next.published_at_ms = now_ms();
            next.checkpoint = checkpoint;
            for (image, key) in &landed {
                next.segments.push(SegmentEntry {
                    first_seq: image.first_seq.0,
                    next_seq: image.next_seq.0,
                    key: key.clone(),
                    bytes: image.bytes.len() as u64,
                    crc32c: image.crc32c,
                    file_len: image.file_len,
                    sealed_at_ms: self
                        .sealed_seen_ms
                        .get(&image.first_seq.0)
                        .copied()
                        .unwrap_or(now),
                });
            }
            next.next_seq = expected.0;
            next.archived_through = archived_through(next.first_seq, next.next_seq);
            self.publish(next).await?;
            if !landed.is_empty() {
                self.stats.upload_busy += upload_started.elapsed();
            }
            report.segments_archived = landed.len() as u64;
            report.bytes_archived = landed.iter().map(|(i, _)| i.bytes.len() as u64).sum();
            report.manifest = Some(self.manifest.manifest);
            report.archived_next = expected;
        }
        if let Some(error) = failure {
            return Err(error);
        }
        if self.options.truncate_local
            && let Some(checkpoint) = checkpoint
        {
            let truncation = self.wal.truncate_through(LogSeq(checkpoint))?;
            self.stats.segments_truncated += truncation.segments_removed;
            report.truncation = Some(truncation);
        }
        let mut due = std::mem::take(&mut *self.files_due.queue()).into_iter();
        while let Some(name) = due.next() {
            if let Err(error) = self.archive_file_inner(&name).await {
                // Still due, with those after it: the next round tries again.
                self.files_due
                    .queue()
                    .extend(std::iter::once(name).chain(due));
                return Err(error);
            }
        }
        Ok(report)
    }

    /// Publishes `manifest` create-only at its number. On a failed request it is kept, and
    /// the next round puts the same bytes again. Once it is published, and only then, the gate
    /// moves past the segments it adds.
    async fn publish(&mut self, manifest: Manifest) -> Result<(), ArchiveError> {
        let key = manifest_key(manifest.manifest);
        let bytes = Bytes::from(manifest.encode());
        match put_or_read(&self.location, &key, bytes).await {
            Ok(Ok(_)) => {
                let published = now_ms();
                let archived_before = self.manifest.next_seq;
                let added = manifest
                    .segments
                    .iter()
                    .filter(|s| s.first_seq >= archived_before);
                let mut record_bytes = 0;
                for segment in added {
                    record_bytes += segment.bytes.saturating_sub(HEADER_BYTES as u64);
                    self.stats.segments_archived += 1;
                    self.stats.bytes_archived += segment.bytes;
                    if let Some(seen) = self.sealed_seen_ms.remove(&segment.first_seq) {
                        self.stats
                            .seal_to_archived_ms
                            .push(published.saturating_sub(seen));
                    }
                }
                self.gate.archived(manifest.archived_next(), record_bytes);
                self.stats.manifests_published += 1;
                self.manifest = manifest;
                Ok(())
            }
            Ok(Err(Taken::By(theirs))) => {
                let path = self.location.path(&key).to_string();
                let their_epoch = Manifest::decode(&path, manifest.manifest, &theirs)
                    .map(|m| m.epoch)
                    .unwrap_or(0);
                Err(ArchiveError::Fenced {
                    manifest: manifest.manifest,
                    their_epoch,
                    our_epoch: manifest.epoch,
                })
            }
            Err(error) => {
                self.pending = Some(manifest);
                Err(error)
            }
        }
    }

    /// Archives the file at `name` (root-relative on the log's filesystem: a journal or a push
    /// log) as a new whole-file generation, and publishes a manifest naming it. A file whose
    /// bytes equal its newest generation's is not archived again. Call it after each
    /// compaction, or whenever a copy off this machine is wanted.
    ///
    /// # Errors
    /// As [`Self::archive_round`], plus the file's read error.
    pub async fn archive_file(&mut self, name: &str) -> Result<FileEntry, ArchiveError> {
        if let Some(reason) = &self.stopped {
            return Err(ArchiveError::Stopped {
                reason: reason.clone(),
            });
        }
        if name.is_empty() {
            return Err(ArchiveError::BadFileName {
                name: name.to_owned(),
                reason: "empty",
            });
        }
        let result = self.archive_file_inner(name).await;
        if let Err(error) = &result
            && error.is_terminal()
        {
            self.stop(error.to_string());
        }
        result
    }

    async fn archive_file_inner(&mut self, name: &str) -> Result<FileEntry, ArchiveError> {
        if let Some(pending) = self.pending.take() {
            self.publish(pending).await?;
        }
        let file = self
            .vfs
            .open(name, OpenMode::Existing)
            .map_err(ArchiveError::local(name))?;
        let len = file.len().map_err(ArchiveError::local(name))?;
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(0, &mut bytes)
            .map_err(ArchiveError::local(name))?;
        let crc = crc32c::crc32c(&bytes);
        let newest = self.manifest.files.iter().find(|f| f.name == name);
        if let Some(newest) = newest
            && newest.crc32c == crc
            && newest.bytes == len
        {
            return Ok(newest.clone());
        }
        let generation = newest.map_or(0, |f| f.generation + 1);
        let key = file_generation_key(name, generation);
        put_create_only(&self.location, &key, Bytes::from(bytes)).await?;
        let entry = FileEntry {
            name: name.to_owned(),
            generation,
            key,
            bytes: len,
            crc32c: crc,
            archived_at_ms: now_ms(),
        };
        let mut next = self.manifest.clone();
        next.manifest += 1;
        next.published_at_ms = now_ms();
        next.files.retain(|f| f.name != name);
        next.files.push(entry.clone());
        next.files.sort_by(|a, b| a.name.cmp(&b.name));
        self.publish(next).await?;
        self.stats.files_archived += 1;
        Ok(entry)
    }

    /// Runs rounds on a thread of its own, every [`ArchiveOptions::poll_interval`], until
    /// [`RunningArchiver::close`] (or its drop) ships the tail, or [`RunningArchiver::stop`].
    pub fn spawn(self) -> std::io::Result<RunningArchiver> {
        let status = Arc::new(Mutex::new(self.status()));
        let (exit_tx, exit_rx) = mpsc::channel::<Exit>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let shared = status.clone();
        let thread = std::thread::Builder::new()
            .name("stele-archiver".into())
            .spawn(move || {
                let mut archiver = self;
                let poll = archiver.options.poll_interval;
                let exit = loop {
                    let _ = runtime.block_on(archiver.archive_round());
                    *shared.lock().unwrap_or_else(PoisonError::into_inner) = archiver.status();
                    match exit_rx.recv_timeout(poll) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Ok(exit) => break exit,
                        // The handle is gone without saying how (it cannot be: its drop
                        // closes); ship the tail, as a drop does.
                        Err(mpsc::RecvTimeoutError::Disconnected) => break Exit::Close,
                    }
                };
                let shipped = match exit {
                    Exit::Close => Some(runtime.block_on(archiver.close())),
                    // A last round, so that what sealed before the stop is archived.
                    Exit::Stop => {
                        if archiver.stopped.is_none() {
                            let _ = runtime.block_on(archiver.archive_round());
                        }
                        None
                    }
                };
                *shared.lock().unwrap_or_else(PoisonError::into_inner) = archiver.status();
                (archiver, shipped)
            })?;
        Ok(RunningArchiver {
            status,
            exit: Some(exit_tx),
            thread: Some(thread),
        })
    }
}

/// How a [`RunningArchiver`]'s thread ends.
enum Exit {
    /// After one last round.
    Stop,
    /// After [`Archiver::close`].
    Close,
}

/// What a [`RunningArchiver`]'s thread hands back: the archiver, and the close's outcome if it
/// closed.
type Joined = (Archiver, Option<Result<LogSeq, ArchiveError>>);

/// An [`Archiver`] running on its own thread ([`Archiver::spawn`]). Dropping it closes it
/// ([`RunningArchiver::close`]: the log's tail is shipped, within
/// [`ArchiveOptions::close_timeout`]), logging a failure; call `close` to see the outcome.
#[derive(Debug)]
pub struct RunningArchiver {
    status: Arc<Mutex<ArchiverStatus>>,
    exit: Option<mpsc::Sender<Exit>>,
    thread: Option<std::thread::JoinHandle<Joined>>,
}

impl RunningArchiver {
    /// Its progress as of its last round.
    pub fn status(&self) -> ArchiverStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until every record before `seq` is archived, the archiver stops, or `timeout`
    /// passes; returns whether `seq` was reached.
    pub fn wait_archived(&self, seq: LogSeq, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let status = self.status();
            if status.archived_next >= seq {
                return true;
            }
            if status.stopped.is_some() || std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Ships the log's tail ([`Archiver::close`]: flush, seal the active segment, archive it,
    /// within [`ArchiveOptions::close_timeout`]), then stops the thread and hands the archiver
    /// back with the close's outcome: `Ok(end)` when every record before `end` (everything
    /// the log acknowledged before the close) is in the archive.
    pub fn close(mut self) -> (Archiver, Result<LogSeq, ArchiveError>) {
        let (archiver, shipped) = self
            .join(Exit::Close)
            .expect("the archiver thread is joined only here");
        let shipped = shipped.expect("a close's thread reports its outcome");
        (archiver, shipped)
    }

    /// Stops it after one last round, without sealing the active segment, and hands the
    /// archiver back: the active segment's records stay local only. See [`Self::close`].
    pub fn stop(mut self) -> Archiver {
        self.join(Exit::Stop)
            .expect("the archiver thread is joined only here")
            .0
    }

    fn join(&mut self, exit: Exit) -> Option<Joined> {
        if let Some(sender) = self.exit.take() {
            let _ = sender.send(exit);
        }
        let thread = self.thread.take()?;
        match thread.join() {
            Ok(joined) => Some(joined),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for RunningArchiver {
    /// Closes it: ships the log's tail within [`ArchiveOptions::close_timeout`], logging a
    /// failure (call [`RunningArchiver::close`] to get it instead).
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some((_, Some(Err(error)))) = self.join(Exit::Close) {
            tracing::warn!(%error, "closing the archiver did not ship the log's tail");
        }
    }
}

/// Checks, at attach, that the local segments continue `manifest`'s archive: the first local
/// segment does not start past its end, the active segment does not start before it, and every
/// local sealed segment it already names holds the bytes it names.
fn check_log_continues_archive(
    vfs: &dyn Vfs,
    dir: &str,
    local: &[LogSeq],
    manifest: &Manifest,
) -> Result<(), ArchiveError> {
    let archived_next = manifest.archived_next();
    if let Some(&first) = local.first()
        && first > archived_next
    {
        return Err(ArchiveError::Gap {
            reason: format!(
                "the archive ends before seq {archived_next}, the local log starts at {first}"
            ),
        });
    }
    if let Some(&active) = local.last()
        && active < archived_next
    {
        return Err(ArchiveError::Gap {
            reason: format!(
                "the archive holds seqs through {}, past the start of the local active segment \
                 ({active}): this log is behind its archive (restore it instead)",
                archived_next.0 - 1
            ),
        });
    }
    for &first in &local[..local.len().saturating_sub(1)] {
        let Some(entry) = manifest.segments.iter().find(|s| s.first_seq == first.0) else {
            continue;
        };
        let image = read_local_segment(vfs, dir, first)?;
        if image.crc32c != entry.crc32c || image.next_seq.0 != entry.next_seq {
            return Err(ArchiveError::Diverged {
                key: entry.key.clone(),
                existing_bytes: entry.bytes as usize,
                our_bytes: image.bytes.len(),
            });
        }
    }
    Ok(())
}

/// Encoded record bytes on disk at or past `from`: the backlog an attach starts with.
fn unarchived_bytes_on_disk(vfs: &dyn Vfs, dir: &str, from: LogSeq) -> Result<u64, ArchiveError> {
    let mut reader =
        SegmentReader::start_at(vfs, dir, from, from).map_err(|e| ArchiveError::LocalSegment {
            path: dir.to_owned(),
            source: e,
        })?;
    let mut bytes = 0u64;
    while let Some(record) = reader
        .next_record(vfs)
        .map_err(|e| ArchiveError::LocalSegment {
            path: dir.to_owned(),
            source: e,
        })?
    {
        if record.seq >= from {
            bytes += encoded_len(record.payload.len()) as u64;
        }
    }
    Ok(bytes)
}
