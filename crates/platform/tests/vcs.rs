//! Publishing modules from a git repository: OAuth clients and tokens, a module published from
//! the semver tags of a repository served over HTTP on 127.0.0.1, and the webhook that
//! publishes a new tag after a push.
//!
//! The git host is a small static file server (`testkit::TestServer`) over bare repositories
//! prepared with `git update-server-info`: git's "dumb" HTTP protocol, plain HTTP on loopback
//! (the product speaks HTTPS to real hosts the same way). It requires the OAuth token as the
//! Basic password, so the tests also show that the token is what authenticates the clone.
//! The repositories are made with the system `git`.

mod fixtures;
mod registry_modules_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use fixtures::path_of;
use http::{Method, StatusCode};
use registry_modules_support::{MAIN_TF, module_files};
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

/// The OAuth token the git host accepts.
const TOKEN: &str = "vcs-secret-token";

/// Runs git in `dir` with a fixed identity and no user configuration.
fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("git runs (install git)");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn write(dir: &Path, files: &[(&str, &[u8])]) {
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// A working repository and the bare repository the host serves.
struct Repository {
    work: PathBuf,
    bare: PathBuf,
}

impl Repository {
    /// `acme-git/terraform-aws-vpc` with tags `0.9.0` (the module in a subdirectory: not a
    /// valid module), `v1.0.0` (annotated, the module at the root) and `release` (not semver).
    fn new(root: &Path) -> Repository {
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        write(&work, &[("vpc/main.tf", b"variable \"x\" {}\n")]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "nested"]);
        git(&work, &["tag", "0.9.0"]);
        git(&work, &["rm", "-q", "-r", "vpc"]);
        write(&work, &module_files());
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "module at the root"]);
        git(&work, &["tag", "-a", "v1.0.0", "-m", "first release"]);
        git(&work, &["tag", "release"]);
        let bare = root.join("served/acme-git/terraform-aws-vpc.git");
        std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
        git(
            root,
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().unwrap(),
                bare.to_str().unwrap(),
            ],
        );
        git(&bare, &["update-server-info"]);
        Repository { work, bare }
    }

    /// Commits a change, tags it `tag` and pushes the tag to the served repository.
    fn push_tag(&self, tag: &str) {
        write(
            &self.work,
            &[(
                "versions.tf",
                b"terraform {\n  required_version = \">= 1.5\"\n}\n",
            )],
        );
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", "require terraform 1.5"]);
        git(&self.work, &["tag", tag]);
        git(
            &self.work,
            &["push", "-q", self.bare.to_str().unwrap(), tag],
        );
        git(&self.bare, &["update-server-info"]);
    }
}

