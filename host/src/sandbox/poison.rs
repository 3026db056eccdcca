//! [`lock`]: a mutex whose holder panicked is taken anyway. Every state behind the sandbox's
//! mutexes is whole between statements, and a panic there is already reported to its caller
//! ([`super::SandboxError::Panicked`]); refusing the lock would only stop the other callers.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
