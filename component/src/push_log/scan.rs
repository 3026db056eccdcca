//! [`PushLogScan`]: recovery, streamed. It holds one frame in memory at a time (the frame
//! reader's window), so a log of any size scans in bounded memory.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::frame::appender;
use crate::frame::{FrameReader, Next, ScanEnd};
use crate::recovery::LogEnd;
use crate::vfs::{OpenMode, Vfs, VfsError, VfsFile};

use super::{PUSH_LOG_FORMAT, PushLogError, ipc};

/// One recovered push (or, after compaction, a run of pushes).
#[derive(Clone, Debug)]
pub struct ScannedFrame {
    /// The byte offset the frame starts at (what `append` returned for it).
    pub offset: u64,
    /// The frame's rows.
    pub batch: RecordBatch,
}

/// The frames of a push log, in order, as an iterator of `Result<ScannedFrame>`; after the last,
/// [`PushLogScan::end`] says how the log ended. A frame whose checksum holds but whose bytes are
/// not one batch of the log's schema is an `Err` item, and the scan stops there.
pub struct PushLogScan {
    file: Option<Box<dyn VfsFile>>,
    reader: FrameReader,
    schema: SchemaRef,
    end: Option<LogEnd>,
}

impl std::fmt::Debug for PushLogScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushLogScan")
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl PushLogScan {
    /// Starts a read-only scan of the log at `path` (nothing is locked or cut: a torn tail is
    /// reported, not repaired). A missing file is an empty log.
    pub fn open(vfs: &dyn Vfs, path: &str, schema: SchemaRef) -> Result<PushLogScan, PushLogError> {
        let empty = |end| PushLogScan {
            file: None,
            reader: FrameReader::new(0, 0),
            schema: schema.clone(),
            end: Some(end),
        };
        let file = match vfs.open(path, OpenMode::Existing) {
            Ok(file) => file,
            Err(VfsError::NotFound) => return Ok(empty(LogEnd::Empty)),
            Err(e) => return Err(e.into()),
        };
        match appender::open_frames(&*file, PUSH_LOG_FORMAT)? {
            Ok(reader) => Ok(PushLogScan {
                file: Some(file),
                reader,
                schema,
                end: None,
            }),
            Err(ScanEnd::TornTail {
                valid_end,
                file_len,
                ..
            }) => Ok(empty(LogEnd::TornTail {
                valid_end,
                torn_end: file_len,
            })),
            Err(_) => Ok(empty(LogEnd::Empty)),
        }
    }

    /// How the log ended, once the iterator has returned `None` ([`LogEnd::Empty`] for a
    /// missing or zero-byte log). Before that, and after an error item (which stops the
    /// scan), [`LogEnd::Clean`].
    pub fn end(&self) -> LogEnd {
        self.end.unwrap_or(LogEnd::Clean)
    }

    /// After the last frame: `Err(Corrupt)` if the log ended in middle corruption. For callers
    /// that rewrite the log (compaction, sealing), which must not drop what lies behind it.
    pub fn refuse_corruption(&self) -> Result<(), PushLogError> {
        match self.end() {
            LogEnd::Corrupt {
                offset,
                valid_frame_at,
            } => Err(PushLogError::Corrupt {
                offset,
                valid_frame_at,
            }),
            _ => Ok(()),
        }
    }

    /// Whether the scan has ended.
    pub fn finished(&self) -> bool {
        self.end.is_some()
    }
}

impl PushLogScan {
    /// The next frame as stored: its offset and body (an Arrow IPC stream), checksum verified
    /// but not decoded. For a driver that forwards frames to a decoder of its own (the component
    /// hands them to the host, which decodes them with [`ipc::decode_stream`] and reports a
    /// failure as [`PushLogError::MalformedFrame`]). The body borrows the scan's window.
    pub fn next_body(&mut self) -> Option<Result<(u64, &[u8]), PushLogError>> {
        next_body(self.file.as_deref(), &mut self.reader, &mut self.end)
    }
}

fn next_body<'r>(
    file: Option<&dyn VfsFile>,
    reader: &'r mut FrameReader,
    end: &mut Option<LogEnd>,
) -> Option<Result<(u64, &'r [u8]), PushLogError>> {
    if end.is_some() {
        return None;
    }
    let step = match reader.next_frame(file?) {
        Ok(step) => step,
        Err(e) => {
            *end = Some(LogEnd::Clean);
            return Some(Err(e.into()));
        }
    };
    match step {
        Next::Frame { offset, body } => Some(Ok((offset, body))),
        Next::End(found) => {
            *end = Some(LogEnd::from(found));
            None
        }
    }
}

impl Iterator for PushLogScan {
    type Item = Result<ScannedFrame, PushLogError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (offset, decoded) =
            match next_body(self.file.as_deref(), &mut self.reader, &mut self.end)? {
                Ok((offset, body)) => (offset, ipc::decode_stream(body, &self.schema)),
                Err(e) => return Some(Err(e)),
            };
        match decoded {
            Ok(batch) => Some(Ok(ScannedFrame { offset, batch })),
            Err(why) => {
                self.end = Some(LogEnd::Clean);
                Some(Err(PushLogError::MalformedFrame { offset, why }))
            }
        }
    }
}
