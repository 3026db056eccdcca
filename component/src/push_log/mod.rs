//! The push log: Arrow record batches in one append-only file, one frame per push, with a
//! recovery scan, atomic compaction and sealing into an archive section
//! (`../shared/reference/push-log-api.txt`).
//!
//! File layout: the 32-byte [`crate::header`] (family push-log, version [`PUSH_LOG_VERSION`]),
//! then one [`crate::frame`] per push whose body is a complete Arrow IPC stream (schema, one
//! batch, end of stream; see [`ipc`]). A missing or zero-byte file is an empty, clean log.
//!
//! What it promises:
//! - [`PushLog::append`] returns once the push's frame (and the header, and for a new file the
//!   directory entry) is synced: an acknowledged push survives power loss. A failed write or
//!   sync is cut back, so the file always ends at a whole frame.
//! - [`PushLog::compact`] is atomic: whatever the crash point, the log reads as before or as
//!   after, and never loses a row.
//! - Scanning is streamed: one frame in memory at a time.
//! - One writer per log: the first write takes the advisory lock `<path>.lock`.
//! - A failed directory sync or rename never leaves an acknowledged push depending on a name
//!   that is not durable: a writer syncs the directory before its first push (a writer before it
//!   may have created or compacted the file and failed before its directory sync returned), and
//!   after a compaction before its next push; the push fails, with nothing written, if that
//!   sync fails.

pub mod ipc;
pub mod refs;
mod scan;
mod section;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
mod writer;

pub use scan::{PushLogScan, ScannedFrame};
pub use section::{ReservedSection, SECTION_PREFIX};
pub use writer::PushLogWriter;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::frame::appender::{self, AppendError, FramedFormat, OpenError};
use crate::frame::{self, Next, ScanEnd};
use crate::header::{Family, HeaderError};
use crate::vfs::replace::ReplaceError;
use crate::vfs::{OpenMode, QuotaExceeded, ReadyIo, Vfs, VfsError, complete_now};

/// The push-log format version this build reads and writes.
pub const PUSH_LOG_VERSION: u16 = 1;

/// A push-log file's header: family push-log, [`PUSH_LOG_VERSION`].
pub const PUSH_LOG_FORMAT: FramedFormat = FramedFormat {
    family: Family::PushLog,
    version: PUSH_LOG_VERSION,
};

pub use crate::vfs::replace::COMPACTING_SUFFIX;

/// Compaction writes frames of at most this many IPC bytes: one frame when the log is smaller,
/// "fewer and larger" frames otherwise. A frame body is bounded by [`frame::BODY_BYTES_MAX`]
/// (what recovery accepts), and half of it leaves room for IPC padding and metadata.
pub const COMPACTED_FRAME_BYTES_TARGET: usize = frame::BODY_BYTES_MAX / 2;

