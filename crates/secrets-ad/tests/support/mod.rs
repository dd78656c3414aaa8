//! Fixtures for the directory engine's tests against the real slapd of `scripts/services`
//! (ldap://127.0.0.1:389, dc=example,dc=org, admin cn=admin,dc=example,dc=org / admin, the
//! ppolicy overlay keeping pwdChangedTime).
//!
//! Each test makes its own `ou=cairn-ad-<random>` under the base with its own accounts, and
//! the subtree is deleted when the [`Tree`] is dropped (also when the test fails), so tests run
//! in parallel and leave nothing behind. The engine is built over in-memory storage with a
//! manual clock, as the core would build it, and driven through `Engine::handle`.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ldap3::exop::PasswordModify;
use ldap3::{LdapConnAsync, Scope, SearchEntry};
use secrets_sdk::testing::MemEngineStorage;
use secrets_sdk::{
    Data, Engine, EngineConfig, EngineError, Lease, Operation, Passwords, Request, RequestAuth,
    Response,
};
use serde_json::{Value, json};
use stdx::clock::ManualClock;

pub(crate) const URL: &str = "ldap://127.0.0.1:389";
pub(crate) const BASE: &str = "dc=example,dc=org";
pub(crate) const ADMIN: &str = "cn=admin,dc=example,dc=org";
pub(crate) const ADMIN_PW: &str = "admin";

fn random(len: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

async fn admin() -> ldap3::Ldap {
    let (conn, mut ldap) = LdapConnAsync::new(URL)
        .await
        .expect("slapd on 127.0.0.1:389");
    ldap3::drive!(conn);
    ldap.simple_bind(ADMIN, ADMIN_PW)
        .await
        .unwrap()
        .success()
        .expect("admin bind (run scripts/services)");
    ldap
}

/// Whether `dn` binds with `password`.
pub(crate) async fn binds(dn: &str, password: &str) -> bool {
    let (conn, mut ldap) = LdapConnAsync::new(URL).await.unwrap();
    ldap3::drive!(conn);
    let ok = ldap
        .simple_bind(dn, password)
        .await
        .is_ok_and(|r| r.success().is_ok());
    let _ = ldap.unbind().await;
    ok
}

/// A throwaway subtree of the test directory.
#[derive(Debug)]
pub(crate) struct Tree {
    pub(crate) ou: String,
}

impl Tree {
    pub(crate) async fn new() -> Tree {
        let name = format!("cairn-ad-{}", random(10));
        let ou = format!("ou={name},{BASE}");
        let mut ldap = admin().await;
        ldap.add(
            &ou,
            vec![
                ("objectClass", HashSet::from(["organizationalUnit"])),
                ("ou", HashSet::from([name.as_str()])),
            ],
        )
        .await
        .unwrap()
        .success()
        .unwrap();
        let _ = ldap.unbind().await;
        Tree { ou }
    }

    /// The DN of account `cn` in this tree.
    pub(crate) fn dn(&self, cn: &str) -> String {
        format!("cn={cn},{}", self.ou)
    }

    /// Adds an inetOrgPerson `cn` with `password`; returns its DN.
    pub(crate) async fn add_user(&self, cn: &str, password: &str) -> String {
        let dn = self.dn(cn);
        let mut ldap = admin().await;
        ldap.add(
            &dn,
            vec![
                ("objectClass", HashSet::from(["inetOrgPerson"])),
                ("cn", HashSet::from([cn])),
                ("sn", HashSet::from([cn])),
                ("userPassword", HashSet::from([password])),
            ],
        )
        .await
        .unwrap()
        .success()
        .unwrap();
        let _ = ldap.unbind().await;
        dn
    }

    /// Sets `dn`'s password as the directory's administrator (outside the store).
    pub(crate) async fn set_password(&self, dn: &str, password: &str) {
        let mut ldap = admin().await;
        ldap.extended(PasswordModify {
            user_id: Some(dn),
            old_pass: None,
            new_pass: Some(password),
        })
        .await
        .unwrap()
        .success()
        .unwrap();
        let _ = ldap.unbind().await;
    }
}

async fn delete_subtree(ou: String) {
    let mut ldap = admin().await;
    let Ok(result) = ldap
        .search(&ou, Scope::Subtree, "(objectClass=*)", vec!["1.1"])
        .await
    else {
        return;
    };
    let Ok((entries, _)) = result.success() else {
        return;
    };
    let mut dns: Vec<String> = entries
        .into_iter()
        .map(|e| SearchEntry::construct(e).dn)
        .collect();
    // Children before parents.
    dns.sort_by_key(|dn| std::cmp::Reverse(dn.len()));
    for dn in dns {
        let _ = ldap.delete(&dn).await;
    }
    let _ = ldap.unbind().await;
}

impl Drop for Tree {
    fn drop(&mut self) {
        let ou = self.ou.clone();
        // A fresh runtime on its own thread: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(delete_subtree(ou));
        })
        .join();
    }
}

