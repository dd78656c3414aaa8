//! API tests of the module registry protocol over the private registry: discovery, list,
//! search, versions with submodules, latest and latest per provider, the module detail JSON
//! against what the uploaded tarball declares, and downloads (204 with `X-Terraform-Get` to a
//! signed `.tar.gz` URL that needs no bearer token and unpacks to the uploaded module).

mod fixtures;
mod registry_modules_support;
mod support;

use std::io::Read;

use axum::body::Body;
use fixtures::{path_of, tar_gz};
use http::{Method, Request};
use registry_modules_support::{MAIN_TF, create_module, module_archive, publish_version};
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

/// An organization `acme` with module `vpc/aws` at 1.0.0, 1.1.0 and 2.0.0-rc.1.
async fn published() -> TestPlatform {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    for version in ["1.0.0", "2.0.0-rc.1", "1.1.0"] {
        publish_version(&platform, "acme", "vpc", "aws", version, module_archive())
            .await
            .expect(200);
    }
    platform
}

/// The files of a `.tar.gz`, path → content.
fn unpack(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut files = Vec::new();
    for entry in archive.entries().expect("tar") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").to_string_lossy().into_owned();
        let mut content = Vec::new();
        entry.read_to_end(&mut content).expect("read");
        files.push((path, content));
    }
    files
}

#[tokio::test]
async fn discovery_names_the_modules_api_as_plain_json() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .call(Method::GET, "/.well-known/terraform.json", None, None)
        .await
        .expect(200);
    assert_eq!(answer.headers["content-type"], "application/json");
    assert_eq!(answer.body["modules.v1"], "/api/registry/v1/modules/");
    assert_eq!(answer.body["tfe.v2"], "/api/v2/");
}

