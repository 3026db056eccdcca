//! The suites that need no process of their own, in one test binary: each file here was a
//! test binary once, and each binary linked wasmtime, cranelift and arrow again (tens of
//! seconds of CI's 2 cores apiece). A suite moves out to `tests/tests/<name>.rs` when it
//! needs the process to itself: a global allocator that counts (`journal_alloc`,
//! `push_log_scan_rss`, `replay_smoke`), process-wide measurements or limits (`tenants`,
//! `pooling`), or its own build (`packages`, `lean_engine`, `one_feature_set`).
//!
//! Run one suite with its module's name as the filter, for example
//! `cargo test --release -p stele-tests --test suite crash_matrix::`.

mod archive;
mod component;
mod crash_matrix;
mod fault_paths;
mod full_disk;
mod journal;
mod journal_crash_matrix;
mod model;
mod push_log;
mod push_log_crash_matrix;
mod push_log_pyarrow;
mod quota;
mod sandbox_boundary;
mod tenants_crash_matrix;
mod wal;
mod wal_async;
mod wal_segments;
mod wit_contract;
