//! The compiled-code cache is the embedder's choice: off unless `Runtime::init` names a
//! directory, and then machine code lands there and nowhere else. The runtime is process-wide,
//! so this suite is its own process, with one test.

use std::sync::Arc;

use stele::vfs::MemVfs;
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::runtime::{Runtime, RuntimeOptions};
use stele_host::{Mode, Wal, read_wal};

fn cwasm_files(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".cwasm"))
        .collect();
    names.sort();
    names
}

#[test]
fn compiled_code_is_cached_only_where_the_embedder_says() {
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("code-cache");
    let runtime =
        Runtime::init(RuntimeOptions::default().with_code_cache_dir(Some(cache.clone()))).unwrap();
    // Lazy: making the runtime compiles (and writes) nothing.
    assert!(!cache.exists(), "init wrote {:?}", cwasm_files(&cache));
    assert!(Runtime::get().is_ok_and(|got| std::ptr::eq(got, runtime)));

    let vfs = Arc::new(MemVfs::new());
    for mode in [Mode::Sandboxed, Mode::SandboxedPlain] {
        let path = format!("{}.wal", mode.name());
        let options = WalOptions::single_file(DurabilityPolicy::FullSync);
        let (wal, _) = Wal::open(vfs.clone(), &path, options, mode).unwrap();
        wal.commit_durable(1, b"cached").unwrap();
        drop(wal);
        let (records, _) = read_wal(vfs.clone(), &path, Mode::Native).unwrap();
        assert_eq!(&records[0].payload[..], b"cached");
    }

    // One file per build, named by the build, in the directory given, made private.
    let files = cwasm_files(&cache);
    assert_eq!(files.len(), 2, "{files:?}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        files[0].starts_with(&format!("stele-{version}-")),
        "{files:?}"
    );
    assert!(
        files[1].starts_with(&format!("stele-async-{version}-")),
        "{files:?}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }
}
