//! [`LoopbackS3`]: a real S3 wire-protocol server on `127.0.0.1`, inside this process, for the
//! suites and `stele bench` (feature `s3-loopback`).
//!
//! The server is `s3s-fs` (objects as files under a root directory) behind `s3s`'s request
//! parser and SigV4 check, served by hyper on its own thread and runtime; clients reach it
//! through `object_store`'s S3 client over TCP, exactly as they reach a remote S3. So what
//! crosses it is the real protocol: signed requests, `If-None-Match: *` on create-only puts and
//! its `412`, `ListObjectsV2` with `start-after`, ranged GETs.
//!
//! What it is not: atomic. s3s-fs checks that a key is absent and then writes it, without a
//! lock, so two racing create-only puts can both succeed. Races between writers are tested on
//! `object_store`'s `InMemory`, which is atomic; this server tests everything else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use object_store::ObjectStore;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::sync::oneshot;

use crate::{ArchiveError, ArchiveLocation};

/// The access key every loopback server accepts (with [`SECRET_ACCESS_KEY`]); requests signed
/// with any other are refused, so a test also proves that the client signs.
pub const ACCESS_KEY_ID: &str = "stele-loopback";
/// The secret key paired with [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "stele-loopback-secret";
/// The region the client signs for; s3s accepts any.
pub const REGION: &str = "us-east-1";

/// Worker threads of the server's runtime: two, the cores of the machines this project runs
/// on, so that a restore's parallel GETs are served in parallel.
const SERVER_THREADS: usize = 2;

/// A running server; dropping it stops the server and waits for its thread.
pub struct LoopbackS3 {
    addr: SocketAddr,
    root: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackS3 {
    /// Starts a server that keeps its buckets as directories under `root` (created if
    /// missing), listening on a free port of `127.0.0.1`.
    ///
    /// # Errors
    /// The I/O error of creating `root`, starting the runtime or binding the port.
    pub fn start(root: &Path) -> std::io::Result<LoopbackS3> {
        std::fs::create_dir_all(root)?;
        let service = {
            let fs = s3s_fs::FileSystem::new(root)
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
            let mut builder = S3ServiceBuilder::new(fs);
            builder.set_auth(SimpleAuth::from_single(ACCESS_KEY_ID, SECRET_ACCESS_KEY));
            builder.build()
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(SERVER_THREADS)
            .thread_name("loopback-s3")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (shutdown, mut stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("loopback-s3".into())
            .spawn(move || {
                runtime.block_on(async move {
                    loop {
                        let socket = tokio::select! {
                            accepted = listener.accept() => match accepted {
                                Ok((socket, _)) => socket,
                                // A failed accept (out of descriptors, a reset connection)
                                // ends that connection, not the server.
                                Err(_) => continue,
                            },
                            _ = &mut stopped => break,
                        };
                        let _ = socket.set_nodelay(true);
                        let service = service.clone();
                        tokio::spawn(async move {
                            // A connection's error (the client hung up) is that connection's.
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(socket), service)
                                .await;
                        });
                    }
                });
                // Dropping the runtime ends the connections still open.
                drop(runtime);
            })?;
        Ok(LoopbackS3 {
            addr,
            root: root.to_owned(),
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates `bucket` (a directory under the root; an existing one is kept).
    ///
    /// # Errors
    /// The I/O error of creating it.
    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join(bucket))
    }

    /// An S3 client for `bucket` on this server, configured in code (no environment).
    ///
    /// # Errors
    /// [`ArchiveError::BadUrl`] if the client cannot be built.
    pub fn store(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, ArchiveError> {
        let bad = |reason: String| ArchiveError::BadUrl {
            url: format!("s3://{bucket}"),
            reason,
        };
        object_store::aws::AmazonS3Builder::new()
            .with_http_connector(crate::location::cloud_io().map_err(bad)?)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region(REGION)
            .with_access_key_id(ACCESS_KEY_ID)
            .with_secret_access_key(SECRET_ACCESS_KEY)
            .build()
            .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
            .map_err(|e| bad(e.to_string()))
    }

    /// The archive at `s3://bucket/prefix` on this server, creating the bucket.
    ///
    /// # Errors
    /// As [`LoopbackS3::store`], and [`ArchiveError::BadUrl`] if the bucket cannot be created.
    pub fn location(&self, bucket: &str, prefix: &str) -> Result<ArchiveLocation, ArchiveError> {
        let url = format!("s3://{bucket}/{prefix}");
        self.create_bucket(bucket)
            .map_err(|e| ArchiveError::BadUrl {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        Ok(ArchiveLocation::new(self.store(bucket)?, prefix, &url))
    }

    /// The `AWS_*` environment under which [`ArchiveLocation::open`] (and so the `stele` CLI)
    /// opens `s3://` URLs on this server.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", REGION.into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.into()),
        ]
    }
}

impl Drop for LoopbackS3 {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
