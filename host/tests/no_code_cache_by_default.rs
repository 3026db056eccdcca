//! A library decides nothing for its embedder: without `Runtime::init`, the sandboxed modes
//! compile in memory and write no compiled code anywhere, whatever the environment says
//! (`STELE_CODE_CACHE`, `XDG_CACHE_HOME` and `HOME` are the `stele` CLI's business, not the
//! library's). The runtime is process-wide, so this suite is its own process, with one test.

use std::sync::Arc;

use stele::vfs::MemVfs;
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::{Mode, Wal};

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn the_default_runtime_reads_no_environment_and_writes_no_code() {
    let scratch = tempfile::tempdir().unwrap();
    let (home, xdg, named) = (
        scratch.path().join("home"),
        scratch.path().join("xdg"),
        scratch.path().join("named"),
    );
    for dir in [&home, &xdg, &named] {
        std::fs::create_dir(dir).unwrap();
    }
    // SAFETY: the only test of this process, before it starts any thread of its own.
    unsafe {
        std::env::set_var("HOME", &home);
        std::env::set_var("XDG_CACHE_HOME", &xdg);
        std::env::set_var("STELE_CODE_CACHE", &named);
    }

    let vfs = Arc::new(MemVfs::new());
    for mode in [Mode::Sandboxed, Mode::SandboxedPlain] {
        let options = WalOptions::single_file(DurabilityPolicy::FullSync);
        let (wal, _) = Wal::open(vfs.clone(), mode.name(), options, mode).unwrap();
        assert_eq!(wal.commit_durable(1, b"uncached").unwrap().0, 0);
    }
    assert_eq!(
        files_under(scratch.path()),
        Vec::<std::path::PathBuf>::new()
    );
}
