//! Atomic replacement of a file: stage, fsync, rename, fsync the directory. One implementation,
//! used by the journal's and the push log's compactions and by the WAL's checkpoint.
//!
//! The live file is never written in place, so a crash at any byte leaves the old file or the
//! new one under the target's name. The steps are typed ([`Staged`] → [`Sealed`] →
//! [`Renamed`]), so none can be skipped or reordered, and a failure names its
//! [`ReplaceStage`]:
//! - before the rename (staging, its sync, the rename itself) the target is untouched; the
//!   staged file may be left behind, and the next replacement truncates it;
//! - after the rename, only the directory sync can fail: the target already names the new file,
//!   but a power loss could still bring the old one back. Whoever acknowledges anything in the
//!   file afterwards must sync the directory first.

use super::{DeviceIo, FileIo, OpenMode, SyncKind, VfsError, parent_dir};

/// The suffix of the file a compaction stages beside its target (`<path>.compacting`). A stray
/// one (a compaction that crashed before its rename) is never read, and the next compaction
/// truncates it.
pub const COMPACTING_SUFFIX: &str = ".compacting";

/// A step of a replacement, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReplaceStage {
    /// Creating and writing the staged file.
    Stage,
    /// Its fsync (`SyncKind::Full`: the file is new, its length must be durable too).
    SyncStaged,
    /// The rename over the target.
    Rename,
    /// The fsync of the directory that makes the rename durable.
    SyncDir,
}

impl ReplaceStage {
    /// Whether the target may already name the new file: true once the rename ran (a failed
    /// rename is not known to have left the name alone on every backend).
    pub fn target_may_be_replaced(self) -> bool {
        self >= ReplaceStage::Rename
    }
}

impl std::fmt::Display for ReplaceStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplaceStage::Stage => "staging the replacement",
            ReplaceStage::SyncStaged => "syncing the staged replacement",
            ReplaceStage::Rename => "renaming the replacement into place",
            ReplaceStage::SyncDir => "syncing the directory after the rename",
        })
    }
}

/// A replacement that failed at `stage`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{stage} failed")]
pub struct ReplaceError {
    /// The step that failed.
    pub stage: ReplaceStage,
    /// Its error.
    #[source]
    pub cause: VfsError,
}

impl ReplaceError {
    fn at(stage: ReplaceStage) -> impl FnOnce(VfsError) -> ReplaceError {
        move |cause| ReplaceError { stage, cause }
    }
}

/// The staged file, open for writing; nothing is durable yet.
#[derive(Debug)]
pub struct Staged<F> {
    file: F,
    staging: String,
    target: String,
}

/// The staged file, synced and closed; the target is untouched.
#[derive(Debug)]
#[must_use = "a sealed replacement does nothing until it is renamed"]
pub struct Sealed {
    staging: String,
    target: String,
}

/// The target names the new file; a directory sync makes that durable.
#[derive(Debug)]
#[must_use = "a rename is not durable until the directory is synced"]
pub struct Renamed {
    target: String,
}

/// Starts replacing `target`: creates (or truncates) `staging`, which must be in the same
/// directory, for the caller to write through [`Staged::file`].
pub fn begin<Io: DeviceIo>(
    io: &Io,
    staging: &str,
    target: &str,
) -> Result<Staged<Io::File>, ReplaceError> {
    let file = io
        .open(staging, OpenMode::Truncate)
        .map_err(ReplaceError::at(ReplaceStage::Stage))?;
    Ok(Staged {
        file,
        staging: staging.to_owned(),
        target: target.to_owned(),
    })
}

impl<F> Staged<F> {
    /// The staged file.
    pub fn file(&self) -> &F {
        &self.file
    }