/// Why a push-log call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushLogError {
    /// The filesystem refused or failed an operation.
    #[error(transparent)]
    Vfs(#[from] VfsError),
    /// The disk quota has no room for this push or compaction: refused before anything was
    /// written to the log, which is as it was. Smaller pushes that fit still succeed; a
    /// compaction that shrinks the log frees room.
    #[error(transparent)]
    QuotaExceeded(QuotaExceeded),
    /// The header is damaged, or of another family or version.
    #[error("bad push-log header")]
    BadHeader(#[from] HeaderError),
    /// The batch's schema is not the log's; nothing was written.
    #[error("batch schema does not match the log's schema: {found}")]
    SchemaMismatch {
        /// The batch's schema.
        found: String,
    },
    /// The pushed batch does not fit in one frame; nothing was written.
    #[error("a push of {bytes} IPC bytes exceeds the {bytes_max}-byte frame limit")]
    PushTooLarge {
        /// The push's size as Arrow IPC.
        bytes: usize,
        /// [`crate::frame::BODY_BYTES_MAX`].
        bytes_max: usize,
    },
    /// The frame at `offset` is damaged and a valid frame follows: refused, never dropped.
    #[error("push log corrupt at byte {offset} (a valid frame follows at byte {valid_frame_at})")]
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next valid frame starts.
        valid_frame_at: u64,
    },
    /// A frame with a valid checksum does not hold one batch of the log's schema.
    #[error("malformed push-log frame at byte {offset}: {why}")]
    MalformedFrame {
        /// Where the frame starts.
        offset: u64,
        /// Why its bytes are not one batch of the schema.
        why: String,
    },
    /// Another writer holds the log.
    #[error("the push log is held by another writer (lock file {lock_path})")]
    Locked {
        /// The lock file the other writer holds.
        lock_path: String,
    },
    /// A write or sync of `append` failed; the file was cut back to its length before the call
    /// (`rolled_back`), or, if that failed too, the next append cuts it first.
    #[error("append failed; rolled back: {rolled_back}")]
    AppendFailed {
        /// The write or sync error.
        #[source]
        cause: VfsError,
        /// Whether the file was cut back to its length before the call.
        rolled_back: bool,
    },
    /// The bytes given to [`PushLog::append_ipc`] are not one Arrow IPC batch; nothing was
    /// written.
    #[error("the pushed bytes are not one Arrow IPC batch: {0}")]
    BadPush(String),
    /// Arrow could not encode or decode a batch or schema.
    #[error("Arrow IPC encoding or decoding failed")]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// Where [`PushLog::compact_with`] stops: the crash points of a compaction, for crash tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// After writing the staged file, before its fsync.
    AfterStage,
    /// After the staged file's fsync, before the rename.
    AfterStageSync,
    /// Right after the rename.
    AfterRename,
    /// After the rename and everything but the directory fsync.
    BeforeDirSync,
    /// The whole compaction.
    Swap,
}

/// When [`PushLog::maybe_compact`] runs: when the log holds at least `frames` frames, or at
/// least `bytes` bytes (either bound that is set). The default sets neither: never.
/// `#[non_exhaustive]`: build it with `CompactionPolicy::default()` and the `with_*` setters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionPolicy {
    /// Compact once the log holds at least this many frames.
    pub frames: Option<usize>,
    /// Compact once the log holds at least this many bytes.
    pub bytes: Option<u64>,
}

impl CompactionPolicy {
    /// This policy with a frame bound (`None`: none).
    pub const fn with_frames(mut self, frames: Option<usize>) -> Self {
        self.frames = frames;
        self
    }

    /// This policy with a byte bound (`None`: none).
    pub const fn with_bytes(mut self, bytes: Option<u64>) -> Self {
        self.bytes = bytes;
        self
    }
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionReport {
    /// Frames before.
    pub frames_before: usize,
    /// Frames after (those of the staged file, if it stopped before the rename).
    pub frames_after: usize,
    /// Rows, the same before and after.
    pub rows: usize,
    /// The log's bytes before.
    pub bytes_before: u64,
    /// The compacted log's bytes.
    pub bytes_after: u64,
    /// Where it stopped ([`Finish::Swap`] for a whole compaction).
    pub finished: Finish,
}

/// An append-only log file of Arrow record batches, for native callers: a [`PushLogWriter`]
/// over [`ReadyIo`] behind a mutex (pushes are serialized; reads take no lock). `Send + Sync`.
#[derive(Debug)]
pub struct PushLog {
    vfs: Arc<dyn Vfs>,
    path: String,
    schema: SchemaRef,
    writer: Mutex<PushLogWriter<ReadyIo>>,
}

impl PushLog {
    /// A push log at `path` in `vfs` whose batches have `schema`. Touches nothing: a log that is
    /// never pushed to is never created.
    pub fn new(vfs: Arc<dyn Vfs>, path: impl Into<String>, schema: SchemaRef) -> Self {
        let path = path.into();
        let writer = PushLogWriter::new(ReadyIo(Arc::clone(&vfs)), path.clone(), schema.clone());
        PushLog {
            vfs,
            path,
            schema,
            writer: Mutex::new(writer),
        }
    }

