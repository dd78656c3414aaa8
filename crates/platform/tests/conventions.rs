//! API tests of the JSON:API conventions every platform endpoint shares: content types (415),
//! authentication (401), error documents, bad input that changes nothing, paging, and the
//! headers of `/api/v2/ping`.

mod support;

use axum::body::Body;
use http::{Method, Request};
use serde_json::json;
use support::{JSONAPI, ROOT, TestPlatform};

fn request(method: Method, uri: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {ROOT}"))
}

#[tokio::test]
async fn ping_is_204_with_discovery_headers_and_no_token() {
    let platform = TestPlatform::new().await;
    let request = Request::get("/api/v2/ping").body(Body::empty()).unwrap();
    let answer = platform.send(request).await.expect(204);
    assert_eq!(answer.headers["tfp-api-version"], "2.5");
    assert_eq!(answer.headers["tfp-appname"], "Terraform Enterprise");
    assert_eq!(answer.headers["x-ratelimit-limit"], "30");
}

#[tokio::test]
async fn every_response_carries_the_api_version() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .get("/api/v2/organizations/none", ROOT)
        .await
        .expect(404);
    assert_eq!(answer.headers["tfp-api-version"], "2.5");
}

#[tokio::test]
async fn missing_token_is_401_in_jsonapi_shape() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .call(Method::GET, "/api/v2/account/details", None, None)
        .await
        .expect(401);
    assert_eq!(answer.headers["content-type"], JSONAPI);
    assert_eq!(
        answer.body,
        json!({"errors": [{"status": "401", "title": "unauthorized"}]})
    );
}

#[tokio::test]
async fn unknown_token_is_401() {
    let platform = TestPlatform::new().await;
    platform
        .get("/api/v2/account/details", "nope.atlasv1.nope")
        .await
        .expect(401);
}

#[tokio::test]
async fn non_bearer_authorization_is_401() {
    let platform = TestPlatform::new().await;
    let request = Request::get("/api/v2/account/details")
        .header("authorization", format!("Basic {ROOT}"))
        .body(Body::empty())
        .unwrap();
    platform.send(request).await.expect(401);
}

#[tokio::test]
async fn unknown_path_is_jsonapi_404() {
    let platform = TestPlatform::new().await;
    let answer = platform.get("/api/v2/nothing-here", ROOT).await.expect(404);
    assert_eq!(answer.error()["status"], "404");
    assert_eq!(answer.headers["content-type"], JSONAPI);
}

#[tokio::test]
async fn wrong_method_is_jsonapi_405() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .call(Method::PUT, "/api/v2/organizations", Some(ROOT), None)
        .await
        .expect(405);
    assert_eq!(answer.error()["status"], "405");
}

