//! API tests of configuration versions: create (with the one-time signed upload URL), upload
//! without a bearer token (size limit, errored archives, identical and different repeats),
//! status and timestamps, list, show and `include`, ingress attributes, archive and its 409s,
//! downloads through signed redirects, and who may do what.

mod fixtures;
mod support;

use axum::body::Body;
use fixtures::{
    BlobPlatform, acme_web, config_archive, create_cv, gzip, new_cv, organization_token, path_of,
    read_cv, send_raw, tar_gz, team_token, upload, uploaded_cv,
};
use http::{Method, Request};
use platform::Config;
use serde_json::json;
use support::{ROOT, TestPlatform};

#[tokio::test]
async fn create_is_201_pending_with_absolute_upload_url_and_defaults() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let answer = create_cv(&platform, &ws, ROOT, json!({})).await.expect(201);
    let data = &answer.body["data"];
    assert_eq!(data["type"], "configuration-versions");
    let id = data["id"].as_str().unwrap();
    assert!(id.starts_with("cv-"));
    let attributes = &data["attributes"];
    assert_eq!(attributes["status"], "pending");
    assert_eq!(attributes["auto-queue-runs"], true);
    assert_eq!(attributes["speculative"], false);
    assert_eq!(attributes["provisional"], false);
    assert_eq!(attributes["source"], "tfe-api");
    assert_eq!(attributes["status-timestamps"], json!({}));
    assert_eq!(attributes["error"], json!(null));
    let url = attributes["upload-url"].as_str().unwrap();
    assert!(url.starts_with("http://"), "{url}");
    assert!(url.contains("/object/"), "{url}");
    assert_eq!(
        data["relationships"]["ingress-attributes"]["data"],
        json!(null)
    );
    assert_eq!(
        data["links"]["download"],
        format!("/api/v2/configuration-versions/{id}/download")
    );
}

#[tokio::test]
async fn create_takes_the_host_header_for_the_upload_url() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let request = Request::post(format!("/api/v2/workspaces/{ws}/configuration-versions"))
        .header("authorization", format!("Bearer {ROOT}"))
        .header("content-type", "application/vnd.api+json")
        .header("host", "tfe.internal:8080")
        .body(Body::from(r#"{"data":{"type":"configuration-versions"}}"#))
        .unwrap();
    let answer = platform.send(request).await.expect(201);
    let url = answer.body["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap();
    assert!(
        url.starts_with("http://tfe.internal:8080/_archivist/v1/object/"),
        "{url}"
    );
}

#[tokio::test]
async fn upload_url_is_shown_only_in_the_create_response() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let created = create_cv(&platform, &ws, ROOT, json!({"auto-queue-runs": false}))
        .await
        .expect(201);
    let id = created.body["data"]["id"].as_str().unwrap();
    let shown = read_cv(&platform, id).await;
    assert!(shown["data"]["attributes"].get("upload-url").is_none());
    let mut created_without_url = created.body["data"].clone();
    created_without_url["attributes"]
        .as_object_mut()
        .unwrap()
        .remove("upload-url");
    assert_eq!(shown["data"], created_without_url);
    let list = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(list.body["data"][0], created_without_url);
}

#[tokio::test]
async fn create_with_options_keeps_them() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let answer = create_cv(
        &platform,
        &ws,
        ROOT,
        json!({"auto-queue-runs": false, "speculative": true, "provisional": true}),
    )
    .await
    .expect(201);
    let attributes = &answer.body["data"]["attributes"];
    assert_eq!(attributes["auto-queue-runs"], false);
    assert_eq!(attributes["speculative"], true);
    assert_eq!(attributes["provisional"], true);
}

#[tokio::test]
async fn create_with_wrong_types_is_422_and_creates_nothing() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let answer = create_cv(&platform, &ws, ROOT, json!({"speculative": "yes"}))
        .await
        .expect(422);
    assert_eq!(
        answer.error()["source"]["pointer"],
        "/data/attributes/speculative"
    );
    let bad_type = platform
        .post(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            ROOT,
            json!({"data": {"type": "runs"}}),
        )
        .await
        .expect(422);
    assert_eq!(bad_type.error()["source"]["pointer"], "/data/type");
    let list = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(list.body["data"], json!([]));
}