#[tokio::test]
async fn versions_list_ok_versions_with_their_providers_and_submodules() {
    let platform = published().await;
    // A version still pending is not listed.
    registry_modules_support::create_version(&platform, "acme", "vpc", "aws", "3.0.0")
        .await
        .expect(201);
    let answer = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/versions", ROOT)
        .await
        .expect(200);
    assert_eq!(answer.headers["content-type"], "application/json");
    let module = &answer.body["modules"][0];
    assert_eq!(module["source"], "acme/vpc/aws");
    let versions: Vec<&str> = module["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["2.0.0-rc.1", "1.1.0", "1.0.0"]);
    let first = &module["versions"][0];
    assert_eq!(
        first["root"]["providers"],
        json!([{"name": "aws", "namespace": "hashicorp", "source": "hashicorp/aws", "version": ">= 5.0"}])
    );
    assert_eq!(
        first["root"]["dependencies"],
        json!([{"name": "subnets", "source": "./modules/subnets", "version": ""}])
    );
    assert_eq!(first["submodules"][0]["path"], "modules/subnets");
    assert_eq!(first["submodules"][0]["providers"][0]["name"], "aws");
}

#[tokio::test]
async fn detail_json_matches_what_the_tarball_declares() {
    let platform = published().await;
    let answer = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/1.0.0", ROOT)
        .await
        .expect(200);
    let detail = &answer.body;
    assert_eq!(detail["id"], "acme/vpc/aws/1.0.0");
    assert_eq!(detail["namespace"], "acme");
    assert_eq!(detail["name"], "vpc");
    assert_eq!(detail["provider"], "aws");
    assert_eq!(detail["version"], "1.0.0");
    assert_eq!(detail["description"], "Creates a VPC with subnets.");
    assert_eq!(detail["verified"], false);
    assert_eq!(detail["downloads"], 0);
    assert_eq!(detail["providers"], json!(["aws"]));
    assert_eq!(detail["versions"], json!(["2.0.0-rc.1", "1.1.0", "1.0.0"]));
    let root = &detail["root"];
    assert_eq!(root["path"], "");
    assert_eq!(root["name"], "vpc");
    assert_eq!(root["empty"], false);
    assert_eq!(root["readme"], "# VPC\n\nCreates a VPC with subnets.\n");
    assert_eq!(
        root["inputs"],
        json!([
            {"name": "azs", "type": "list(string)", "description": "Availability zones.", "default": "", "required": true},
            {"name": "cidr_block", "type": "string", "description": "The VPC's CIDR block.", "default": "\"10.0.0.0/16\"", "required": false},
            {"name": "tags", "type": "map(string)", "description": "", "default": "{}", "required": false},
        ])
    );
    assert_eq!(
        root["outputs"],
        json!([{"name": "vpc_id", "description": "The VPC's id."}])
    );
    assert_eq!(
        root["resources"],
        json!([{"name": "this", "type": "aws_vpc"}])
    );
    assert_eq!(root["provider_dependencies"].as_array().unwrap().len(), 1);
    let submodules = detail["submodules"].as_array().unwrap();
    assert_eq!(submodules.len(), 1);
    assert_eq!(submodules[0]["path"], "modules/subnets");
    assert_eq!(submodules[0]["name"], "subnets");
    assert_eq!(submodules[0]["readme"], "");
    assert_eq!(submodules[0]["inputs"][0]["name"], "vpc_id");
    assert_eq!(submodules[0]["resources"].as_array().unwrap().len(), 2);
    let examples = detail["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 1);
    assert_eq!(examples[0]["path"], "examples/basic");
    assert_eq!(examples[0]["dependencies"][0]["source"], "../..");

    // Latest is the highest release, not the release candidate.
    let latest = platform
        .get("/api/registry/v1/modules/acme/vpc/aws", ROOT)
        .await
        .expect(200);
    assert_eq!(latest.body["version"], "1.1.0");
    assert_eq!(latest.body["root"], *root);
    platform
        .get("/api/registry/v1/modules/acme/vpc/aws/9.9.9", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn download_is_204_with_a_signed_tar_gz_that_needs_no_bearer_and_unpacks() {
    let platform = published().await;
    let answer = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/1.0.0/download", ROOT)
        .await
        .expect(204);
    let location = answer.headers["x-terraform-get"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(location.starts_with("http://"), "{location}");
    assert!(location.ends_with(".tar.gz"), "{location}");
    // go-getter sends no bearer token; pytfe-like clients may send one: both work.
    let request = Request::get(path_of(&location))
        .body(Body::empty())
        .unwrap();
    let archive = platform.send(request).await.expect(200);
    assert_eq!(archive.headers["content-type"], "application/octet-stream");
    let files = unpack(&archive.bytes);
    let main = files
        .iter()
        .find(|(path, _)| path == "main.tf")
        .expect("main.tf");
    assert_eq!(main.1, MAIN_TF.as_bytes());
    assert!(
        files
            .iter()
            .any(|(path, _)| path == "modules/subnets/main.tf")
    );
    let with_bearer = platform.get(&path_of(&location), ROOT).await.expect(200);
    assert_eq!(with_bearer.bytes, archive.bytes);
    // A URL for another object or a tampered signature is 404.
    let tampered = path_of(&location).replacen("/object/", "/object/9", 1);
    platform.get(&tampered, ROOT).await.expect(404);

    // The latest download redirects to the latest version's download.
    let latest = platform
        .get("/api/registry/v1/modules/acme/vpc/aws/download", ROOT)
        .await
        .expect(302);
    assert_eq!(
        latest.headers["location"],
        "/api/registry/v1/modules/acme/vpc/aws/1.1.0/download"
    );
    platform
        .get("/api/registry/v1/modules/acme/vpc/aws/3.0.0/download", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn lists_search_and_latest_per_provider() {
    let platform = published().await;
    create_module(&platform, "acme", "vpc", "google")
        .await
        .expect(201);
    publish_version(
        &platform,
        "acme",
        "vpc",
        "google",
        "0.1.0",
        tar_gz(&[("main.tf", b"resource \"google_compute_network\" \"n\" {}\n")]),
    )
    .await
    .expect(200);
    // A module without versions is not listed.
    create_module(&platform, "acme", "empty", "aws")
        .await
        .expect(201);
    let ids = |body: &Value| -> Vec<String> {
        body["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = platform
        .get("/api/registry/v1/modules", ROOT)
        .await
        .expect(200);
    assert_eq!(
        ids(&all.body),
        ["acme/vpc/aws/1.1.0", "acme/vpc/google/0.1.0"]
    );
    assert_eq!(all.body["meta"]["limit"], 15);
    let namespace = platform
        .get("/api/registry/v1/modules/acme?provider=google", ROOT)
        .await
        .expect(200);
    assert_eq!(ids(&namespace.body), ["acme/vpc/google/0.1.0"]);
    let per_provider = platform
        .get("/api/registry/v1/modules/acme/vpc", ROOT)
        .await
        .expect(200);
    assert_eq!(
        ids(&per_provider.body),
        ["acme/vpc/aws/1.1.0", "acme/vpc/google/0.1.0"]
    );
    let found = platform
        .get("/api/registry/v1/modules/search?q=subnets", ROOT)
        .await
        .expect(200);
    assert_eq!(ids(&found.body), ["acme/vpc/aws/1.1.0"]);
    let paged = platform
        .get("/api/registry/v1/modules?limit=1&offset=1", ROOT)
        .await
        .expect(200);
    assert_eq!(ids(&paged.body), ["acme/vpc/google/0.1.0"]);
    assert_eq!(paged.body["meta"]["prev_offset"], 0);
    platform
        .get("/api/registry/v1/modules/search", ROOT)
        .await
        .expect(400);
    platform
        .get("/api/registry/v1/modules?limit=x", ROOT)
        .await
        .expect(400);
}

#[tokio::test]
async fn the_protocol_needs_a_token_with_access_to_the_namespace() {
    let platform = published().await;
    platform.create_org("other").await;
    let outsider = platform
        .member("other", "outsider", &[&platform.owners_team("other").await])
        .await;
    for path in [
        "/api/registry/v1/modules/acme/vpc/aws/versions",
        "/api/registry/v1/modules/acme/vpc/aws/1.0.0",
        "/api/registry/v1/modules/acme/vpc/aws/1.0.0/download",
        "/api/registry/v1/modules/acme",
    ] {
        platform.get(path, &outsider.token).await.expect(404);
        platform
            .call(Method::GET, path, None, None)
            .await
            .expect(401);
    }
    let all = platform
        .get("/api/registry/v1/modules", &outsider.token)
        .await
        .expect(200);
    assert_eq!(all.body["modules"], json!([]));
}