#[tokio::test]
async fn post_without_content_type_is_415_and_creates_nothing() {
    let platform = TestPlatform::new().await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": "acme", "email": "a@b.co"}}});
    let request = request(Method::POST, "/api/v2/organizations")
        .body(Body::from(body.to_string()))
        .unwrap();
    let answer = platform.send(request).await.expect(415);
    assert_eq!(answer.error()["status"], "415");
    platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn post_with_plain_json_content_type_is_415() {
    let platform = TestPlatform::new().await;
    let request = request(Method::POST, "/api/v2/organizations")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    platform.send(request).await.expect(415);
}

#[tokio::test]
async fn delete_without_content_type_is_415_and_deletes_nothing() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let request = request(Method::DELETE, "/api/v2/organizations/acme")
        .body(Body::empty())
        .unwrap();
    platform.send(request).await.expect(415);
    platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn get_without_content_type_is_accepted() {
    let platform = TestPlatform::new().await;
    let request = request(Method::GET, "/api/v2/account/details")
        .body(Body::empty())
        .unwrap();
    platform.send(request).await.expect(200);
}

#[tokio::test]
async fn content_type_with_parameters_is_accepted() {
    let platform = TestPlatform::new().await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": "acme", "email": "a@b.co"}}});
    let request = request(Method::POST, "/api/v2/organizations")
        .header("content-type", "application/vnd.api+json; charset=utf-8")
        .body(Body::from(body.to_string()))
        .unwrap();
    platform.send(request).await.expect(201);
}

#[tokio::test]
async fn malformed_json_is_422_in_jsonapi_shape() {
    let platform = TestPlatform::new().await;
    let request = request(Method::POST, "/api/v2/organizations")
        .header("content-type", JSONAPI)
        .body(Body::from("{\"data\": {"))
        .unwrap();
    let answer = platform.send(request).await.expect(422);
    assert_eq!(answer.error()["status"], "422");
    assert!(
        answer.error()["detail"].as_str().unwrap().contains("parse"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn body_that_is_not_an_object_is_422() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .post("/api/v2/organizations", ROOT, json!([1, 2]))
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/");
}

#[tokio::test]
async fn data_of_the_wrong_shape_is_422_pointing_at_data() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .post("/api/v2/organizations", ROOT, json!({"data": "acme"}))
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data");
}

#[tokio::test]
async fn wrongly_typed_attribute_is_422_pointing_at_it_and_creates_nothing() {
    let platform = TestPlatform::new().await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": ["acme"], "email": "a@b.co"}}});
    let answer = platform
        .post("/api/v2/organizations", ROOT, body)
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data/attributes/name");
    let list = platform
        .get("/api/v2/organizations", ROOT)
        .await
        .expect(200);
    assert_eq!(list.body["data"], json!([]));
}

#[tokio::test]
async fn unknown_attributes_are_ignored() {
    let platform = TestPlatform::new().await;
    let body = json!({"data": {"type": "organizations", "attributes": {
        "name": "acme", "email": "a@b.co", "no-such-thing": {"x": 1}
    }}});
    platform
        .post("/api/v2/organizations", ROOT, body)
        .await
        .expect(201);
}

#[tokio::test]
async fn huge_body_is_413_and_creates_nothing() {
    let platform = TestPlatform::new().await;
    let body = json!({"data": {"type": "organizations", "attributes": {
        "name": "acme", "email": "a@b.co", "padding": "x".repeat(2 * 1024 * 1024)
    }}});
    let answer = platform
        .post("/api/v2/organizations", ROOT, body)
        .await
        .expect(413);
    assert_eq!(answer.error()["status"], "413");
    platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn wrong_data_type_is_422_pointing_at_type() {
    let platform = TestPlatform::new().await;
    let body =
        json!({"data": {"type": "workspaces", "attributes": {"name": "acme", "email": "a@b.co"}}});
    let answer = platform
        .post("/api/v2/organizations", ROOT, body)
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data/type");
}

#[tokio::test]
async fn paging_reads_bracketed_keys_encoded_or_not() {
    let platform = TestPlatform::new().await;
    for name in ["a", "b", "c"] {
        platform.create_org(name).await;
    }
    for uri in [
        "/api/v2/organizations?page%5Bnumber%5D=2&page%5Bsize%5D=2",
        "/api/v2/organizations?page[number]=2&page[size]=2",
    ] {
        let answer = platform.get(uri, ROOT).await.expect(200);
        assert_eq!(answer.body["data"].as_array().unwrap().len(), 1, "{uri}");
        assert_eq!(answer.body["data"][0]["id"], "c");
        let pagination = &answer.body["meta"]["pagination"];
        assert_eq!(pagination["current-page"], 2);
        assert_eq!(pagination["prev-page"], 1);
        assert_eq!(pagination["next-page"], json!(null));
        assert_eq!(pagination["total-pages"], 2);
        assert_eq!(pagination["total-count"], 3);
        assert_eq!(answer.body["links"]["next"], json!(null));
    }
}

#[tokio::test]
async fn page_past_the_end_is_200_with_empty_data() {
    let platform = TestPlatform::new().await;
    platform.create_org("a").await;
    let answer = platform
        .get("/api/v2/organizations?page%5Bnumber%5D=999", ROOT)
        .await
        .expect(200);
    assert_eq!(answer.body["data"], json!([]));
    assert_eq!(answer.body["meta"]["pagination"]["current-page"], 999);
    assert_eq!(answer.body["meta"]["pagination"]["total-count"], 1);
}

#[tokio::test]
async fn page_size_is_capped_at_100() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .get("/api/v2/organizations?page%5Bsize%5D=1000", ROOT)
        .await
        .expect(200);
    assert_eq!(answer.body["meta"]["pagination"]["page-size"], 100);
}

#[tokio::test]
async fn non_numeric_page_is_400_naming_the_parameter() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .get("/api/v2/organizations?page%5Bnumber%5D=two", ROOT)
        .await
        .expect(400);
    assert_eq!(answer.error()["source"]["parameter"], "page[number]");
}
