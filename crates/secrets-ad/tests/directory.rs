//! The directory engine against the real OpenLDAP of `scripts/services`: every password the
//! engine hands out binds, and every rotation or check-in retires the previous one in the
//! directory itself. Each test works in its own subtree (see `support`).

mod support;

use std::time::Duration;

use secrets_sdk::Operation;
use serde_json::json;
use support::{Fixture, Tree, bad_request, binds, caller, text};

#[tokio::test]
async fn a_roles_password_binds_and_rotate_role_retires_it() {
    let tree = Tree::new().await;
    let dn = tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({})).await;
    assert_eq!(
        fx.write("roles/app", json!({"service_account_name": "svc"}))
            .await
            .unwrap(),
        None
    );

    let first = fx.data("creds/app").await;
    assert_eq!(text(&first, "username"), "svc");
    let current = text(&first, "current_password");
    assert!(current.starts_with("?@09AZ") && current.len() == 64);
    assert!(first.get("last_password").is_none());
    assert!(binds(&dn, &current).await, "the handed-out password binds");
    assert!(
        !binds(&dn, "initial-secret").await,
        "the first read rotated it"
    );

    // A second read within the TTL answers the same password.
    assert_eq!(
        text(&fx.data("creds/app").await, "current_password"),
        current
    );

    assert_eq!(fx.write("rotate-role/app", json!({})).await.unwrap(), None);
    let second = fx.data("creds/app").await;
    let next = text(&second, "current_password");
    assert_ne!(next, current);
    assert_eq!(text(&second, "last_password"), current);
    assert!(binds(&dn, &next).await);
    assert!(
        !binds(&dn, &current).await,
        "the previous password no longer binds"
    );

    let role = fx.data("roles/app").await;
    assert_eq!(text(&role, "service_account_name"), "svc");
    assert!(role.contains_key("last_vault_rotation"));
    assert!(role.contains_key("password_last_set"), "{role:?}");

    let list = fx
        .call(Operation::List, "roles/", json!({}), None)
        .await
        .unwrap();
    assert_eq!(list.unwrap().data.unwrap()["keys"], json!(["app"]));
    assert_eq!(
        fx.call(Operation::Delete, "roles/app", json!({}), None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        fx.read("creds/app").await.unwrap(),
        None,
        "a deleted role reads as 404"
    );
    assert!(
        binds(&dn, &next).await,
        "deleting a role leaves the password alone"
    );
}

#[tokio::test]
async fn the_periodic_hook_rotates_a_role_whose_ttl_ran_out() {
    let tree = Tree::new().await;
    let dn = tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({"ttl": "1h", "max_ttl": "2h"}))
        .await;
    fx.write(
        "roles/app",
        json!({"service_account_name": "svc", "ttl": 60}),
    )
    .await
    .unwrap();
    // A role never read is left for its first read.
    fx.engine.periodic().await.unwrap();
    assert!(binds(&dn, "initial-secret").await);

    let before = text(&fx.data("creds/app").await, "current_password");
    fx.clock.advance(Duration::from_secs(30));
    fx.engine.periodic().await.unwrap();
    assert!(binds(&dn, &before).await, "not due yet");

    fx.clock.advance(Duration::from_secs(31));
    fx.engine.periodic().await.unwrap();
    assert!(!binds(&dn, &before).await, "rotated when the TTL ran out");
    let after = fx.data("creds/app").await;
    assert_eq!(text(&after, "last_password"), before);
    assert!(binds(&dn, &text(&after, "current_password")).await);
}

#[tokio::test]
async fn a_password_changed_outside_the_store_is_rotated_on_the_next_read() {
    let tree = Tree::new().await;
    let dn = tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({"last_rotation_tolerance": "0s"}))
        .await;
    fx.write("roles/app", json!({"service_account_name": "svc"}))
        .await
        .unwrap();
    let ours = text(&fx.data("creds/app").await, "current_password");
    // pwdChangedTime has whole seconds: change it in a later second than our rotation.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tree.set_password(&dn, "changed-by-hand").await;
    // The directory's times are real ones: bring the engine's clock along.
    fx.clock.set_ms(stdx::time::unix_now_ms());

    let creds = fx.data("creds/app").await;
    let current = text(&creds, "current_password");
    assert_ne!(current, ours);
    assert!(binds(&dn, &current).await);
    assert!(
        !binds(&dn, "changed-by-hand").await,
        "the store took the account back"
    );

    // Within the tolerance nothing moves.
    assert_eq!(
        text(&fx.data("creds/app").await, "current_password"),
        current
    );
}