/// Serves the files under its root, to requests authenticated with [`TOKEN`] only.
async fn serve_file(State(root): State<PathBuf>, request: Request) -> Response {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN}"))
    );
    let authorized = request
        .headers()
        .get("authorization")
        .is_some_and(|value| value.as_bytes() == expected.as_bytes());
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Basic realm=\"git\"")],
        )
            .into_response();
    }
    let relative = request.uri().path().trim_start_matches('/');
    if relative.split('/').any(|part| part == "..") {
        return StatusCode::NOT_FOUND.into_response();
    }
    match std::fs::read(root.join(relative)) {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A git host over `root` on 127.0.0.1.
async fn git_host(root: PathBuf) -> testkit::TestServer {
    testkit::TestServer::start(Router::new().fallback(serve_file).with_state(root)).await
}

/// Creates an OAuth client for `http_url` with `token`; `(client id, oauth token id)`.
async fn oauth_client(platform: &TestPlatform, http_url: &str, token: &str) -> (String, String) {
    let answer = platform
        .post(
            "/api/v2/organizations/acme/oauth-clients",
            ROOT,
            json!({"data": {"type": "oauth-clients", "attributes": {
                "name": "git host",
                "service-provider": "github",
                "http-url": http_url,
                "api-url": http_url,
                "oauth-token-string": token,
            }}}),
        )
        .await
        .expect(201);
    let data = &answer.body["data"];
    (
        data["id"].as_str().unwrap().to_owned(),
        data["relationships"]["oauth-tokens"]["data"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

async fn publish_from_vcs(platform: &TestPlatform, token_id: &str) -> Value {
    platform
        .post(
            "/api/v2/organizations/acme/registry-modules/vcs",
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {"vcs-repo": {
                "identifier": "acme-git/terraform-aws-vpc",
                "oauth-token-id": token_id,
                "display_identifier": "acme-git/terraform-aws-vpc",
            }}}}),
        )
        .await
        .expect(201)
        .body
}

#[tokio::test]
async fn oauth_clients_keep_the_token_secret_and_list_read_update_delete() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let (client_id, token_id) = oauth_client(&platform, "https://git.example.com", TOKEN).await;
    let read = platform
        .get(&format!("/api/v2/oauth-clients/{client_id}"), ROOT)
        .await
        .expect(200);
    let attributes = &read.body["data"]["attributes"];
    assert_eq!(attributes["service-provider"], "github");
    assert_eq!(attributes["http-url"], "https://git.example.com");
    assert!(!read.text.contains(TOKEN), "{}", read.text);
    let tokens = platform
        .get("/api/v2/organizations/acme/oauth-tokens", ROOT)
        .await
        .expect(200);
    assert_eq!(tokens.body["data"][0]["id"], token_id.as_str());
    assert_eq!(tokens.body["data"][0]["attributes"]["has-ssh-key"], false);
    let listed = platform
        .get(
            &format!("/api/v2/oauth-clients/{client_id}/oauth-tokens"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(listed.body["data"][0]["id"], token_id.as_str());
    platform
        .get("/api/v2/organizations/acme/oauth-clients", ROOT)
        .await
        .expect(200);
    for attributes in [
        json!({"service-provider": "github", "http-url": "git.example.com", "api-url": "https://x"}),
        json!({"service-provider": "sourceforge", "http-url": "https://x", "api-url": "https://x"}),
        json!({"http-url": "https://x", "api-url": "https://x"}),
    ] {
        platform
            .post(
                "/api/v2/organizations/acme/oauth-clients",
                ROOT,
                json!({"data": {"type": "oauth-clients", "attributes": attributes}}),
            )
            .await
            .expect(422);
    }
    let renamed = platform
        .patch(
            &format!("/api/v2/oauth-clients/{client_id}"),
            ROOT,
            json!({"data": {"type": "oauth-clients", "attributes": {"name": "renamed"}}}),
        )
        .await
        .expect(200);
    assert_eq!(renamed.body["data"]["attributes"]["name"], "renamed");
    platform
        .delete(&format!("/api/v2/oauth-clients/{client_id}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/oauth-tokens/{token_id}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn a_module_is_published_from_every_semver_tag_and_new_tags_through_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let repository = Repository::new(dir.path());
    let host = git_host(dir.path().join("served")).await;
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let (_, token_id) = oauth_client(&platform, &host.url(""), TOKEN).await;

    let created = publish_from_vcs(&platform, &token_id).await;
    let attributes = &created["data"]["attributes"];
    assert_eq!(attributes["name"], "vpc");
    assert_eq!(attributes["provider"], "aws");
    assert_eq!(attributes["namespace"], "acme");
    assert_eq!(attributes["publishing-mechanism"], "git_tag");
    assert_eq!(attributes["status"], "setup_complete");
    let statuses = attributes["version-statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    assert_eq!(statuses[0]["version"], "1.0.0");
    assert_eq!(statuses[0]["status"], "ok");
    assert_eq!(statuses[1]["version"], "0.9.0");
    assert_eq!(statuses[1]["status"], "reg_ingress_failed");
    let vcs = &attributes["vcs-repo"];
    assert_eq!(vcs["identifier"], "acme-git/terraform-aws-vpc");
    assert_eq!(vcs["oauth-token-id"], token_id.as_str());
    assert_eq!(vcs["tags"], true);
    let webhook = vcs["webhook-url"].as_str().unwrap().to_owned();
    assert!(webhook.starts_with("http://"), "{webhook}");

    // The published version is the tagged tree, parsed.
    let detail = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/1.0.0", ROOT)
        .await
        .expect(200);
    assert_eq!(detail.body["tag"], "v1.0.0");
    assert_eq!(detail.body["root"]["inputs"].as_array().unwrap().len(), 3);
    assert_eq!(detail.body["submodules"][0]["path"], "modules/subnets");
    let download = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/1.0.0/download", ROOT)
        .await
        .expect(204);
    let location = download.headers["x-terraform-get"].to_str().unwrap();
    let archive = platform
        .call(Method::GET, &path_of(location), None, None)
        .await
        .expect(200);
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&archive.bytes[..]));
    let mut main = None;
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_str() == Some("main.tf") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            main = Some(text);
        }
    }
    assert_eq!(main.as_deref(), Some(MAIN_TF));

    // A push of a new tag reaches the webhook, which publishes it (once).
    repository.push_tag("v1.1.0");
    let request = http::Request::post(path_of(&webhook))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(r#"{"ref":"refs/tags/v1.1.0"}"#))
        .unwrap();
    let hook = platform.send(request).await.expect(200);
    assert_eq!(hook.body, json!({"published": ["1.1.0"]}));
    let module = registry_modules_support::read_module(&platform, "acme", "vpc", "aws").await;
    assert_eq!(
        module["data"]["attributes"]["version-statuses"][0],
        json!({"version": "1.1.0", "status": "ok"})
    );
    let again = http::Request::post(path_of(&webhook))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        platform.send(again).await.expect(200).body,
        json!({"published": []})
    );
    let latest = platform
        .get("/api/registry/v1/modules/acme/vpc/aws", ROOT)
        .await
        .expect(200);
    assert_eq!(latest.body["version"], "1.1.0");
    // Versions of a tag-based module come from tags only.
    registry_modules_support::create_version(&platform, "acme", "vpc", "aws", "2.0.0")
        .await
        .expect(422);
    // An unknown webhook is 404.
    platform
        .call(Method::POST, "/webhooks/vcs/wh-unknown", None, None)
        .await
        .expect(404);
    host.stop().await;
}

#[tokio::test]
async fn a_repository_the_token_cannot_fetch_leaves_the_module_setup_failed() {
    let dir = tempfile::tempdir().unwrap();
    let _repository = Repository::new(dir.path());
    let host = git_host(dir.path().join("served")).await;
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let (_, token_id) = oauth_client(&platform, &host.url(""), "wrong-token").await;
    let created = publish_from_vcs(&platform, &token_id).await;
    assert_eq!(created["data"]["attributes"]["status"], "setup_failed");
    assert_eq!(created["data"]["attributes"]["version-statuses"], json!([]));

    // Bad requests are 422: unknown token, no identifier, a repository name that names no
    // provider, branch with tags.
    for repo in [
        json!({"identifier": "acme-git/terraform-aws-vpc", "oauth-token-id": "ot-nope"}),
        json!({"oauth-token-id": token_id}),
        json!({"identifier": "acme-git/vpc", "oauth-token-id": token_id}),
        json!({"identifier": "../etc", "oauth-token-id": token_id}),
        json!({"identifier": "acme-git/terraform-aws-x", "oauth-token-id": token_id, "branch": "main", "tags": true}),
    ] {
        platform
            .post(
                "/api/v2/organizations/acme/registry-modules/vcs",
                ROOT,
                json!({"data": {"type": "registry-modules", "attributes": {"vcs-repo": repo}}}),
            )
            .await
            .expect(422);
    }
    host.stop().await;
}
