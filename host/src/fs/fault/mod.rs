//! [`FaultFs`]: a deterministic, in-memory model of a disk behind a page cache, for crash tests.
//!
//! It follows LevelDB's and RocksDB's fault-injection filesystems, SQLite's crash-test VFS,
//! LazyFS and ALICE:
//!
//! - Each file (an inode, by id) has **durable** contents. Writes and `set_len`s since its last
//!   sync are **volatile**: they are visible to reads but would not survive a crash.
//! - The namespace (path → inode) has durable entries. Creates, renames and removes since the
//!   parent directory's last `sync_dir` are volatile too. So a file that was synced but whose
//!   creation was never made durable by a directory sync can vanish in a crash, and a rename
//!   without a directory sync can be undone: POSIX's pessimistic semantics.
//! - All volatile operations sit in one list, in the order they were issued. A **crash** keeps
//!   the durable state plus a chosen [`CrashPlan`] of that list: none of it, all of it, a
//!   prefix, or a prefix whose last write is torn at [`SECTOR_BYTES`] granularity (the first
//!   `s` sectors of it, counted on file offsets, reach the disk).
//! - A failed sync models fsyncgate: the file's volatile writes are dropped from the list (the
//!   kernel marked those pages clean), while reads still see them.
//! - [`FaultRule`]s make the Nth write, sync, rename, directory sync or `set_len` fail with EIO
//!   or ENOSPC, or make a write short (a prefix of it lands, then an error).
//! - Every operation is appended to a trace (kind, path, offset, length), and with
//!   [`FaultFs::record_boundaries`] the model is snapshotted after each operation, so a crash
//!   matrix can build the crashed state at every operation boundary of one recorded run.
//!
//! Everything is deterministic: no clock, no randomness. Callers that want random plans draw
//! them from their own seeded generator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use stele::vfs::{OpenMode, SyncKind, Vfs, VfsError, VfsFile, VfsLock, child_names};

mod model;

pub use model::{CrashPlan, SECTOR_BYTES};
use model::{Model, PagedFile, Volatile, write_into};

/// Which operation a [`FaultRule`] or a [`TraceEntry`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`Vfs::open`], any mode.
    Open,
    /// [`VfsFile::write_at`].
    Write,
    /// [`VfsFile::set_len`].
    SetLen,
    /// [`VfsFile::sync`], any kind.
    Sync,
    /// [`Vfs::rename`].
    Rename,
    /// [`Vfs::sync_dir`].
    SyncDir,
    /// [`Vfs::remove`].
    Remove,
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedError {
    /// EIO.
    Io,
    /// ENOSPC.
    NoSpace,
    /// Only the first `landed_bytes` of the write land, then the write fails with EIO.
    ShortWrite {
        /// Bytes of the write that reach the file before the error.
        landed_bytes: u64,
    },
    /// Only the first `landed_bytes` of the write land, then the write fails with ENOSPC: a
    /// write that filled the device part way.
    ShortWriteNoSpace {
        /// Bytes of the write that reach the file before the error.
        landed_bytes: u64,
    },
}

/// Makes the `nth` (1-based) operation of `op` kind fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// The kind of operation that fails.
    pub op: OpKind,
    /// Which one, counting operations of that kind from the filesystem's creation, from 1.
    pub nth: u64,
    /// How it fails.
    pub error: InjectedError,
}

/// One traced operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// The operation.
    pub kind: OpKind,
    /// The file (or, for directory operations, the directory) it acted on.
    pub path: String,
    /// The byte offset, for writes; 0 otherwise.
    pub offset: u64,
    /// Bytes written, or the new length for `SetLen`; 0 otherwise.
    pub len: u64,
    /// Whether the operation failed (injected fault or ordinary error).
    pub failed: bool,
}

