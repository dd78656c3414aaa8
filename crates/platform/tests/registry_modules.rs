//! API tests of the private module registry's JSON:API side: creating modules (name rules,
//! private vs public, snake_case attributes), creating versions (semver with pre-release and
//! build, the upload link), uploading archives without a bearer token (parsed: `ok`, or
//! `reg_ingress_failed` with the reason), version-statuses and module status, list filters
//! and paging, read by path and id, update, delete through the current and deprecated paths,
//! and who may do what.

mod fixtures;
mod registry_modules_support;
mod support;

use fixtures::{organization_token, tar_gz, upload};
use platform::Config;
use registry_modules_support::{
    create_module, create_version, module_archive, publish_version, read_module,
};
use serde_json::json;
use support::{ROOT, TestPlatform};

#[tokio::test]
async fn create_is_201_pending_private_in_the_organizations_namespace() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let answer = create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    let data = &answer.body["data"];
    assert_eq!(data["type"], "registry-modules");
    assert!(data["id"].as_str().unwrap().starts_with("mod-"));
    let attributes = &data["attributes"];
    assert_eq!(attributes["name"], "vpc");
    assert_eq!(attributes["provider"], "aws");
    assert_eq!(attributes["namespace"], "acme");
    assert_eq!(attributes["registry-name"], "private");
    assert_eq!(attributes["status"], "pending");
    assert_eq!(attributes["version-statuses"], json!([]));
    assert_eq!(attributes["publishing-mechanism"], "non_vcs");
    assert_eq!(attributes["permissions"]["can-delete"], true);
    assert!(attributes.get("vcs-repo").is_none());
    assert_eq!(data["relationships"]["organization"]["data"]["id"], "acme");
    assert_eq!(
        data["links"]["self"],
        "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws"
    );
    // Read by path and by id render the same resource.
    assert_eq!(
        read_module(&platform, "acme", "vpc", "aws").await["data"],
        *data
    );
    let id = data["id"].as_str().unwrap();
    let by_id = platform
        .get(&format!("/api/v2/registry-modules/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(by_id.body["data"], *data);
    let deprecated = platform
        .get("/api/v2/registry-modules/show/acme/vpc/aws", ROOT)
        .await
        .expect(200);
    assert_eq!(deprecated.body["data"], *data);
}

#[tokio::test]
async fn create_refuses_bad_names_duplicates_and_namespaces_of_private_modules() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let create = |attributes: serde_json::Value| {
        let platform = &platform;
        async move {
            platform
                .post(
                    "/api/v2/organizations/acme/registry-modules",
                    ROOT,
                    json!({"data": {"type": "registry-modules", "attributes": attributes}}),
                )
                .await
        }
    };
    for (attributes, pointer) in [
        (
            json!({"name": "-vpc", "provider": "aws"}),
            "/data/attributes/name",
        ),
        (
            json!({"name": "v".repeat(65), "provider": "aws"}),
            "/data/attributes/name",
        ),
        (json!({"provider": "aws"}), "/data/attributes/name"),
        (
            json!({"name": "vpc", "provider": "AWS"}),
            "/data/attributes/provider",
        ),
        (
            json!({"name": "vpc", "provider": "my-cloud"}),
            "/data/attributes/provider",
        ),
        (
            json!({"name": "vpc", "provider": "aws", "namespace": "other"}),
            "/data/attributes/namespace",
        ),
        (
            json!({"name": "vpc", "provider": "aws", "registry-name": "shared"}),
            "/data/attributes/registry-name",
        ),
        (
            json!({"name": 3, "provider": "aws"}),
            "/data/attributes/name",
        ),
    ] {
        let answer = create(attributes.clone()).await.expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    create(json!({"name": "vpc", "provider": "aws"}))
        .await
        .expect(201);
    let duplicate = create(json!({"name": "vpc", "provider": "aws"}))
        .await
        .expect(422);
    assert!(
        duplicate.error()["detail"]
            .as_str()
            .unwrap()
            .contains("already exists")
    );
    // Another provider of the same name is another module.
    create(json!({"name": "vpc", "provider": "google"}))
        .await
        .expect(201);
}

#[tokio::test]
async fn public_modules_are_403_while_curation_is_off_and_creatable_when_on() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let public = json!({"data": {"type": "registry-modules", "attributes": {
        "name": "vpc", "provider": "aws", "registry-name": "public", "namespace": "hashicorp"
    }}});
    let answer = platform
        .post(
            "/api/v2/organizations/acme/registry-modules",
            ROOT,
            public.clone(),
        )
        .await
        .expect(403);
    assert_eq!(answer.error()["status"], "403");
    platform
        .get(
            "/api/v2/organizations/acme/registry-modules/public/hashicorp/vpc/aws",
            ROOT,
        )
        .await
        .expect(403);

    let curated = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        api_rate_limiting_enabled: false,
        public_module_curation: true,
        ..Config::default()
    })
    .await;
    curated.create_org("acme").await;
    let created = curated
        .post("/api/v2/organizations/acme/registry-modules", ROOT, public)
        .await
        .expect(201);
    assert_eq!(created.body["data"]["attributes"]["namespace"], "hashicorp");
    assert_eq!(
        created.body["data"]["attributes"]["registry-name"],
        "public"
    );
    // Versions cannot be created for public modules.
    curated
        .post(
            "/api/v2/organizations/acme/registry-modules/public/hashicorp/vpc/aws/versions",
            ROOT,
            json!({"data": {"type": "registry-module-versions", "attributes": {"version": "1.0.0"}}}),
        )
        .await
        .expect(403);
    let listed = curated
        .get(
            "/api/v2/organizations/acme/registry-modules?filter%5Bregistry_name%5D=public",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_version_with_pre_release_and_build_is_pending_with_an_object_upload_link() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let module = create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    let answer = create_version(&platform, "acme", "vpc", "aws", "1.2.3-alpha+feature")
        .await
        .expect(201);
    let data = &answer.body["data"];
    assert_eq!(data["type"], "registry-module-versions");
    assert!(data["id"].as_str().unwrap().starts_with("modver-"));
    assert_eq!(data["attributes"]["version"], "1.2.3-alpha+feature");
    assert_eq!(data["attributes"]["status"], "pending");
    assert_eq!(data["attributes"]["source"], "tfe-api");
    assert_eq!(data["attributes"]["commit-sha"], "abc123");
    assert!(
        data["attributes"]["created-at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(
        data["relationships"]["registry-module"]["data"]["id"],
        module.body["data"]["id"]
    );
    let upload_url = data["links"]["upload"].as_str().unwrap();
    assert!(upload_url.starts_with("http://"), "{upload_url}");
    assert!(upload_url.contains("/object/"), "{upload_url}");

    // pytfe sends the version unencoded in the query: `+` must not become a space.
    let read = platform
        .get(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/version?module_version=1.2.3-alpha+feature",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(read.body["data"]["id"], data["id"]);
    let statuses = read_module(&platform, "acme", "vpc", "aws").await["data"]["attributes"]
        ["version-statuses"]
        .clone();
    assert_eq!(
        statuses,
        json!([{"version": "1.2.3-alpha+feature", "status": "pending"}])
    );

    // Not semver, or a version the module has, is 422; the current path works too.
    for version in ["1.2", "v1.0.0", "1.0.0-", "01.0.0", "1.2.3-alpha+feature"] {
        create_version(&platform, "acme", "vpc", "aws", version)
            .await
            .expect(422);
    }
    platform
        .post(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/versions",
            ROOT,
            json!({"data": {"type": "registry-module-versions", "attributes": {"version": "2.0.0"}}}),
        )
        .await
        .expect(201);
    create_version(&platform, "acme", "nope", "aws", "1.0.0")
        .await
        .expect(404);
}

#[tokio::test]
async fn an_uploaded_archive_is_parsed_and_the_version_and_module_turn_ok() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    publish_version(&platform, "acme", "vpc", "aws", "1.0.0", module_archive())
        .await
        .expect(200);
    let module = read_module(&platform, "acme", "vpc", "aws").await;
    let attributes = &module["data"]["attributes"];
    assert_eq!(attributes["status"], "setup_complete");
    assert_eq!(
        attributes["version-statuses"],
        json!([{"version": "1.0.0", "status": "ok"}])
    );
    let version = platform
        .get(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/version?module_version=1.0.0",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(version.body["data"]["attributes"]["status"], "ok");
    assert!(version.body["data"]["links"].get("upload").is_none());

    // The upload link answers 409 once the version is published.
    let again = create_version(&platform, "acme", "vpc", "aws", "1.1.0")
        .await
        .expect(201);
    let url = again.body["data"]["links"]["upload"]
        .as_str()
        .unwrap()
        .to_owned();
    upload(&platform, &url, module_archive()).await.expect(200);
    upload(&platform, &url, module_archive()).await.expect(409);
    let listed = platform
        .get(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/versions",
            ROOT,
        )
        .await
        .expect(200);
    let versions: Vec<&str> = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["attributes"]["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["1.1.0", "1.0.0"]);
}

#[tokio::test]
async fn an_archive_that_is_not_a_module_at_its_root_is_reg_ingress_failed_with_the_reason() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    let nested = tar_gz(&[("vpc/main.tf", b"variable \"x\" {}\n")]);
    let created = create_version(&platform, "acme", "vpc", "aws", "1.0.0")
        .await
        .expect(201);
    let url = created.body["data"]["links"]["upload"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = upload(&platform, &url, nested).await.expect(422);
    assert!(
        refused.error()["detail"]
            .as_str()
            .unwrap()
            .contains("not in a subdirectory"),
        "{}",
        refused.text
    );
    let module = read_module(&platform, "acme", "vpc", "aws").await;
    let status = &module["data"]["attributes"]["version-statuses"][0];
    assert_eq!(status["status"], "reg_ingress_failed");
    assert!(status["error"].as_str().unwrap().contains(".tf"));
    assert_eq!(module["data"]["attributes"]["status"], "pending");

    // Bad HCL and garbage are refused the same way; a retry with a good archive publishes.
    let bad_hcl = tar_gz(&[("main.tf", b"variable \"x\" {\n")]);
    let refused = upload(&platform, &url, bad_hcl).await.expect(422);
    assert!(
        refused.error()["detail"]
            .as_str()
            .unwrap()
            .contains("main.tf")
    );
    upload(&platform, &url, b"not an archive".to_vec())
        .await
        .expect(422);
    upload(&platform, &url, module_archive()).await.expect(200);
    let module = read_module(&platform, "acme", "vpc", "aws").await;
    assert_eq!(
        module["data"]["attributes"]["version-statuses"],
        json!([{"version": "1.0.0", "status": "ok"}])
    );

    // A tampered or foreign upload URL is 404.
    let tampered = url.replace("/object/", "/object/1");
    upload(&platform, &tampered, module_archive())
        .await
        .expect(404);
}

#[tokio::test]
async fn list_filters_searches_and_pages_with_page_size() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    for (name, provider) in [
        ("vpc", "aws"),
        ("vpc", "google"),
        ("dns", "aws"),
        ("lb", "azurerm"),
    ] {
        create_module(&platform, "acme", name, provider)
            .await
            .expect(201);
    }
    let names = |answer: &support::Answer| -> Vec<String> {
        answer.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m["attributes"]["name"].as_str().unwrap(),
                    m["attributes"]["provider"].as_str().unwrap()
                )
            })
            .collect()
    };
    let all = platform
        .get("/api/v2/organizations/acme/registry-modules", ROOT)
        .await
        .expect(200);
    assert_eq!(
        names(&all),
        ["dns/aws", "lb/azurerm", "vpc/aws", "vpc/google"]
    );
    assert_eq!(all.body["meta"]["pagination"]["page-size"], 20);
    assert_eq!(all.body["meta"]["pagination"]["total-count"], 4);
    for (query, expected) in [
        ("q=vp", vec!["vpc/aws", "vpc/google"]),
        ("q=AZURE", vec!["lb/azurerm"]),
        ("filter%5Bprovider%5D=aws", vec!["dns/aws", "vpc/aws"]),
        (
            "filter[registry_name]=private&filter[provider]=google",
            vec!["vpc/google"],
        ),
        ("filter[organization_name]=acme&q=dns", vec!["dns/aws"]),
        ("filter[registry_name]=public", vec![]),
    ] {
        let answer = platform
            .get(
                &format!("/api/v2/organizations/acme/registry-modules?{query}"),
                ROOT,
            )
            .await
            .expect(200);
        assert_eq!(names(&answer), expected, "{query}");
    }
    let page = platform
        .get(
            "/api/v2/organizations/acme/registry-modules?page%5Bnumber%5D=2&page%5Bsize%5D=3",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&page), ["vpc/google"]);
    let pagination = &page.body["meta"]["pagination"];
    assert_eq!(pagination["current-page"], 2);
    assert_eq!(pagination["page-size"], 3);
    assert_eq!(pagination["total-pages"], 2);
    assert_eq!(pagination["next-page"], json!(null));
    platform
        .get("/api/v2/organizations/nope/registry-modules", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn update_sets_test_config_and_no_code_and_refuses_vcs_settings_without_vcs() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let created = create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    let path = "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws";
    let updated = platform
        .patch(
            &format!("{path}/"),
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {
                "no_code": true, "test-config": {"tests-enabled": true}
            }}}),
        )
        .await
        .expect(200);
    let attributes = &updated.body["data"]["attributes"];
    assert_eq!(attributes["no-code"], true);
    assert_eq!(attributes["test-config"]["tests-enabled"], true);
    assert_eq!(updated.body["data"]["id"], created.body["data"]["id"]);
    // Omitted attributes keep their values.
    let again = platform
        .patch(
            path,
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {}}}),
        )
        .await
        .expect(200);
    assert_eq!(again.body["data"]["attributes"]["no-code"], true);
    let refused = platform
        .patch(
            path,
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {
                "vcs-repo": {"branch": "main", "tags": true}
            }}}),
        )
        .await
        .expect(422);
    assert_eq!(
        refused.error()["source"]["pointer"],
        "/data/attributes/vcs-repo"
    );
    platform
        .patch(
            path,
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {"vcs-repo": {"tags": true}}}}),
        )
        .await
        .expect(422);
}

