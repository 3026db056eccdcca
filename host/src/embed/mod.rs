//! The WIT boundary: what `bindgen!` generates from `wit/` ([`bindings`]), the `stele:log/vfs`
//! imports served to a guest from any [`stele::vfs::Vfs`] ([`imports`]), and the conversions of
//! the WIT types every facet shares ([`convert`]), and the lane where the async imports'
//! posted I/O can run on the shared worker threads ([`io_lane`], on `crate::workers`). An
//! embedder's own store uses this folder alone. `bindings` and `imports` name each other (the generated resource types are
//! `imports`' own, as in wasmtime-wasi); nothing here imports the sandbox
//! or a facet.

pub mod bindings;
pub(crate) mod convert;
pub mod imports;
pub(crate) mod io_lane;
