//! Host-side [`stele::vfs::Vfs`] backends.
//!
//! - [`RealFs`]: the real filesystem, confined to one root directory with cap-std, with real
//!   `fdatasync`, `fsync`, rename and directory fsync.

mod real;

pub use real::{NAME_BYTES_MAX, PATH_BYTES_MAX, RealFs};