#[tokio::test]
async fn delete_by_version_provider_and_name_through_both_paths() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    for provider in ["aws", "google"] {
        create_module(&platform, "acme", "vpc", provider)
            .await
            .expect(201);
        for version in ["1.0.0", "1.1.0"] {
            publish_version(
                &platform,
                "acme",
                "vpc",
                provider,
                version,
                module_archive(),
            )
            .await
            .expect(200);
        }
    }
    create_module(&platform, "acme", "dns", "aws")
        .await
        .expect(201);
    // Deprecated version delete (pytfe's delete_version), with the {} body pytfe sends.
    platform
        .post(
            "/api/v2/registry-modules/actions/delete/acme/vpc/aws/1.1.0",
            ROOT,
            json!({}),
        )
        .await
        .expect(204);
    let module = read_module(&platform, "acme", "vpc", "aws").await;
    assert_eq!(
        module["data"]["attributes"]["version-statuses"],
        json!([{"version": "1.0.0", "status": "ok"}])
    );
    // The last version takes the module with it.
    platform
        .delete(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws/1.0.0",
            ROOT,
        )
        .await
        .expect(204);
    platform
        .get(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws",
            ROOT,
        )
        .await
        .expect(404);
    // Current provider delete, then deprecated name delete.
    platform
        .delete(
            "/api/v2/organizations/acme/registry-modules/private/acme/vpc/google",
            ROOT,
        )
        .await
        .expect(204);
    platform
        .post(
            "/api/v2/registry-modules/actions/delete/acme/dns",
            ROOT,
            json!({}),
        )
        .await
        .expect(204);
    let listed = platform
        .get("/api/v2/organizations/acme/registry-modules", ROOT)
        .await
        .expect(200);
    assert_eq!(listed.body["data"], json!([]));
    platform
        .post(
            "/api/v2/registry-modules/actions/delete/acme/dns",
            ROOT,
            json!({}),
        )
        .await
        .expect(404);
    // The name is free again.
    create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
}

