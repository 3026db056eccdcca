//! [`FaultStore`]: an [`ObjectStore`] over another that fails on request, for crash tests.
//!
//! Each rule names a key fragment and fires on the next request whose key holds it:
//! - [`Fault::FailPut`]: the put is refused and nothing is stored;
//! - [`Fault::LosePutReply`]: the put is applied, then reported failed (a reply lost on the
//!   way back, after which object_store or the caller retries);
//! - [`FaultStore::set_down`]: every request fails until it is brought back up.
//!
//! [`FaultStore::overwrite`] replaces an object's bytes behind the archive's back (a flipped
//! bit in the store).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// One injected failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Refuse the next put whose key holds this fragment; nothing is stored.
    FailPut(String),
    /// Apply the next put whose key holds this fragment, then report it failed.
    LosePutReply(String),
}

/// See the module doc.
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    faults: Mutex<Vec<Fault>>,
    down: AtomicBool,
    puts: AtomicU64,
    fired: AtomicU64,
}

impl fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultStore",
        source: what.to_owned().into(),
    }
}

impl FaultStore {
    /// A store that passes everything to `inner` until told otherwise.
    pub fn new(inner: Arc<dyn ObjectStore>) -> FaultStore {
        FaultStore {
            inner,
            faults: Mutex::new(Vec::new()),
            down: AtomicBool::new(false),
            puts: AtomicU64::new(0),
            fired: AtomicU64::new(0),
        }
    }

    /// Queues a fault; faults fire in the order queued, each once.
    pub fn inject(&self, fault: Fault) {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(fault);
    }

    /// Drops every queued fault that has not fired.
    pub fn clear(&self) {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Takes the store down (every request fails) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Puts that reached the inner store.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::SeqCst)
    }

    /// Faults that fired, the store being down not counted.
    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::SeqCst)
    }

    /// Faults queued and not yet fired.
    pub fn pending(&self) -> usize {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Replaces the object at `location` with `bytes`, as damage in the store would.
    pub async fn overwrite(&self, location: &Path, bytes: Vec<u8>) -> Result<()> {
        self.inner.put(location, bytes.into()).await.map(|_| ())
    }

    fn check_up(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(injected("the store is down"))
        } else {
            Ok(())
        }
    }

    /// The fault the put of `location` meets, taken off the queue.
    fn take_put_fault(&self, location: &Path) -> Option<Fault> {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let key = location.as_ref();
        let at = faults.iter().position(|fault| match fault {
            Fault::FailPut(fragment) | Fault::LosePutReply(fragment) => key.contains(fragment),
        })?;
        self.fired.fetch_add(1, Ordering::SeqCst);
        Some(faults.remove(at))
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.check_up()?;
        match self.take_put_fault(location) {
            Some(Fault::FailPut(_)) => Err(injected("put refused")),
            Some(Fault::LosePutReply(_)) => {
                self.puts.fetch_add(1, Ordering::SeqCst);
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected("put applied, reply lost"))
            }
            None => {
                self.puts.fetch_add(1, Ordering::SeqCst);
                self.inner.put_opts(location, payload, opts).await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.check_up()?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.check_up()?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        if self.check_up().is_err() {
            return futures::stream::once(async { Err(injected("the store is down")) }).boxed();
        }
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        if self.check_up().is_err() {
            return futures::stream::once(async { Err(injected("the store is down")) }).boxed();
        }
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        if self.check_up().is_err() {
            return futures::stream::once(async { Err(injected("the store is down")) }).boxed();
        }
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.check_up()?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.check_up()?;
        self.inner.copy_opts(from, to, options).await
    }
}
