//! [`PlainInstance`]: one instance of the plain component (`stele.wasm`) and the resource its
//! calls act on, for every facet's `SandboxedPlain` handle. Calls are serialized by the caller's
//! lock; the first trap is sticky.

use wasmtime::Store;

use super::error::{SandboxError, StickyFailure};
use super::runtime::{GuestState, trap_error};
use crate::embed::bindings;

/// One instance of the plain component and the resource its calls act on (a WAL writer, a push
/// log). A trap leaves the instance's state unknown, so the first one is sticky: every later
/// call gets the same error ([`SandboxError::Trapped`], or the limit's own variant).
pub(crate) struct PlainInstance {
    store: Store<GuestState>,
    /// Boxed: the generated bindings are large, and the enums holding an instance have small
    /// native variants.
    bindings: Box<bindings::SteleEngine>,
    resource: wasmtime::component::ResourceAny,
    trapped: StickyFailure,
}

impl std::fmt::Debug for PlainInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainInstance")
            .field("trapped", &self.trapped)
            .finish_non_exhaustive()
    }
}

impl PlainInstance {
    pub(crate) fn new(
        store: Store<GuestState>,
        bindings: bindings::SteleEngine,
        resource: wasmtime::component::ResourceAny,
    ) -> PlainInstance {
        PlainInstance {
            store,
            bindings: Box::new(bindings),
            resource,
            trapped: StickyFailure::default(),
        }
    }

    /// Runs one call; the outer `Err` is a trap (now, or an earlier one).
    pub(crate) fn call<R, E>(
        &mut self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &bindings::SteleEngine,
            wasmtime::component::ResourceAny,
        ) -> wasmtime::Result<Result<R, E>>,
    ) -> Result<Result<R, E>, SandboxError> {
        let (store, bindings, resource) = (&mut self.store, &self.bindings, self.resource);
        self.trapped.run(|| {
            store.data_mut().touch();
            call(store, bindings, resource).map_err(trap_error)
        })
    }
}
