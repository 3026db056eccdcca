//! `Runtime::init_with_engine`: Stele's typed API runs on the embedder's engine. A process-wide
//! runtime, so this suite is its own process.

use std::sync::Arc;

use stele::vfs::MemVfs;
use stele::wal::{DurabilityPolicy, WalOptions};
use stele_host::runtime::Runtime;
use stele_host::wasmtime::{Config, Engine};
use stele_host::{Mode, SandboxError, Wal, read_wal};

#[test]
fn the_typed_api_runs_on_the_embedders_engine_and_a_second_init_is_refused() {
    // An engine without the async ABI cannot compile the async build: refused, and not kept.
    let mut plain = Config::new();
    plain.wasm_component_model_async(false);
    let refused = Runtime::init_with_engine(Engine::new(&plain).unwrap());
    assert!(
        matches!(refused, Err(SandboxError::Load(_))),
        "{:?}",
        refused.err()
    );

    let engine = Engine::new(&Runtime::default_config()).unwrap();
    let runtime = Runtime::init_with_engine(engine.clone()).unwrap();
    assert!(Engine::same(runtime.engine(), &engine));
    assert!(Engine::same(Runtime::get().unwrap().engine(), &engine));

    let vfs = Arc::new(MemVfs::new());
    for mode in [Mode::Sandboxed, Mode::SandboxedPlain] {
        let path = format!("{}.wal", mode.name());
        let options = WalOptions::single_file(DurabilityPolicy::FullSync);
        let (wal, _) = Wal::open(vfs.clone(), &path, options, mode).unwrap();
        assert_eq!(wal.commit_durable(1, b"on your engine").unwrap().0, 0);
        drop(wal);
        let (records, _) = read_wal(vfs.clone(), &path, Mode::Native).unwrap();
        assert_eq!(&records[0].payload[..], b"on your engine");
    }

    let again = Runtime::init_with_engine(Engine::new(&Runtime::default_config()).unwrap());
    assert!(
        matches!(again, Err(SandboxError::AlreadyInitialized)),
        "{:?}",
        again.err()
    );
}
