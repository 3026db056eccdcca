//! Passes the components `stele-components` made (its `links` metadata) to the bench and its
//! test: the bench embeds the WASI build and the composed example plugin, and the test checks
//! the sizes the components table prints.

fn main() {
    for name in [
        "STELE_WASM",
        "STELE_ASYNC_WASM",
        "STELE_WASI_WASM",
        "STELE_EXAMPLE_PLUGIN_WASM",
    ] {
        let key = format!("DEP_STELE_COMPONENTS_{name}");
        println!("cargo:rerun-if-env-changed={key}");
        let path = std::env::var(&key).unwrap_or_else(|_| {
            panic!("stele-components' build script sets {key} (links metadata) in a checkout")
        });
        println!("cargo:rustc-env={name}={path}");
    }
}
