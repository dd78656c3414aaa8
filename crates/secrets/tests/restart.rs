//! Restart: a server-mode store on redb is initialised, unsealed and filled (policy, tokens,
//! a kv mount at a custom path with data); the store is closed and reopened; it comes back
//! sealed, and after unsealing with the same shares everything is there and still enforced.
//! (Lease deadlines across a restart are covered in `src/leases.rs`, `manager_tests`, with a
//! leasing test engine the registry does not offer to integration tests.)

mod support;

use http::StatusCode;
use serde_json::json;
use support::{call, create_token, init, put_policy, server, unseal};

#[tokio::test]
async fn everything_survives_a_restart_and_stays_enforced_after_unseal() {
    let mut store = testkit::TempStore::new();

    // First life: init with 3 shares (threshold 2), unseal, fill.
    let app = server(store.storage()).await;
    let (keys, root_token) = init(&app, 3, 2).await;
    assert_eq!(keys.len(), 3);
    unseal(&app, &keys[..2]).await;
    let policy = r#"path "team-a/allowed/*" { capabilities = ["read", "list"] }"#;
    put_policy(&app, &root_token, "reader", policy).await;
    let root = Some(root_token.as_str());
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/team-a",
        root,
        Some(json!({"type": "kv", "options": {"version": "1"}, "config": {"max_lease_ttl": "2h"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for (path, value) in [("allowed/one", "1"), ("other/two", "2")] {
        let (status, body) = call(
            &app,
            "PUT",
            &format!("/v1/team-a/{path}"),
            root,
            Some(json!({"v": value})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let body = json!({"policies": ["reader"], "ttl": "1h"});
    let (limited, _) = create_token(&app, &root_token, body).await;
    let (_, revoked) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        root,
        Some(json!({"ttl": "1h"})),
    )
    .await;
    let revoked = revoked["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke",
        root,
        Some(json!({"token": revoked})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // Restart: close the store, open it again.
    drop(app);
    store.reopen().await;
    let app = server(store.storage()).await;

    let (status, seal) = call(&app, "GET", "/v1/sys/seal-status", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seal["sealed"], true, "{seal}");
    assert_eq!(seal["initialized"], true, "{seal}");
    assert_eq!((seal["t"].clone(), seal["n"].clone()), (json!(2), json!(3)));
    let (status, body) = call(&app, "GET", "/v1/team-a/allowed/one", root, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "sealed: {body}");

    // One share is not enough; the other two shares (not the same two) are.
    let (_, progress) = call(
        &app,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"key": keys[2]})),
    )
    .await;
    assert_eq!(progress["sealed"], true, "{progress}");
    unseal(&app, &keys[1..2]).await;

    // Root token, policy, mount (with its tuning), data.
    let (status, policy_read) = call(&app, "GET", "/v1/sys/policies/acl/reader", root, None).await;
    assert_eq!(status, StatusCode::OK, "{policy_read}");
    assert_eq!(policy_read["data"]["policy"], policy);
    let (_, mounts) = call(&app, "GET", "/v1/sys/mounts", root, None).await;
    assert_eq!(mounts["data"]["team-a/"]["type"], "kv", "{mounts}");
    assert_eq!(
        mounts["data"]["team-a/"]["config"]["max_lease_ttl"], 7200,
        "{mounts}"
    );
    let (status, data) = call(&app, "GET", "/v1/team-a/other/two", root, None).await;
    assert_eq!(status, StatusCode::OK, "{data}");
    assert_eq!(data["data"], json!({"v": "2"}));

    // The limited token: still valid, still limited.
    let limited = Some(limited.as_str());
    let (status, me) = call(&app, "GET", "/v1/auth/token/lookup-self", limited, None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert!(
        me["data"]["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("reader")),
        "{me}"
    );
    let ttl = me["data"]["ttl"].as_u64().unwrap();
    assert!(ttl > 3500 && ttl <= 3600, "expiry kept: {ttl}");
    let (status, data) = call(&app, "GET", "/v1/team-a/allowed/one", limited, None).await;
    assert_eq!(status, StatusCode::OK, "{data}");
    assert_eq!(data["data"], json!({"v": "1"}));
    let (status, _) = call(&app, "GET", "/v1/team-a/other/two", limited, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/team-a/allowed/one",
        limited,
        Some(json!({"v": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "GET", "/v1/sys/policies/acl/reader", limited, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The token revoked before the restart stays revoked.
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(revoked.as_str()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
