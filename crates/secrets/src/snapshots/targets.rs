//! Where automated snapshots are written: a local directory, S3 or an S3-compatible store,
//! Azure blob storage, or Google Cloud Storage. The first three go through `object_store`;
//! GCS objects are written, listed and deleted through GCS's JSON API (the one Vault's Go
//! client and the GCS emulators speak; `object_store` speaks the XML API), authenticated by
//! `object_store`'s GCS credential provider (service account key, application default
//! credentials or instance metadata).
//!
//! A target is a store and a directory in it (`path_prefix`: a directory for `local`, a key
//! prefix for the cloud types, read as a directory in every case). A snapshot is the object
//! `<dir>/<file_prefix>-<unix nanos>.snap`; listing and pruning look only at the directory's
//! own objects of that exact shape, so other files beside them are never touched.
//!
//! Credentials left out fall back to the provider's ambient authentication (`from_env`:
//! environment variables, instance metadata), except where an endpoint is given: there a
//! missing credential means anonymous requests, so a local emulator never makes the client
//! look for cloud metadata.
//!
//! Invariants: `local` never lets the schedule's snapshots exceed `local_max_space` bytes
//! (the attempt fails before writing); errors are strings for the status record (they never
//! carry credentials: `object_store` does not put them in messages).

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GcpCredentialProvider, GoogleCloudStorageBuilder};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};

use super::config::{AutoConfig, StorageType};

/// One request's time limit, and the retry budget: a schedule that cannot reach its store
/// fails this attempt within about a minute and tries again at its next interval.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_RETRIES: usize = 3;

/// A snapshot found in a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) unix_nanos: i64,
    /// The object's key (`<dir>/<name>`).
    pub(crate) key: String,
    pub(crate) size: u64,
}

/// How a target reaches its objects.
#[derive(Debug)]
enum Backend {
    Objects(Arc<dyn ObjectStore>),
    Gcs(GcsJson),
}

/// GCS through its JSON API.
#[derive(Debug)]
struct GcsJson {
    http: reqwest::Client,
    /// `https://storage.googleapis.com` or the configured endpoint.
    base: String,
    bucket: String,
    /// `None`: anonymous (an endpoint without a key).
    credentials: Option<GcpCredentialProvider>,
}

/// An opened target.
#[derive(Debug)]
pub(crate) struct Target {
    backend: Backend,
    /// The directory's key prefix without slashes at either end (`""`: the top).
    dir: String,
    /// `file:///dir`, `s3://bucket`, `az://container`, `gs://bucket`: a snapshot's URL is this,
    /// `/`, and its key.
    url_base: String,
    /// `local`'s allowance in bytes.
    max_space: Option<u64>,
}

/// The blob endpoint suffix of an Azure cloud (`cloud_b_blob_environment`), `None` when
/// unknown. The names are Go SDK's environment names.
pub(crate) fn azure_blob_suffix(environment: &str) -> Option<&'static str> {
    Some(match environment.to_ascii_lowercase().as_str() {
        "" | "azurepubliccloud" | "azurecloud" => "blob.core.windows.net",
        "azurechinacloud" => "blob.core.chinacloudapi.cn",
        "azureusgovernmentcloud" | "azureusgovernment" => "blob.core.usgovcloudapi.net",
        "azuregermancloud" => "blob.core.cloudapi.de",
        _ => return None,
    })
}

fn client_options(allow_http: bool) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout(REQUEST_TIMEOUT)
}

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    }
}

/// `endpoint` with a scheme: as given when it has one, else `http://` when TLS is disabled
/// and `https://` otherwise. Whether plain HTTP must be allowed comes with it.
fn endpoint_url(endpoint: &str, disable_tls: bool) -> (String, bool) {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.starts_with("http://") {
        (endpoint.to_owned(), true)
    } else if endpoint.starts_with("https://") {
        (endpoint.to_owned(), disable_tls)
    } else if disable_tls {
        (format!("http://{endpoint}"), true)
    } else {
        (format!("https://{endpoint}"), false)
    }
}

/// The directory part of `path_prefix` as a key prefix (`""` is the top).
fn dir_key(path_prefix: &str) -> Result<String, String> {
    let trimmed = path_prefix.trim_matches('/');
    Path::parse(trimmed).map_err(|err| format!("invalid path_prefix {path_prefix:?}: {err}"))?;
    Ok(trimmed.to_owned())
}

