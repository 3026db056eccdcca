//! The [`VfsError`](crate::vfs::VfsError) ↔ WIT `vfs-error` mapping, written once for both
//! sides of the boundary. The guest (`guest/vfs.rs`, over wit-bindgen's types) and the host
//! (`stele-host`'s `embed/imports.rs`, over wasmtime's) each generate their own Rust type from
//! the same WIT, with the same variants, so the mapping is a macro each side instantiates with
//! its generated type's path. A variant added to one side but not the other fails to compile
//! on that side, so the two cannot drift apart.

/// Defines `to_wit(VfsError) -> $wit` and `from_wit($wit) -> VfsError` in the calling module,
/// where `$wit` is that side's generated `vfs-error` type.
#[doc(hidden)]
#[macro_export]
macro_rules! vfs_error_wit_conversions {
    ($wit:ty) => {
        /// The engine's error as the WIT `vfs-error` that crosses the boundary.
        pub(crate) fn to_wit(err: $crate::vfs::VfsError) -> $wit {
            use $crate::vfs::VfsError;
            type Wit = $wit;
            // `VfsError` is `#[non_exhaustive]`: outside the engine's crate a variant added
            // later still crosses, as `other` with its message, until the WIT names it.
            #[allow(unreachable_patterns)]
            match err {
                VfsError::NotFound => Wit::NotFound,
                VfsError::AlreadyExists => Wit::AlreadyExists,
                VfsError::NoSpace => Wit::NoSpace,
                VfsError::InvalidPath(p) => Wit::InvalidPath(p),
                VfsError::PermissionDenied => Wit::PermissionDenied,
                VfsError::TooManyHandles => Wit::TooManyHandles,
                VfsError::InvalidInput(m) => Wit::InvalidInput(m),
                VfsError::Io(m) => Wit::Io(m),
                VfsError::Locked(p) => Wit::Locked(p),
                other => Wit::Other(other.to_string()),
            }
        }

        /// The WIT `vfs-error` that crossed the boundary, as the engine's error.
        pub(crate) fn from_wit(err: $wit) -> $crate::vfs::VfsError {
            use $crate::vfs::VfsError;
            type Wit = $wit;
            match err {
                Wit::NotFound => VfsError::NotFound,
                Wit::AlreadyExists => VfsError::AlreadyExists,
                Wit::NoSpace => VfsError::NoSpace,
                Wit::InvalidPath(p) => VfsError::InvalidPath(p),
                Wit::PermissionDenied => VfsError::PermissionDenied,
                Wit::TooManyHandles => VfsError::TooManyHandles,
                Wit::InvalidInput(m) => VfsError::InvalidInput(m),
                Wit::Io(m) => VfsError::Io(m),
                Wit::Locked(p) => VfsError::Locked(p),
                // A condition a later version of the contract added: a failure of this call,
                // with the peer's message, which is what `Io` carries.
                Wit::Other(m) => VfsError::Io(m),
            }
        }
    };
}
