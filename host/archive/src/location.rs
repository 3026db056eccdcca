//! [`ArchiveLocation`]: an object store and the prefix an archive lives under, opened from a
//! URL or built from any [`ObjectStore`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::ObjectStore;
use object_store::path::Path;

use crate::ArchiveError;

/// An archive's store and prefix. Cheap to clone: the store is shared.
#[derive(Clone, Debug)]
pub struct ArchiveLocation {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
    /// Requests made through this location and its clones (puts, gets, listings).
    requests: Arc<AtomicU64>,
}

impl ArchiveLocation {
    /// The archive under `prefix` (`/`-separated, no leading or trailing `/`; empty for the
    /// store's root) of `store`. `url` is how errors and reports name it.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, url: &str) -> ArchiveLocation {
        ArchiveLocation {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
            url: url.to_owned(),
            requests: Arc::default(),
        }
    }

    /// Opens an archive URL:
    /// - `file:///path/to/dir`: a local directory (created if missing);
    /// - `memory://`: a new, empty store in this process's memory (for tests and demos);
    /// - `s3://bucket/prefix`: Amazon S3 or any S3-compatible server, with region, endpoint
    ///   and keys from the usual `AWS_*` environment variables (`AWS_ENDPOINT_URL`,
    ///   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`); needs
    ///   the `aws` feature;
    /// - `gs://bucket/prefix` (`gcp` feature) and `az://container/prefix` (`azure` feature),
    ///   configured from their environment variables likewise.
    ///
    /// # Errors
    /// [`ArchiveError::BadUrl`] for a URL this build cannot open.
    pub fn open(url: &str) -> Result<ArchiveLocation, ArchiveError> {
        let bad = |reason: String| ArchiveError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let path_prefix = parsed.path().trim_matches('/').to_owned();
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                return Ok(ArchiveLocation::new(Arc::new(store), "", url));
            }
            "memory" => Arc::new(object_store::memory::InMemory::new()),
            "s3" | "s3a" => cloud::s3(&parsed).map_err(bad)?,
            "gs" => cloud::gcs(&parsed).map_err(bad)?,
            "az" | "azure" => cloud::azure(&parsed).map_err(bad)?,
            other => {
                return Err(bad(format!(
                    "unknown scheme {other:?}: expected file, memory, s3, gs or az"
                )));
            }
        };
        Ok(ArchiveLocation::new(store, &path_prefix, url))
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Requests made so far through this location and its clones.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The URL or name it was opened as.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The full path of `key`, a key under the prefix.
    pub fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// `path`'s key under the prefix, if it is under it.
    pub fn key_of<'a>(&self, path: &'a str) -> Option<&'a str> {
        if self.prefix.is_empty() {
            Some(path)
        } else {
            path.strip_prefix(&self.prefix)?.strip_prefix('/')
        }
    }
}

impl std::fmt::Display for ArchiveLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// Makes `ring` rustls's process-wide crypto provider, unless the process installed one
/// already (an embedder's choice stands). The cloud clients are built without a bundled
/// provider (see the `cloud` feature), and rustls refuses to build a TLS client without one.
#[cfg(feature = "cloud")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one between the check and here; either stands.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Worker threads of [`cloud_io`]'s runtime: two, enough for a restore's parallel fetches to
/// copy response bodies on both cores of the machines this project runs on.
#[cfg(feature = "cloud")]
const CLOUD_IO_THREADS: usize = 2;

/// The connector every cloud client is built with, after [`install_crypto_provider`]: its
/// HTTP I/O (connections, their pool, response bodies) runs on one runtime of this crate's,
/// always driven, whatever runtime the caller awaits on.
///
/// Why: a hyper connection is driven by a task on the runtime that opened it. An
/// [`Archiver`](crate::Archiver) is attached on the caller's runtime and then runs its rounds
/// on a thread and runtime of its own ([`Archiver::spawn`](crate::Archiver::spawn)); with the
/// default connector its pooled connections stay with the first runtime, which no longer
/// runs, and a request on one hangs until the client's timeout (30 s, measured on the loopback
/// S3 server before this connector) before a retry on a new connection.
///
/// # Errors
/// The runtime could not be started (threads refused by the OS).
#[cfg(feature = "cloud")]
pub(crate) fn cloud_io() -> Result<object_store::client::SpawnedReqwestConnector, String> {
    install_crypto_provider();
    static IO: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    let runtime = IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(CLOUD_IO_THREADS)
            .thread_name("stele-archive-io")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the archive's I/O runtime: {e}"))
    });
    let runtime = runtime.as_ref().map_err(Clone::clone)?;
    Ok(object_store::client::SpawnedReqwestConnector::new(
        runtime.handle().clone(),
    ))
}

/// The cloud stores, each behind its feature so that a build without it pulls in no HTTP
/// client.
mod cloud {
    use std::sync::Arc;

    use object_store::ObjectStore;

    fn host(url: &url::Url) -> Result<&str, String> {
        url.host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "no bucket name".to_owned())
    }

    #[cfg(feature = "aws")]
    pub(super) fn s3(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_http_connector(super::cloud_io()?)
            .with_bucket_name(host(url)?)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "aws"))]
    pub(super) fn s3(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        host(url)?;
        Err("this build has no S3 client: build stele-archive with the `aws` feature".into())
    }

    #[cfg(feature = "gcp")]
    pub(super) fn gcs(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        let store = object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_http_connector(super::cloud_io()?)
            .with_bucket_name(host(url)?)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "gcp"))]
    pub(super) fn gcs(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        host(url)?;
        Err("this build has no GCS client: build stele-archive with the `gcp` feature".into())
    }

    #[cfg(feature = "azure")]
    pub(super) fn azure(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        let store = object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_http_connector(super::cloud_io()?)
            .with_container_name(host(url)?)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "azure"))]
    pub(super) fn azure(url: &url::Url) -> Result<Arc<dyn ObjectStore>, String> {
        host(url)?;
        Err("this build has no Azure client: build stele-archive with the `azure` feature".into())
    }
}
