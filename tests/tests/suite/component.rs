//! The built components' contracts: what each imports and exports (what `wasm-tools component
//! wit` would show), read from the embedded binaries themselves.

use stele_host::runtime::{COMPONENT_ASYNC_WASM, COMPONENT_WASM, Runtime};
use wasmtime::component::Component;

fn imports_exports(wasm: &[u8]) -> (Vec<String>, Vec<String>) {
    let engine = Runtime::get().unwrap().engine();
    let component = Component::new(engine, wasm).unwrap();
    let ty = component.component_type();
    let imports = ty
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let exports = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    (imports, exports)
}

/// Rust's std on wasm32-wasip2 brings wasi:io and wasi:cli (and may bring wasi:random or
/// wasi:clocks); the only storage is Stele's own import: no wasi:filesystem, no wasi:sockets.
fn assert_only_stele_storage(imports: &[String], stele_imports: &[&str]) {
    for want in stele_imports {
        assert!(
            imports.iter().any(|i| i == want),
            "missing import {want}: {imports:?}"
        );
    }
    for import in imports {
        let allowed = stele_imports.contains(&import.as_str())
            || ["wasi:io/", "wasi:cli/", "wasi:random/", "wasi:clocks/"]
                .iter()
                .any(|p| import.starts_with(p));
        assert!(allowed, "unexpected import {import}");
    }
}

#[test]
fn plain_component_exports_wal_and_journal_and_imports_only_vfs_and_std_wasi() {
    let (imports, mut exports) = imports_exports(COMPONENT_WASM);
    println!("plain imports: {imports:?}\nplain exports: {exports:?}");
    exports.sort();
    assert_eq!(
        exports,
        vec![
            "stele:log/journal@0.9.0".to_owned(),
            "stele:log/push-log@0.9.0".to_owned(),
            "stele:log/wal@0.9.0".to_owned()
        ]
    );
    assert_only_stele_storage(&imports, &["stele:log/vfs@0.9.0"]);
}

#[test]
fn async_component_adds_the_async_exports_and_vfs_async() {
    let (imports, mut exports) = imports_exports(COMPONENT_ASYNC_WASM);
    println!("async imports: {imports:?}\nasync exports: {exports:?}");
    exports.sort();
    assert_eq!(
        exports,
        vec![
            "stele:log/journal-async@0.9.0".to_owned(),
            "stele:log/journal@0.9.0".to_owned(),
            "stele:log/push-log-async@0.9.0".to_owned(),
            "stele:log/push-log@0.9.0".to_owned(),
            "stele:log/wal-async@0.9.0".to_owned(),
            "stele:log/wal@0.9.0".to_owned()
        ]
    );
    assert_only_stele_storage(
        &imports,
        &["stele:log/vfs@0.9.0", "stele:log/vfs-async@0.9.0"],
    );
}
