//! The built component's contract: what it imports and exports (what `wasm-tools component
//! wit` would show), read from the embedded binary itself.

use stele_host::runtime::{COMPONENT_WASM, Runtime};
use wasmtime::component::Component;

#[test]
fn component_exports_wal_and_imports_only_vfs_and_std_wasi() {
    let engine = Runtime::get().unwrap().engine();
    let component = Component::new(engine, COMPONENT_WASM).unwrap();
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    println!("imports: {imports:?}\nexports: {exports:?}");

    assert_eq!(exports, vec!["stele:log/wal@0.1.0".to_owned()]);
    assert!(
        imports.contains(&"stele:log/vfs@0.1.0".to_owned()),
        "{imports:?}"
    );
    // Rust's std on wasm32-wasip2 brings wasi:io, wasi:cli, wasi:random (and may bring
    // wasi:clocks); nothing else, and in particular no wasi:filesystem or wasi:sockets.
    for import in &imports {
        let allowed = import == "stele:log/vfs@0.1.0"
            || ["wasi:io/", "wasi:cli/", "wasi:random/", "wasi:clocks/"]
                .iter()
                .any(|p| import.starts_with(p));
        assert!(allowed, "unexpected import {import}");
        assert!(!import.starts_with("wasi:filesystem") && !import.starts_with("wasi:sockets"));
    }
}