#[derive(Debug, Default)]
struct State {
    model: Model,
    rules: Vec<FaultRule>,
    counts: HashMap<OpKind, u64>,
    trace: Vec<TraceEntry>,
    /// Snapshots of the model after each operation; `snapshots[0]` is the state when recording
    /// began.
    snapshots: Option<Vec<Model>>,
    /// Paths locked by a live [`FaultLock`]. Process state, not disk state: a crashed
    /// filesystem starts with none, as a real kernel drops a dead process's locks.
    locks: std::collections::BTreeSet<String>,
}

impl State {
    /// Counts an operation of `kind` and returns the fault to inject, if a rule matches.
    fn fault_for(&mut self, kind: OpKind) -> Option<InjectedError> {
        let n = self.counts.entry(kind).or_default();
        *n += 1;
        let n = *n;
        self.rules
            .iter()
            .find(|r| r.op == kind && r.nth == n)
            .map(|r| r.error)
    }

    fn record(&mut self, kind: OpKind, path: &str, offset: u64, len: u64, failed: bool) {
        self.trace.push(TraceEntry {
            kind,
            path: path.to_owned(),
            offset,
            len,
            failed,
        });
        if let Some(snapshots) = &mut self.snapshots {
            snapshots.push(self.model.clone());
        }
    }
}

fn injected(err: InjectedError) -> VfsError {
    match err {
        InjectedError::NoSpace | InjectedError::ShortWriteNoSpace { .. } => VfsError::NoSpace,
        InjectedError::Io | InjectedError::ShortWrite { .. } => VfsError::Io("injected EIO".into()),
    }
}

/// The fault-injecting filesystem. Cloning shares the same model.
#[derive(Clone, Debug, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

impl FaultFs {
    /// An empty filesystem: no files, no faults, nothing volatile.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a fault rule. Counting starts from the filesystem's creation.
    pub fn inject(&self, rule: FaultRule) {
        self.lock().rules.push(rule);
    }

    /// How many operations of `kind` have been issued so far.
    pub fn count(&self, kind: OpKind) -> u64 {
        self.lock().counts.get(&kind).copied().unwrap_or(0)
    }

    /// Every operation issued so far, in order, and whether it failed.
    pub fn trace(&self) -> Vec<TraceEntry> {
        self.lock().trace.clone()
    }

    /// Starts snapshotting the model after every operation (boundary 0 is now).
    pub fn record_boundaries(&self) {
        let mut state = self.lock();
        let now = state.model.clone();
        state.snapshots = Some(vec![now]);
    }

    /// Operation boundaries recorded so far (operations since recording began, plus one).
    pub fn boundaries(&self) -> usize {
        self.lock().snapshots.as_ref().map_or(0, Vec::len)
    }

    /// Every distinct crash plan at `boundary`.
    pub fn crash_plans_at(&self, boundary: usize) -> Vec<CrashPlan> {
        self.lock()
            .snapshots
            .as_ref()
            .expect("record_boundaries first")[boundary]
            .crash_plans()
    }

    /// The filesystem as it would be after a crash at `boundary` under `plan`: a new, independent
    /// `FaultFs` whose whole state is durable.
    pub fn crash_at(&self, boundary: usize, plan: CrashPlan) -> FaultFs {
        let model = self
            .lock()
            .snapshots
            .as_ref()
            .expect("record_boundaries first")[boundary]
            .crashed(plan);
        FaultFs {
            state: Arc::new(Mutex::new(State {
                model,
                ..State::default()
            })),
        }
    }

    /// Every distinct crash plan now.
    pub fn crash_plans(&self) -> Vec<CrashPlan> {
        self.lock().model.crash_plans()
    }

    /// The filesystem as it would be after a crash now under `plan`.
    pub fn crash(&self, plan: CrashPlan) -> FaultFs {
        let model = self.lock().model.crashed(plan);
        FaultFs {
            state: Arc::new(Mutex::new(State {
                model,
                ..State::default()
            })),
        }
    }

    /// Volatile operations now: what a crash could lose.
    pub fn volatile_ops(&self) -> usize {
        self.lock().model.volatile.len()
    }

