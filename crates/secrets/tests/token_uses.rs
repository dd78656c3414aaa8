//! Limited-use tokens under concurrency: a token created with `num_uses = n` answers exactly
//! `n` requests, whether many requests use it at once through one service, or through two
//! services sharing one store (as two servers on etcd do). The use count is a compare-and-swap
//! on the stored token (`tokens/mod.rs`, `use_token`).
//!
//! Invariants: real services over memory storage, no sleeps; counts only, no timing.

mod support;

use std::sync::Arc;

use axum::Router;
use http::StatusCode;
use serde_json::json;
use storage::{MemStorage, Storage};
use support::{call, create_token, dev_over};

const ROOT: &str = "root-token-for-token-use-tests";

/// Sends `requests` concurrent `lookup-self` calls with `token`, alternating over `apps`;
/// returns how many answered 200, asserting every other answer is Vault's 403.
async fn use_concurrently(apps: &[Router], token: &str, requests: usize) -> usize {
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..requests {
        let app = apps[i % apps.len()].clone();
        let token = token.to_owned();
        calls.spawn(async move {
            call(
                &app,
                "GET",
                "/v1/auth/token/lookup-self",
                Some(&token),
                None,
            )
            .await
        });
    }
    let mut accepted = 0;
    while let Some(joined) = calls.join_next().await {
        let (status, body) = joined.unwrap();
        match status {
            StatusCode::OK => accepted += 1,
            StatusCode::FORBIDDEN => {
                assert_eq!(body, json!({"errors": ["permission denied"]}));
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limited_use_token_is_used_exactly_n_times_under_concurrent_requests() {
    let app = dev_over(Arc::new(MemStorage::new()), ROOT, None).await;
    let (token, _) = create_token(&app, ROOT, json!({"num_uses": 10})).await;
    let accepted = use_concurrently(std::slice::from_ref(&app), &token, 60).await;
    assert_eq!(
        accepted, 10,
        "a num_uses=10 token answered {accepted} requests"
    );
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "used up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limited_use_token_is_used_exactly_n_times_across_two_services_sharing_a_store() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("unseal-key");
    let first = dev_over(storage.clone(), ROOT, Some(key_file.clone())).await;
    let second = dev_over(storage, ROOT, Some(key_file)).await;
    for round in 0..3 {
        let (token, _) = create_token(&first, ROOT, json!({"num_uses": 15})).await;
        // Both services have seen (and cached) the token before the race.
        for app in [&first, &second] {
            let (status, body) = call(
                app,
                "POST",
                "/v1/auth/token/lookup",
                Some(ROOT),
                Some(json!({ "token": token })),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        let accepted = use_concurrently(&[first.clone(), second.clone()], &token, 80).await;
        assert_eq!(
            accepted, 15,
            "round {round}: a num_uses=15 token answered {accepted} requests over two services"
        );
    }
}
