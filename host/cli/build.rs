//! Passes the components `stele-host`'s build script built (its `links` metadata) to this
//! crate's code and tests: the bench embeds the WASI adapter build and the composed example
//! plugin, and the suites run them.

fn main() {
    for name in [
        "STELE_COMPONENT_WASM_EMBEDDED",
        "STELE_COMPONENT_ASYNC_WASM_EMBEDDED",
        "STELE_WASI_WASM",
        "STELE_EXAMPLE_PLUGIN_WASM",
    ] {
        let key = format!("DEP_STELE_COMPONENTS_{name}");
        println!("cargo:rerun-if-env-changed={key}");
        let path = std::env::var(&key)
            .unwrap_or_else(|_| panic!("stele-host's build script sets {key} (links metadata)"));
        println!("cargo:rustc-env={name}={path}");
    }
}