#[tokio::test]
async fn organization_token_cannot_create_but_team_token_can() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let org_token = organization_token(&platform, "acme").await;
    create_cv(&platform, &ws, &org_token, json!({}))
        .await
        .expect(404);
    let owners = platform.owners_team("acme").await;
    let team = team_token(&platform, &owners).await;
    create_cv(&platform, &ws, &team, json!({}))
        .await
        .expect(201);
}

#[tokio::test]
async fn reader_cannot_create_and_missing_workspace_is_404() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let team = platform
        .create_team("acme", "readers", json!({"read-workspaces": true}))
        .await;
    let reader = platform.member("acme", "rita", &[&team]).await;
    create_cv(&platform, &ws, &reader.token, json!({}))
        .await
        .expect(404);
    platform
        .get(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            &reader.token,
        )
        .await
        .expect(200);
    create_cv(&platform, "ws-doesnotexist0000", ROOT, json!({}))
        .await
        .expect(404);
}

#[tokio::test]
async fn upload_without_bearer_moves_pending_to_uploaded_with_timestamps() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    let answer = upload(&platform, &url, config_archive()).await.expect(200);
    assert_eq!(answer.text, "");
    let shown = read_cv(&platform, &id).await;
    let attributes = &shown["data"]["attributes"];
    assert_eq!(attributes["status"], "uploaded");
    let timestamps = attributes["status-timestamps"].as_object().unwrap();
    for key in ["started-at", "finished-at", "uploaded-at"] {
        let at = timestamps[key].as_str().unwrap();
        assert!(at.ends_with('Z') && at.len() == 24, "{key}: {at}");
    }
}

#[tokio::test]
async fn upload_tolerates_authorization_and_jsonapi_accept_headers() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    let request = Request::put(path_of(&url))
        .header("authorization", "Bearer not-a-real-token")
        .header("accept", "application/vnd.api+json")
        .header("content-type", "application/vnd.api+json")
        .body(Body::from(config_archive()))
        .unwrap();
    platform.send(request).await.expect(200);
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["status"],
        "uploaded"
    );
}

#[tokio::test]
async fn upload_without_content_length_is_streamed() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    let archive = config_archive();
    let (first, second) = archive.split_at(archive.len() / 2);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(first.to_vec()), Ok(second.to_vec())];
    let request = Request::put(path_of(&url))
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    platform.send(request).await.expect(200);
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["status"],
        "uploaded"
    );
}

#[tokio::test]
async fn identical_repeated_upload_succeeds_and_different_one_is_409() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    upload(&platform, &url, config_archive()).await.expect(200);
    let other = tar_gz(&[("other.tf", b"# other\n")]);
    let answer = upload(&platform, &url, other).await.expect(409);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("different archive")
    );
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["status"],
        "uploaded"
    );
    let download = download_bytes(&platform, &id).await;
    assert_eq!(download, config_archive());
}

#[tokio::test]
async fn upload_over_the_limit_is_422_with_the_limit_and_stays_pending() {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        max_upload_bytes: Some(1024),
        ..Config::default()
    })
    .await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    let big = vec![0x1f; 4096];
    let answer = upload(&platform, &url, big.clone()).await.expect(422);
    let detail = answer.error()["detail"].as_str().unwrap();
    assert!(
        detail.contains("larger than the limit of 1024 bytes"),
        "{detail}"
    );
    // Without Content-Length the limit is enforced while streaming.
    let request = Request::put(path_of(&url))
        .body(Body::from_stream(futures::stream::iter(vec![
            Ok::<_, std::io::Error>(big[..800].to_vec()),
            Ok(big[800..].to_vec()),
        ])))
        .unwrap();
    platform.send(request).await.expect(422);
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["status"],
        "pending"
    );
    // Nothing was lost: a proper upload still works.
    upload(&platform, &url, config_archive()).await.expect(200);
}

