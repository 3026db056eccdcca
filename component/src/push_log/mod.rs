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

pub use scan::{PushLogScan, ScannedFrame};
pub use section::{ReservedSection, SECTION_PREFIX};

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::frame::appender::{self, AppendError, FramedAppender, FramedFormat, OpenError};
use crate::frame::{self, FrameReader, Next, ScanEnd};
use crate::header::{Family, HEADER_BYTES, HeaderError};
use crate::vfs::replace::{self, ReplaceError};
use crate::vfs::{OpenMode, ReadyIo, Vfs, VfsError, VfsFile, complete_now};

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
/// least `bytes` bytes (either bound that is set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Compact once the log holds at least this many frames.
    pub frames: Option<usize>,
    /// Compact once the log holds at least this many bytes.
    pub bytes: Option<u64>,
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

/// An append-only log file of Arrow record batches. One `append` is one push.
#[derive(Debug)]
pub struct PushLog {
    vfs: Arc<dyn Vfs>,
    path: String,
    schema: SchemaRef,
    /// The file appends go to, opened (and locked) by the first write. Its lifecycle (torn
    /// tail, lazy header, pending directory sync, rollback, the reopen after a compaction) is
    /// the [`FramedAppender`]'s, shared with the journal.
    writer: Mutex<Option<FramedAppender<ReadyIo>>>,
}

type WriterGuard<'a> = MutexGuard<'a, Option<FramedAppender<ReadyIo>>>;

