//! Hands the examples the example plugin, which `stele-components` builds in a Stele checkout
//! (`DEP_STELE_COMPONENTS_STELE_EXAMPLE_PLUGIN_WASM`). A packaged `stele-host` has no examples
//! and no plugin: then this does nothing.

fn main() {
    const KEY: &str = "DEP_STELE_COMPONENTS_STELE_EXAMPLE_PLUGIN_WASM";
    println!("cargo:rerun-if-env-changed={KEY}");
    if let Ok(path) = std::env::var(KEY) {
        println!("cargo:rustc-env=STELE_EXAMPLE_PLUGIN_WASM={path}");
    }
}
