//! Automated snapshots against real storage: a local directory, S3 (moto's server), Azure
//! blob (Azurite) and GCS (gcp-storage-emulator), each on 127.0.0.1 as `scripts/services`
//! starts them. For each storage type a schedule runs three times on a manual clock, its
//! target is listed with an independent `object_store` client and holds exactly the `retain`
//! newest `<file_prefix>-<unix nanos>.snap` objects, and the newest, read back, restores
//! deleted data. Also: `local_max_space` stops a snapshot that would not fit, and a schedule's
//! cadence survives a restart (the next run is due from the last snapshot stored, not from
//! the start).

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use futures::TryStreamExt;
use http::StatusCode;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt};
use serde_json::{Value, json};
use storage::Storage;
use testkit::ManualClock;
use tokio_util::sync::CancellationToken;

use support::call;

const ROOT: &str = "root";
const S3_PORT: u16 = 9020;
const AZURITE_PORT: u16 = 10000;
const GCS_PORT: u16 = 9023;
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's documented development account key.
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const INTERVAL_SECS: u64 = 60;
const CONFIG: &str = "/v1/sys/storage/raft/snapshot-auto/config";
const STATUS: &str = "/v1/sys/storage/raft/snapshot-auto/status";

/// A dev store on a manual clock with its background loops running.
struct Harness {
    app: Router,
    clock: ManualClock,
    shutdown: CancellationToken,
    runner: cluster::Runner,
}

impl Harness {
    async fn over(
        storage: Arc<dyn Storage>,
        key_file: Option<std::path::PathBuf>,
        clock: ManualClock,
    ) -> Harness {
        let state = secrets::State::open_with_clock(
            storage,
            support::dev_config(ROOT, key_file),
            Arc::new(clock.clone()),
        )
        .await
        .unwrap();
        let shutdown = CancellationToken::new();
        let runner = cluster::Runner::embedded(shutdown.clone());
        secrets::start_tasks(&state, &runner);
        Harness {
            app: secrets::router(state),
            clock,
            shutdown,
            runner,
        }
    }