/// An engine over in-memory storage and a manual clock at the system time.
pub(crate) struct Fixture {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) storage: Arc<MemEngineStorage>,
    pub(crate) clock: Arc<ManualClock>,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let storage = Arc::new(MemEngineStorage::default());
        let clock = Arc::new(ManualClock::at_system_time());
        let engine = secrets_ad::factory(EngineConfig {
            mount_point: "ad/".to_owned(),
            storage: storage.clone(),
            options: BTreeMap::new(),
            clock: clock.clone(),
            passwords: Passwords::default(),
        })
        .unwrap();
        Fixture {
            engine,
            storage,
            clock,
        }
    }

    pub(crate) async fn call(
        &self,
        operation: Operation,
        path: &str,
        body: Value,
        caller: Option<&RequestAuth>,
    ) -> Result<Option<Response>, EngineError> {
        let data: Data = match body {
            Value::Object(map) => map,
            _ => Data::new(),
        };
        let mut request = Request::new(operation, path).with_data(data);
        request.mount_point = "ad/".to_owned();
        request.auth = caller.cloned().map(std::sync::Arc::new);
        if operation.is_write() && self.engine.exists(&request).await?.is_some_and(|e| !e) {
            request.operation = Operation::Create;
        }
        self.engine.handle(request).await
    }

    pub(crate) async fn write(
        &self,
        path: &str,
        body: Value,
    ) -> Result<Option<Response>, EngineError> {
        self.call(Operation::Update, path, body, None).await
    }

    pub(crate) async fn read(&self, path: &str) -> Result<Option<Response>, EngineError> {
        self.call(Operation::Read, path, json!({}), None).await
    }

    /// `data` of a read that must answer.
    pub(crate) async fn data(&self, path: &str) -> Data {
        self.read(path)
            .await
            .unwrap()
            .and_then(|r| r.data)
            .unwrap_or_else(|| panic!("{path}: no data"))
    }

    /// Configures the engine for OpenLDAP on `tree`, bound as the directory's administrator.
    pub(crate) async fn configure(&self, tree: &Tree, extra: Value) {
        let mut body = json!({
            "schema": "openldap",
            "url": URL,
            "binddn": ADMIN,
            "bindpass": ADMIN_PW,
            "userdn": tree.ou,
        });
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        assert_eq!(self.write("config", body).await.unwrap(), None);
    }

    pub(crate) async fn revoke(&self, path: &str, response: &Response) -> Result<(), EngineError> {
        self.engine.revoke(&lease(path, response, None)).await
    }

    pub(crate) async fn renew(
        &self,
        path: &str,
        response: &Response,
    ) -> Result<std::time::Duration, EngineError> {
        self.engine
            .renew(&lease(
                path,
                response,
                Some(std::time::Duration::from_secs(60)),
            ))
            .await
    }
}

/// The lease the core would hand back for a leased `response` issued at `path`.
pub(crate) fn lease(
    path: &str,
    response: &Response,
    increment: Option<std::time::Duration>,
) -> Lease {
    let secret = response.secret.clone().expect("a leased response");
    Lease {
        lease_id: format!("ad/{path}/{}", random(24)),
        path: path.to_owned(),
        internal: secret.internal,
        age: std::time::Duration::ZERO,
        increment,
    }
}

/// A caller with a token (and optionally an entity).
pub(crate) fn caller(name: &str, entity: Option<&str>) -> RequestAuth {
    RequestAuth {
        accessor: format!("accessor-{name}"),
        display_name: name.to_owned(),
        policies: vec!["default".to_owned()],
        entity_id: entity.map(str::to_owned),
        token_hash: format!("hash-{name}"),
    }
}

pub(crate) fn text(data: &Data, field: &str) -> String {
    data.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{field} missing in {data:?}"))
        .to_owned()
}

pub(crate) fn bad_request(result: Result<Option<Response>, EngineError>) -> String {
    match result {
        Err(EngineError::BadRequest(message)) => message,
        other => panic!("expected a 400, got {other:?}"),
    }
}