/// Checks what only the stores know of a schedule written through the API: a known Azure
/// blob environment, and that a cloud target can be set up with its settings (nothing is
/// contacted). The message is the 400's.
pub(crate) fn check(config: &AutoConfig) -> Result<(), String> {
    if config.storage_type == StorageType::CloudB
        && let Some(environment) = config.text("cloud_b_blob_environment")
        && azure_blob_suffix(environment).is_none()
    {
        return Err(format!(
            "unknown {} {environment:?}",
            config.spelled("cloud_b_blob_environment")
        ));
    }
    if config.storage_type != StorageType::Local {
        open(config)?;
    }
    Ok(())
}

/// Builds the target a schedule writes to. Nothing is contacted here; a local directory is
/// created when missing.
pub(crate) fn open(config: &AutoConfig) -> Result<Target, String> {
    let build_err = |err: object_store::Error| format!("cannot set up the snapshot store: {err}");
    match config.storage_type {
        StorageType::Local => {
            let dir = std::path::Path::new(&config.path_prefix);
            std::fs::create_dir_all(dir).map_err(|err| {
                format!(
                    "cannot create the snapshot directory {}: {err}",
                    dir.display()
                )
            })?;
            let absolute = std::fs::canonicalize(dir).map_err(|err| {
                format!(
                    "cannot resolve the snapshot directory {}: {err}",
                    dir.display()
                )
            })?;
            let store = LocalFileSystem::new_with_prefix(&absolute).map_err(build_err)?;
            Ok(Target {
                backend: Backend::Objects(Arc::new(store)),
                dir: String::new(),
                url_base: format!("file://{}", absolute.display()),
                max_space: Some(config.local_max_space),
            })
        }
        StorageType::CloudA => {
            let bucket = config.text("cloud_a_bucket").unwrap_or_default();
            let force_path_style = config.flag("cloud_a_force_path_style");
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_region(config.text("cloud_a_region").unwrap_or_default())
                .with_retry(retry());
            let mut allow_http = false;
            match config.text("cloud_a_endpoint") {
                Some(endpoint) => {
                    let (url, http) = endpoint_url(endpoint, config.flag("cloud_a_disable_tls"));
                    allow_http = http;
                    if force_path_style {
                        builder = builder.with_endpoint(url);
                    } else {
                        // Virtual-hosted style: the bucket is the first label of the host.
                        let (scheme, host) = url.split_once("://").unwrap_or(("https", &url));
                        builder = builder
                            .with_endpoint(format!("{scheme}://{bucket}.{host}"))
                            .with_virtual_hosted_style_request(true);
                    }
                    if config.text("cloud_a_access_key_id").is_none() {
                        builder = builder.with_skip_signature(true);
                    }
                }
                None => {
                    builder = builder.with_virtual_hosted_style_request(!force_path_style);
                }
            }
            if let Some(id) = config.text("cloud_a_access_key_id") {
                builder = builder.with_access_key_id(id);
            }
            if let Some(secret) = config.text("cloud_a_secret_access_key") {
                builder = builder.with_secret_access_key(secret);
            }
            if let Some(token) = config.text("cloud_a_session_token") {
                builder = builder.with_token(token);
            }
            // The server-side encryption header: SSE-KMS (with the key, else the bucket's
            // default KMS key) or SSE-S3 (AES256).
            let sse_key = || {
                "aws_server_side_encryption"
                    .parse::<AmazonS3ConfigKey>()
                    .map_err(build_err)
            };
            if config.flag("cloud_a_enable_kms") {
                match config.text("cloud_a_kms_key") {
                    Some(key) => builder = builder.with_sse_kms_encryption(key),
                    None => builder = builder.with_config(sse_key()?, "aws:kms"),
                }
            } else if config.flag("cloud_a_server_side_encryption") {
                builder = builder.with_config(sse_key()?, "AES256");
            }
            let store = builder
                .with_client_options(client_options(allow_http))
                .build()
                .map_err(build_err)?;
            Ok(Target {
                backend: Backend::Objects(Arc::new(store)),
                dir: dir_key(&config.path_prefix)?,
                url_base: format!("s3://{bucket}"),
                max_space: None,
            })
        }
        StorageType::CloudB => {
            let container = config.text("cloud_b_container_name").unwrap_or_default();
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_container_name(container)
                .with_retry(retry());
            let account = config.text("cloud_b_account_name");
            if let Some(account) = account {
                builder = builder.with_account(account);
            }
            if let Some(key) = config.text("cloud_b_account_key") {
                builder = builder.with_access_key(key);
            }
            let mut allow_http = false;
            match config.text("cloud_b_endpoint") {
                Some(endpoint) => {
                    let (url, http) = endpoint_url(endpoint, false);
                    allow_http = http;
                    builder = builder.with_endpoint(url);
                }
                None => {
                    let environment = config.text("cloud_b_blob_environment").unwrap_or("");
                    let suffix = azure_blob_suffix(environment)
                        .ok_or_else(|| format!("unknown blob environment {environment:?}"))?;
                    if let Some(account) = account {
                        builder = builder.with_endpoint(format!("https://{account}.{suffix}"));
                    }
                }
            }
            let store = builder
                .with_client_options(client_options(allow_http))
                .build()
                .map_err(build_err)?;
            Ok(Target {
                backend: Backend::Objects(Arc::new(store)),
                dir: dir_key(&config.path_prefix)?,
                url_base: format!("az://{container}"),
                max_space: None,
            })
        }
        StorageType::CloudC => {
            let bucket = config.text("cloud_c_bucket").unwrap_or_default();
            let mut base = "https://storage.googleapis.com".to_owned();
            let mut allow_http = false;
            let endpoint = config.text("cloud_c_endpoint");
            if let Some(endpoint) = endpoint {
                (base, allow_http) = endpoint_url(endpoint, config.flag("cloud_c_disable_tls"));
            }
            let credentials = match config.text("cloud_c_service_account_key") {
                None if endpoint.is_some() => None,
                key => {
                    // Only the credential provider is used: it turns the key (or the ambient
                    // credentials) into bearer tokens, refreshed as they expire.
                    let mut builder = GoogleCloudStorageBuilder::from_env()
                        .with_bucket_name(bucket)
                        .with_base_url(&base)
                        .with_retry(retry())
                        .with_client_options(client_options(allow_http));
                    if let Some(key) = key {
                        builder = builder.with_service_account_key(key);
                    }
                    Some(builder.build().map_err(build_err)?.credentials().clone())
                }
            };
            let http = reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .https_only(!allow_http)
                .build()
                .map_err(|err| format!("cannot set up the snapshot store: {err}"))?;
            Ok(Target {
                backend: Backend::Gcs(GcsJson {
                    http,
                    base,
                    bucket: bucket.to_owned(),
                    credentials,
                }),
                dir: dir_key(&config.path_prefix)?,
                url_base: format!("gs://{bucket}"),
                max_space: None,
            })
        }
    }
}

