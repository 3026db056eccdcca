//! A tenant's quota at a typed handle: [`with_quota`] puts a handle's [`Vfs`] under the
//! [`SandboxLimits::quota`] it was opened with, and [`Pacer`] keeps a tenant to its rates before
//! a call reaches the engine.
//!
//! [`Pacer`]:
//! It asks the handle's [`Vfs`] ([`Vfs::throttle_wait`]): a tenant in debt waits, on the
//! caller's own thread or task (never on a shared worker, so a throttled tenant delays no one
//! else), up to its `throttle_delay_max`; past it the call is refused with [`Throttled`] before
//! anything is staged. Over a [`Vfs`] without a quota it holds nothing and costs a branch.
//! Generic: it names no facet.

use std::sync::Arc;
use std::time::Duration;

use stele::vfs::{QuotaStats, Throttled, Vfs, VfsError};

use crate::fs::QuotaVfs;

use crate::sandbox::SandboxLimits;

/// `vfs` under `limits.quota` when it sets a bound (a [`QuotaVfs`] of this handle's own,
/// counting every file under `vfs`'s root), else `vfs` itself.
///
/// # Errors
/// A listing or opening error of the quota's first walk.
pub(crate) fn with_quota(
    vfs: Arc<dyn Vfs>,
    limits: &SandboxLimits,
) -> Result<Arc<dyn Vfs>, VfsError> {
    if !limits.quota.is_bounded() {
        return Ok(vfs);
    }
    Ok(Arc::new(QuotaVfs::new(vfs, limits.quota)?))
}

/// The pacing of one handle's writing calls. Cloning shares it.
#[derive(Clone, Default)]
pub(crate) struct Pacer(Option<Arc<dyn Vfs>>);

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pacer").field(&self.0.is_some()).finish()
    }
}

impl Pacer {
    /// Paces by `vfs`'s quota, if it has one.
    pub(crate) fn over(vfs: &Arc<dyn Vfs>) -> Pacer {
        Pacer(vfs.quota_stats().is_some().then(|| Arc::clone(vfs)))
    }

    fn wait(&self) -> Result<Duration, Throttled> {
        let Some(vfs) = &self.0 else {
            return Ok(Duration::ZERO);
        };
        match vfs.throttle_wait() {
            Ok(wait) => Ok(wait),
            Err(VfsError::Throttled(throttled)) => Err(throttled),
            // A quota answers only `Throttled`; any other answer is no reason to refuse.
            Err(_) => Ok(Duration::ZERO),
        }
    }

    /// The quota's figures, when the handle's storage has a quota.
    pub(crate) fn stats(&self) -> Option<QuotaStats> {
        self.0.as_ref().and_then(|vfs| vfs.quota_stats())
    }

    /// Waits, on this thread, as long as the tenant's rates ask, or refuses.
    pub(crate) fn pace_blocking(&self) -> Result<(), Throttled> {
        let wait = self.wait()?;
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(())
    }

    /// [`Self::pace_blocking`] for a task: waits without holding a thread.
    pub(crate) async fn pace(&self) -> Result<(), Throttled> {
        let wait = self.wait()?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }
}
