//! The model behind [`super::FaultFs`]: durable and volatile state per file (paged contents)
//! and per name, the ordered list of volatile operations, and what a crash keeps of them
//! ([`CrashPlan`]). Plain data, deterministic; the `Vfs` calls that feed it are in `super`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use stele::vfs::parent_dir;

/// The granularity at which a crash may tear a write: the classic disk sector. A torn write
/// keeps a prefix of the sectors it covers.
pub const SECTOR_BYTES: u64 = 512;

/// Which volatile operations survive a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrashPlan {
    /// The first `ops` volatile operations survive, whole. `0` keeps none; the list's length
    /// keeps all.
    KeepPrefix {
        /// How many of the volatile operations, in issue order, survive.
        ops: usize,
    },
    /// The first `ops` survive whole, and of the next one, which is a write, only its first
    /// `sectors` sectors (`1 <= sectors < ` the sectors it covers).
    KeepPrefixTorn {
        /// How many volatile operations survive whole.
        ops: usize,
        /// How many leading sectors of the next write survive.
        sectors: u64,
    },
}

#[derive(Clone, Debug)]
pub(super) enum Volatile {
    Write {
        file: u64,
        offset: u64,
        data: Arc<[u8]>,
    },
    SetLen {
        file: u64,
        len: u64,
    },
    Create {
        path: String,
        file: u64,
    },
    Rename {
        from: String,
        to: String,
    },
    Remove {
        path: String,
    },
}

impl Volatile {
    pub(super) fn file(&self) -> Option<u64> {
        match self {
            Volatile::Write { file, .. } | Volatile::SetLen { file, .. } => Some(*file),
            _ => None,
        }
    }

    pub(super) fn touches_dir(&self, dir: &str) -> bool {
        match self {
            Volatile::Create { path, .. } | Volatile::Remove { path } => parent_dir(path) == dir,
            Volatile::Rename { from, to } => parent_dir(from) == dir || parent_dir(to) == dir,
            _ => false,
        }
    }
}

/// The sector-aligned pieces a write of `len` bytes at `offset` covers.
pub(super) fn sector_pieces(offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut pieces = Vec::new();
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let next = ((at / SECTOR_BYTES) + 1) * SECTOR_BYTES;
        let piece_end = next.min(end);
        pieces.push((at, piece_end));
        at = piece_end;
    }
    pieces
}

/// Bytes per page of a [`PagedFile`]. Snapshots share pages, so a write copies only the pages
/// it touches: recording a boundary after every operation costs pointers, not whole files.
pub(super) const PAGE_BYTES: usize = 4096;

/// File contents as copy-on-write pages.
#[derive(Clone, Debug, Default)]
pub(super) struct PagedFile {
    pub(super) len: usize,
    pub(super) pages: Vec<Arc<[u8; PAGE_BYTES]>>,
}

impl PagedFile {
    pub(super) fn resize(&mut self, len: usize) {
        if len < self.len {
            // Zero the cut part of the last kept page, so a later extension reads zeros.
            let page = len / PAGE_BYTES;
            if !len.is_multiple_of(PAGE_BYTES) && page < self.pages.len() {
                Arc::make_mut(&mut self.pages[page])[len % PAGE_BYTES..].fill(0);
            }
            self.pages.truncate(len.div_ceil(PAGE_BYTES));
        } else {
            self.pages
                .resize_with(len.div_ceil(PAGE_BYTES), || Arc::new([0u8; PAGE_BYTES]));
        }
        self.len = len;
    }

    pub(super) fn write(&mut self, offset: usize, data: &[u8]) {
        let end = offset + data.len();
        if end > self.len {
            self.resize(end);
        }
        let mut at = offset;
        while at < end {
            let (page, within) = (at / PAGE_BYTES, at % PAGE_BYTES);
            let n = (PAGE_BYTES - within).min(end - at);
            Arc::make_mut(&mut self.pages[page])[within..within + n]
                .copy_from_slice(&data[at - offset..at - offset + n]);
            at += n;
        }
    }

    pub(super) fn read(&self, offset: usize, buf: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = buf.len().min(self.len - offset);
        let mut at = offset;
        while at < offset + n {
            let (page, within) = (at / PAGE_BYTES, at % PAGE_BYTES);
            let k = (PAGE_BYTES - within).min(offset + n - at);
            buf[at - offset..at - offset + k]
                .copy_from_slice(&self.pages[page][within..within + k]);
            at += k;
        }
        n
    }

    pub(super) fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        self.read(0, &mut out);
        out
    }
}

