//! The `ssh` secrets engine (Vault's ssh): one-time passwords, dynamic keys installed on
//! hosts, and a CA signing user and host certificates.
//!
//! Where it sits: the core (`crates/secrets`) mounts it for `sys/mounts` type `ssh` at any
//! path and calls [`Engine::handle`] with paths relative to the mount; leases it issues (OTPs,
//! dynamic keys) come back through [`Engine::revoke`] and [`Engine::renew`].
//!
//! Paths, one file per family:
//! - `keys/:name` (write, delete): registered host keys (`keys.rs`);
//! - `roles/:name` (write, read, delete), `LIST roles` (`roles.rs`);
//! - `config/zeroaddress` (read, write, delete) (`zeroaddress.rs`);
//! - `creds/:role` (write), `lookup` (write) (`creds.rs`; OTPs in `otp.rs`, dynamic keys in
//!   `dynamic.rs` over `remote.rs`);
//! - `verify` (write, unauthenticated) (`otp.rs`);
//! - `config/ca` (write, read, delete), `public_key` (read, unauthenticated, `text/plain`)
//!   (`ca.rs`);
//! - `sign/:role` (write) (`sign.rs`).
//!
//! Names in paths follow Vault's `GenericNameWithAtRegex` (letters, digits, `_`, `-`, `.`, `@`,
//! starting and ending with a letter, digit or `_`); any other path is 404 `unsupported path`,
//! a known path with another operation 405. Storage keys and records: `store.rs`. Key material:
//! `crypto.rs`; CIDR rules: `cidr.rs`.
//!
//! Invariants: time comes from [`EngineConfig::clock`] only; nothing secret leaves the
//! engine except to the client that asked (the CA's and registered private keys are never
//! answered; OTPs are stored only as an HMAC); every bad input is a 400 with Vault's words.

use std::sync::Arc;

use async_trait::async_trait;
use secrets_sdk::{
    Data, Engine, EngineConfig, EngineError, EngineStorage, Lease, Operation, Request, Response,
    SharedClock, SpecialPaths, fields,
};

mod ca;
mod cidr;
mod creds;
mod crypto;
mod dynamic;
mod keys;
mod otp;
mod remote;
mod roles;
mod sign;
mod store;
mod zeroaddress;

/// Builds the engine for one `ssh` mount. It takes no options.
pub fn factory(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(Arc::new(SshEngine {
        storage: config.storage,
        clock: config.clock,
        salt: otp::Salt::default(),
        verify_lock: tokio::sync::Mutex::new(()),
        host_locks: dynamic::HostLocks::default(),
        ca: ca::CaCache::default(),
    }))
}

/// One `ssh` mount.
#[derive(Debug)]
pub(crate) struct SshEngine {
    storage: Arc<dyn EngineStorage>,
    clock: SharedClock,
    salt: otp::Salt,
    /// Serialises OTP verification (lookup then delete).
    verify_lock: tokio::sync::Mutex<()>,
    host_locks: dynamic::HostLocks,
    /// The CA's parsed private key (`ca.rs`).
    ca: ca::CaCache,
}

/// A 400 with Vault's message.
pub(crate) fn bad(message: impl Into<String>) -> EngineError {
    EngineError::BadRequest(message.into())
}

/// A string field, `""` when absent or null.
pub(crate) fn text(data: &Data, name: &str) -> Result<String, EngineError> {
    Ok(fields::string(data, name)?.unwrap_or_default())
}

/// Vault's `GenericNameWithAtRegex`: `\w(([\w-.@]+)?\w)?`.
fn valid_name(name: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            word(first)
                && word(last)
                && bytes
                    .iter()
                    .all(|&b| word(b) || matches!(b, b'-' | b'.' | b'@'))
        }
        _ => false,
    }
}

/// A path split into its family and, for `family/:name` paths, the name.
fn named<'a>(path: &'a str, family: &str) -> Option<&'a str> {
    path.strip_prefix(family)
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|name| valid_name(name))
}

fn is_write(operation: Operation) -> bool {
    matches!(operation, Operation::Create | Operation::Update)
}

#[async_trait]
impl Engine for SshEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let storage = self.storage.as_ref();
        let path = request.path.as_str();
        let op = request.operation;
        let data = &request.data;
        if let Some(name) = named(path, "keys") {
            return match op {
                _ if is_write(op) => keys::write(storage, name, data).await,
                Operation::Delete => keys::delete(storage, name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if path == "roles" || path == "roles/" {
            return match op {
                Operation::List => roles::list(storage).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = named(path, "roles") {
            return match op {
                _ if is_write(op) => roles::write(storage, name, data).await,
                Operation::Read => roles::read(storage, name).await,
                Operation::Delete => roles::delete(storage, name).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = named(path, "creds") {
            return match op {
                _ if is_write(op) => creds::create(self, name, data).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        if let Some(name) = named(path, "sign") {
            return match op {
                _ if is_write(op) => sign::sign(self, name, &request).await,
                _ => Err(EngineError::UnsupportedOperation),
            };
        }
        match (path, op) {
            ("config/zeroaddress", Operation::Read) => zeroaddress::read(storage).await,
            ("config/zeroaddress", _) if is_write(op) => zeroaddress::write(storage, data).await,
            ("config/zeroaddress", Operation::Delete) => zeroaddress::delete(storage).await,
            ("lookup", _) if is_write(op) => creds::lookup(self, data).await,
            ("verify", _) if is_write(op) => {
                otp::verify(storage, &self.salt, &self.verify_lock, data).await
            }
            ("config/ca", Operation::Read) => ca::read(storage).await,
            ("config/ca", _) if is_write(op) => ca::write(storage, &self.ca, data).await,
            ("config/ca", Operation::Delete) => ca::delete(storage, &self.ca).await,
            ("public_key", Operation::Read) => ca::public_key(storage).await,
            ("config/zeroaddress" | "lookup" | "verify" | "config/ca" | "public_key", _) => {
                Err(EngineError::UnsupportedOperation)
            }
            _ => Err(EngineError::UnsupportedPath),
        }
    }

    async fn revoke(&self, lease: &Lease) -> Result<(), EngineError> {
        let kind = lease
            .internal
            .get("secret_type")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        match kind {
            otp::SECRET_TYPE => otp::revoke(self.storage.as_ref(), &lease.internal).await,
            dynamic::SECRET_TYPE => dynamic::revoke(self, &lease.internal).await,
            other => Err(EngineError::Internal(format!(
                "a lease of an unknown secret type {other:?}"
            ))),
        }
    }

    fn special_paths(&self) -> SpecialPaths {
        SpecialPaths {
            unauthenticated: vec!["verify".to_owned(), "public_key".to_owned()],
            root: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_vaults_pattern() {
        for ok in ["web", "a", "my-role.v2", "ops@corp", "_x_"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a/b", "a b", ".a"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