/// `<file_prefix>-<nanos>.snap` → nanos.
fn parse_name(name: &str, file_prefix: &str) -> Option<i64> {
    let digits = name
        .strip_prefix(file_prefix)?
        .strip_prefix('-')?
        .strip_suffix(".snap")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl Target {
    /// The key a snapshot taken at `unix_nanos` goes to.
    pub(crate) fn key(&self, file_prefix: &str, unix_nanos: i64) -> String {
        let name = format!("{file_prefix}-{unix_nanos}.snap");
        if self.dir.is_empty() {
            name
        } else {
            format!("{}/{name}", self.dir)
        }
    }

    /// The URL the status reports for `key`.
    pub(crate) fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.url_base)
    }

    /// This schedule's snapshots in the directory, oldest first.
    pub(crate) async fn list(&self, file_prefix: &str) -> Result<Vec<Found>, String> {
        let objects = match &self.backend {
            Backend::Objects(store) => {
                let dir = Path::from(self.dir.as_str());
                let prefix = (!self.dir.is_empty()).then_some(&dir);
                let metas: Vec<_> = store
                    .list(prefix)
                    .try_collect()
                    .await
                    .map_err(|err| format!("listing snapshots failed: {err}"))?;
                metas
                    .into_iter()
                    .map(|meta| (meta.location.to_string(), meta.size))
                    .collect()
            }
            Backend::Gcs(gcs) => gcs.list(&self.dir).await?,
        };
        let mut found: Vec<Found> = objects
            .into_iter()
            .filter_map(|(key, size)| {
                let name = match self.dir.is_empty() {
                    true => key.as_str(),
                    false => key.strip_prefix(&self.dir)?.strip_prefix('/')?,
                };
                if name.contains('/') {
                    return None;
                }
                let nanos = parse_name(name, file_prefix)?;
                Some(Found {
                    unix_nanos: nanos,
                    key,
                    size,
                })
            })
            .collect();
        found.sort_by_key(|f| f.unix_nanos);
        Ok(found)
    }

    /// Writes one snapshot and returns its URL; `local` checks its allowance first.
    pub(crate) async fn write(
        &self,
        file_prefix: &str,
        unix_nanos: i64,
        bytes: Vec<u8>,
    ) -> Result<String, String> {
        if let Some(max) = self.max_space {
            let used: u64 = self.list(file_prefix).await?.iter().map(|f| f.size).sum();
            let needed = bytes.len() as u64;
            if used.saturating_add(needed) > max {
                return Err(format!(
                    "not enough space: the snapshot needs {needed} bytes, {used} of the \
                     local_max_space of {max} bytes are used by earlier snapshots"
                ));
            }
        }
        let key = self.key(file_prefix, unix_nanos);
        let written = match &self.backend {
            Backend::Objects(store) => store
                .put(&Path::from(key.as_str()), PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|err| err.to_string()),
            Backend::Gcs(gcs) => gcs.upload(&key, bytes).await,
        };
        written.map_err(|err| format!("writing the snapshot failed: {err}"))?;
        Ok(self.url(&key))
    }

    /// Deletes the oldest snapshots beyond `retain`; returns how many went.
    pub(crate) async fn prune(&self, file_prefix: &str, retain: u64) -> Result<usize, String> {
        let found = self.list(file_prefix).await?;
        let keep = usize::try_from(retain).unwrap_or(usize::MAX);
        let excess = found.len().saturating_sub(keep);
        for old in &found[..excess] {
            let deleted = match &self.backend {
                Backend::Objects(store) => store
                    .delete(&Path::from(old.key.as_str()))
                    .await
                    .map_err(|err| err.to_string()),
                Backend::Gcs(gcs) => gcs.delete(&old.key).await,
            };
            deleted.map_err(|err| format!("deleting snapshot {} failed: {err}", old.key))?;
        }
        Ok(excess)
    }
}

