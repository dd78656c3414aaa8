//! The site data retention policy applied by the platform's background loop (started by
//! `platform::start_tasks` through a `cluster::Runner`, on a manual clock): configuration
//! versions older than `delete-older-than-n-days` lose their archive (file deleted, status
//! `archived`), while younger ones, the workspace's current one, and everything when no
//! policy is set, are kept.

mod fixtures;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use fixtures::{config_archive, path_of};
use http::{Method, Request};
use serde_json::{Value, json};
use storage::Storage;
use testkit::ManualClock;
use tokio_util::sync::CancellationToken;

#[path = "support/mod.rs"]
mod support;

use support::ROOT;

const DAY_MS: u64 = 86_400_000;

struct Site {
    router: Router,
    blob_dir: tempfile::TempDir,
    clock: ManualClock,
    runner: cluster::Runner,
}

impl Site {
    async fn start() -> Site {
        let blob_dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::at_system_time();
        let config = platform::Config {
            dev_root_token: Some(ROOT.to_owned()),
            api_rate_limiting_enabled: false,
            blob_dir: blob_dir.path().to_path_buf(),
            ..platform::Config::default()
        };
        let storage = testkit::mem_storage();
        let opened = platform::State::open_with_clock(
            storage as Arc<dyn Storage>,
            config,
            Arc::new(clock.clone()),
        )
        .await
        .expect("open");
        let runner = cluster::Runner::embedded(CancellationToken::new());
        platform::start_tasks(&opened.state, &runner);
        Site {
            router: platform::router(opened.state),
            blob_dir,
            clock,
            runner,
        }
    }

    async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {ROOT}"))
            .header("content-type", "application/vnd.api+json")
            .body(body.map_or_else(Body::empty, |body| Body::from(body.to_string())))
            .expect("request");
        let response = testkit::call(&self.router, request).await;
        (
            response.status.as_u16(),
            serde_json::from_slice(&response.body).unwrap_or(Value::Null),
        )
    }

    /// A configuration version of `workspace`, uploaded: its id.
    async fn uploaded_cv(&self, workspace: &str) -> String {
        let body = json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": false}}});
        let (status, cv) = self
            .call(
                Method::POST,
                &format!("/api/v2/workspaces/{workspace}/configuration-versions"),
                Some(body),
            )
            .await;
        assert_eq!(status, 201);
        let url = cv["data"]["attributes"]["upload-url"].as_str().unwrap();
        let request = Request::put(path_of(url))
            .body(Body::from(config_archive()))
            .unwrap();
        assert_eq!(testkit::call(&self.router, request).await.status, 200);
        cv["data"]["id"].as_str().unwrap().to_owned()
    }

    async fn status(&self, cv: &str) -> String {
        let (_, body) = self
            .call(
                Method::GET,
                &format!("/api/v2/configuration-versions/{cv}"),
                None,
            )
            .await;
        body["data"]["attributes"]["status"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn holds_archive(&self, cv: &str) -> bool {
        let mut stack = vec![self.blob_dir.path().to_path_buf()];
        let mut files: Vec<PathBuf> = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    stack.push(entry.path());
                } else {
                    files.push(entry.path());
                }
            }
        }
        files.iter().any(|file| file.to_string_lossy().contains(cv))
    }

    /// Waits (a few seconds at most) until `cv` is archived.
    async fn wait_archived(&self, cv: &str) {
        for _ in 0..200 {
            if self.status(cv).await == "archived" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        panic!("{cv} was not archived");
    }
}

#[tokio::test]
async fn archives_older_than_the_policy_are_deleted_by_the_background_loop() {
    let site = Site::start().await;
    let (status, _) = site
        .call(
            Method::POST,
            "/api/v2/organizations",
            Some(json!({"data": {"type": "organizations", "attributes": {"name": "acme", "email": "a@acme.test"}}})),
        )
        .await;
    assert_eq!(status, 201);
    let (_, ws) = site
        .call(
            Method::POST,
            "/api/v2/organizations/acme/workspaces",
            Some(json!({"data": {"type": "workspaces", "attributes": {"name": "web"}}})),
        )
        .await;
    let ws = ws["data"]["id"].as_str().unwrap().to_owned();
    let oldest = site.uploaded_cv(&ws).await;
    let old = site.uploaded_cv(&ws).await;
    site.clock.advance_ms(20 * DAY_MS);
    let recent = site.uploaded_cv(&ws).await;
    let current = site.uploaded_cv(&ws).await;
    site.clock.advance_ms(15 * DAY_MS);

    // No policy: everything is kept, whatever its age.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for cv in [&oldest, &old, &recent, &current] {
        assert_eq!(site.status(cv).await, "uploaded");
        assert!(site.holds_archive(cv));
    }

    // 30 days: the two versions 35 days old go at once; the one 15 days old and the current
    // one stay.
    let (status, _) = site
        .call(
            Method::POST,
            "/api/v2/admin/data-retention-policy-settings",
            Some(
                json!({"data": {"type": "data-retention-policy-delete-olders",
                                 "attributes": {"delete-older-than-n-days": 30}}}),
            ),
        )
        .await;
    assert_eq!(status, 201);
    site.wait_archived(&oldest).await;
    site.wait_archived(&old).await;
    assert!(!site.holds_archive(&oldest) && !site.holds_archive(&old));
    let (status, _) = site
        .call(
            Method::GET,
            &format!("/api/v2/configuration-versions/{old}/download"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(site.status(&recent).await, "uploaded");
    assert!(site.holds_archive(&recent));

    // Time passes: the next one expires when the clock moves past it; the current one never.
    site.clock.advance_ms(20 * DAY_MS);
    site.wait_archived(&recent).await;
    assert!(!site.holds_archive(&recent));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(site.status(&current).await, "uploaded");
    assert!(site.holds_archive(&current));
    site.runner.shutdown_and_wait().await;
}
