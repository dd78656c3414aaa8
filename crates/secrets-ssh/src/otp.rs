//! One-time passwords: issuing them for `creds/:role` of an `otp` role, `verify` (the
//! unauthenticated check a host's helper makes) and the lease's revocation (Vault's
//! `path_verify.go`, `secret_otp.go`).
//!
//! - An OTP is a random UUID; only its HMAC-SHA256 under the mount's salt is stored
//!   (`otp/<hex>`), with the username, IP and role it was issued for.
//! - `verify {otp}` → `{username, ip, role_name}` and the record is deleted: an OTP works once;
//!   a second verify, an unknown OTP or one whose lease was revoked or expired → 400
//!   `OTP not found`. `verify-echo-request` → `{message: "verify-echo-response"}` (the helper's
//!   health check). A missing `otp` → 400 `Missing otp`.
//! - Revoking the lease deletes the record.
//!
//! Invariants: the OTP itself is never stored; a lookup and its delete run under one lock, so
//! two concurrent verifies of one OTP cannot both succeed on this server.

use secrets_sdk::{Data, EngineError, EngineStorage, LeaseOptions, Response};
use serde_json::json;

use crate::store::{self, OtpEntry};
use crate::{bad, text};

/// The echo a host's helper sends to check the engine is reachable.
const ECHO_REQUEST: &str = "verify-echo-request";
const ECHO_RESPONSE: &str = "verify-echo-response";

/// `secret_type` of an OTP lease's internal data.
pub(crate) const SECRET_TYPE: &str = "otp";

/// The mount's OTP salt, made and stored on first use.
#[derive(Debug, Default)]
pub(crate) struct Salt {
    cell: tokio::sync::OnceCell<Vec<u8>>,
}

impl Salt {
    async fn get(&self, storage: &dyn EngineStorage) -> Result<&[u8], EngineError> {
        self.cell
            .get_or_try_init(|| async {
                if let Some(bytes) = storage.get(store::SALT).await? {
                    let text = String::from_utf8_lossy(&bytes);
                    return stdx::hex::decode(text.trim()).ok_or_else(|| {
                        EngineError::Internal("the stored OTP salt is not hex".to_owned())
                    });
                }
                let mut salt = vec![0u8; 32];
                crate::crypto::fill_random(&mut salt);
                storage
                    .put(store::SALT, stdx::hex::encode(&salt).as_bytes())
                    .await?;
                Ok(salt)
            })
            .await
            .map(Vec::as_slice)
    }

    /// The storage key of `otp`.
    async fn key_of(&self, storage: &dyn EngineStorage, otp: &str) -> Result<String, EngineError> {
        use aws_lc_rs::hmac;
        let salt = self.get(storage).await?;
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, salt), otp.as_bytes());
        Ok(format!(
            "{}{}",
            store::OTPS,
            stdx::hex::encode(tag.as_ref())
        ))
    }
}

/// Issues an OTP for `username` at `ip` through `role_name`; the answer is a lease of the
/// mount's default TTL, not renewable.
pub(crate) async fn issue(
    storage: &dyn EngineStorage,
    salt: &Salt,
    role_name: &str,
    username: &str,
    ip: &str,
    port: u16,
) -> Result<Response, EngineError> {
    let mut otp = uuid::Uuid::new_v4().to_string();
    let mut key = salt.key_of(storage, &otp).await?;
    while storage.get(&key).await?.is_some() {
        otp = uuid::Uuid::new_v4().to_string();
        key = salt.key_of(storage, &otp).await?;
    }
    let entry = OtpEntry {
        version: 1,
        username: username.to_owned(),
        ip: ip.to_owned(),
        role_name: role_name.to_owned(),
    };
    store::put(storage, &key, &entry).await?;
    let mut internal = Data::new();
    internal.insert("secret_type".to_owned(), json!(SECRET_TYPE));
    internal.insert("otp_key".to_owned(), json!(key));
    let data = json!({
        "ip": ip,
        "key": otp,
        "key_type": store::KEY_TYPE_OTP,
        "port": port,
        "username": username,
    });
    Ok(Response {
        data: data.as_object().cloned(),
        secret: Some(LeaseOptions {
            renewable: false,
            internal,
            ..LeaseOptions::default()
        }),
        ..Response::default()
    })
}

/// `verify`.
pub(crate) async fn verify(
    storage: &dyn EngineStorage,
    salt: &Salt,
    lock: &tokio::sync::Mutex<()>,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let otp = text(data, "otp")?;
    if otp.is_empty() {
        return Err(bad("Missing otp"));
    }
    if otp == ECHO_REQUEST {
        let mut data = Data::new();
        data.insert("message".to_owned(), json!(ECHO_RESPONSE));
        return Ok(Some(Response::data(data)));
    }
    let key = salt.key_of(storage, &otp).await?;
    let _guard = lock.lock().await;
    let Some(entry) = store::get::<OtpEntry>(storage, &key).await? else {
        return Err(bad("OTP not found"));
    };
    storage.delete(&key).await?;
    let mut data = Data::new();
    data.insert("username".to_owned(), json!(entry.username));
    data.insert("ip".to_owned(), json!(entry.ip));
    data.insert("role_name".to_owned(), json!(entry.role_name));
    Ok(Some(Response::data(data)))
}

/// Revokes an OTP lease: the OTP no longer verifies.
pub(crate) async fn revoke(
    storage: &dyn EngineStorage,
    internal: &Data,
) -> Result<(), EngineError> {
    let Some(key) = internal.get("otp_key").and_then(|v| v.as_str()) else {
        return Err(EngineError::Internal(
            "an OTP lease without its key".to_owned(),
        ));
    };
    if !key.starts_with(store::OTPS) {
        return Err(EngineError::Internal(
            "an OTP lease with a foreign key".to_owned(),
        ));
    }
    storage.delete(key).await?;
    Ok(())
}
