//! The [`VfsError`](crate::vfs::VfsError) ↔ WIT `vfs-error` mapping, written once for both
//! sides of the boundary. The guest (`guest/vfs.rs`, over wit-bindgen's types) and the host
//! (`stele-host`'s `embed/imports.rs`, over wasmtime's) each generate their own Rust type from
//! the same WIT, with the same variants, so the mapping is a macro each side instantiates with
//! its generated type's path. A variant added to one side but not the other fails to compile
//! on that side, so the two cannot drift apart.

/// Defines `to_wit(VfsError) -> $wit` and `from_wit($wit) -> VfsError` in the calling module,
/// where `$wit` is that side's generated `vfs-error` type and `$quota` its `quota-exceeded`
/// record.
#[doc(hidden)]
#[macro_export]
macro_rules! vfs_error_wit_conversions {
    ($wit:ty, $quota:ty) => {
        /// The engine's quota refusal as the WIT record.
        #[allow(dead_code)]
        pub(crate) fn quota_to_wit(refusal: $crate::vfs::QuotaExceeded) -> $quota {
            type Record = $quota;
            Record {
                limit: refusal.limit,
                used: refusal.used,
                requested: refusal.requested,
            }
        }

        /// The WIT record as the engine's quota refusal.
        #[allow(dead_code)]
        pub(crate) fn quota_from_wit(refusal: $quota) -> $crate::vfs::QuotaExceeded {
            $crate::vfs::QuotaExceeded {
                limit: refusal.limit,
                used: refusal.used,
                requested: refusal.requested,
            }
        }

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
                VfsError::QuotaExceeded(refusal) => {
                    Wit::QuotaExceeded((refusal.limit, refusal.used, refusal.requested))
                }
                VfsError::Throttled(throttled) => Wit::Throttled(
                    u64::try_from(throttled.retry_after.as_nanos()).unwrap_or(u64::MAX),
                ),
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
                Wit::QuotaExceeded((limit, used, requested)) => {
                    VfsError::QuotaExceeded($crate::vfs::QuotaExceeded {
                        limit,
                        used,
                        requested,
                    })
                }
                Wit::Throttled(retry_after_ns) => VfsError::Throttled($crate::vfs::Throttled {
                    retry_after: std::time::Duration::from_nanos(retry_after_ns),
                }),
                // A condition a later version of the contract added: a failure of this call,
                // with the peer's message, which is what `Io` carries.
                Wit::Other(m) => VfsError::Io(m),
            }
        }
    };
}
