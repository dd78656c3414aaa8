//! Dynamic keys (Vault before 1.13, `secret_dynamic_key.go`): `creds/:role` of a `dynamic`
//! role generates an RSA key pair, installs its public half on the host for the user, and
//! answers the private half under a renewable lease; revoking the lease uninstalls it.
//!
//! Installing: the engine logs in to `ip:port` as the role's `admin_user` with the registered
//! key (`keys/:name`) through the system OpenSSH client (`remote.rs`), writes the public key
//! line (prefixed with `key_option_specs`) and the role's `install_script` to files named after
//! a random UUID in the admin's home, and runs `./<uuid>.sh install <uuid>
//! /home/<username>/.ssh/authorized_keys`; both files are removed afterwards. Uninstalling
//! runs the same with `uninstall`, with the key and script kept in the lease.
//!
//! Host keys are pinned on first use per IP and port (`host_keys/<ip>/<port>`): the first
//! connection learns and stores the host's key, every later one (installs and revocations)
//! requires exactly that key; a host presenting another is refused with 400 and nothing runs
//! on it. There is no API to reset a pin: a host whose key really changed needs a new mount
//! (docs/compat.md).
//!
//! Errors: a role's key no longer registered → 400 `key "x" not found`; a username that is not
//! a plain POSIX name (it becomes part of a path) → 400; the host refusing, failing or timing
//! out → 500 (logged); revocation failures are returned to the core, which retries.
//!
//! Invariants: operations on one host run one at a time in this engine (the install script
//! rewrites `authorized_keys`); the private key goes to the client only, never to storage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use secrets_sdk::{Data, EngineError, LeaseOptions, Response};
use serde_json::{Value, json};

use crate::remote::{Connection, RemoteError, Target, shell_quote};
use crate::store::{self, HostKeyPin, KEY_TYPE_DYNAMIC, Role};
use crate::{SshEngine, bad, keys};

/// The install script of a dynamic role without its own.
pub(crate) const DEFAULT_INSTALL_SCRIPT: &str = include_str!("install_script.sh");

/// `secret_type` of a dynamic key lease's internal data.
pub(crate) const SECRET_TYPE: &str = "dynamic_key";

/// One lock per host, so two operations never rewrite a host's `authorized_keys` at once.
#[derive(Debug, Default)]
pub(crate) struct HostLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl HostLocks {
    fn of(&self, ip: &str, port: u16) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(format!("{ip}:{port}")).or_default().clone()
    }
}

/// What installing or uninstalling needs, kept in the lease.
#[derive(Debug, Clone)]
struct Installation {
    key_name: String,
    admin_user: String,
    username: String,
    ip: String,
    port: u16,
    public_key: String,
    install_script: String,
}

impl Installation {
    fn internal(&self, key_option_specs: &str) -> Data {
        let value = json!({
            "secret_type": SECRET_TYPE,
            "host_key_name": self.key_name,
            "admin_user": self.admin_user,
            "username": self.username,
            "ip": self.ip,
            "port": self.port,
            "dynamic_public_key": self.public_key,
            "install_script": self.install_script,
            "key_option_specs": key_option_specs,
        });
        value.as_object().cloned().unwrap_or_default()
    }

    fn from_internal(internal: &Data) -> Result<Installation, EngineError> {
        let text = |name: &str| {
            internal
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| EngineError::Internal(format!("a dynamic key lease without {name}")))
        };
        let port = internal
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|port| u16::try_from(port).ok())
            .ok_or_else(|| EngineError::Internal("a dynamic key lease without port".to_owned()))?;
        Ok(Installation {
            key_name: text("host_key_name")?,
            admin_user: text("admin_user")?,
            username: text("username")?,
            ip: text("ip")?,
            port,
            public_key: text("dynamic_public_key")?,
            install_script: text("install_script")?,
        })
    }
}

/// A name fit for `/home/<name>/.ssh`: POSIX portable user-name characters, not starting with
/// `-`.
fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with('-')
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

pub(crate) async fn create(
    engine: &SshEngine,
    role: &Role,
    username: &str,
    ip: &str,
) -> Result<Response, EngineError> {
    if !valid_username(username) {
        return Err(bad(format!(
            "invalid username {username:?} for a dynamic key: letters, digits, '.', '_', '-' and '@' only"
        )));
    }
    let bits = if role.key_bits == 0 {
        1024
    } else {
        role.key_bits
    };
    let (private_pem, public_line) =
        tokio::task::spawn_blocking(move || crate::crypto::generate_dynamic_key(bits))
            .await
            .map_err(|err| EngineError::Internal(format!("key generation stopped: {err}")))?
            .map_err(EngineError::Internal)?;
    let public_line = public_line.trim_end();
    let public_key = if role.key_option_specs.is_empty() {
        public_line.to_owned()
    } else {
        format!("{} {public_line}", role.key_option_specs)
    };
    let installation = Installation {
        key_name: role.key.clone(),
        admin_user: role.admin_user.clone(),
        username: username.to_owned(),
        ip: ip.to_owned(),
        port: role.port,
        public_key,
        install_script: role.install_script.clone(),
    };
    run(engine, &installation, "install").await?;
    let data = json!({
        "ip": ip,
        "key": private_pem,
        "key_type": KEY_TYPE_DYNAMIC,
        "port": role.port,
        "username": username,
    });
    Ok(Response {
        data: data.as_object().cloned(),
        secret: Some(LeaseOptions {
            renewable: true,
            internal: installation.internal(&role.key_option_specs),
            ..LeaseOptions::default()
        }),
        ..Response::default()
    })
}

