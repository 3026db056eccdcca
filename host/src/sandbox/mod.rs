//! The sandbox: runs the engine's component in wasmtime, and serves one instance to many
//! callers. Generic: no file here names a facet. Each facet's session (`crate::wal::session`,
//! `crate::journal::session`, `crate::push_log::session`) implements `instance::Served` in its own
//! folder; this folder owns everything else. May import `crate::embed` (the bindings and the
//! imports it links) and `crate::workers` (the shared threads), and nothing of the facets.
//!
//! - [`runtime`]: the process's wasmtime engine, the compiled components, stores and their
//!   limits ([`SandboxLimits`]); [`code_cache`]: compiled code kept on disk;
//! - [`error`]: [`SandboxError`] and the sticky-failure rule; [`plain`]: one plain instance
//!   ([`PlainInstance`]);
//! - [`start`]: every async handle's start; [`store_driver`]: serves one instance to
//!   concurrent callers (who drives when, the dispatcher's turns); [`instance`]: the state they
//!   share (the session, its runs, where the instance is); [`drive`]: one caller's wait,
//!   driving the run when it can; [`wakes`]: the wakes both use; [`departures`]: a run waits
//!   for the threads it answered;
//! - [`posted_io`]: where a run's posted I/O (a guest's sync) runs: the caller's thread, its
//!   tokio worker, or the store's I/O lane on the shared worker threads (`crate::workers`);
//! - [`guest_calls`]: what every session shares: a caller's task and answer, and the loop
//!   that serves a run's tasks one after another.
//!
//! The figures behind each rule are in `docs/BENCHMARKS.md`, "The sandboxed driver".

pub mod code_cache;
pub(crate) mod departures;
mod drive;
pub(crate) mod error;
pub(crate) mod guest_calls;
pub(crate) mod instance;
pub(crate) mod plain;
mod poison;
pub(crate) mod posted_io;
pub mod runtime;
pub(crate) mod start;
pub(crate) mod store_driver;
mod wakes;

pub use error::SandboxError;
pub(crate) use plain::PlainInstance;
pub(crate) use poison::lock;
pub use runtime::SandboxLimits;