#[tokio::test]
async fn upload_of_non_gzip_errors_the_version() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    let answer = upload(&platform, &url, b"definitely not an archive".to_vec())
        .await
        .expect(422);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("not gzip"),
        "{}",
        answer.text
    );
    let attributes = read_cv(&platform, &id).await["data"]["attributes"].clone();
    assert_eq!(attributes["status"], "errored");
    assert_eq!(attributes["error"], "archive_not_gzip");
    assert!(
        attributes["error-message"]
            .as_str()
            .unwrap()
            .contains("gzip")
    );
    assert!(attributes["status-timestamps"]["errored-at"].is_string());
    // An errored version queues no run and is not current.
    let runs = platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), ROOT)
        .await
        .expect(200);
    assert_eq!(runs.body["data"], json!([]));
    // The same bytes again get the same answer; other bytes a 409.
    upload(&platform, &url, b"definitely not an archive".to_vec())
        .await
        .expect(422);
    upload(&platform, &url, config_archive()).await.expect(409);
    platform
        .get(
            &format!("/api/v2/configuration-versions/{id}/download"),
            ROOT,
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn upload_of_gzip_that_is_not_tar_errors_the_version() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    upload(&platform, &url, gzip(b"plain text, gzipped"))
        .await
        .expect(422);
    let attributes = read_cv(&platform, &id).await["data"]["attributes"].clone();
    assert_eq!(attributes["status"], "errored");
    assert_eq!(attributes["error"], "archive_not_tar");
}

#[tokio::test]
async fn upload_of_truncated_archive_errors_the_version() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    let archive = tar_gz(&[("main.tf", &[b'x'; 50_000])]);
    upload(&platform, &url, archive[..archive.len() / 2].to_vec())
        .await
        .expect(422);
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["error"],
        "archive_corrupt"
    );
}

#[tokio::test]
async fn upload_with_bad_or_tampered_signature_is_404() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    let path = path_of(&url);
    let tampered = path.replacen(".", ".A", 1);
    for bad in [
        tampered,
        format!("/_archivist/v1/object/1.abc/configuration-versions/{id}"),
        path.replace(&id, "cv-0000000000000000"),
    ] {
        let request = Request::put(bad.as_str())
            .body(Body::from(config_archive()))
            .unwrap();
        platform.send(request).await.expect(404);
    }
    // A download URL never authorises an upload.
    let (other, other_url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    upload(&platform, &other_url, config_archive())
        .await
        .expect(200);
    let location = redirect(
        &platform,
        &format!("/api/v2/configuration-versions/{other}/download"),
    )
    .await;
    let request = Request::put(path_of(&location))
        .body(Body::from(config_archive()))
        .unwrap();
    platform.send(request).await.expect(404);
    assert_eq!(
        read_cv(&platform, &id).await["data"]["attributes"]["status"],
        "pending"
    );
}

async fn redirect(platform: &TestPlatform, path: &str) -> String {
    let answer = platform.get(path, ROOT).await.expect(302);
    answer.headers["location"].to_str().unwrap().to_owned()
}

async fn download_bytes(platform: &TestPlatform, id: &str) -> Vec<u8> {
    let location = redirect(
        platform,
        &format!("/api/v2/configuration-versions/{id}/download"),
    )
    .await;
    // pytfe follows a same-origin redirect with its bearer and JSON:API Accept header.
    let request = Request::get(path_of(&location))
        .header("authorization", "Bearer whatever")
        .header("accept", "application/vnd.api+json")
        .body(Body::empty())
        .unwrap();
    let (status, headers, bytes) = send_raw(&platform.state, request).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/octet-stream");
    bytes.to_vec()
}

#[tokio::test]
async fn download_redirects_to_a_signed_url_that_needs_no_bearer() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let location = redirect(
        &platform,
        &format!("/api/v2/configuration-versions/{id}/download"),
    )
    .await;
    assert!(location.starts_with("http://"), "{location}");
    assert!(
        location.ends_with(&format!("/configuration-versions/{id}.tar.gz")),
        "{location}"
    );
    let request = Request::get(path_of(&location))
        .body(Body::empty())
        .unwrap();
    let (status, _, bytes) = send_raw(&platform.state, request).await;
    assert_eq!(status, 200);
    assert_eq!(bytes.as_ref(), config_archive().as_slice());
    // Clients that follow the redirect with their bearer and JSON:API Accept also get it.
    assert_eq!(download_bytes(&platform, &id).await, config_archive());
}