    /// What a read of `path` sees now, or `None` if it does not exist.
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        let state = self.lock();
        let id = state.model.live_names.get(path)?;
        state.model.live_files.get(id).map(PagedFile::to_vec)
    }

    /// Replaces a file's contents, durably (for corruption tests).
    pub fn set_contents(&self, path: &str, bytes: Vec<u8>) {
        let mut state = self.lock();
        let model = &mut state.model;
        let id = match model.live_names.get(path) {
            Some(id) => *id,
            None => {
                model.next_id += 1;
                model.next_id
            }
        };
        let mut contents = PagedFile::default();
        contents.write(0, &bytes);
        model.live_names.insert(path.to_owned(), id);
        model.durable_names.insert(path.to_owned(), id);
        model.live_files.insert(id, contents.clone());
        model.durable_files.insert(id, contents);
        model.volatile.retain(|op| op.file() != Some(id));
    }
}

#[derive(Debug)]
struct FaultFile {
    state: Arc<Mutex<State>>,
    id: u64,
    path: String,
}

impl FaultFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl VfsFile for FaultFile {
    fn len(&self) -> Result<u64, VfsError> {
        Ok(self
            .lock()
            .model
            .live_files
            .get(&self.id)
            .map_or(0, |c| c.len as u64))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, VfsError> {
        let state = self.lock();
        let Some(data) = state.model.live_files.get(&self.id) else {
            return Ok(0);
        };
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        Ok(data.read(start, buf))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), VfsError> {
        let mut state = self.lock();
        let fault = state.fault_for(OpKind::Write);
        let landed = match fault {
            None => data.len(),
            Some(
                InjectedError::ShortWrite { landed_bytes }
                | InjectedError::ShortWriteNoSpace { landed_bytes },
            ) => (landed_bytes as usize).min(data.len()),
            Some(_) => 0,
        };
        if landed > 0 {
            let bytes: Arc<[u8]> = Arc::from(&data[..landed]);
            write_into(
                state.model.live_files.entry(self.id).or_default(),
                offset,
                &bytes,
            );
            state.model.volatile.push(Volatile::Write {
                file: self.id,
                offset,
                data: bytes,
            });
        }
        let path = self.path.clone();
        state.record(
            OpKind::Write,
            &path,
            offset,
            data.len() as u64,
            fault.is_some(),
        );
        match fault {
            None => Ok(()),
            Some(err) => Err(injected(err)),
        }
    }

    fn set_len(&self, len: u64) -> Result<(), VfsError> {
        let mut state = self.lock();
        let fault = state.fault_for(OpKind::SetLen);
        if fault.is_none() {
            state
                .model
                .live_files
                .entry(self.id)
                .or_default()
                .resize(len as usize);
            state
                .model
                .volatile
                .push(Volatile::SetLen { file: self.id, len });
        }
        let path = self.path.clone();
        state.record(OpKind::SetLen, &path, len, 0, fault.is_some());
        fault.map_or(Ok(()), |e| Err(injected(e)))
    }

    fn sync(&self, _kind: SyncKind) -> Result<(), VfsError> {
        let mut state = self.lock();
        let fault = state.fault_for(OpKind::Sync);
        match fault {
            None => state.model.sync_file(self.id),
            // fsyncgate: the kernel dropped the dirty pages it failed to write.
            Some(_) => state.model.drop_volatile_writes(self.id),
        }
        let path = self.path.clone();
        state.record(OpKind::Sync, &path, 0, 0, fault.is_some());
        fault.map_or(Ok(()), |e| Err(injected(e)))
    }
}

impl Vfs for FaultFs {
    fn open(&self, path: &str, mode: OpenMode) -> Result<Box<dyn VfsFile>, VfsError> {
        if path.is_empty()
            || path.starts_with('/')
            || path.split('/').any(|s| s == ".." || s.is_empty())
        {
            return Err(VfsError::InvalidPath(path.to_owned()));
        }
        let mut state = self.lock();
        if let Some(e) = state.fault_for(OpKind::Open) {
            state.record(OpKind::Open, path, 0, 0, true);
            return Err(injected(e));
        }
        let existing = state.model.live_names.get(path).copied();
        let result = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => Err(VfsError::AlreadyExists),
            (None, OpenMode::Existing) => Err(VfsError::NotFound),
            (Some(id), OpenMode::Truncate) => {
                state.model.live_files.entry(id).or_default().resize(0);
                state
                    .model
                    .volatile
                    .push(Volatile::SetLen { file: id, len: 0 });
                Ok(id)
            }
            (Some(id), _) => Ok(id),
            (None, _) => {
                state.model.next_id += 1;
                let id = state.model.next_id;
                state.model.live_names.insert(path.to_owned(), id);
                state.model.live_files.insert(id, PagedFile::default());
                state.model.volatile.push(Volatile::Create {
                    path: path.to_owned(),
                    file: id,
                });
                Ok(id)
            }
        };
        state.record(OpKind::Open, path, 0, 0, result.is_err());
        let id = result?;
        Ok(Box::new(FaultFile {
            state: self.state.clone(),
            id,
            path: path.to_owned(),
        }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), VfsError> {
        let mut state = self.lock();
        let fault = state.fault_for(OpKind::Rename);
        let result = match fault {
            Some(e) => Err(injected(e)),
            None => match state.model.live_names.remove(from) {
                None => Err(VfsError::NotFound),
                Some(id) => {
                    state.model.live_names.insert(to.to_owned(), id);
                    state.model.volatile.push(Volatile::Rename {
                        from: from.to_owned(),
                        to: to.to_owned(),
                    });
                    Ok(())
                }
            },
        };
        state.record(OpKind::Rename, from, 0, 0, result.is_err());
        result
    }

    fn sync_dir(&self, dir: &str) -> Result<(), VfsError> {
        let mut state = self.lock();
        let fault = state.fault_for(OpKind::SyncDir);
        if fault.is_none() {
            state.model.sync_dir(dir);
        }
        state.record(OpKind::SyncDir, dir, 0, 0, fault.is_some());
        fault.map_or(Ok(()), |e| Err(injected(e)))
    }

    fn remove(&self, path: &str) -> Result<(), VfsError> {
        let mut state = self.lock();
        let result = match state.model.live_names.remove(path) {
            None => Err(VfsError::NotFound),
            Some(_) => {
                state.model.volatile.push(Volatile::Remove {
                    path: path.to_owned(),
                });
                Ok(())
            }
        };
        state.record(OpKind::Remove, path, 0, 0, result.is_err());
        result
    }

    /// Directories are implicit in this model (a path prefix), so creating one changes nothing
    /// and cannot be lost in a crash. The model therefore does not catch an engine that forgets
    /// to sync a new directory's parent; only file entries are modeled as volatile.
    fn create_dir(&self, dir: &str) -> Result<(), VfsError> {
        let state = self.lock();
        if state.model.live_names.contains_key(dir) {
            return Err(VfsError::AlreadyExists);
        }
        Ok(())
    }

    fn exists(&self, path: &str) -> Result<bool, VfsError> {
        let state = self.lock();
        let dir_prefix = format!("{path}/");
        Ok(state.model.live_names.contains_key(path)
            || state
                .model
                .live_names
                .keys()
                .any(|k| k.starts_with(&dir_prefix)))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, VfsError> {
        let state = self.lock();
        Ok(child_names(
            state.model.live_names.keys().map(String::as_str),
            dir,
        ))
    }

    fn lock_exclusive(&self, path: &str) -> Result<Box<dyn VfsLock>, VfsError> {
        self.open(path, OpenMode::Create)?;
        if !self.lock().locks.insert(path.to_owned()) {
            return Err(VfsError::Locked(path.to_owned()));
        }
        Ok(Box::new(FaultLock {
            state: self.state.clone(),
            path: path.to_owned(),
        }))
    }
}

/// A held [`FaultFs`] lock.
#[derive(Debug)]
struct FaultLock {
    state: Arc<Mutex<State>>,
    path: String,
}

impl VfsLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.locks.remove(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &FaultFs, path: &str, offset: u64, data: &[u8]) -> Box<dyn VfsFile> {
        let f = fs.open(path, OpenMode::Create).unwrap();
        f.write_at(offset, data).unwrap();
        f
    }

    #[test]
    fn unsynced_create_is_lost_and_synced_file_without_dir_sync_too() {
        let fs = FaultFs::new();
        let f = write(&fs, "a", 0, b"hello");
        f.sync(SyncKind::Full).unwrap();
        // The data is durable, the name is not.
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: 0 }).contents("a"),
            None
        );
        fs.sync_dir("").unwrap();
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: 0 }).contents("a"),
            Some(b"hello".to_vec())
        );
    }

    #[test]
    fn prefixes_and_torn_writes() {
        let fs = FaultFs::new();
        let f = write(&fs, "a", 0, b"");
        f.sync(SyncKind::Full).unwrap();
        fs.sync_dir("").unwrap();
        f.write_at(0, &[1u8; 1000]).unwrap(); // two sectors: 0..512, 512..1000
        f.write_at(1000, &[2u8; 10]).unwrap();
        assert_eq!(fs.volatile_ops(), 2);
        let plans = fs.crash_plans();
        assert_eq!(
            plans,
            vec![
                CrashPlan::KeepPrefix { ops: 0 },
                CrashPlan::KeepPrefix { ops: 1 },
                CrashPlan::KeepPrefix { ops: 2 },
                CrashPlan::KeepPrefixTorn { ops: 0, sectors: 1 },
            ]
        );
        assert_eq!(fs.crash(plans[0]).contents("a").unwrap().len(), 0);
        assert_eq!(fs.crash(plans[1]).contents("a").unwrap(), vec![1u8; 1000]);
        assert_eq!(fs.crash(plans[2]).contents("a").unwrap().len(), 1010);
        assert_eq!(fs.crash(plans[3]).contents("a").unwrap(), vec![1u8; 512]);
    }

    #[test]
    fn rename_without_dir_sync_may_be_undone() {
        let fs = FaultFs::new();
        let f = write(&fs, "tmp", 0, b"new");
        f.sync(SyncKind::Full).unwrap();
        fs.sync_dir("").unwrap();
        fs.rename("tmp", "live").unwrap();
        let undone = fs.crash(CrashPlan::KeepPrefix { ops: 0 });
        assert_eq!(
            (undone.contents("tmp"), undone.contents("live")),
            (Some(b"new".to_vec()), None)
        );
        fs.sync_dir("").unwrap();
        let kept = fs.crash(CrashPlan::KeepPrefix { ops: 0 });
        assert_eq!(
            (kept.contents("tmp"), kept.contents("live")),
            (None, Some(b"new".to_vec()))
        );
    }

    #[test]
    fn failed_sync_drops_the_dirty_data_but_reads_still_see_it() {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op: OpKind::Sync,
            nth: 2,
            error: InjectedError::Io,
        });
        let f = write(&fs, "a", 0, b"one");
        f.sync(SyncKind::Data).unwrap();
        fs.sync_dir("").unwrap();
        f.write_at(3, b"two").unwrap();
        assert!(f.sync(SyncKind::Data).is_err());
        assert_eq!(fs.contents("a").unwrap(), b"onetwo");
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: usize::MAX })
                .contents("a")
                .unwrap(),
            b"one"
        );
        // A later sync succeeds, and still the lost write does not come back.
        f.sync(SyncKind::Data).unwrap();
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: 0 })
                .contents("a")
                .unwrap(),
            b"one"
        );
    }

    #[test]
    fn injected_faults_and_short_writes_and_trace() {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op: OpKind::Write,
            nth: 1,
            error: InjectedError::ShortWrite { landed_bytes: 2 },
        });
        fs.inject(FaultRule {
            op: OpKind::Write,
            nth: 2,
            error: InjectedError::NoSpace,
        });
        let f = fs.open("a", OpenMode::Create).unwrap();
        assert_eq!(
            f.write_at(0, b"abcdef"),
            Err(VfsError::Io("injected EIO".into()))
        );
        assert_eq!(fs.contents("a").unwrap(), b"ab");
        assert_eq!(f.write_at(2, b"cd"), Err(VfsError::NoSpace));
        f.write_at(2, b"cd").unwrap();
        let trace = fs.trace();
        assert_eq!(trace.len(), 4);
        assert_eq!(
            (
                trace[1].kind,
                trace[1].offset,
                trace[1].len,
                trace[1].failed
            ),
            (OpKind::Write, 0, 6, true)
        );
        assert_eq!(fs.count(OpKind::Write), 3);
    }

    #[test]
    fn rename_sync_dir_and_set_len_faults_fail_and_change_nothing() {
        let fs = FaultFs::new();
        fs.inject(FaultRule {
            op: OpKind::Rename,
            nth: 1,
            error: InjectedError::Io,
        });
        fs.inject(FaultRule {
            op: OpKind::SyncDir,
            nth: 1,
            error: InjectedError::NoSpace,
        });
        fs.inject(FaultRule {
            op: OpKind::SetLen,
            nth: 1,
            error: InjectedError::Io,
        });
        let f = write(&fs, "a", 0, b"abc");
        assert_eq!(f.set_len(1), Err(VfsError::Io("injected EIO".into())));
        assert_eq!(fs.contents("a").unwrap(), b"abc");
        assert_eq!(
            fs.rename("a", "b"),
            Err(VfsError::Io("injected EIO".into()))
        );
        assert_eq!((fs.contents("a").is_some(), fs.contents("b")), (true, None));
        assert_eq!(fs.sync_dir(""), Err(VfsError::NoSpace));
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: 0 }).contents("a"),
            None,
            "dir sync failed"
        );
        // The second of each succeeds.
        f.set_len(1).unwrap();
        fs.rename("a", "b").unwrap();
        fs.sync_dir("").unwrap();
        f.sync(SyncKind::Full).unwrap();
        assert_eq!(
            fs.crash(CrashPlan::KeepPrefix { ops: 0 }).contents("b"),
            Some(b"a".to_vec())
        );
    }

    #[test]
    fn paged_contents_behave_like_a_vec() {
        let mut paged = PagedFile::default();
        let mut plain: Vec<u8> = Vec::new();
        let mut rng = 7u64;
        for _ in 0..300 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (rng >> 33) as usize % 20_000;
            let len = (rng >> 20) as usize % 9_000;
            if rng.is_multiple_of(5) {
                paged.resize(at);
                plain.resize(at, 0);
            } else {
                let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ rng) as u8).collect();
                paged.write(at, &data);
                if plain.len() < at + len {
                    plain.resize(at + len, 0);
                }
                plain[at..at + len].copy_from_slice(&data);
            }
            assert_eq!(paged.to_vec(), plain);
        }
    }

    #[test]
    fn boundaries_rebuild_the_past() {
        let fs = FaultFs::new();
        fs.record_boundaries();
        let f = write(&fs, "a", 0, b"x");
        f.sync(SyncKind::Full).unwrap();
        fs.sync_dir("").unwrap();
        assert_eq!(fs.boundaries(), 5); // before, open, write, sync, sync-dir
        assert_eq!(
            fs.crash_at(2, CrashPlan::KeepPrefix { ops: 0 })
                .contents("a"),
            None
        );
        assert_eq!(
            fs.crash_at(4, CrashPlan::KeepPrefix { ops: 0 })
                .contents("a"),
            Some(b"x".to_vec())
        );
    }
}