#[tokio::test]
async fn members_read_owners_manage_and_organization_tokens_may_not_manage() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    create_module(&platform, "acme", "vpc", "aws")
        .await
        .expect(201);
    let readers = platform
        .create_team("acme", "readers", json!({"read-workspaces": true}))
        .await;
    let member = platform.member("acme", "reader", &[&readers]).await;
    let path = "/api/v2/organizations/acme/registry-modules/private/acme/vpc/aws";
    platform.get(path, &member.token).await.expect(200);
    let as_member = platform.get(path, &member.token).await;
    assert_eq!(
        as_member.body["data"]["attributes"]["permissions"]["can-delete"],
        false
    );
    platform
        .post(
            "/api/v2/organizations/acme/registry-modules",
            &member.token,
            json!({"data": {"type": "registry-modules", "attributes": {"name": "x", "provider": "aws"}}}),
        )
        .await
        .expect(404);
    platform.delete(path, &member.token).await.expect(404);
    let org_token = organization_token(&platform, "acme").await;
    platform
        .post(
            "/api/v2/registry-modules/acme/vpc/aws/versions",
            &org_token,
            json!({"data": {"type": "registry-module-versions", "attributes": {"version": "1.0.0"}}}),
        )
        .await
        .expect(404);
    // Another organization's member sees nothing.
    let outsider = platform
        .member("other", "outsider", &[&platform.owners_team("other").await])
        .await;
    platform.get(path, &outsider.token).await.expect(404);
    platform
        .call(http::Method::GET, path, None, None)
        .await
        .expect(401);
    // Mutations need the JSON:API content type.
    let request = http::Request::post("/api/v2/organizations/acme/registry-modules")
        .header("authorization", format!("Bearer {ROOT}"))
        .body(axum::body::Body::from("{}"))
        .unwrap();
    platform.send(request).await.expect(415);
}