/// One path segment or query value, percent-encoded (everything but unreserved characters).
fn encode(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl GcsJson {
    async fn authorize(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, String> {
        let Some(provider) = &self.credentials else {
            return Ok(request);
        };
        let credential = provider
            .get_credential()
            .await
            .map_err(|err| format!("GCS credentials: {err}"))?;
        if credential.bearer.is_empty() {
            return Ok(request);
        }
        Ok(request.bearer_auth(&credential.bearer))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
        let response = self
            .authorize(request)
            .await?
            .send()
            .await
            .map_err(|err| format!("GCS request failed: {err}"))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let body: String = body.chars().take(300).collect();
        Err(format!("GCS answered {status}: {body}"))
    }

    async fn upload(&self, key: &str, bytes: Vec<u8>) -> Result<(), String> {
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=media&name={}",
            self.base,
            encode(&self.bucket),
            encode(key)
        );
        let request = self
            .http
            .post(url)
            .header("Content-Type", "application/octet-stream")
            .body(bytes);
        self.send(request).await.map(|_| ())
    }

    async fn delete(&self, key: &str) -> Result<(), String> {
        let url = format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base,
            encode(&self.bucket),
            encode(key)
        );
        self.send(self.http.delete(url)).await.map(|_| ())
    }

    /// Every object under `dir/` (all of them when `dir` is empty), with sizes.
    async fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, String> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            items: Vec<Item>,
            #[serde(rename = "nextPageToken")]
            next_page_token: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Item {
            name: String,
            /// The JSON API sends sizes as decimal strings.
            #[serde(default)]
            size: Option<String>,
        }
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/storage/v1/b/{}/o?prefix={}",
                self.base,
                encode(&self.bucket),
                encode(&prefix)
            );
            if let Some(token) = &token {
                url.push_str(&format!("&pageToken={}", encode(token)));
            }
            let page: Page = self
                .send(self.http.get(url))
                .await?
                .json()
                .await
                .map_err(|err| format!("listing snapshots failed: {err}"))?;
            out.extend(page.items.into_iter().map(|item| {
                let size = item.size.and_then(|s| s.parse().ok()).unwrap_or(0);
                (item.name, size)
            }));
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_exact_shape_are_snapshots() {
        assert_eq!(
            parse_name("store-snapshot-17.snap", "store-snapshot"),
            Some(17)
        );
        assert_eq!(parse_name("store-snapshot-.snap", "store-snapshot"), None);
        assert_eq!(parse_name("store-snapshot-1x.snap", "store-snapshot"), None);
        assert_eq!(parse_name("other-17.snap", "store-snapshot"), None);
        assert_eq!(
            parse_name("store-snapshot-17.snap.tmp", "store-snapshot"),
            None
        );
    }

    #[test]
    fn endpoints_get_a_scheme_and_plain_http_only_when_asked() {
        assert_eq!(endpoint_url("h:1", true), ("http://h:1".to_owned(), true));
        assert_eq!(
            endpoint_url("h:1", false),
            ("https://h:1".to_owned(), false)
        );
        assert_eq!(
            endpoint_url("http://h:1/", false),
            ("http://h:1".to_owned(), true)
        );
    }
}
