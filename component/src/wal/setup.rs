//! Starting a log, the same for every driver: [`setup_log`] (one file) and [`setup_segments`]
//! (a directory of segments) take the writer lock, create or recover the log, and hand back
//! the [`GroupCommit`] core that continues it. The thread driver ([`super::WalWriter`]) and the
//! component's async driver (`crate::guest::wal_async`) both start a log here, so creation and
//! recovery behave the same in all; the syncs are the driver's I/O futures. What a group does
//! to the segments once the log runs (rotation) is [`super::executor`]'s.
//!
//! May import the WAL's format, recovery and core (`replay`, `segment`, `group_commit`,
//! `executor`, `lock`) and `crate::vfs`; no driver.

use crate::header::{Family, FileHeader, HEADER_BYTES};
use crate::recovery::LogEnd;
use crate::vfs::{
    DeviceIo, OpenMode, Vfs, VfsFile, VfsLock, VfsReservation, parent_dir, write_zeros,
};

use super::executor::start_segment;
use super::group_commit::GroupCommit;
use super::lock::lock_writer;
use super::replay::{Recovery, replay};
use super::segment::{self, SEGMENT_BYTES_MIN, SegmentedRecovery, join, segment_file_name};
use super::{LogSeq, WAL_VERSION, WalOpenError, WalOptions};

/// Whether [`setup_log`] starts a new log or recovers an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupMode {
    /// The file must be empty (missing files are created empty by the caller's open).
    Create,
    /// Recover whatever the file holds; an empty file becomes a new log.
    Open,
}

/// The writer lock of a single-file log, from [`lock_single_file`]: for [`setup_log`], the
/// proof that no other writer holds the log and that the options ask for no segments.
#[derive(Debug)]
pub struct SingleFileLock {
    /// Held for its drop, which releases the lock.
    _held: Box<dyn VfsLock>,
}

impl VfsLock for SingleFileLock {}

/// The first step of starting a single-file log, before its file is opened: refuses options that
/// ask for segments (the caller meant a segment directory), then takes the writer lock
/// `<path>.lock` ([`lock_writer`]). A refused call touches nothing.
///
/// # Errors
/// [`WalOpenError::SegmentOptionsForSingleFile`]; [`WalOpenError::Locked`] if another writer
/// holds the log; a Vfs error if the lock file cannot be created.
pub fn lock_single_file(
    vfs: &dyn Vfs,
    path: &str,
    options: &WalOptions,
) -> Result<SingleFileLock, WalOpenError> {
    if let Some(segment_bytes) = options.segment_bytes {
        return Err(WalOpenError::SegmentOptionsForSingleFile { segment_bytes });
    }
    lock_writer(vfs, path, false).map(|held| SingleFileLock { _held: held })
}

