//! The object-store requests the archive makes, with the rules that make them safe to retry.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutMode, PutOptions};

use crate::layout::{MANIFEST_DIR, manifest_key, parse_manifest_name};
use crate::manifest::Manifest;
use crate::{ArchiveError, ArchiveLocation};

/// What a create-only put found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was created by this put.
    Created,
    /// The key already held these exact bytes: an earlier try of this put landed and its reply
    /// was lost (object_store retries 5xx answers, conditional puts included), or another
    /// writer put the same deterministic object. Either way the object is there: done.
    AlreadyThere,
}

/// What a create-only put of a manifest found, when the key was taken by other bytes.
pub(crate) enum Taken {
    /// The bytes already there.
    By(Bytes),
}

/// Puts `bytes` at `key` only if nothing is there (`PutMode::Create`: S3 `If-None-Match: *`,
/// GCS generation 0, a hard link on a local directory, one lock in memory).
///
/// # Errors
/// [`ArchiveError::Diverged`] if the key holds other bytes; [`ArchiveError::Store`] if a
/// request failed.
pub async fn put_create_only(
    location: &ArchiveLocation,
    key: &str,
    bytes: Bytes,
) -> Result<PutOutcome, ArchiveError> {
    match put_or_read(location, key, bytes.clone()).await? {
        Ok(outcome) => Ok(outcome),
        Err(Taken::By(existing)) => Err(ArchiveError::Diverged {
            key: location.path(key).to_string(),
            existing_bytes: existing.len(),
            our_bytes: bytes.len(),
        }),
    }
}

/// [`put_create_only`], handing back the bytes found when they differ instead of judging them.
pub(crate) async fn put_or_read(
    location: &ArchiveLocation,
    key: &str,
    bytes: Bytes,
) -> Result<Result<PutOutcome, Taken>, ArchiveError> {
    let path = location.path(key);
    let options = PutOptions::from(PutMode::Create);
    location.count_request();
    match location
        .store()
        .put_opts(&path, bytes.clone().into(), options)
        .await
    {
        Ok(_) => Ok(Ok(PutOutcome::Created)),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let existing = get(location, key).await?;
            if existing == bytes {
                Ok(Ok(PutOutcome::AlreadyThere))
            } else {
                Ok(Err(Taken::By(existing)))
            }
        }
        Err(source) => Err(ArchiveError::Store {
            key: path.to_string(),
            source,
        }),
    }
}

/// The whole object at `key`.
pub async fn get(location: &ArchiveLocation, key: &str) -> Result<Bytes, ArchiveError> {
    let path = location.path(key);
    location.count_request();
    let result = location
        .store()
        .get(&path)
        .await
        .map_err(ArchiveError::store(&path))?;
    result.bytes().await.map_err(ArchiveError::store(&path))
}

/// The manifest numbers present, ascending; only those after `after` when it is given (a
/// `start-after` listing on S3).
pub async fn list_manifests(
    location: &ArchiveLocation,
    after: Option<u64>,
) -> Result<Vec<u64>, ArchiveError> {
    let dir = location.path(MANIFEST_DIR);
    location.count_request();
    let listing = match after {
        Some(n) => location
            .store()
            .list_with_offset(Some(&dir), &location.path(&manifest_key(n))),
        None => location.store().list(Some(&dir)),
    };
    let metas: Vec<_> = listing
        .try_collect()
        .await
        .map_err(ArchiveError::store(&dir))?;
    let mut numbers: Vec<u64> = metas
        .iter()
        .filter_map(|meta| meta.location.filename().and_then(parse_manifest_name))
        .filter(|&n| after.is_none_or(|after| n > after))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// Manifest `n`, decoded and checked.
pub async fn read_manifest(location: &ArchiveLocation, n: u64) -> Result<Manifest, ArchiveError> {
    let key = manifest_key(n);
    let bytes = get(location, &key).await?;
    Manifest::decode(location.path(&key).as_ref(), n, &bytes)
}

/// The newest manifest, or `None` if there is none; only one newer than `after` when given.
pub async fn latest_manifest(
    location: &ArchiveLocation,
    after: Option<u64>,
) -> Result<Option<Manifest>, ArchiveError> {
    match list_manifests(location, after).await?.last() {
        Some(&n) => Ok(Some(read_manifest(location, n).await?)),
        None => Ok(None),
    }
}