    /// Writes `data` at `offset` of the staged file.
    pub async fn write_at<Io: FileIo<File = F>>(
        &self,
        io: &Io,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ReplaceError> {
        io.write_at(&self.file, offset, data)
            .await
            .map_err(ReplaceError::at(ReplaceStage::Stage))
    }

    /// Syncs the staged file (its data and its length) and closes it.
    pub async fn seal<Io: FileIo<File = F>>(self, io: &Io) -> Result<Sealed, ReplaceError> {
        io.sync(&self.file, SyncKind::Full)
            .await
            .map_err(ReplaceError::at(ReplaceStage::SyncStaged))?;
        Ok(Sealed {
            staging: self.staging,
            target: self.target,
        })
    }
}

impl Sealed {
    /// Renames the staged file over the target. From here the target may name the new file.
    pub fn rename<Io: DeviceIo>(self, io: &Io) -> Result<Renamed, ReplaceError> {
        io.vfs()
            .rename(&self.staging, &self.target)
            .map_err(ReplaceError::at(ReplaceStage::Rename))?;
        Ok(Renamed {
            target: self.target,
        })
    }
}

impl Renamed {
    /// Syncs the target's directory: the replacement survives power loss once this returns.
    pub async fn sync_dir<Io: DeviceIo>(self, io: &Io) -> Result<(), ReplaceError> {
        io.sync_dir(parent_dir(&self.target))
            .await
            .map_err(ReplaceError::at(ReplaceStage::SyncDir))
    }
}

/// Replaces `target` with a file holding `parts` (each at its offset), through `staging`: every
/// step above, in order. On `Ok` the new contents survive power loss. On an error before
/// [`ReplaceStage::Rename`], the staged file is removed (best effort) and the target is
/// untouched.
///
/// The staged file's room is reserved first ([`super::Vfs::reserve`]): under a disk quota
/// that has no room for it, this fails at [`ReplaceStage::Stage`] with
/// [`VfsError::QuotaExceeded`] before anything is created.
pub async fn replace_file<Io: DeviceIo>(
    io: &Io,
    staging: &str,
    target: &str,
    parts: &[(u64, &[u8])],
) -> Result<(), ReplaceError> {
    let len = parts
        .iter()
        .map(|(offset, data)| offset + data.len() as u64)
        .max()
        .unwrap_or(0);
    let room = io
        .vfs()
        .reserve(staging, len)
        .map_err(ReplaceError::at(ReplaceStage::Stage))?;
    let sealed = async {
        let staged = begin(io, staging, target)?;
        for (offset, data) in parts {
            staged.write_at(io, *offset, data).await?;
        }
        staged.seal(io).await
    }
    .await;
    // The staged file holds its bytes now, charged by its length: released before the rename,
    // which a quota refuses while the name it leaves is still reserved (see
    // `quota::ledger::DiskLedger::rename`).
    drop(room);
    let renamed = sealed.and_then(|sealed| sealed.rename(io));
    match renamed {
        Ok(renamed) => renamed.sync_dir(io).await,
        Err(error) => {
            // The staged file is unread garbage; the next replacement would truncate it anyway.
            let _ = io.vfs().remove(staging);
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::vfs::{MemVfs, ReadyIo, Vfs, complete_now};

    #[test]
    fn replace_file_swaps_contents_and_leaves_no_staging() {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let io = ReadyIo(vfs);
        mem.set_contents("j", b"old".to_vec());
        complete_now(replace_file(
            &io,
            "j.compacting",
            "j",
            &[(0, b"ne"), (2, b"w!")],
        ))
        .unwrap();
        assert_eq!(mem.contents("j").unwrap(), b"new!");
        assert!(mem.contents("j.compacting").is_none());
    }

    #[test]
    fn stages_order_and_say_when_the_target_may_be_replaced() {
        assert!(ReplaceStage::Stage < ReplaceStage::SyncStaged);
        assert!(ReplaceStage::SyncStaged < ReplaceStage::Rename);
        assert!(!ReplaceStage::SyncStaged.target_may_be_replaced());
        assert!(ReplaceStage::Rename.target_may_be_replaced());
        assert!(ReplaceStage::SyncDir.target_may_be_replaced());
    }
}