impl PushLog {
    /// A push log at `path` in `vfs` whose batches have `schema`. Touches nothing: a log that is
    /// never pushed to is never created.
    pub fn new(vfs: Arc<dyn Vfs>, path: impl Into<String>, schema: SchemaRef) -> Self {
        PushLog {
            vfs,
            path: path.into(),
            schema,
            writer: Mutex::new(None),
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

    fn compacting_path(&self) -> String {
        format!("{}{COMPACTING_SUFFIX}", self.path)
    }

    /// Appends one push and makes it durable: when this returns, the frame (and with the
    /// first push the header, and for a new file its directory entry) is synced (`fdatasync`).
    /// Returns the byte offset the frame starts at.
    ///
    /// Refused before any I/O: a batch of another schema, or one too large for a frame. The
    /// frame is built in memory first and written with one write; a failed write or sync is
    /// cut back to the last whole frame.
    pub fn append(&self, batch: &RecordBatch) -> Result<u64, PushLogError> {
        if batch.schema_ref().fields() != self.schema.fields() {
            return Err(PushLogError::SchemaMismatch {
                found: format!("{:?}", batch.schema()),
            });
        }
        self.append_body(&ipc::encode_stream(batch)?)
    }

    /// [`PushLog::append`] for a push that arrives as Arrow IPC stream bytes (a schema message,
    /// one batch, the end-of-stream marker), as it does across the component boundary. The
    /// bytes are decoded and checked (one batch, the log's schema, nothing after the marker;
    /// else [`PushLogError::BadPush`] or [`PushLogError::SchemaMismatch`], before any I/O), then
    /// stored as the frame body as they are, saving a re-encode. Same durability as `append`.
    pub fn append_ipc(&self, stream: &[u8]) -> Result<u64, PushLogError> {
        check_push_size(stream.len())?;
        let batch = ipc::decode_one(stream).map_err(PushLogError::BadPush)?;
        if batch.schema_ref().fields() != self.schema.fields() {
            return Err(PushLogError::SchemaMismatch {
                found: format!("{:?}", batch.schema()),
            });
        }
        self.append_body(stream)
    }

    /// Writes one frame holding `body`, a checked IPC stream of the log's schema, and syncs it.
    fn append_body(&self, body: &[u8]) -> Result<u64, PushLogError> {
        check_push_size(body.len())?;
        let mut writer = self.lock_writer();
        let appender = self.open_writer(&mut writer)?;
        // The frame header and the body go out as two writes: no copy of the body.
        let frame_at = complete_now(appender.append(&[&frame::frame_header(body), body]))?;
        Ok(frame_at)
    }

    fn lock_writer(&self) -> WriterGuard<'_> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer's appender, opened by the first write: takes the lock, opens or creates the
    /// file, checks the header, finds the last whole frame and cuts anything after it.
    fn open_writer<'a>(
        &self,
        writer: &'a mut WriterGuard<'_>,
    ) -> Result<&'a mut FramedAppender<ReadyIo>, PushLogError> {
        if writer.is_none() {
            let io = ReadyIo(Arc::clone(&self.vfs));
            let appender = complete_now(FramedAppender::open(
                io,
                &self.path,
                PUSH_LOG_FORMAT,
                |_, _| Ok::<_, OpenError>(()),
            ))?;
            **writer = Some(appender);
        }
        Ok(writer.as_mut().expect("opened above"))
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
        let Ok(mut reader) = open_frames(&*file)? else {
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
        let file = match self.vfs.open(&self.path, OpenMode::Existing) {
            Ok(file) => file,
            Err(VfsError::NotFound) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let mut frames = 0;
        match scan_frames(&*file, |_, _| {
            frames += 1;
            Ok(())
        })? {
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
        let mut writer = self.lock_writer();
        let appender = self.open_writer(&mut writer)?;
        complete_now(appender.ensure_open())?;
        let bytes_before = appender.clean_end();
        let io = ReadyIo(Arc::clone(&self.vfs));
        let staged = replace::begin(&io, &self.compacting_path(), &self.path)?;
        // Streamed: one compacted frame in memory at a time, written as it fills.
        let mut stager = Stager {
            file: &**staged.file(),
            schema: &self.schema,
            written: 0,
            frames: 0,
            pending: Vec::new(),
            pending_bytes: 0,
        };
        let mut scan = self.scan()?;
        let mut frames_before = 0;
        let mut rows = 0;
        for frame in scan.by_ref() {
            let frame = frame?;
            frames_before += 1;
            rows += frame.batch.num_rows();
            stager.push(frame.batch)?;
        }
        scan.refuse_corruption()?;
        stager.flush()?;
        let (frames_after, bytes_after) = (stager.frames, stager.written);
        let report = |finished| CompactionReport {
            frames_before,
            frames_after,
            rows,
            bytes_before,
            bytes_after,
            finished,
        };
        if finish == Finish::AfterStage {
            return Ok(report(finish));
        }
        let sealed = complete_now(staged.seal(&io))?;
        if finish == Finish::AfterStageSync {
            return Ok(report(finish));
        }
        // From here until a directory sync returns, the log's name may point at the old file
        // after a crash. Whatever fails below, the next append reopens (the handle may name the
        // replaced file) and syncs the directory before it writes. Said before the rename: a
        // failed rename is not known to have left the name alone on every backend.
        appender.replacing();
        let renamed = sealed.rename(&io)?;
        // Both leave the same disk state (renamed, directory not synced); the reference names
        // the two crash points separately, so both stay.
        if matches!(finish, Finish::AfterRename | Finish::BeforeDirSync) {
            return Ok(report(finish));
        }
        complete_now(renamed.sync_dir(&io))?;
        // The compaction is whole and durable; a failed reopen only means the next append
        // reopens (and rescans) the file itself, and reports the error if it persists.
        if let Err(cause) = appender.adopt_replacement(bytes_after, true) {
            tracing::warn!(path = %self.path, %cause, "reopening the compacted push log failed");
        }
        tracing::info!(
            path = %self.path,
            frames_before,
            frames_after,
            rows,
            bytes_before,
            bytes_after,
            "push log compacted"
        );
        Ok(report(Finish::Swap))
    }

    /// Compacts if `policy` says the log has grown enough; `None` when it did not run.
    pub fn maybe_compact(
        &self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogError> {
        let frames_due = match policy.frames {
            Some(limit) => self.frame_count()? >= limit,
            None => false,
        };
        let bytes_due = match policy.bytes {
            Some(limit) => match self.vfs.open(&self.path, OpenMode::Existing) {
                Ok(file) => file.len()? >= limit,
                Err(VfsError::NotFound) => false,
                Err(e) => return Err(e.into()),
            },
            None => false,
        };
        if frames_due || bytes_due {
            self.compact().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Folds the recovered pushes into the section that seals them into an archive: an Arrow
    /// IPC file with one batch per push, in push order. After a compaction, a frame is a run of
    /// pushes; when the schema has a `push_seq` column, each run is split back at its seams.
    pub fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogError> {
        ReservedSection::seal(self, module_name)
    }
}

/// Writes a compaction's frames to the staged file, merging batches up to
/// [`COMPACTED_FRAME_BYTES_TARGET`] per frame.
struct Stager<'a> {
    file: &'a dyn VfsFile,
    schema: &'a SchemaRef,
    /// Bytes written so far (the header goes out with the first frame).
    written: u64,
    frames: usize,
    pending: Vec<RecordBatch>,
    pending_bytes: usize,
}

impl Stager<'_> {
    fn push(&mut self, batch: RecordBatch) -> Result<(), PushLogError> {
        let size = batch.get_array_memory_size();
        if !self.pending.is_empty() && self.pending_bytes + size > COMPACTED_FRAME_BYTES_TARGET {
            self.flush()?;
        }
        self.pending_bytes += size;
        self.pending.push(batch);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PushLogError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let merged = arrow_select::concat::concat_batches(self.schema, self.pending.iter())?;
        self.pending.clear();
        self.pending_bytes = 0;
        let body = ipc::encode_stream(&merged)?;
        drop(merged);
        // Only a single push near the frame limit can grow past it in re-encoding.
        check_push_size(body.len())?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + frame::FRAME_HEADER_BYTES + body.len());
        if self.written == 0 {
            bytes.extend_from_slice(&PUSH_LOG_FORMAT.header());
        }
        frame::push_frame(&mut bytes, |out| out.extend_from_slice(&body));
        self.file.write_at(self.written, &bytes)?;
        self.written += bytes.len() as u64;
        self.frames += 1;
        Ok(())
    }
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

/// Checks a push-log file's header and returns a frame reader positioned after it, or, for a
/// file without frames (empty, or shorter than a header), how its scan ends.
pub(crate) fn open_frames(
    file: &dyn VfsFile,
) -> Result<Result<FrameReader, ScanEnd>, PushLogError> {
    Ok(appender::open_frames(file, PUSH_LOG_FORMAT)?)
}

/// Walks the frames of a push-log file, checking the header; `on_frame` sees each frame's
/// offset and body.
pub(crate) fn scan_frames(
    file: &dyn VfsFile,
    on_frame: impl FnMut(u64, &[u8]) -> Result<(), PushLogError>,
) -> Result<ScanEnd, PushLogError> {
    appender::scan_frames(file, PUSH_LOG_FORMAT, on_frame)
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
            AppendError::Failed { cause, rolled_back } => {
                PushLogError::AppendFailed { cause, rolled_back }
            }
        }
    }
}

/// A compaction's replacement step failed: the push log reports that step's storage error.
impl From<ReplaceError> for PushLogError {
    fn from(error: ReplaceError) -> Self {
        PushLogError::from(error.cause)
    }
}