#[tokio::test]
async fn role_writes_are_checked_against_the_config_and_the_directory() {
    let tree = Tree::new().await;
    tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    assert_eq!(
        bad_request(
            fx.write("roles/app", json!({"service_account_name": "svc"}))
                .await
        ),
        "the config is currently unset"
    );
    fx.configure(&tree, json!({"ttl": 100, "max_ttl": 200}))
        .await;
    assert_eq!(
        bad_request(fx.write("roles/app", json!({})).await),
        "\"service_account_name\" is required"
    );
    assert!(
        bad_request(
            fx.write("roles/app", json!({"service_account_name": "nobody"}))
                .await
        )
        .contains("unable to find service account named nobody")
    );
    assert_eq!(
        bad_request(
            fx.write(
                "roles/app",
                json!({"service_account_name": "svc", "ttl": 300})
            )
            .await
        ),
        "requested ttl of 300 seconds is over the max ttl of 200 seconds"
    );
    fx.write("roles/app", json!({"service_account_name": "svc"}))
        .await
        .unwrap();
    assert_eq!(fx.data("roles/app").await["ttl"], json!(100));
    assert!(bad_request(fx.write("rotate-role/nope", json!({})).await).contains("does not exist"));
}

#[tokio::test]
async fn config_is_validated_and_read_without_the_bind_password() {
    let fx = Fixture::new();
    let base = json!({"binddn": "cn=x,dc=example,dc=org", "bindpass": "pw"});
    let with = |extra: serde_json::Value| {
        let mut body = base.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    assert_eq!(
        bad_request(
            fx.write(
                "config",
                with(json!({"password_policy": "p", "length": 20}))
            )
            .await
        ),
        "cannot set password_policy and either length or formatter"
    );
    assert!(
        bad_request(fx.write("config", with(json!({"length": 13}))).await)
            .contains("boost length to 14")
    );
    assert!(
        bad_request(
            fx.write("config", with(json!({"formatter": "abc", "length": 20})))
                .await
        )
        .contains("must contain password replacement field")
    );
    assert!(
        bad_request(fx.write("config", with(json!({"url": "http://dc1"}))).await)
            .contains("scheme must be ldap or ldaps")
    );
    assert_eq!(
        bad_request(
            fx.write(
                "config",
                with(json!({"tls_min_version": "tls13", "tls_max_version": "tls12"}))
            )
            .await
        ),
        "'tls_max_version' must be greater than or equal to 'tls_min_version'"
    );
    assert_eq!(
        bad_request(
            fx.write("config", with(json!({"ttl": 100, "max_ttl": 50})))
                .await
        ),
        "ttl must be smaller than or equal to max_ttl"
    );
    assert_eq!(
        bad_request(
            fx.write("config", with(json!({"certificate": "not a pem"})))
                .await
        ),
        "failed to parse server tls cert"
    );
    assert_eq!(
        bad_request(fx.write("config", json!({"bindpass": "pw"})).await),
        "binddn is required"
    );
    assert!(
        bad_request(fx.write("config", with(json!({"schema": "novell"}))).await).contains("schema")
    );

    fx.write("config", base.clone()).await.unwrap();
    let read = fx.data("config").await;
    assert!(!read.contains_key("bindpass"));
    assert_eq!(read["url"], json!("ldap://127.0.0.1"));
    assert_eq!(read["length"], json!(64));
    assert_eq!(read["request_timeout"], json!(90));
    assert_eq!(read["last_rotation_tolerance"], json!(5));
    assert_eq!(read["ttl"], json!(768 * 3600));
    assert_eq!(
        read["schema"],
        json!("ad"),
        "Active Directory is the default"
    );
    assert_eq!(read["tls_min_version"], json!("tls12"));

    // Connection settings merge; password settings are taken afresh.
    fx.write(
        "config",
        json!({"url": "ldaps://dc1,ldaps://dc2", "request_timeout": "30s", "password_policy": "p"}),
    )
    .await
    .unwrap();
    let read = fx.data("config").await;
    assert_eq!(read["binddn"], json!("cn=x,dc=example,dc=org"));
    assert_eq!(read["url"], json!("ldaps://dc1,ldaps://dc2"));
    assert_eq!(read["request_timeout"], json!(30));
    assert_eq!(read["length"], json!(0));
    assert_eq!(read["password_policy"], json!("p"));

    assert_eq!(
        fx.call(Operation::Delete, "config", json!({}), None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(fx.read("config").await.unwrap(), None);
}

#[tokio::test]
async fn urls_are_tried_in_order_until_one_connects() {
    let tree = Tree::new().await;
    let dn = tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    // Nothing listens on port 1.
    fx.configure(
        &tree,
        json!({"url": "ldap://127.0.0.1:1,ldap://127.0.0.1:389"}),
    )
    .await;
    fx.write("roles/app", json!({"service_account_name": "svc"}))
        .await
        .unwrap();
    let current = text(&fx.data("creds/app").await, "current_password");
    assert!(binds(&dn, &current).await);

    fx.configure(&tree, json!({"url": "ldap://127.0.0.1:1"}))
        .await;
    assert!(bad_request(fx.read("creds/app").await).contains("failed to connect to the directory"));
}

#[tokio::test]
async fn check_out_lends_each_account_once_and_check_in_rotates_it() {
    let tree = Tree::new().await;
    let dn1 = tree.add_user("lib1", "initial-1").await;
    let dn2 = tree.add_user("lib2", "initial-2").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({})).await;
    assert_eq!(
        fx.write(
            "library/team",
            json!({"service_account_names": "lib1,lib2", "ttl": "1h", "max_ttl": "2h"})
        )
        .await
        .unwrap(),
        None
    );
    assert!(
        !binds(&dn1, "initial-1").await && !binds(&dn2, "initial-2").await,
        "joining a set rotates the password"
    );
    let set = fx.data("library/team").await;
    assert_eq!(set["service_account_names"], json!(["lib1", "lib2"]));
    assert_eq!(set["ttl"], json!(3600));
    assert_eq!(set["max_ttl"], json!(7200));

    let alice = caller("alice", Some("entity-alice"));
    let bob = caller("bob", None);
    let out_a = fx
        .call(
            Operation::Update,
            "library/team/check-out",
            json!({"ttl": "10m"}),
            Some(&alice),
        )
        .await
        .unwrap()
        .unwrap();
    let lease = out_a.secret.clone().unwrap();
    assert!(lease.renewable);
    assert_eq!(
        lease.ttl,
        Duration::from_secs(600),
        "a requested ttl shortens"
    );
    assert_eq!(lease.max_ttl, Some(Duration::from_secs(7200)));
    let data_a = out_a.data.clone().unwrap();
    assert_eq!(text(&data_a, "service_account_name"), "lib1");
    let password_a = text(&data_a, "password");
    assert!(
        binds(&dn1, &password_a).await,
        "the checked-out password binds"
    );

    let out_b = fx
        .call(
            Operation::Update,
            "library/team/check-out",
            json!({"ttl": "5h"}),
            Some(&bob),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out_b.secret.clone().unwrap().ttl,
        Duration::from_secs(3600),
        "a longer ttl is capped at the set's"
    );
    assert_eq!(
        text(out_b.data.as_ref().unwrap(), "service_account_name"),
        "lib2"
    );

    assert_eq!(
        bad_request(
            fx.call(
                Operation::Update,
                "library/team/check-out",
                json!({}),
                Some(&alice)
            )
            .await
        ),
        "No service accounts available for check-out."
    );

    let status = fx.data("library/team/status").await;
    assert_eq!(
        status["lib1"],
        json!({"available": false, "borrower_client_token": "accessor-alice", "borrower_entity_id": "entity-alice"})
    );
    assert_eq!(
        status["lib2"],
        json!({"available": false, "borrower_client_token": "accessor-bob"})
    );

    // Bob may not check in Alice's account; with no names he checks in his own.
    assert_eq!(
        bad_request(
            fx.call(
                Operation::Update,
                "library/team/check-in",
                json!({"service_account_names": "lib1"}),
                Some(&bob)
            )
            .await
        ),
        "\"lib1\" can't be checked in because it wasn't checked out by the caller"
    );
    let checked_in = fx
        .call(
            Operation::Update,
            "library/team/check-in",
            json!({}),
            Some(&bob),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checked_in.data.unwrap()["check_ins"], json!(["lib2"]));
    let bob_password = text(out_b.data.as_ref().unwrap(), "password");
    assert!(
        !binds(&dn2, &bob_password).await,
        "check-in rotated the password"
    );

    // The same entity with another token may check in Alice's account.
    let alice_again = caller("alice-2", Some("entity-alice"));
    let checked_in = fx
        .call(
            Operation::Update,
            "library/team/check-in",
            json!({"service_account_names": ["lib1"]}),
            Some(&alice_again),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checked_in.data.unwrap()["check_ins"], json!(["lib1"]));
    assert!(!binds(&dn1, &password_a).await);
    // Checking in an available account succeeds without listing it.
    let again = fx
        .call(
            Operation::Update,
            "library/team/check-in",
            json!({"service_account_names": "lib1"}),
            Some(&alice),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.data.unwrap()["check_ins"], json!([]));
    assert_eq!(
        fx.data("library/team/status").await["lib1"],
        json!({"available": true})
    );

    // A renewed lease after its account was checked in is refused.
    assert!(
        fx.renew("library/team/check-out", &out_a)
            .await
            .unwrap_err()
            .to_string()
            .contains("is already checked in")
    );

    // And the next borrower gets the rotated password.
    let out = fx
        .call(
            Operation::Update,
            "library/team/check-out",
            json!({}),
            Some(&bob),
        )
        .await
        .unwrap()
        .unwrap();
    let data = out.data.unwrap();
    let dn = if text(&data, "service_account_name") == "lib1" {
        &dn1
    } else {
        &dn2
    };
    assert!(binds(dn, &text(&data, "password")).await);
}

#[tokio::test]
async fn revoking_a_check_out_lease_checks_the_account_in() {
    let tree = Tree::new().await;
    let dn = tree.add_user("lib1", "initial-1").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({})).await;
    fx.write(
        "library/solo",
        json!({"service_account_names": ["lib1"], "ttl": 0, "max_ttl": 0}),
    )
    .await
    .unwrap();
    let alice = caller("alice", None);
    let out = fx
        .call(
            Operation::Update,
            "library/solo/check-out",
            json!({"ttl": 120}),
            Some(&alice),
        )
        .await
        .unwrap()
        .unwrap();
    let secret = out.secret.clone().unwrap();
    assert_eq!(
        secret.ttl,
        Duration::from_secs(120),
        "an unlimited set takes the requested ttl"
    );
    assert_eq!(secret.max_ttl, None);
    let password = text(out.data.as_ref().unwrap(), "password");
    assert!(binds(&dn, &password).await);
    assert_eq!(
        fx.renew("library/solo/check-out", &out).await.unwrap(),
        Duration::from_secs(60),
        "an unlimited set renews by the increment"
    );

    fx.revoke("library/solo/check-out", &out).await.unwrap();
    assert!(
        !binds(&dn, &password).await,
        "revoke checked in and rotated"
    );
    assert_eq!(
        fx.data("library/solo/status").await["lib1"],
        json!({"available": true})
    );

    // A lease from an earlier check-out does not check in the next borrower's account.
    let bob = caller("bob", None);
    let next = fx
        .call(
            Operation::Update,
            "library/solo/check-out",
            json!({}),
            Some(&bob),
        )
        .await
        .unwrap()
        .unwrap();
    fx.revoke("library/solo/check-out", &out).await.unwrap();
    let next_password = text(next.data.as_ref().unwrap(), "password");
    assert!(binds(&dn, &next_password).await);
    assert_eq!(
        fx.data("library/solo/status").await["lib1"]["available"],
        json!(false)
    );

    // The set cannot go while lent out; the manage path checks in for anyone.
    assert!(
        bad_request(
            fx.call(Operation::Delete, "library/solo", json!({}), None)
                .await
        )
        .contains("currently checked out")
    );
    let forced = fx
        .call(
            Operation::Update,
            "library/manage/solo/check-in",
            json!({}),
            Some(&alice),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(forced.data.unwrap()["check_ins"], json!(["lib1"]));
    assert!(!binds(&dn, &next_password).await);
    assert_eq!(
        fx.call(Operation::Delete, "library/solo", json!({}), None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(fx.read("library/solo").await.unwrap(), None);
}

#[tokio::test]
async fn library_sets_are_validated_and_enforcement_can_be_disabled() {
    let tree = Tree::new().await;
    tree.add_user("lib1", "initial-1").await;
    let dn2 = tree.add_user("lib2", "initial-2").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({})).await;
    assert_eq!(
        bad_request(fx.write("library/a", json!({})).await),
        "\"service_account_names\" must be provided"
    );
    assert_eq!(
        bad_request(
            fx.write(
                "library/a",
                json!({"service_account_names": "lib1", "ttl": "2h", "max_ttl": "1h"})
            )
            .await
        ),
        "max_ttl (3600 seconds) may not be less than ttl (7200 seconds)"
    );
    assert!(
        bad_request(
            fx.write("library/a", json!({"service_account_names": "ghost"}))
                .await
        )
        .contains("unable to find service account named ghost")
    );
    fx.write("library/a", json!({"service_account_names": "lib1"}))
        .await
        .unwrap();
    assert_eq!(
        bad_request(
            fx.write("library/b", json!({"service_account_names": "lib1"}))
                .await
        ),
        "\"lib1\" is already managed by another set"
    );
    fx.write(
        "library/b",
        json!({"service_account_names": "lib2", "disable_check_in_enforcement": true}),
    )
    .await
    .unwrap();
    let list = fx
        .call(Operation::List, "library/", json!({}), None)
        .await
        .unwrap();
    assert_eq!(list.unwrap().data.unwrap()["keys"], json!(["a", "b"]));

    let out = fx
        .call(
            Operation::Update,
            "library/b/check-out",
            json!({}),
            Some(&caller("alice", None)),
        )
        .await
        .unwrap()
        .unwrap();
    let password = text(out.data.as_ref().unwrap(), "password");
    let checked_in = fx
        .call(
            Operation::Update,
            "library/b/check-in",
            json!({}),
            Some(&caller("bob", None)),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checked_in.data.unwrap()["check_ins"], json!(["lib2"]));
    assert!(!binds(&dn2, &password).await);
    assert_eq!(
        bad_request(
            fx.call(Operation::Update, "library/nope/check-out", json!({}), None)
                .await
        ),
        "\"nope\" doesn't exist"
    );
}

#[tokio::test]
async fn rotate_root_gives_the_bind_account_a_password_only_the_store_knows() {
    let tree = Tree::new().await;
    let binder = tree.add_user("binder", "bind-secret").await;
    tree.add_user("svc", "initial-secret").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({"binddn": binder, "bindpass": "bind-secret"}))
        .await;

    let (first, second) = tokio::join!(
        fx.write("rotate-root", json!({})),
        fx.write("rotate-root", json!({}))
    );
    assert_eq!(first.unwrap(), None);
    assert_eq!(
        second.unwrap().unwrap().warnings,
        vec!["Root password rotation is already in progress.".to_owned()]
    );
    assert!(
        !binds(&binder, "bind-secret").await,
        "the old bind password is gone"
    );
    let read = fx.data("config").await;
    assert!(!read.contains_key("bindpass"));
    assert!(read.contains_key("last_bind_password_rotation"));
    // The engine still binds (with the new password) to find accounts.
    assert_eq!(
        fx.write("roles/app", json!({"service_account_name": "svc"}))
            .await
            .unwrap(),
        None
    );
    // GET works too.
    assert_eq!(fx.read("rotate-root").await.unwrap(), None);
}

#[tokio::test]
async fn the_periodic_hook_finishes_password_changes_a_crash_interrupted() {
    use secrets_sdk::EngineStorage;
    let tree = Tree::new().await;
    let dn = tree.add_user("svc", "initial-secret").await;
    let lib = tree.add_user("lib1", "initial-1").await;
    let fx = Fixture::new();
    fx.configure(&tree, json!({})).await;
    fx.write("roles/app", json!({"service_account_name": "svc"}))
        .await
        .unwrap();
    let before = text(&fx.data("creds/app").await, "current_password");
    fx.write("library/team", json!({"service_account_names": "lib1"}))
        .await
        .unwrap();
    fx.call(
        Operation::Update,
        "library/team/check-out",
        json!({}),
        Some(&caller("alice", None)),
    )
    .await
    .unwrap();

    // A crash right after the new passwords were written down, before the directory took them.
    let pending = |password: &str| {
        serde_json::to_vec(&json!({"version": 1, "password": password, "created_ms": 1})).unwrap()
    };
    fx.storage
        .put("wal/role/app", &pending("?@09AZfrom-the-wal-1"))
        .await
        .unwrap();
    fx.storage
        .put("wal/account/lib1", &pending("?@09AZfrom-the-wal-2"))
        .await
        .unwrap();
    fx.engine.periodic().await.unwrap();

    assert!(binds(&dn, "?@09AZfrom-the-wal-1").await);
    let creds = fx.data("creds/app").await;
    assert_eq!(text(&creds, "current_password"), "?@09AZfrom-the-wal-1");
    assert_eq!(text(&creds, "last_password"), before);
    assert!(binds(&lib, "?@09AZfrom-the-wal-2").await);
    assert_eq!(
        fx.data("library/team/status").await["lib1"],
        json!({"available": true}),
        "the interrupted check-in completed"
    );
    assert!(
        !fx.storage.keys().iter().any(|k| k.starts_with("wal/")),
        "no WAL is left"
    );
}