/// Prepares `file`, opened at `path` through `io` after `lock` was taken, for appending, and
/// returns the group-commit core that continues it. Every driver (the thread driver here, the
/// component's async driver) starts a log through this one function, so creation and recovery
/// behave the same in all; its syncs are `io`'s futures, so an async driver's open suspends on
/// them as its groups do. The caller holds `lock` as long as the core is used.
///
/// A new log gets its header; under `FullSync` and `Barrier` the header is synced and then the
/// parent directory, so the empty log and its first seq survive power loss from here on. A torn
/// tail is cut (`set_len`) and, under those policies, the cut is synced before any append.
/// Recovering an existing log under those policies syncs the parent directory too: the writer
/// that created the file may have failed (or crashed) before its directory sync returned, and
/// nothing may be acknowledged in a file whose name a power loss can take.
///
/// # Errors
/// [`WalOpenError::NotEmpty`] when creating over bytes; replay's errors when recovering (the
/// file is then not modified); Vfs errors.
pub async fn setup_log<Io: DeviceIo>(
    io: &Io,
    path: &str,
    _lock: &SingleFileLock,
    file: &Io::File,
    options: WalOptions,
    mode: SetupMode,
) -> Result<(GroupCommit, Recovery), WalOpenError> {
    let recovery = match mode {
        SetupMode::Create => {
            let len = file.len()?;
            if len != 0 {
                return Err(WalOpenError::NotEmpty { len });
            }
            Recovery::new_log(options.first_seq, 0)
        }
        SetupMode::Open => replay(file, options.first_seq, |_| {})?,
    };
    tracing::info!(
        path,
        end = ?recovery.end,
        records = recovery.records,
        next_seq = recovery.next_seq.0,
        bytes_read = recovery.valid_end,
        file_len = recovery.file_len,
        "wal recovered"
    );
    let sync = options.policy.group_sync();
    let core = match recovery.end {
        LogEnd::Empty => {
            let header = FileHeader {
                family: Family::Wal,
                version: WAL_VERSION,
                family_word: options.first_seq.0,
            };
            io.write_at(file, 0, &header.encode()).await?;
            let mut core = GroupCommit::new(&options, options.first_seq, HEADER_BYTES as u64);
            if let Some(kind) = sync {
                // The header carries first_seq; syncing it now means a crash before the first
                // group still reopens at the right seq. The directory sync makes the new file's
                // name durable: without it a power loss can drop the file and every record in it.
                io.sync(file, kind).await?;
                io.sync_dir(parent_dir(path)).await?;
                core.count_setup_syncs(1, 1);
            }
            core
        }
        LogEnd::Corrupt { .. } => unreachable!("replay refuses corruption with an error"),
        LogEnd::Clean | LogEnd::TornTail { .. } => {
            let mut core = GroupCommit::new(&options, recovery.next_seq, recovery.valid_end);
            if recovery.end.is_torn() {
                // The unfinished group is cut before anything new is appended; syncing the cut
                // closes the window where a crash could bring its bytes back after records that
                // we append later.
                file.set_len(recovery.valid_end)?;
                if let Some(kind) = sync {
                    io.sync(file, kind).await?;
                    core.count_setup_syncs(1, 0);
                }
            }
            if sync.is_some() {
                io.sync_dir(parent_dir(path)).await?;
                core.count_setup_syncs(0, 1);
            }
            core
        }
    };
    Ok((core, recovery))
}

/// What [`setup_segments`] hands a driver of a segmented log, with the current segment open
/// as the file type of the driver's I/O.
#[derive(Debug)]
pub struct SegmentedSetup<F = Box<dyn VfsFile>> {
    /// The group-commit core, continuing after the last recovered record.
    pub core: GroupCommit,
    /// What recovery found.
    pub recovery: SegmentedRecovery,
    /// The segment that groups are appended to.
    pub current: F,
    /// First seqs of the live segments, `current`'s last.
    pub live: Vec<LogSeq>,
    /// The segment size in effect.
    pub segment_bytes: u64,
    /// The writer lock (`<dir>/LOCK`), taken before recovery read anything. Whoever drives the
    /// core holds it until the writer is dropped.
    pub lock: Box<dyn VfsLock>,
    /// The room a checkpoint needs under a disk quota (`reserve_checkpoint_room`): whoever
    /// drives the core holds it until the writer is dropped.
    pub checkpoint_room: Vec<Box<dyn VfsReservation>>,
}