#[tokio::test]
async fn download_before_upload_or_with_bad_signature_is_404() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, _) = new_cv(&platform, &ws, json!({})).await;
    platform
        .get(
            &format!("/api/v2/configuration-versions/{id}/download"),
            ROOT,
        )
        .await
        .expect(404);
    platform
        .get("/api/v2/configuration-versions/cv-none/download", ROOT)
        .await
        .expect(404);
    let request = Request::get(format!(
        "/_archivist/v1/object/99999999999.AAAA/configuration-versions/{id}.tar.gz"
    ))
    .body(Body::empty())
    .unwrap();
    platform.send(request).await.expect(404);
}

#[tokio::test]
async fn run_download_redirects_to_the_runs_archive() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let runs = platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), ROOT)
        .await
        .expect(200);
    let run = runs.body["data"][0]["id"].as_str().unwrap().to_owned();
    let location = redirect(
        &platform,
        &format!("/api/v2/runs/{run}/configuration-version/download"),
    )
    .await;
    assert!(location.contains(&id), "{location}");
    platform
        .get("/api/v2/runs/run-none/configuration-version/download", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn list_is_newest_first_and_paged() {
    // The clock stands still: all three versions are created in one millisecond.
    let platform = TestPlatform::with_clock(&testkit::ManualClock::at_system_time()).await;
    let ws = acme_web(&platform).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            new_cv(&platform, &ws, json!({"auto-queue-runs": false}))
                .await
                .0,
        );
    }
    let page = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/configuration-versions?page[size]=2"),
            ROOT,
        )
        .await
        .expect(200);
    let got: Vec<&str> = page.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cv| cv["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[2].as_str(), ids[1].as_str()]);
    assert_eq!(page.body["meta"]["pagination"]["total-count"], 3);
    assert_eq!(page.body["meta"]["pagination"]["next-page"], 2);
}

#[tokio::test]
async fn show_with_include_run_and_ingress_attributes() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let shown = platform
        .get(
            &format!("/api/v2/configuration-versions/{id}?include=ingress_attributes,run"),
            ROOT,
        )
        .await
        .expect(200);
    let included = shown.body["included"].as_array().unwrap();
    assert_eq!(included.len(), 1);
    assert_eq!(included[0]["type"], "runs");
    platform
        .get(
            &format!("/api/v2/configuration-versions/{id}?include=ingress-attributes"),
            ROOT,
        )
        .await
        .expect(200);
    platform
        .get(
            &format!("/api/v2/configuration-versions/{id}?include=bogus"),
            ROOT,
        )
        .await
        .expect(400);
}