    /// The log's path in its [`Vfs`].
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn writer(&self) -> MutexGuard<'_, PushLogWriter<ReadyIo>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one push and makes it durable: when this returns, the frame (and with the
    /// first push the header, and for a new file its directory entry) is synced (`fdatasync`).
    /// Returns the byte offset the frame starts at.
    ///
    /// Refused before any I/O: a batch of another schema, or one too large for a frame. The
    /// frame's header and body are written back to back; a failed write or sync is cut back to
    /// the last whole frame.
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogError> {
        complete_now(self.writer().append(batch))
    }

    /// [`PushLog::append`] for a push that arrives as Arrow IPC stream bytes (a schema message,
    /// one batch, the end-of-stream marker), as it does across the component boundary. The
    /// bytes are decoded and checked (one batch, the log's schema, nothing after the marker;
    /// else [`PushLogError::BadPush`] or [`PushLogError::SchemaMismatch`], before any I/O), then
    /// stored as the frame body as they are, saving a re-encode. Same durability as `append`.
    pub fn append_ipc(&self, stream: &[u8]) -> Result<u64, PushLogError> {
        complete_now(self.writer().append_ipc(stream))
    }

    /// The schema of the log at `path`, read from its first frame (each frame carries it), or
    /// `None` for a log without frames. For tools that open logs they did not write.
    pub fn detect_schema(vfs: &dyn Vfs, path: &str) -> Result<Option<SchemaRef>, PushLogError> {
        let file = match vfs.open(path, OpenMode::Existing) {
            Ok(file) => file,
            Err(VfsError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // The first frame carries the schema: read no further.
        let Ok(mut reader) = appender::open_frames(&*file, PUSH_LOG_FORMAT)? else {
            return Ok(None);
        };
        match reader.next_frame(&*file)? {
            Next::Frame { offset, body } => ipc::decode_schema(body)
                .map(Some)
                .map_err(|why| PushLogError::MalformedFrame { offset, why }),
            Next::End(_) => Ok(None),
        }
    }

    /// Recovers the log, streaming: the returned scan yields each frame's batch and offset in
    /// order, then says how the log ended ([`PushLogScan::end`]). A missing file is an empty,
    /// clean log. Read-only.
    pub fn scan(&self) -> Result<PushLogScan, PushLogError> {
        PushLogScan::open(&*self.vfs, &self.path, self.schema.clone())
    }

    /// How many whole frames the log holds (checksums checked, batches not decoded).
    pub fn frame_count(&self) -> Result<usize, PushLogError> {
        frame_count(&*self.vfs, &self.path)
    }

    /// Folds every frame into as few as fit ([`COMPACTED_FRAME_BYTES_TARGET`]; one for any log
    /// below it), atomically; see [`PushLog::compact_with`].
    pub fn compact(&self) -> Result<CompactionReport, PushLogError> {
        self.compact_with(Finish::Swap)
    }

    /// Compacts, stopping where `finish` says (the crash test's hook; everyone else passes
    /// [`Finish::Swap`]). Rows are concatenated in push order, never dropped. The replacement is
    /// staged at `<path>.compacting`, fsynced, renamed over the log, and the parent directory
    /// fsynced; the live log is never written in place, so a crash at any byte leaves the old
    /// log or the new one. Refuses a log with corruption in the middle.
    ///
    /// Durability on `Ok` with [`Finish::Swap`]: the compacted log survives power loss. If the
    /// rename or the directory sync fails, the error is returned and the log may read as before
    /// or as after a crash; this writer then retries the directory sync at the start of its next
    /// append, before writing, so no push is acknowledged in a file that a crash could unname
    /// (the append fails with [`PushLogError::AppendFailed`], nothing written, if the sync fails
    /// again).
    pub fn compact_with(&self, finish: Finish) -> Result<CompactionReport, PushLogError> {
        complete_now(self.writer().compact_with(finish))
    }

    /// Compacts if `policy` says the log has grown enough; `None` when it did not run.
    pub fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogError> {
        complete_now(self.writer().maybe_compact(policy))
    }

    /// Folds the recovered pushes into the section that seals them into an archive: an Arrow
    /// IPC file with one batch per push, in push order. After a compaction, a frame is a run of
    /// pushes; when the schema has a `push_seq` column, each run is split back at its seams.
    pub fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogError> {
        ReservedSection::seal(self.scan()?, &self.schema, module_name)
    }
}

/// How many whole frames the log at `path` holds (checksums checked, batches not decoded); a
/// missing file holds none. Refuses a log damaged in the middle. Read-only.
pub fn frame_count(vfs: &dyn Vfs, path: &str) -> Result<usize, PushLogError> {
    let file = match vfs.open(path, OpenMode::Existing) {
        Ok(file) => file,
        Err(VfsError::NotFound) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut frames = 0;
    let end = appender::scan_frames(&*file, PUSH_LOG_FORMAT, |_, _| {
        frames += 1;
        Ok::<_, PushLogError>(())
    })?;
    match end {
        ScanEnd::Corrupt {
            offset,
            valid_frame_at,
        } => Err(PushLogError::Corrupt {
            offset,
            valid_frame_at,
        }),
        _ => Ok(frames),
    }
}

/// The log file's length; a missing file is zero bytes.
fn log_len(vfs: &dyn Vfs, path: &str) -> Result<u64, PushLogError> {
    match vfs.open(path, OpenMode::Existing) {
        Ok(file) => Ok(file.len()?),
        Err(VfsError::NotFound) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Refuses a batch whose fields are not the log's `schema`'s, with the error every push-log
/// writer gives. Public so that a host checks a push in the same order in every mode: the
/// schema first, then (once encoded) the size.
pub fn check_schema(schema: &SchemaRef, batch: &RecordBatch) -> Result<(), PushLogError> {
    if batch.schema_ref().fields() != schema.fields() {
        return Err(PushLogError::SchemaMismatch {
            found: format!("{:?}", batch.schema()),
        });
    }
    Ok(())
}

/// Refuses a push of `bytes` IPC bytes that would not fit in one frame, with the error every
/// push-log writer gives. Public so that a host can refuse it before copying the bytes into a
/// sandboxed writer's memory.
pub fn check_push_size(bytes: usize) -> Result<(), PushLogError> {
    if bytes > frame::BODY_BYTES_MAX {
        return Err(PushLogError::PushTooLarge {
            bytes,
            bytes_max: frame::BODY_BYTES_MAX,
        });
    }
    Ok(())
}

/// Opening the log's file failed, in the push log's terms.
impl From<OpenError> for PushLogError {
    fn from(error: OpenError) -> Self {
        match error {
            OpenError::Vfs(cause) => PushLogError::Vfs(cause),
            OpenError::BadHeader(cause) => PushLogError::BadHeader(cause),
            OpenError::Corrupt {
                offset,
                valid_frame_at,
            } => PushLogError::Corrupt {
                offset,
                valid_frame_at,
            },
            OpenError::Locked { lock_path } => PushLogError::Locked { lock_path },
            // The push log never gives its handle up (a failed reopen is retried by the next
            // call), so this is only reachable through a bug; it still reports, never panics.
            OpenError::NoHandle { why } => PushLogError::Vfs(VfsError::Io(why)),
        }
    }
}

/// An append that failed, in the push log's terms.
impl From<AppendError> for PushLogError {
    fn from(error: AppendError) -> Self {
        match error {
            AppendError::Reopen(error) => error.into(),
            AppendError::QuotaExceeded(refusal) => PushLogError::QuotaExceeded(refusal),
            AppendError::Failed { cause, rolled_back } => {
                PushLogError::AppendFailed { cause, rolled_back }
            }
        }
    }
}

/// A compaction's replacement step failed: the push log reports that step's storage error.
impl From<ReplaceError> for PushLogError {
    fn from(error: ReplaceError) -> Self {
        match error.cause {
            VfsError::QuotaExceeded(refusal) => PushLogError::QuotaExceeded(refusal),
            cause => PushLogError::from(cause),
        }
    }
}