pub(super) fn write_into(contents: &mut PagedFile, offset: u64, data: &[u8]) {
    contents.write(offset as usize, data);
}

/// The filesystem model: durable state, live (what reads see) state, and the volatile list
/// that separates them.
#[derive(Clone, Debug, Default)]
pub(super) struct Model {
    pub(super) durable_files: HashMap<u64, PagedFile>,
    pub(super) durable_names: BTreeMap<String, u64>,
    pub(super) live_files: HashMap<u64, PagedFile>,
    pub(super) live_names: BTreeMap<String, u64>,
    pub(super) volatile: Vec<Volatile>,
    pub(super) next_id: u64,
}

pub(super) fn apply(
    files: &mut HashMap<u64, PagedFile>,
    names: &mut BTreeMap<String, u64>,
    op: &Volatile,
) {
    match op {
        Volatile::Write { file, offset, data } => {
            write_into(files.entry(*file).or_default(), *offset, data)
        }
        Volatile::SetLen { file, len } => files.entry(*file).or_default().resize(*len as usize),
        Volatile::Create { path, file } => {
            names.insert(path.clone(), *file);
            files.entry(*file).or_default();
        }
        Volatile::Rename { from, to } => {
            if let Some(id) = names.remove(from) {
                names.insert(to.clone(), id);
            }
        }
        Volatile::Remove { path } => {
            names.remove(path);
        }
    }
}

impl Model {
    pub(super) fn crash_plans(&self) -> Vec<CrashPlan> {
        let mut plans: Vec<CrashPlan> = (0..=self.volatile.len())
            .map(|ops| CrashPlan::KeepPrefix { ops })
            .collect();
        for (ops, op) in self.volatile.iter().enumerate() {
            if let Volatile::Write { offset, data, .. } = op {
                let pieces = sector_pieces(*offset, data.len() as u64).len() as u64;
                plans.extend((1..pieces).map(|sectors| CrashPlan::KeepPrefixTorn { ops, sectors }));
            }
        }
        plans
    }

    pub(super) fn crashed(&self, plan: CrashPlan) -> Model {
        let mut files = self.durable_files.clone();
        let mut names = self.durable_names.clone();
        let (whole, torn) = match plan {
            CrashPlan::KeepPrefix { ops } => (ops.min(self.volatile.len()), None),
            CrashPlan::KeepPrefixTorn { ops, sectors } => {
                (ops.min(self.volatile.len()), Some(sectors))
            }
        };
        for op in &self.volatile[..whole] {
            apply(&mut files, &mut names, op);
        }
        if let (Some(sectors), Some(Volatile::Write { file, offset, data })) =
            (torn, self.volatile.get(whole))
        {
            let pieces = sector_pieces(*offset, data.len() as u64);
            let keep = sectors.min(pieces.len() as u64) as usize;
            if keep > 0 {
                let landed = pieces[keep - 1].1 - offset;
                write_into(
                    files.entry(*file).or_default(),
                    *offset,
                    &data[..landed as usize],
                );
            }
        }
        // Only reachable inodes matter after the crash.
        files.retain(|id, _| names.values().any(|n| n == id));
        Model {
            durable_files: files.clone(),
            durable_names: names.clone(),
            live_files: files,
            live_names: names,
            volatile: Vec::new(),
            next_id: self.next_id,
        }
    }

    pub(super) fn sync_file(&mut self, file: u64) {
        let mut durable = self.durable_files.remove(&file).unwrap_or_default();
        self.volatile.retain(|op| {
            if op.file() == Some(file) {
                apply_file_op(&mut durable, op);
                false
            } else {
                true
            }
        });
        self.durable_files.insert(file, durable);
    }

    pub(super) fn drop_volatile_writes(&mut self, file: u64) {
        self.volatile.retain(|op| op.file() != Some(file));
    }

    pub(super) fn sync_dir(&mut self, dir: &str) {
        let mut durable_names = std::mem::take(&mut self.durable_names);
        let mut files = std::mem::take(&mut self.durable_files);
        self.volatile.retain(|op| {
            if op.touches_dir(dir) {
                apply(&mut files, &mut durable_names, op);
                false
            } else {
                true
            }
        });
        self.durable_names = durable_names;
        self.durable_files = files;
    }
}

pub(super) fn apply_file_op(contents: &mut PagedFile, op: &Volatile) {
    match op {
        Volatile::Write { offset, data, .. } => write_into(contents, *offset, data),
        Volatile::SetLen { len, .. } => contents.resize(*len as usize),
        _ => unreachable!("only file ops are applied to a file"),
    }
}