/// Revokes a dynamic key lease: uninstalls the key from the host.
pub(crate) async fn revoke(engine: &SshEngine, internal: &Data) -> Result<(), EngineError> {
    let installation = Installation::from_internal(internal)?;
    run(engine, &installation, "uninstall").await
}

/// Runs the install script with `action` on the installation's host.
async fn run(
    engine: &SshEngine,
    installation: &Installation,
    action: &str,
) -> Result<(), EngineError> {
    let storage = engine.storage.as_ref();
    let Some(admin_key) = keys::get(storage, &installation.key_name).await? else {
        return Err(bad(format!("key {:?} not found", installation.key_name)));
    };
    let host_lock = engine.host_locks.of(&installation.ip, installation.port);
    let _guard = host_lock.lock().await;
    let pin_path = store::host_key_path(&installation.ip, installation.port);
    let pin = store::get::<HostKeyPin>(storage, &pin_path).await?;
    let connection = Connection::with_key(&admin_key.key)
        .await
        .map_err(|err| remote_failure(installation, &err))?;
    let mut key_line = installation.public_key.trim().to_owned();
    key_line.push('\n');
    let encoded = base64::engine::general_purpose::STANDARD.encode(key_line.as_bytes());
    let auth_keys = format!("/home/{}/.ssh/authorized_keys", installation.username);
    let file = format!("cairn-{}", uuid::Uuid::new_v4().simple());
    let command = format!(
        "umask 077; f={file}; printf '%s' {encoded} | base64 -d > \"$f\" && cat > \"$f.sh\" \
         && chmod 700 \"$f.sh\" && ./\"$f.sh\" {action} \"$f\" {auth_keys}; \
         rc=$?; rm -f \"$f\" \"$f.sh\"; exit $rc",
        encoded = shell_quote(&encoded),
        auth_keys = shell_quote(&auth_keys),
    );
    let target = Target {
        ip: &installation.ip,
        port: installation.port,
        user: &installation.admin_user,
    };
    let outcome = connection
        .run(
            target,
            pin.as_ref().map(|pin| pin.host_key.as_str()),
            &command,
            installation.install_script.as_bytes(),
        )
        .await
        .map_err(|err| remote_failure(installation, &err))?;
    if let Some(host_key) = outcome.learned_host_key {
        let record = HostKeyPin {
            version: 1,
            host_key,
            pinned_at: engine.clock.now_ms().div_euclid(1000),
        };
        store::put(storage, &pin_path, &record).await?;
    }
    Ok(())
}

fn remote_failure(installation: &Installation, err: &RemoteError) -> EngineError {
    match err {
        RemoteError::HostKeyChanged => bad(format!(
            "refusing to connect to {}:{}: its host key does not match the key pinned on first use",
            installation.ip, installation.port
        )),
        RemoteError::Failed(why) => {
            tracing::warn!(ip = %installation.ip, port = installation.port, error = %why, "ssh: dynamic key host failed");
            EngineError::Internal(format!(
                "error installing the public key on {}:{}: {why}",
                installation.ip, installation.port
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_plain_posix_names() {
        for ok in ["alice", "svc_backup", "a.b-c", "u@realm"] {
            assert!(valid_username(ok), "{ok}");
        }
        for bad in ["", "..", "-rf", "a/b", "a b", "a'b", "$(id)"] {
            assert!(!valid_username(bad), "{bad}");
        }
    }

    #[test]
    fn the_lease_keeps_all_uninstalling_needs() {
        let installation = Installation {
            key_name: "admin".into(),
            admin_user: "root".into(),
            username: "alice".into(),
            ip: "10.0.0.1".into(),
            port: 2222,
            public_key: "ssh-rsa AAAA".into(),
            install_script: "#!/bin/sh\n".into(),
        };
        let back = Installation::from_internal(&installation.internal("")).unwrap();
        assert_eq!(back.port, 2222);
        assert_eq!(back.public_key, "ssh-rsa AAAA");
        assert_eq!(back.key_name, "admin");
    }
}