#[tokio::test]
async fn ingress_attributes_of_an_api_version_are_null() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, _) = new_cv(&platform, &ws, json!({})).await;
    let answer = platform
        .get(
            &format!("/api/v2/configuration-versions/{id}/ingress-attributes"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(answer.body, json!({"data": null}));
    platform
        .get(
            "/api/v2/configuration-versions/cv-none/ingress-attributes",
            ROOT,
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn archive_of_current_version_is_409_with_go_tfe_wording() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let id = uploaded_cv(&platform, &ws).await;
    let answer = platform
        .post(
            &format!("/api/v2/configuration-versions/{id}/actions/archive"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    let error = answer.error();
    assert_eq!(error["title"], "transition not allowed");
    assert_eq!(
        error["detail"],
        "configuration could not be archived because it is current"
    );
}

#[tokio::test]
async fn archive_of_pending_version_is_409() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, _) = new_cv(&platform, &ws, json!({})).await;
    let answer = platform
        .post(
            &format!("/api/v2/configuration-versions/{id}/actions/archive"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("not been uploaded")
    );
}

#[tokio::test]
async fn archive_with_a_run_in_progress_is_409() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (first, url) = new_cv(&platform, &ws, json!({})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    uploaded_cv(&platform, &ws).await;
    let answer = platform
        .post(
            &format!("/api/v2/configuration-versions/{first}/actions/archive"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("runs in progress")
    );
}

#[tokio::test]
async fn archive_of_an_older_version_is_202_then_archived_and_gone() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let old = uploaded_cv(&platform, &ws).await;
    uploaded_cv(&platform, &ws).await;
    let answer = platform
        .post(
            &format!("/api/v2/configuration-versions/{old}/actions/archive"),
            ROOT,
            json!(null),
        )
        .await
        .expect(202);
    assert_eq!(answer.text, "");
    let attributes = read_cv(&platform, &old).await["data"]["attributes"].clone();
    assert_eq!(attributes["status"], "archived");
    assert!(attributes["status-timestamps"]["archived-at"].is_string());
    platform
        .get(
            &format!("/api/v2/configuration-versions/{old}/download"),
            ROOT,
        )
        .await
        .expect(404);
    platform
        .post(
            &format!("/api/v2/configuration-versions/{old}/actions/archive"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    platform
        .post(
            "/api/v2/configuration-versions/cv-none/actions/archive",
            ROOT,
            json!(null),
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn archive_deletes_the_archive_file() {
    let platform = BlobPlatform::new().await;
    let org = json!({"data": {"type": "organizations", "attributes": {"name": "acme", "email": "a@acme.io"}}});
    assert_eq!(
        platform
            .call(Method::POST, "/api/v2/organizations", Some(org))
            .await
            .0,
        201
    );
    let ws = json!({"data": {"type": "workspaces", "attributes": {"name": "web"}}});
    let (_, ws) = platform
        .call(
            Method::POST,
            "/api/v2/organizations/acme/workspaces",
            Some(ws),
        )
        .await;
    let ws = ws["data"]["id"].as_str().unwrap().to_owned();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let body = json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": false}}});
        let (status, cv) = platform
            .call(
                Method::POST,
                &format!("/api/v2/workspaces/{ws}/configuration-versions"),
                Some(body),
            )
            .await;
        assert_eq!(status, 201);
        let url = cv["data"]["attributes"]["upload-url"].as_str().unwrap();
        let request = Request::put(path_of(url))
            .body(Body::from(config_archive()))
            .unwrap();
        assert_eq!(send_raw(&platform.state, request).await.0, 200);
        ids.push(cv["data"]["id"].as_str().unwrap().to_owned());
    }
    let holds = |id: &str| {
        platform
            .files()
            .iter()
            .any(|file| file.to_string_lossy().contains(id))
    };
    assert!(holds(&ids[0]) && holds(&ids[1]));
    let archive = format!("/api/v2/configuration-versions/{}/actions/archive", ids[0]);
    assert_eq!(platform.call(Method::POST, &archive, None).await.0, 202);
    assert!(!holds(&ids[0]), "{:?}", platform.files());
    assert!(holds(&ids[1]));
}

#[tokio::test]
async fn download_returns_the_exact_bytes() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (id, url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    let archive = tar_gz(&[("main.tf", &[0xfe, 0x00, 0xff]), ("sub/x.tf", b"y")]);
    upload(&platform, &url, archive.clone()).await.expect(200);
    let location = redirect(
        &platform,
        &format!("/api/v2/configuration-versions/{id}/download"),
    )
    .await;
    let request = Request::get(path_of(&location))
        .body(Body::empty())
        .unwrap();
    let (status, headers, bytes) = send_raw(&platform.state, request).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-length"], archive.len().to_string());
    assert_eq!(bytes.as_ref(), archive.as_slice());
}

#[tokio::test]
async fn configuration_version_list_page_reads_only_the_versions_on_the_page() {
    let (platform, storage) = TestPlatform::counting().await;
    let ws = acme_web(&platform).await;
    let mut created = Vec::new();
    for _ in 0..12 {
        created.push(new_cv(&platform, &ws, json!({})).await.0);
    }
    storage.reset();
    let page = platform
        .get(
            &format!(
                "/api/v2/workspaces/{ws}/configuration-versions?page%5Bnumber%5D=2&page%5Bsize%5D=5"
            ),
            ROOT,
        )
        .await
        .expect(200);
    let ids: Vec<&str> = page.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cv| cv["id"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = created.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first[5..10]);
    assert_eq!(page.body["meta"]["pagination"]["total-count"], 12);
    assert_eq!(storage.reads_under("platform/configuration-versions/"), 5);
}
