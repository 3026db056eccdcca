//! [`PushLogWriter`]: the push log's writing half over any [`DeviceIo`], so one implementation
//! of a push and of a compaction runs natively ([`super::PushLog`], over [`crate::vfs::ReadyIo`]
//! through [`crate::vfs::complete_now`]) and in the async component (over the `vfs-async`
//! imports, where a push's write and sync suspend the calling task and the instance serves
//! its other calls meanwhile).
//!
//! It owns the log's [`FramedAppender`] (lock, torn tail, lazy header, pending directory sync,
//! rollback, the reopen after a compaction). Reads (scans, counts) go through
//! [`DeviceIo::vfs`] and take no lock, as the native log's always have.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::{
    COMPACTED_FRAME_BYTES_TARGET, COMPACTING_SUFFIX, CompactionPolicy, CompactionReport, Finish,
    PUSH_LOG_FORMAT, PushLogError, PushLogScan, ReservedSection, check_push_size, check_schema,
    frame_count, ipc, log_len,
};
use crate::frame::appender::{FramedAppender, OpenError};
use crate::frame::{self};
use crate::header::HEADER_BYTES;
use crate::vfs::DeviceIo;
use crate::vfs::replace::{self, ReplaceError, ReplaceStage, Staged};

/// One writer of a push log at `path`, whose batches have `schema`. Its first write takes the
/// lock `<path>.lock`, which it holds until it is dropped.
pub struct PushLogWriter<Io: DeviceIo> {
    io: Io,
    path: String,
    schema: SchemaRef,
    /// Opened (and locked) by the first write.
    appender: Option<FramedAppender<Io>>,
}

impl<Io: DeviceIo> std::fmt::Debug for PushLogWriter<Io> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushLogWriter")
            .field("path", &self.path)
            .field("opened", &self.appender.is_some())
            .finish_non_exhaustive()
    }
}

impl<Io: DeviceIo + Clone> PushLogWriter<Io> {
    /// A writer of the log at `path`. Touches nothing: a log that is never pushed to is never
    /// created.
    pub fn new(io: Io, path: impl Into<String>, schema: SchemaRef) -> Self {
        PushLogWriter {
            io,
            path: path.into(),
            schema,
            appender: None,
        }
    }

    /// The log's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The schema every batch of this log has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// See [`super::PushLog::append`].
    pub async fn append(&mut self, batch: &RecordBatch) -> Result<u64, PushLogError> {
        self.check_schema(batch)?;
        self.append_body(&ipc::encode_stream(batch)?).await
    }

    /// See [`super::PushLog::append_ipc`].
    pub async fn append_ipc(&mut self, stream: &[u8]) -> Result<u64, PushLogError> {
        check_push_size(stream.len())?;
        let batch = ipc::decode_one(stream).map_err(PushLogError::BadPush)?;
        self.check_schema(&batch)?;
        self.append_body(stream).await
    }

    fn check_schema(&self, batch: &RecordBatch) -> Result<(), PushLogError> {
        check_schema(&self.schema, batch)
    }

    /// Writes one frame holding `body`, a checked IPC stream of the log's schema, and syncs it.
    async fn append_body(&mut self, body: &[u8]) -> Result<u64, PushLogError> {
        check_push_size(body.len())?;
        let appender = self.opened().await?;
        // The frame header and the body go out as two writes: no copy of the body.
        Ok(appender.append(&[&frame::frame_header(body), body]).await?)
    }

    /// The appender, opened by the first write: takes the lock, opens or creates the file,
    /// checks the header, finds the last whole frame and cuts anything after it.
    async fn opened(&mut self) -> Result<&mut FramedAppender<Io>, PushLogError> {
        if self.appender.is_none() {
            let appender =
                FramedAppender::open(self.io.clone(), &self.path, PUSH_LOG_FORMAT, |_, _| {
                    Ok::<_, OpenError>(())
                })
                .await?;
            self.appender = Some(appender);
        }
        Ok(self.appender.as_mut().expect("opened above"))
    }

    /// See [`super::PushLog::scan`].
    pub fn scan(&self) -> Result<PushLogScan, PushLogError> {
        PushLogScan::open(self.io.vfs(), &self.path, self.schema.clone())
    }

    /// See [`super::PushLog::frame_count`].
    pub fn frame_count(&self) -> Result<usize, PushLogError> {
        frame_count(self.io.vfs(), &self.path)
    }