/// [`setup_log`] for a segmented log in directory `dir` (created if missing), with
/// `options.segment_bytes` (default [`super::segment::SEGMENT_BYTES_DEFAULT`]).
///
/// The writer lock (`<dir>/LOCK`, [`lock_writer`]) is taken once the directory exists, before
/// anything in it is read. Recovery runs over every segment first
/// ([`segment::replay_segments`]); on an error nothing is modified. Then, before the first
/// append: an unfinished rotation's residue is removed, a torn tail in the last segment is
/// zeroed, and a log with no segment gets its first one. Under `FullSync` and `Barrier` each of
/// these is synced, and then the directory and its parent are, whatever recovery found: a
/// writer that failed (or crashed) before its rotation's or its creation's directory sync
/// returned may have left a segment, or the directory itself, whose name is not durable, and
/// nothing may be acknowledged in it until it is.
///
/// # Errors
/// [`WalOpenError::SingleFileLog`] if `dir` is a file; [`WalOpenError::SegmentTooSmall`];
/// [`WalOpenError::Locked`] if another writer holds the log; [`WalOpenError::NotEmpty`] when
/// creating over segments; recovery's errors; Vfs errors.
pub async fn setup_segments<Io: DeviceIo>(
    io: &Io,
    dir: &str,
    options: WalOptions,
    mode: SetupMode,
) -> Result<SegmentedSetup<Io::File>, WalOpenError> {
    let vfs = io.vfs();
    let segment_bytes = options
        .segment_bytes
        .unwrap_or(segment::SEGMENT_BYTES_DEFAULT);
    if segment_bytes < SEGMENT_BYTES_MIN {
        return Err(WalOpenError::SegmentTooSmall {
            bytes: segment_bytes,
            bytes_min: SEGMENT_BYTES_MIN,
        });
    }
    let options = WalOptions {
        segment_bytes: Some(segment_bytes),
        ..options
    };
    if !dir.is_empty() {
        if vfs.open(dir, OpenMode::Existing).is_ok() {
            return Err(WalOpenError::SingleFileLog {
                path: dir.to_owned(),
            });
        }
        vfs.create_dir(dir)?;
    }
    let lock = lock_writer(vfs, dir, true)?;
    let checkpoint_room = reserve_checkpoint_room(vfs, dir);
    let recovery = segment::replay_segments(vfs, dir, options.first_seq, |_| {})?;
    if mode == SetupMode::Create && recovery.usable_segments().next().is_some() {
        return Err(WalOpenError::NotEmpty {
            len: recovery.usable_segments().map(|s| s.file_len).sum(),
        });
    }
    let sync = options.policy.group_sync();
    let (mut file_syncs, mut dir_syncs) = (0, 0);
    if let Some(unfinished) = recovery.unfinished_segment() {
        // Made durable by the directory sync below, before the first append.
        vfs.remove(&join(dir, &segment_file_name(unfinished.first_seq)))?;
    }
    let mut live: Vec<LogSeq> = recovery.usable_segments().map(|s| s.first_seq).collect();
    let (current, core) = match recovery.usable_segments().last() {
        None => {
            let first_seq = recovery.recovery.first_seq;
            let file = start_segment(io, dir, first_seq, segment_bytes)?;
            if let Some(kind) = sync {
                // The empty log and its first seq survive power loss once the names below are
                // durable too.
                io.sync(&file, kind).await?;
                file_syncs += 1;
            }
            live.push(first_seq);
            let core = GroupCommit::new(&options, first_seq, HEADER_BYTES as u64);
            (file, core)
        }
        Some(last) => {
            let path = join(dir, &segment_file_name(last.first_seq));
            let file = io.open(&path, OpenMode::Existing)?;
            if let LogEnd::TornTail { torn_end, .. } = last.end {
                // The cleared tail must be durable before anything is appended after it, or a
                // crash could bring the torn bytes back behind new records. Zeroed, not cut:
                // cutting would undo the preallocation.
                write_zeros(io, &file, last.valid_end, torn_end).await?;
                if let Some(kind) = sync {
                    io.sync(&file, kind).await?;
                    file_syncs += 1;
                }
            }
            let core = GroupCommit::new(&options, last.next_seq, last.valid_end);
            (file, core)
        }
    };
    if sync.is_some() {
        // The segments' names, and the directory's own entry in its parent (it may be new, or
        // an earlier creator's sync of it may have failed): without them a power loss could
        // drop a segment, or the directory with every segment in it.
        io.sync_dir(dir).await?;
        dir_syncs += 1;
        if !dir.is_empty() {
            io.sync_dir(parent_dir(dir)).await?;
            dir_syncs += 1;
        }
    }
    let mut core = core;
    core.count_setup_syncs(file_syncs, dir_syncs);
    tracing::info!(
        dir,
        end = ?recovery.recovery.end,
        records = recovery.recovery.records,
        next_seq = recovery.recovery.next_seq.0,
        segments = live.len(),
        "wal recovered"
    );
    Ok(SegmentedSetup {
        core,
        recovery,
        current,
        live,
        segment_bytes,
        lock,
        checkpoint_room,
    })
}

/// Holds, for the writer's life, the room a checkpoint needs under a disk quota: the
/// checkpoint file and the file it is staged in, a header each. A tenant at its quota can then
/// still checkpoint, and so truncate what it has absorbed, which is how it frees room: a
/// checkpoint never asks for more. Best effort: a tenant already past its quota when the log
/// opens gets what fits (the reservations are asked again by nothing), and a checkpoint that
/// then finds no room fails with `QuotaExceeded`, typed, touching nothing.
fn reserve_checkpoint_room(vfs: &dyn Vfs, dir: &str) -> Vec<Box<dyn VfsReservation>> {
    [segment::CHECKPOINT_FILE, segment::CHECKPOINT_STAGING_FILE]
        .into_iter()
        .filter_map(|name| {
            vfs.reserve(&join(dir, name), HEADER_BYTES as u64)
                .inspect_err(|cause| {
                    tracing::debug!(dir, name, %cause, "no room held for the checkpoint");
                })
                .ok()
        })
        .collect()
}
