//! The auth cache (`auth_cache.rs`): a token seen again is resolved without reading the store,
//! and a change to what it resolves to is seen at once when this server made it, and as soon
//! as the watch delivers it when someone else wrote the store; a plain membership page read
//! again reads nothing from the store.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use storage::StorageExt;
use support::{Member, ROOT, TestPlatform};

/// Organization `acme` with member `alice` (in team `devs`, no organization access).
async fn alice_in_acme(platform: &TestPlatform) -> Member {
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    platform.member("acme", "alice", &[&devs]).await
}

fn page(organization: &str) -> String {
    format!("/api/v2/organizations/{organization}/organization-memberships")
}

#[tokio::test]
async fn a_repeated_page_reads_nothing_from_the_store() {
    let (platform, counting) = TestPlatform::counting().await;
    let member = alice_in_acme(&platform).await;
    for token in [ROOT, member.token.as_str()] {
        platform.get(&page("acme"), token).await.expect(200);
        counting.reset();
        platform.get(&page("acme"), token).await.expect(200);
        // The caller, its access and the plain page are all kept under the same epoch.
        assert_eq!(counting.reads_under("platform/"), 0, "token {token}");
    }
}

#[tokio::test]
async fn a_token_deleted_here_is_refused_at_once_after_being_cached() {
    let platform = TestPlatform::new().await;
    let member = alice_in_acme(&platform).await;
    platform.get(&page("acme"), &member.token).await.expect(200);
    platform.get(&page("acme"), &member.token).await.expect(200);
    let tokens = platform
        .get(
            &format!("/api/v2/users/{}/authentication-tokens", member.user_id),
            &member.token,
        )
        .await
        .expect(200);
    let token_id = tokens.body["data"][0]["id"].as_str().expect("token id");
    platform
        .delete(
            &format!("/api/v2/authentication-tokens/{token_id}"),
            &member.token,
        )
        .await
        .expect(204);
    platform.get(&page("acme"), &member.token).await.expect(401);
}

#[tokio::test]
async fn a_member_removed_here_loses_the_organization_at_once() {
    let platform = TestPlatform::new().await;
    let member = alice_in_acme(&platform).await;
    platform.get(&page("acme"), &member.token).await.expect(200);
    platform
        .delete(
            &format!("/api/v2/organization-memberships/{}", member.membership_id),
            ROOT,
        )
        .await
        .expect(204);
    platform.get(&page("acme"), &member.token).await.expect(404);
}

#[tokio::test]
async fn a_team_given_access_here_grants_it_at_once() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let team = platform
        .create_team("acme", "ops", json!({"manage-membership": false}))
        .await;
    let member = platform.member("acme", "alice", &[&team]).await;
    let refused = platform
        .invite("acme", "bob@example.com", &[&team], &member.token)
        .await;
    assert_eq!(refused.status, 404, "{}", refused.text);
    platform
        .patch(
            &format!("/api/v2/teams/{team}"),
            ROOT,
            json!({"data": {"type": "teams", "attributes": {
                "organization-access": {"manage-membership": true}
            }}}),
        )
        .await
        .expect(200);
    platform
        .invite("acme", "carol@example.com", &[&team], &member.token)
        .await
        .expect(201);
}

#[tokio::test]
async fn a_token_deleted_by_another_server_is_refused_once_the_watch_delivers_it() {
    let platform = TestPlatform::new().await;
    let member = alice_in_acme(&platform).await;
    platform.get(&page("acme"), &member.token).await.expect(200);
    platform.get(&page("acme"), &member.token).await.expect(200);
    // Another server's write: straight to the shared store, not through this platform.
    let tokens = platform
        .storage
        .scan_prefix(b"platform/tokens/")
        .await
        .expect("scan tokens");
    let own = tokens
        .kvs
        .iter()
        .find(|kv| String::from_utf8_lossy(&kv.value).contains(&member.user_id))
        .expect("the member's token record");
    platform.storage.delete(&own.key).await.expect("delete");
    let started = Instant::now();
    loop {
        let status = platform.get(&page("acme"), &member.token).await.status;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the deleted token still works after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