    /// See [`super::PushLog::seal_section`].
    pub fn seal_section(&self, module_name: &str) -> Result<ReservedSection, PushLogError> {
        ReservedSection::seal(self.scan()?, &self.schema, module_name)
    }

    /// See [`super::PushLog::maybe_compact`].
    pub async fn maybe_compact(
        &mut self,
        policy: CompactionPolicy,
    ) -> Result<Option<CompactionReport>, PushLogError> {
        let frames_due = match policy.frames {
            Some(limit) => self.frame_count()? >= limit,
            None => false,
        };
        let bytes_due = match policy.bytes {
            Some(limit) => log_len(self.io.vfs(), &self.path)? >= limit,
            None => false,
        };
        if frames_due || bytes_due {
            self.compact_with(Finish::Swap).await.map(Some)
        } else {
            Ok(None)
        }
    }

    /// See [`super::PushLog::compact_with`].
    pub async fn compact_with(&mut self, finish: Finish) -> Result<CompactionReport, PushLogError> {
        let appender = self.opened().await?;
        appender.ensure_open().await?;
        let bytes_before = appender.clean_end();
        let io = self.io.clone();
        let staging = format!("{}{COMPACTING_SUFFIX}", self.path);
        // Compaction merges frames, so the staged file is rarely longer than the log: its room
        // is reserved at the log's length before anything is created, so that a tenant at its
        // quota is refused here, the log untouched. A staged file that grows past it meets the
        // quota write by write.
        let room = io
            .vfs()
            .reserve(&staging, bytes_before)
            .map_err(|cause| ReplaceError {
                stage: ReplaceStage::Stage,
                cause,
            })?;
        let staged_outcome = async {
            let staged = replace::begin(&io, &staging, &self.path)?;
            // Streamed: one compacted frame in memory at a time, written as it fills.
            let mut stager = Stager {
                io: &io,
                staged: &staged,
                schema: &self.schema,
                written: 0,
                frames: 0,
                pending: Vec::new(),
                pending_bytes: 0,
            };
            let mut scan = PushLogScan::open(io.vfs(), &self.path, self.schema.clone())?;
            let mut frames_before = 0;
            let mut rows = 0;
            for frame in scan.by_ref() {
                let frame = frame?;
                frames_before += 1;
                rows += frame.batch.num_rows();
                stager.push(frame.batch).await?;
            }
            scan.refuse_corruption()?;
            stager.flush().await?;
            let (frames_after, bytes_after) = (stager.frames, stager.written);
            Ok::<_, PushLogError>((staged, frames_before, rows, frames_after, bytes_after))
        }
        .await;
        let (staged, frames_before, rows, frames_after, bytes_after) = match staged_outcome {
            Ok(staged) => staged,
            Err(error) => {
                // The staged file is unread garbage, and under a quota it holds room: gone
                // now rather than at the next compaction (best effort; that one truncates it).
                let _ = io.vfs().remove(&staging);
                return Err(error);
            }
        };
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
        let sealed = staged.seal(&io).await?;
        // Written and synced: the file's length is charged now. Released before the rename (see
        // `replace_file`).
        drop(room);
        if finish == Finish::AfterStageSync {
            return Ok(report(finish));
        }
        let appender = self.appender.as_mut().expect("opened above");
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
        renamed.sync_dir(&io).await?;
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
}

/// Writes a compaction's frames to the staged file, merging batches up to
/// [`COMPACTED_FRAME_BYTES_TARGET`] per frame.
struct Stager<'a, Io: DeviceIo> {
    io: &'a Io,
    staged: &'a Staged<Io::File>,
    schema: &'a SchemaRef,
    /// Bytes written so far (the header goes out with the first frame).
    written: u64,
    frames: usize,
    pending: Vec<RecordBatch>,
    pending_bytes: usize,
}

impl<Io: DeviceIo> Stager<'_, Io> {
    async fn push(&mut self, batch: RecordBatch) -> Result<(), PushLogError> {
        let size = batch.get_array_memory_size();
        if !self.pending.is_empty() && self.pending_bytes + size > COMPACTED_FRAME_BYTES_TARGET {
            self.flush().await?;
        }
        self.pending_bytes += size;
        self.pending.push(batch);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), PushLogError> {
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
        self.staged.write_at(self.io, self.written, &bytes).await?;
        self.written += bytes.len() as u64;
        self.frames += 1;
        Ok(())
    }
}
