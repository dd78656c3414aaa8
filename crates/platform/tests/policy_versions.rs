//! API tests of the policy-engine version catalogue at `/api/v2/admin/policy-engine-versions`
//! and upstream's `/api/v2/admin/sentinel-versions`: defaults on create, validation as 422s,
//! unique versions, `filter[version]` over `search[version]`, paging, usage counted from
//! workspaces, deletes refused for official and used versions, and 404 for anyone but a site
//! administrator.

mod support;

use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

const URI: &str = "/api/v2/admin/policy-engine-versions";

fn sha(fill: char) -> String {
    std::iter::repeat_n(fill, 64).collect()
}

fn version(attributes: Value) -> Value {
    json!({"data": {"type": "policy-engine-versions", "attributes": attributes}})
}

async fn create(platform: &TestPlatform, engine_version: &str) -> Value {
    platform
        .post(
            URI,
            ROOT,
            version(json!({"version": engine_version,
                           "url": format!("https://releases.example.com/sentinel_{engine_version}.zip"),
                           "sha": sha('a')})),
        )
        .await
        .expect(201)
        .body["data"]
        .clone()
}

#[tokio::test]
async fn create_applies_the_defaults_and_reads_back_at_both_paths() {
    let platform = TestPlatform::new().await;
    let created = create(&platform, "0.26.0").await;
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("tool-"), "{id}");
    assert_eq!(created["type"], "policy-engine-versions");
    let attributes = &created["attributes"];
    assert_eq!(attributes["version"], "0.26.0");
    assert_eq!(attributes["enabled"], true);
    assert_eq!(attributes["official"], false);
    assert_eq!(attributes["beta"], false);
    assert_eq!(attributes["deprecated"], false);
    assert!(attributes["deprecated-reason"].is_null());
    assert_eq!(attributes["usage"], 0);
    assert!(attributes["created-at"].as_str().unwrap().ends_with('Z'));
    let shown = platform.get(&format!("{URI}/{id}"), ROOT).await.expect(200);
    assert_eq!(shown.body["data"], created);
    let sentinel = platform
        .get(&format!("/api/v2/admin/sentinel-versions/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(sentinel.body["data"]["type"], "sentinel-versions");
    assert_eq!(sentinel.body["data"]["attributes"], created["attributes"]);
    platform
        .get(&format!("{URI}/tool-missing"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn invalid_or_missing_attributes_and_taken_versions_are_422() {
    let platform = TestPlatform::new().await;
    let good = json!({"version": "1.2.3", "url": "https://example.com/s.zip", "sha": sha('b')});
    for (name, bad) in [
        ("version", json!("1.2")),
        ("version", json!("v1.2.3")),
        ("version", json!(null)),
        ("url", json!("http://example.com/s.zip")),
        ("url", json!("not a url")),
        ("sha", json!("abc123")),
        ("sha", json!(sha('z'))),
    ] {
        let mut attributes = good.clone();
        attributes[name] = bad.clone();
        let answer = platform
            .post(URI, ROOT, version(attributes))
            .await
            .expect(422);
        assert_eq!(
            answer.error()["source"]["pointer"],
            format!("/data/attributes/{name}"),
            "{name}: {bad}"
        );
    }
    platform
        .post(URI, ROOT, version(good.clone()))
        .await
        .expect(201);
    let taken = platform.post(URI, ROOT, version(good)).await.expect(422);
    assert!(taken.error()["detail"].as_str().unwrap().contains("taken"));
    // A bundle name is allowed.
    create(&platform, "1.2.3-bundle").await;
}

#[tokio::test]
async fn filter_wins_over_search_and_lists_are_paged() {
    let platform = TestPlatform::new().await;
    for engine_version in ["0.24.0", "0.25.0", "0.25.1", "0.26.0"] {
        create(&platform, engine_version).await;
    }
    let versions = |body: &Value| -> Vec<String> {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["attributes"]["version"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = platform.get(URI, ROOT).await.expect(200);
    assert_eq!(
        versions(&all.body),
        ["0.24.0", "0.25.0", "0.25.1", "0.26.0"]
    );
    assert_eq!(all.body["meta"]["pagination"]["total-count"], 4);
    let search = platform
        .get(&format!("{URI}?search%5Bversion%5D=0.25"), ROOT)
        .await
        .expect(200);
    assert_eq!(versions(&search.body), ["0.25.0", "0.25.1"]);
    let exact = platform
        .get(
            &format!("{URI}?filter%5Bversion%5D=0.25.0&search%5Bversion%5D=0.2"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(versions(&exact.body), ["0.25.0"]);
    let page = platform
        .get(
            "/api/v2/admin/sentinel-versions?page%5Bsize%5D=3&page%5Bnumber%5D=2",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(versions(&page.body), ["0.26.0"]);
    assert_eq!(page.body["data"][0]["type"], "sentinel-versions");
    assert_eq!(page.body["meta"]["pagination"]["total-pages"], 2);
    assert!(page.body["meta"]["pagination"]["next-page"].is_null());
}

#[tokio::test]
async fn update_keeps_omitted_attributes_and_clears_the_reason_when_undeprecated() {
    let platform = TestPlatform::new().await;
    let id = create(&platform, "0.26.0").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    create(&platform, "0.27.0").await;
    let uri = format!("{URI}/{id}");
    let updated = platform
        .patch(
            &uri,
            ROOT,
            version(json!({"deprecated": true, "deprecated-reason": "CVE", "beta": true})),
        )
        .await
        .expect(200);
    let attributes = &updated.body["data"]["attributes"];
    assert_eq!(attributes["deprecated"], true);
    assert_eq!(attributes["deprecated-reason"], "CVE");
    assert_eq!(attributes["beta"], true);
    assert_eq!(attributes["version"], "0.26.0");
    let undeprecated = platform
        .patch(&uri, ROOT, version(json!({"deprecated": false})))
        .await
        .expect(200);
    assert!(undeprecated.body["data"]["attributes"]["deprecated-reason"].is_null());
    platform
        .patch(&uri, ROOT, version(json!({"version": "0.27.0"})))
        .await
        .expect(422);
    platform
        .patch(&uri, ROOT, version(json!({"sha": "short"})))
        .await
        .expect(422);
    let renamed = platform
        .patch(&uri, ROOT, version(json!({"version": "0.26.1"})))
        .await
        .expect(200);
    assert_eq!(renamed.body["data"]["attributes"]["version"], "0.26.1");
    // The old name is free again.
    create(&platform, "0.26.0").await;
}

#[tokio::test]
async fn usage_counts_workspaces_and_official_or_used_versions_cannot_be_deleted() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let used = create(&platform, "0.26.0").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let official = platform
        .post(
            URI,
            ROOT,
            version(
                json!({"version": "0.25.0", "url": "https://example.com/s.zip",
                           "sha": sha('c'), "official": true}),
            ),
        )
        .await
        .expect(201)
        .body["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let unused = create(&platform, "0.24.0").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for name in ["one", "two"] {
        platform
            .post(
                "/api/v2/organizations/acme/workspaces",
                ROOT,
                json!({"data": {"type": "workspaces", "attributes": {
                    "name": name, "policy-engine-version": "0.26.0"
                }}}),
            )
            .await
            .expect(201);
    }
    let shown = platform
        .get(&format!("{URI}/{used}"), ROOT)
        .await
        .expect(200);
    assert_eq!(shown.body["data"]["attributes"]["usage"], 2);
    let refused = platform
        .delete(&format!("{URI}/{used}"), ROOT)
        .await
        .expect(422);
    assert!(refused.error()["detail"].as_str().unwrap().contains("used"));
    let refused = platform
        .delete(&format!("/api/v2/admin/sentinel-versions/{official}"), ROOT)
        .await
        .expect(422);
    assert!(
        refused.error()["detail"]
            .as_str()
            .unwrap()
            .contains("official")
    );
    platform
        .delete(&format!("{URI}/{unused}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("{URI}/{unused}"), ROOT)
        .await
        .expect(404);
    platform
        .delete(&format!("{URI}/{unused}"), ROOT)
        .await
        .expect(404);
    // A workspace moved off the version frees it.
    for name in ["one", "two"] {
        platform
            .patch(
                &format!("/api/v2/organizations/acme/workspaces/{name}"),
                ROOT,
                json!({"data": {"type": "workspaces", "attributes": {"policy-engine-version": null}}}),
            )
            .await
            .expect(200);
    }
    platform
        .delete(&format!("{URI}/{used}"), ROOT)
        .await
        .expect(204);
}

#[tokio::test]
async fn only_site_administrators_see_the_catalogue() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let owner = platform.member("acme", "olivia", &[&owners]).await;
    let id = create(&platform, "0.26.0").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    platform.get(URI, &owner.token).await.expect(404);
    platform
        .get(&format!("{URI}/{id}"), &owner.token)
        .await
        .expect(404);
    platform
        .post(
            URI,
            &owner.token,
            version(json!({"version": "1.0.0", "url": "https://e.com/s", "sha": sha('d')})),
        )
        .await
        .expect(404);
    platform
        .delete(&format!("{URI}/{id}"), &owner.token)
        .await
        .expect(404);
}
