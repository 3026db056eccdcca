//! [`FramedAppender`]: the writer's side of a framed file, written once for the journal and the
//! push log. It owns the file's lifecycle: the advisory lock, opening or creating the file,
//! cutting a torn tail, the lazily written header, the pending directory sync, the rollback of a
//! failed append, and adopting the file a compaction renamed over it.
//!
//! A framed file is the 32-byte [`crate::header`] and then [frames](super). The appender does
//! not know what the frames hold: a family checks their bodies while the file is opened
//! (`on_frame` of [`FramedAppender::open`]) and builds the bodies it appends.
//!
//! What it promises, whatever fails:
//! - the file ends at a whole frame, [`FramedAppender::clean_end`], after every call that
//!   returns: a failed append is cut back to it, and if the cut itself fails, the next append
//!   cuts first (a shorter retry must not leave the failed append's tail where recovery could
//!   read it back);
//! - an append is acknowledged only once its bytes, the header before them (written with the
//!   first append, so that a file opened and never appended to stays zero bytes) and the
//!   directory entry that names the file are all durable;
//! - after a replacement (a compaction through [`crate::vfs::replace`]) nothing is written
//!   through the old handle, which names the replaced file, and nothing is acknowledged before
//!   a directory sync has returned since the rename.
//!
//! The methods are `async` over [`DeviceIo`], so the same code runs on a thread (over
//! [`crate::vfs::ReadyIo`], through [`crate::vfs::complete_now`]) and in the async component.

use crate::frame::{FrameReader, Next, ScanEnd};
use crate::header::{Family, FileHeader, HEADER_BYTES, HeaderError};
use crate::vfs::{
    DeviceIo, OpenMode, QuotaExceeded, SyncKind, VfsError, VfsFile, VfsLock, parent_dir,
};

/// What a framed file's header says: its family and format version. Its family word is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramedFormat {
    /// The family every file of this format carries.
    pub family: Family,
    /// The format version this build reads and writes.
    pub version: u16,
}

impl FramedFormat {
    /// The header this build writes.
    pub fn header(self) -> [u8; HEADER_BYTES] {
        FileHeader {
            family: self.family,
            version: self.version,
            family_word: 0,
        }
        .encode()
    }
}

/// The advisory lock file that guards the framed file at `path`: `<path>.lock`.
pub fn lock_path(path: &str) -> String {
    format!("{path}.lock")
}

/// Why a framed file could not be opened (or reopened) for reading or appending. Each family
/// maps these onto its own error's variants.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The filesystem refused or failed an operation.
    #[error(transparent)]
    Vfs(#[from] VfsError),
    /// The header is damaged, or of another family or version.
    #[error("bad header")]
    BadHeader(#[from] HeaderError),
    /// The frame at `offset` is damaged and a valid frame follows: acknowledged data may be
    /// behind it, so it is refused, never cut.
    #[error("corrupt at byte {offset} (a valid frame follows at byte {valid_frame_at})")]
    Corrupt {
        /// Where the damaged frame starts.
        offset: u64,
        /// Where the next valid frame starts.
        valid_frame_at: u64,
    },
    /// Another writer holds the file.
    #[error("held by another writer (lock file {lock_path})")]
    Locked {
        /// The lock file the other writer holds.
        lock_path: String,
    },
    /// Reopening after a replacement failed, and the family refuses every later call
    /// ([`FramedAppender::lose_handle`]).
    #[error("the writer has no handle: {why}")]
    NoHandle {
        /// What failed.
        why: String,
    },
}

/// Why [`FramedAppender::append`] failed. Nothing it wrote is acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// The file could not be reopened before writing; nothing was written.
    #[error("reopening before the append failed")]
    Reopen(#[source] OpenError),
    /// The disk quota has no room for the append: refused before anything was written.
    #[error(transparent)]
    QuotaExceeded(QuotaExceeded),
    /// A directory sync, write or sync failed. `rolled_back`: the file was cut back to its
    /// length before the call (or nothing had been written); if not, the next append cuts it
    /// first.
    #[error("append failed; rolled back: {rolled_back}")]
    Failed {
        /// The failed operation's error.
        #[source]
        cause: VfsError,
        /// Whether the file ends where it ended before the call.
        rolled_back: bool,
    },
}

/// Checks a framed file's header and returns a frame reader positioned after it, or, for a file
/// without frames, how its scan ends: a zero-byte file is clean and empty, and a file shorter
/// than a header is a first append that never completed (the header goes out with the first
/// append, in the same synced call), a torn tail at byte 0.
pub fn open_frames(
    file: &dyn VfsFile,
    format: FramedFormat,
) -> Result<Result<FrameReader, ScanEnd>, OpenError> {
    let len = file.len()?;
    if len == 0 {
        return Ok(Err(ScanEnd::Clean { end: 0 }));
    }
    if len < HEADER_BYTES as u64 {
        let mut present = [0u8; HEADER_BYTES];
        let present = &mut present[..len as usize];
        file.read_exact_at(0, present)?;
        return Ok(Err(ScanEnd::TornTail {
            valid_end: 0,
            file_len: len,
            nonzero_end: present
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |i| i as u64 + 1),
        }));
    }
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact_at(0, &mut header)?;
    FileHeader::decode_expecting(&header, format.family, format.version)?;
    Ok(Ok(FrameReader::new(HEADER_BYTES as u64, len)))
}