    async fn new() -> Harness {
        let harness =
            Harness::over(testkit::mem_storage(), None, ManualClock::at_system_time()).await;
        let (status, _) = call(
            &harness.app,
            "DELETE",
            "/v1/sys/mounts/secret",
            Some(ROOT),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _) = call(
            &harness.app,
            "POST",
            "/v1/sys/mounts/secret",
            Some(ROOT),
            Some(json!({"type": "kv", "options": {"version": "1"}})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        harness
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.runner.shutdown_and_wait().await;
    }

    async fn configure(&self, name: &str, body: Value) {
        let (status, body) = call(
            &self.app,
            "POST",
            &format!("{CONFIG}/{name}"),
            Some(ROOT),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    async fn status(&self, name: &str) -> Value {
        let (status, body) = call(
            &self.app,
            "GET",
            &format!("{STATUS}/{name}"),
            Some(ROOT),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["data"].clone()
    }

    /// Moves the clock one interval on and waits (up to 10 s) for the schedule's next run to
    /// be recorded; returns its status.
    async fn next_run(&self, name: &str) -> Value {
        let before = self.status(name).await["last_snapshot_start"].clone();
        self.clock.advance(Duration::from_secs(INTERVAL_SECS + 1));
        for _ in 0..200 {
            let status = self.status(name).await;
            if status["last_snapshot_start"] != before
                && status["snapshot_start"] == "0001-01-01T00:00:00Z"
            {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("schedule {name} did not run: {}", self.status(name).await);
    }

    async fn put(&self, path: &str, value: &str) {
        let (status, body) = call(
            &self.app,
            "PUT",
            &format!("/v1/secret/{path}"),
            Some(ROOT),
            Some(json!({"v": value})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    async fn get(&self, path: &str) -> StatusCode {
        call(
            &self.app,
            "GET",
            &format!("/v1/secret/{path}"),
            Some(ROOT),
            None,
        )
        .await
        .0
    }

    async fn restore(&self, bytes: Vec<u8>) {
        let request = testkit::request("POST", "/v1/sys/storage/raft/snapshot")
            .header("X-Vault-Token", ROOT)
            .body(Body::from(bytes))
            .unwrap();
        let response = testkit::call(&self.app, request).await;
        assert_eq!(
            response.status,
            StatusCode::NO_CONTENT,
            "{}",
            response.text()
        );
    }
}

fn unique(stem: &str) -> String {
    format!("{stem}-{}", uuid::Uuid::new_v4().simple())
}

/// Fails with a pointer to `scripts/services` when nothing listens on `port`.
async fn require(port: u16, what: &str) {
    if tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        panic!(
            "{what} is not listening on 127.0.0.1:{port}: run scripts/services (as root) to install and start it"
        );
    }
}

async fn raw(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> testkit::RawResponse {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut connection = testkit::RawConnection::connect(addr).await.unwrap();
    connection
        .request(method, target, headers, body)
        .await
        .unwrap()
}

/// How a test reads a target back, independently of the product: an `object_store` client,
/// or GCS's JSON API over raw HTTP (the emulator has no XML API, which `object_store`'s GCS
/// client speaks).
enum Reader {
    Store(Arc<dyn ObjectStore>),
    GcsJson { bucket: String },
}

impl Reader {
    /// Object names directly under `dir` (`""`: the top).
    async fn names(&self, dir: &str) -> Vec<String> {
        match self {
            Reader::Store(store) => {
                let prefix = Path::from(dir);
                let listing: Vec<_> = store
                    .list((!dir.is_empty()).then_some(&prefix))
                    .try_collect()
                    .await
                    .unwrap();
                listing
                    .iter()
                    .filter_map(|meta| meta.location.filename().map(str::to_owned))
                    .collect()
            }
            Reader::GcsJson { bucket } => {
                let target = format!("/storage/v1/b/{bucket}/o?prefix={dir}%2F");
                let listed = raw(GCS_PORT, "GET", &target, &[], b"").await;
                assert_eq!(listed.status, 200, "{}", listed.text());
                let body: Value = serde_json::from_slice(&listed.body).unwrap();
                let dir_slash = format!("{dir}/");
                body["items"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|item| {
                        let name = item["name"].as_str()?.strip_prefix(&dir_slash)?;
                        Some(name.to_owned())
                    })
                    .collect()
            }
        }
    }

    async fn read(&self, dir: &str, name: &str) -> Vec<u8> {
        match self {
            Reader::Store(store) => {
                let key = if dir.is_empty() {
                    Path::from(name)
                } else {
                    Path::from(dir).join(name)
                };
                let got = store.get(&key).await.unwrap();
                got.bytes().await.unwrap().to_vec()
            }
            Reader::GcsJson { bucket } => {
                let target = format!("/storage/v1/b/{bucket}/o/{dir}%2F{name}?alt=media");
                let read = raw(GCS_PORT, "GET", &target, &[], b"").await;
                assert_eq!(read.status, 200, "{}", read.text());
                read.body
            }
        }
    }
}

/// The common scenario of the module docs; `reader` lists and reads the target, `dir` is
/// the target's directory in it, `url_base` what the status URLs start with.
async fn writes_lists_prunes_and_restores(
    storage: Value,
    reader: Reader,
    dir: &str,
    url_base: &str,
) {
    let harness = Harness::new().await;
    harness.put("kept", "before").await;
    let file_prefix = unique("snap");
    let mut body = storage;
    body["interval"] = json!(INTERVAL_SECS);
    body["retain"] = json!(2);
    body["file_prefix"] = json!(file_prefix);
    harness.configure("sched", body).await;

    let mut urls = Vec::new();
    for _ in 0..3 {
        let status = harness.next_run("sched").await;
        assert_eq!(status["last_snapshot_error"], "", "{status}");
        let url = status["last_snapshot_url"].as_str().unwrap().to_owned();
        assert!(
            url.starts_with(url_base),
            "{url} does not start with {url_base}"
        );
        assert!(
            url.contains(&format!("/{file_prefix}-")) && url.ends_with(".snap"),
            "{url}"
        );
        urls.push(url);
    }

    let mut names: Vec<String> = reader
        .names(dir)
        .await
        .into_iter()
        .filter(|name| name.starts_with(&file_prefix))
        .collect();
    names.sort();
    let newest_two: Vec<String> = urls[1..]
        .iter()
        .map(|url| url.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(names, newest_two, "retain 2 keeps the two newest");
    for name in &names {
        let nanos = name
            .strip_prefix(&format!("{file_prefix}-"))
            .and_then(|rest| rest.strip_suffix(".snap"))
            .unwrap();
        assert!(
            nanos.parse::<i64>().unwrap() > 1_600_000_000_000_000_000,
            "{name}"
        );
    }

    let bytes = reader.read(dir, &names[1]).await;
    let (status, _) = call(&harness.app, "DELETE", "/v1/secret/kept", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(harness.get("kept").await, StatusCode::NOT_FOUND);
    harness.restore(bytes).await;
    assert_eq!(
        harness.get("kept").await,
        StatusCode::OK,
        "the snapshot read back restores"
    );
    harness.stop().await;
}

#[tokio::test]
async fn local_directory_snapshots_are_written_pruned_to_retain_and_restore() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snapshots");
    let storage = json!({"storage_type": "local", "path_prefix": target.to_str().unwrap(), "local_max_space": 10_000_000});
    std::fs::create_dir_all(&target).unwrap();
    // A file of another shape in the directory is never touched.
    std::fs::write(target.join("notes.txt"), b"keep me").unwrap();
    let reader = Arc::new(LocalFileSystem::new_with_prefix(&target).unwrap());
    let base = format!(
        "file://{}",
        std::fs::canonicalize(&target).unwrap().display()
    );
    writes_lists_prunes_and_restores(storage, Reader::Store(reader), "", &base).await;
    assert_eq!(std::fs::read(target.join("notes.txt")).unwrap(), b"keep me");
}

#[tokio::test]
async fn s3_snapshots_on_moto_are_written_pruned_to_retain_and_restore() {
    require(S3_PORT, "moto (S3)").await;
    let bucket = unique("cairn");
    let created = raw(
        S3_PORT,
        "PUT",
        &format!("/{bucket}"),
        &[("Content-Length", "0")],
        b"",
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let storage = json!({
        "storage_type": "aws-s3", "path_prefix": "nightly/",
        "aws_s3_bucket": bucket, "aws_s3_region": "us-east-1",
        "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
        "aws_s3_endpoint": format!("127.0.0.1:{S3_PORT}"), "aws_s3_disable_tls": true,
        "aws_s3_force_path_style": true, "aws_s3_server_side_encryption": true,
    });
    let reader = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{S3_PORT}"))
        .with_bucket_name(&bucket)
        .with_region("us-east-1")
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()
        .unwrap();
    writes_lists_prunes_and_restores(
        storage,
        Reader::Store(Arc::new(reader)),
        "nightly",
        &format!("s3://{bucket}/nightly/"),
    )
    .await;
}

#[tokio::test]
async fn azure_blob_snapshots_on_azurite_are_written_pruned_to_retain_and_restore() {
    require(AZURITE_PORT, "Azurite").await;
    let container = unique("cairn");
    create_azurite_container(&container).await;
    let storage = json!({
        "storage_type": "cloud-b-blob", "path_prefix": "blobs/",
        "cloud_b_container_name": container,
        "cloud_b_account_name": AZURITE_ACCOUNT, "cloud_b_account_key": AZURITE_KEY,
        "cloud_b_endpoint": format!("http://127.0.0.1:{AZURITE_PORT}/{AZURITE_ACCOUNT}"),
    });
    let reader = MicrosoftAzureBuilder::new()
        .with_use_emulator(true)
        .with_container_name(&container)
        .build()
        .unwrap();
    writes_lists_prunes_and_restores(
        storage,
        Reader::Store(Arc::new(reader)),
        "blobs",
        &format!("az://{container}/blobs/"),
    )
    .await;
}

#[tokio::test]
async fn gcs_snapshots_on_the_emulator_are_written_pruned_to_retain_and_restore() {
    require(GCS_PORT, "gcp-storage-emulator").await;
    let bucket = format!("cairn{}", uuid::Uuid::new_v4().simple());
    let body = json!({"name": bucket}).to_string();
    let created = raw(
        GCS_PORT,
        "POST",
        "/storage/v1/b?project=cairn-test",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let storage = json!({
        "storage_type": "google-gcs", "path_prefix": "gcs/",
        "google_gcs_bucket": bucket,
        "google_endpoint": format!("127.0.0.1:{GCS_PORT}"), "google_disable_tls": true,
    });
    writes_lists_prunes_and_restores(
        storage,
        Reader::GcsJson {
            bucket: bucket.clone(),
        },
        "gcs",
        &format!("gs://{bucket}/gcs/"),
    )
    .await;
}

#[tokio::test]
async fn local_max_space_stops_a_snapshot_that_would_not_fit() {
    let harness = Harness::new().await;
    let dir = tempfile::tempdir().unwrap();
    harness
        .configure(
            "tiny",
            json!({"storage_type": "local", "interval": INTERVAL_SECS, "path_prefix": dir.path().to_str().unwrap(), "local_max_space": 64}),
        )
        .await;
    let status = harness.next_run("tiny").await;
    assert!(
        status["last_snapshot_error"]
            .as_str()
            .unwrap()
            .contains("not enough space"),
        "{status}"
    );
    assert_eq!(status["last_snapshot_url"], "");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_schedules_cadence_survives_a_restart() {
    let mut store = testkit::TempStore::new();
    let key_file = store.dir().join("unseal.key");
    let snapshots = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_system_time();
    let harness = Harness::over(store.storage(), Some(key_file.clone()), clock.clone()).await;
    harness
        .configure(
            "steady",
            json!({"storage_type": "local", "interval": INTERVAL_SECS, "retain": 5, "path_prefix": snapshots.path().to_str().unwrap(), "local_max_space": 10_000_000}),
        )
        .await;
    let first = harness.next_run("steady").await;
    assert_eq!(first["last_snapshot_error"], "", "{first}");
    harness.stop().await;

    // Restarted half an interval later: nothing is due yet, so nothing runs...
    store.reopen().await;
    clock.advance(Duration::from_secs(INTERVAL_SECS / 2));
    let harness = Harness::over(store.storage(), Some(key_file), clock.clone()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = harness.status("steady").await;
    assert_eq!(
        status["last_snapshot_start"], first["last_snapshot_start"],
        "ran early after the restart"
    );
    // ...and the next run comes one interval after the first, not one after the restart.
    clock.advance(Duration::from_secs(INTERVAL_SECS / 2 + 1));
    let mut ran = false;
    for _ in 0..200 {
        if harness.status("steady").await["last_snapshot_start"] != first["last_snapshot_start"] {
            ran = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ran,
        "the run due before the restart's interval elapsed did not happen"
    );
    let files = std::fs::read_dir(snapshots.path()).unwrap().count();
    assert_eq!(files, 2);
    harness.stop().await;
}

// ---- Azurite: creating a container needs a Shared Key signed request -------------------

async fn create_azurite_container(container: &str) {
    use aws_lc_rs::hmac;
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    let date = http_date(std::time::SystemTime::now());
    let version = "2021-08-06";
    let resource = format!("/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container");
    let to_sign =
        format!("PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{resource}");
    let key = hmac::Key::new(hmac::HMAC_SHA256, &engine.decode(AZURITE_KEY).unwrap());
    let signature = engine.encode(hmac::sign(&key, to_sign.as_bytes()).as_ref());
    let authorization = format!("SharedKey {AZURITE_ACCOUNT}:{signature}");
    let created = raw(
        AZURITE_PORT,
        "PUT",
        &format!("/{AZURITE_ACCOUNT}/{container}?restype=container"),
        &[
            ("x-ms-date", &date),
            ("x-ms-version", version),
            ("Authorization", &authorization),
            ("Content-Length", "0"),
        ],
        b"",
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
}

/// RFC 1123 (`Tue, 03 Jun 2025 10:00:00 GMT`), as `x-ms-date` wants.
fn http_date(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = stdx::time::civil_from_days(days);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][month as usize - 1];
    format!(
        "{weekday}, {day:02} {month} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
