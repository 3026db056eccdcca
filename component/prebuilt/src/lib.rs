//! The Stele engine's components and WIT, prebuilt, so that a host embeds them without a
//! `wasm32-wasip2` toolchain. `stele-host` runs them; any other component-model host can too.
//!
//! | constant | world | for |
//! |---|---|---|
//! | [`STELE_WASM`] | `stele:log/engine` | any component-model host: plain WASI 0.2, synchronous exports; imports `stele:log/vfs` |
//! | [`STELE_ASYNC_WASM`] | `stele:log/engine-async` | hosts with the component model's async ABI: concurrent durable commits on one instance share syncs |
//! | [`STELE_WASI_WASM`] | `stele.wasm` with its `vfs` served by `wasi:filesystem` | any WASI 0.2 host that preopens a directory, with no Stele code |
//!
//! The bytes come from the engine's sources at the same version, built reproducibly: in a
//! Stele checkout `build.rs` builds them; a package carries them, made by
//! `component/prebuilt/package.sh`, which checks that they equal a fresh build.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The plain WASI 0.2 engine component (world `stele:log/engine`).
pub static STELE_WASM: &[u8] = include_bytes!(env!("STELE_WASM"));

/// The async-ABI engine component (world `stele:log/engine-async`).
pub static STELE_ASYNC_WASM: &[u8] = include_bytes!(env!("STELE_ASYNC_WASM"));

/// `stele.wasm` composed with the WASI-filesystem adapter: its only storage import is
/// `wasi:filesystem`, rooted at the first preopened directory.
pub static STELE_WASI_WASM: &[u8] = include_bytes!(env!("STELE_WASI_WASM"));

/// The WIT package `stele:log` these components implement, file by file (name, text): what
/// a host in another language, or a guest that imports `stele:log/wal`, generates its
/// bindings from.
pub static WIT_FILES: &[(&str, &str)] = &[
    ("async.wit", include_str!("../wit/async.wit")),
    ("journal.wit", include_str!("../wit/journal.wit")),
    ("push-log.wit", include_str!("../wit/push-log.wit")),
    ("vfs.wit", include_str!("../wit/vfs.wit")),
    ("wal.wit", include_str!("../wit/wal.wit")),
    ("world.wit", include_str!("../wit/world.wit")),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_is_a_component_and_every_wit_file_is_listed() {
        // The component-model preamble: magic, then layer 1 (a component, not a core module).
        for wasm in [STELE_WASM, STELE_ASYNC_WASM, STELE_WASI_WASM] {
            assert_eq!(&wasm[..8], b"\0asm\x0d\0\x01\0");
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".wit"))
            .collect();
        on_disk.sort();
        let listed: Vec<&str> = WIT_FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(on_disk, listed);
    }
}
