//! [`PushLogScan`]: a streamed scan of a push log, the same in every mode. Its frames come from
//! a [`FrameSource`]: the engine's own scan natively, or [`GuestScan`] over a sandboxed
//! instance, which fetches frame bodies in lists and decodes them here.

use std::collections::VecDeque;

use arrow_schema::SchemaRef;
use stele::push_log::{PushLogError, ScannedFrame, ipc};
use stele::recovery::LogEnd;
use wasmtime::component::ResourceAny;

use super::error::PushLogCallError;

/// Where a scan's frames come from.
pub(crate) trait FrameSource {
    /// The next frame, or `None` once the log has ended.
    fn next_frame(&mut self) -> Option<Result<ScannedFrame, PushLogCallError>>;
    /// How the log ended; [`LogEnd::Clean`] until it has.
    fn end(&self) -> LogEnd;
}

/// How many frames a sandboxed scan asks the guest for at once; the guest also stops near 4 MiB.
const SCAN_FRAMES_PER_CALL: u32 = 64;

/// A streamed scan of a [`super::PushLog`], from [`super::PushLog::scan`]. Yields each frame's
/// batch and offset; after the last one, [`PushLogScan::end`] says how the log ended. The first
/// error ends it.
pub struct PushLogScan<'a> {
    source: Box<dyn FrameSource + 'a>,
    failed: bool,
}

impl<'a> PushLogScan<'a> {
    pub(super) fn new(source: Box<dyn FrameSource + 'a>) -> PushLogScan<'a> {
        PushLogScan {
            source,
            failed: false,
        }
    }

    /// How the log ended: empty, clean, a torn tail (not yet cut) or middle corruption. Final
    /// once the iterator has returned `None`; [`LogEnd::Clean`] before that.
    pub fn end(&self) -> LogEnd {
        self.source.end()
    }
}

impl std::fmt::Debug for PushLogScan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushLogScan")
            .field("end", &self.end())
            .finish_non_exhaustive()
    }
}

impl Iterator for PushLogScan<'_> {
    type Item = Result<ScannedFrame, PushLogCallError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.source.next_frame();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// The scan calls a sandboxed instance answers, the same for both builds.
pub(crate) trait GuestScanCalls {
    /// Up to `frames_max` frames (fewer near 4 MiB): offsets and IPC stream bytes; none once
    /// the log has ended.
    fn next_frames(
        &self,
        scan: ResourceAny,
        frames_max: u32,
    ) -> Result<Vec<(u64, Vec<u8>)>, PushLogCallError>;
    fn scan_end(&self, scan: ResourceAny) -> Result<LogEnd, PushLogCallError>;
    /// Releases the scan's resource in the guest.
    fn close_scan(&self, scan: ResourceAny);
}

/// A scan running in a sandboxed instance. The guest verifies each frame's checksum and hands
/// the body over undecoded; decoding it here is the schema check, exactly as a native scan
/// does it.
pub(crate) struct GuestScan<'a, G: GuestScanCalls> {
    guest: &'a G,
    schema: &'a SchemaRef,
    /// The guest's scan resource, until the scan ends (or is dropped).
    handle: Option<ResourceAny>,
    /// Offsets and IPC stream bytes, not yet decoded.
    fetched: VecDeque<(u64, Vec<u8>)>,
    end: Option<LogEnd>,
}

impl<'a, G: GuestScanCalls> GuestScan<'a, G> {
    pub(crate) fn new(guest: &'a G, handle: ResourceAny, schema: &'a SchemaRef) -> Self {
        GuestScan {
            guest,
            schema,
            handle: Some(handle),
            fetched: VecDeque::new(),
            end: None,
        }
    }

    /// Releases the guest's scan resource once.
    fn close(&mut self) {
        if let Some(scan) = self.handle.take() {
            self.guest.close_scan(scan);
        }
    }
}

impl<G: GuestScanCalls> FrameSource for GuestScan<'_, G> {
    fn next_frame(&mut self) -> Option<Result<ScannedFrame, PushLogCallError>> {
        if self.fetched.is_empty() {
            let scan = self.handle?;
            match self.guest.next_frames(scan, SCAN_FRAMES_PER_CALL) {
                Ok(frames) if frames.is_empty() => {
                    let found = self.guest.scan_end(scan);
                    self.close();
                    self.end = Some(match found {
                        Ok(found) => found,
                        Err(e) => return Some(Err(e)),
                    });
                    return None;
                }
                Ok(frames) => self.fetched.extend(frames),
                Err(e) => {
                    self.close();
                    return Some(Err(e));
                }
            }
        }
        let (offset, ipc_stream) = self.fetched.pop_front()?;
        Some(
            ipc::decode_stream(&ipc_stream, self.schema)
                .map(|batch| ScannedFrame { offset, batch })
                .map_err(|why| PushLogError::MalformedFrame { offset, why }.into()),
        )
    }

    fn end(&self) -> LogEnd {
        self.end.unwrap_or(LogEnd::Clean)
    }
}

impl<G: GuestScanCalls> Drop for GuestScan<'_, G> {
    fn drop(&mut self) {
        self.close();
    }
}