/// Walks every frame of a framed file, checking the header first; `on_frame` sees each frame's
/// offset and body, and may stop the walk with an error of its own.
pub fn scan_frames<E: From<OpenError>>(
    file: &dyn VfsFile,
    format: FramedFormat,
    mut on_frame: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<ScanEnd, E> {
    let mut reader = match open_frames(file, format)? {
        Ok(reader) => reader,
        Err(end) => return Ok(end),
    };
    loop {
        match reader.next_frame(file).map_err(OpenError::from)? {
            Next::Frame { offset, body } => on_frame(offset, body)?,
            Next::End(end) => return Ok(end),
        }
    }
}

/// The appender's handle on its file.
#[derive(Debug)]
enum Handle<F> {
    Open(F),
    /// The file was replaced, or may have been (a rename whose outcome is unknown): the next
    /// call reopens it and finds its end by a scan.
    Reopen,
    /// Reopening failed and the family refuses every later call with this reason.
    Lost(String),
}

/// An open framed file, held exclusively (its `<path>.lock`) until dropped.
#[derive(Debug)]
pub struct FramedAppender<Io: DeviceIo> {
    io: Io,
    path: String,
    format: FramedFormat,
    _lock: Box<dyn VfsLock>,
    handle: Handle<Io::File>,
    /// Where the last whole frame ends: the file's length after every call that returns. Zero
    /// exactly while the file holds no header.
    clean_end: u64,
    /// A failed append could not be cut back to `clean_end`. Appends write at `clean_end`, not
    /// at the end of the file, so the stale bytes would sit after a shorter retry: the next
    /// append cuts first.
    tail_dirty: bool,
    /// The directory entry naming the file is not known to be durable: from opening (an earlier
    /// writer may have created or compacted the file and failed before its directory sync
    /// returned, and nothing on disk records which) until the first append, and after a
    /// replacement until its directory sync returns. The next append syncs the directory before
    /// it writes: one directory sync per writer.
    dir_sync_pending: bool,
}

impl<Io: DeviceIo> FramedAppender<Io> {
    /// Opens (creating if missing) the framed file at `path` for appending. Takes the advisory
    /// lock `<path>.lock` first ([`OpenError::Locked`] if another writer holds it), refuses a
    /// header of another family or version, and scans the frames, handing each body to
    /// `on_frame`: corruption followed by a valid frame is refused ([`OpenError::Corrupt`]); a
    /// torn tail is cut and the cut synced, so appends start at a whole frame.
    pub async fn open<E: From<OpenError>>(
        io: Io,
        path: &str,
        format: FramedFormat,
        on_frame: impl FnMut(u64, &[u8]) -> Result<(), E>,
    ) -> Result<Self, E> {
        let lock_path = lock_path(path);
        let lock = io.vfs().lock_exclusive(&lock_path).map_err(|e| match e {
            VfsError::Locked(_) => OpenError::Locked { lock_path },
            other => OpenError::Vfs(other),
        })?;
        let mut appender = FramedAppender {
            io,
            path: path.to_owned(),
            format,
            _lock: lock,
            handle: Handle::Reopen,
            clean_end: 0,
            tail_dirty: false,
            dir_sync_pending: true,
        };
        appender.open_file(on_frame).await?;
        Ok(appender)
    }

    async fn open_file<E: From<OpenError>>(
        &mut self,
        on_frame: impl FnMut(u64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let file = self
            .io
            .open(&self.path, OpenMode::Create)
            .map_err(OpenError::from)?;
        let clean_end = match scan_frames(&file, self.format, on_frame)? {
            ScanEnd::Clean { end } => end,
            ScanEnd::TornTail { valid_end, .. } => {
                file.set_len(valid_end).map_err(OpenError::from)?;
                self.io
                    .sync(&file, SyncKind::Data)
                    .await
                    .map_err(OpenError::from)?;
                valid_end
            }
            ScanEnd::Corrupt {
                offset,
                valid_frame_at,
            } => {
                return Err(OpenError::Corrupt {
                    offset,
                    valid_frame_at,
                }
                .into());
            }
        };
        self.handle = Handle::Open(file);
        self.clean_end = clean_end;
        self.tail_dirty = false;
        Ok(())
    }

    /// Makes sure the appender holds a handle: reopens (and rescans) the file after a
    /// replacement that left none, and refuses once the handle is lost.
    pub async fn ensure_open(&mut self) -> Result<(), OpenError> {
        match &self.handle {
            Handle::Open(_) => Ok(()),
            Handle::Lost(why) => Err(OpenError::NoHandle { why: why.clone() }),
            Handle::Reopen => self.open_file(|_, _| Ok::<_, OpenError>(())).await,
        }
    }

    /// Appends `parts`, back to back at [`FramedAppender::clean_end`], and makes them durable:
    /// when this returns `Ok`, they, the header before them (written first when the file holds
    /// none) and the file's directory entry (when not yet known durable) have all been synced
    /// (`fdatasync`; `fsync` of the parent directory). Returns the offset of the first part.
    ///
    /// The parts are written as they are, with no copy: a family passes a frame's header and
    /// its body as two parts. A failure is rolled back to the length before the call; see
    /// [`AppendError`].
    ///
    /// The room the append needs is reserved first ([`VfsFile::reserve`]), so under a disk quota
    /// an append that does not fit fails with [`AppendError::QuotaExceeded`] before anything,
    /// the directory sync included, is done.
    pub async fn append(&mut self, parts: &[&[u8]]) -> Result<u64, AppendError> {
        self.ensure_open().await.map_err(AppendError::Reopen)?;
        let Handle::Open(file) = &self.handle else {
            unreachable!("ensure_open returned a handle")
        };
        let header_bytes = if self.clean_end == 0 {
            HEADER_BYTES as u64
        } else {
            0
        };
        let end =
            self.clean_end + header_bytes + parts.iter().map(|part| part.len() as u64).sum::<u64>();
        let _room = file.reserve(end).map_err(|cause| match cause {
            VfsError::QuotaExceeded(refusal) => AppendError::QuotaExceeded(refusal),
            cause => AppendError::Failed {
                cause,
                rolled_back: true,
            },
        })?;
        if self.dir_sync_pending {
            // Before writing, so that a failure leaves nothing to roll back.
            self.io
                .sync_dir(parent_dir(&self.path))
                .await
                .map_err(|cause| AppendError::Failed {
                    cause,
                    rolled_back: true,
                })?;
            self.dir_sync_pending = false;
        }
        if self.tail_dirty {
            file.set_len(self.clean_end)
                .map_err(|cause| AppendError::Failed {
                    cause,
                    rolled_back: false,
                })?;
            self.tail_dirty = false;
        }
        let start = self.clean_end;
        let mut at = start;
        let mut result = Ok(());
        if start == 0 {
            result = self.io.write_at(file, 0, &self.format.header()).await;
            at = HEADER_BYTES as u64;
        }
        let data_at = at;
        for part in parts {
            if result.is_err() {
                break;
            }
            result = self.io.write_at(file, at, part).await;
            at += part.len() as u64;
        }
        if result.is_ok() {
            result = self.io.sync(file, SyncKind::Data).await;
        }
        match result {
            Ok(()) => {
                self.clean_end = at;
                Ok(data_at)
            }
            Err(cause) => {
                // The cut needs no sync of its own: until the next successful append's sync, a
                // crash may keep bytes past `start`, but they are this call's unacknowledged
                // frames, which recovery either reads whole or cuts as a torn tail.
                let rolled_back = file.set_len(start).is_ok();
                self.tail_dirty = !rolled_back;
                Err(AppendError::Failed { cause, rolled_back })
            }
        }
    }

    /// Call before a replacement's rename: from then on the handle may name the replaced file,
    /// and after a crash the name may point at either file until a directory sync returns. So
    /// the next append reopens the file and syncs the directory before it writes, whatever
    /// happens to the rename.
    pub fn replacing(&mut self) {
        self.handle = Handle::Reopen;
        self.dir_sync_pending = true;
    }

    /// Call once a replacement's rename landed: the file now holds `len` bytes of whole frames
    /// (zero: no header). `dir_synced` says whether the replacement's directory sync returned;
    /// if not, the next append makes it first. Reopens the file now, so that the next append
    /// needs no scan; if that fails, the handle stays missing and the error is returned (the
    /// next call retries, unless the family gives the handle up: [`Self::lose_handle`]).
    pub fn adopt_replacement(&mut self, len: u64, dir_synced: bool) -> Result<(), VfsError> {
        self.handle = Handle::Reopen;
        self.dir_sync_pending = !dir_synced;
        let file = self.io.open(&self.path, OpenMode::Existing)?;
        self.handle = Handle::Open(file);
        self.clean_end = len;
        self.tail_dirty = false;
        Ok(())
    }

    /// Records that a directory sync of the file's directory returned after a replacement.
    pub fn dir_synced(&mut self) {
        self.dir_sync_pending = false;
    }

    /// Gives the handle up for good: every later call fails with [`OpenError::NoHandle`] and
    /// `why`.
    pub fn lose_handle(&mut self, why: String) {
        self.handle = Handle::Lost(why);
    }

    /// Why the appender has no handle for good, if it has lost it.
    pub fn lost(&self) -> Option<&str> {
        match &self.handle {
            Handle::Lost(why) => Some(why),
            _ => None,
        }
    }

    /// The I/O the appender runs on.
    pub fn io(&self) -> &Io {
        &self.io
    }

    /// The file's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where the last whole frame ends: the file's length.
    pub fn clean_end(&self) -> u64 {
        self.clean_end
    }

    /// Whether the file starts with its header (false while it is zero bytes).
    pub fn header_written(&self) -> bool {
        self.clean_end > 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::frame::frame_header;
    use crate::vfs::{MemVfs, ReadyIo, Vfs, complete_now};

    const FORMAT: FramedFormat = FramedFormat {
        family: Family::PushLog,
        version: 1,
    };

    fn open(vfs: &MemVfs) -> Result<FramedAppender<ReadyIo>, OpenError> {
        let io = ReadyIo(Arc::new(vfs.clone()) as Arc<dyn Vfs>);
        complete_now(FramedAppender::open(io, "f", FORMAT, |_, _| {
            Ok::<_, OpenError>(())
        }))
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut bytes = frame_header(body).to_vec();
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn the_header_goes_out_with_the_first_append_and_parts_land_back_to_back() {
        let vfs = MemVfs::new();
        let mut appender = open(&vfs).unwrap();
        assert_eq!(
            vfs.contents("f"),
            Some(vec![]),
            "opened, unused: zero bytes"
        );
        assert!(!appender.header_written());
        let body = b"first body";
        let at = complete_now(appender.append(&[&frame_header(body), body])).unwrap();
        assert_eq!(at, HEADER_BYTES as u64);
        let at = complete_now(appender.append(&[&frame(b"second")])).unwrap();
        let mut expected = FORMAT.header().to_vec();
        expected.extend(frame(body));
        assert_eq!(at, expected.len() as u64);
        expected.extend(frame(b"second"));
        assert_eq!(vfs.contents("f"), Some(expected.clone()));
        assert_eq!(appender.clean_end(), expected.len() as u64);

        drop(appender);
        let reopened = open(&vfs).unwrap();
        assert_eq!(reopened.clean_end(), expected.len() as u64);
    }

    #[test]
    fn open_cuts_a_torn_tail_and_refuses_damage_before_a_valid_frame() {
        let vfs = MemVfs::new();
        let mut appender = open(&vfs).unwrap();
        complete_now(appender.append(&[&frame(b"one")])).unwrap();
        complete_now(appender.append(&[&frame(b"two")])).unwrap();
        drop(appender);
        let whole = vfs.contents("f").unwrap();
        let first_end = HEADER_BYTES + frame(b"one").len();

        vfs.set_contents("f", whole[..whole.len() - 1].to_vec());
        let appender = open(&vfs).unwrap();
        assert_eq!(appender.clean_end(), first_end as u64);
        assert_eq!(
            vfs.contents("f").unwrap(),
            whole[..first_end],
            "the cut is made"
        );
        drop(appender);

        let mut damaged = whole.clone();
        damaged[HEADER_BYTES + 9] ^= 1;
        vfs.set_contents("f", damaged.clone());
        assert_eq!(
            open(&vfs).unwrap_err(),
            OpenError::Corrupt {
                offset: HEADER_BYTES as u64,
                valid_frame_at: first_end as u64
            }
        );
        assert_eq!(vfs.contents("f").unwrap(), damaged, "refused, not cut");

        vfs.set_contents("f", whole[..HEADER_BYTES - 3].to_vec());
        let appender = open(&vfs).unwrap();
        assert!(
            !appender.header_written(),
            "a cut header is a torn first append"
        );
    }

    #[test]
    fn a_second_writer_is_refused_until_the_first_drops() {
        let vfs = MemVfs::new();
        let first = open(&vfs).unwrap();
        assert_eq!(
            open(&vfs).unwrap_err(),
            OpenError::Locked {
                lock_path: "f.lock".into()
            }
        );
        drop(first);
        open(&vfs).unwrap();
    }

    #[test]
    fn a_replacement_is_adopted_and_a_lost_handle_refuses_every_later_append() {
        let vfs = MemVfs::new();
        let mut appender = open(&vfs).unwrap();
        complete_now(appender.append(&[&frame(b"old")])).unwrap();
        let mut replacement = FORMAT.header().to_vec();
        replacement.extend(frame(b"new"));
        appender.replacing();
        vfs.set_contents("f", replacement.clone());
        appender
            .adopt_replacement(replacement.len() as u64, true)
            .unwrap();
        complete_now(appender.append(&[&frame(b"after")])).unwrap();
        replacement.extend(frame(b"after"));
        assert_eq!(vfs.contents("f"), Some(replacement.clone()));

        // A replacement whose outcome is unknown: the next append rescans the file.
        appender.replacing();
        complete_now(appender.append(&[&frame(b"rescanned")])).unwrap();
        replacement.extend(frame(b"rescanned"));
        assert_eq!(vfs.contents("f"), Some(replacement));

        appender.lose_handle("reopen failed".into());
        assert_eq!(
            complete_now(appender.append(&[&frame(b"refused")])).unwrap_err(),
            AppendError::Reopen(OpenError::NoHandle {
                why: "reopen failed".into()
            })
        );
    }
}
