//! The component side (wasm32 only): the WIT bindings, a [`crate::vfs::Vfs`] over the
//! `stele:log/vfs` imports, and the `stele:log/wal` export over [`crate::wal::WalWriter`].
//!
//! This build is plain WASI 0.2: every export is synchronous, so the host serializes calls on
//! one instance and each durable commit syncs on its own. The engine code is the same as native.

mod vfs;
mod wal;

wit_bindgen::generate!({
    world: "engine",
    path: "../wit",
});

struct Component;

export!(Component);
