//! The engine trait and how engines are made.
//!
//! Invariant: `handle` returning `Ok(None)` means "nothing to say": the core answers 204 to a
//! write and 404 to a read or list.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Data, EngineError, EngineStorage, Request, Response, SharedClock};

/// What a mount's engine is built from.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The mount path, with a trailing slash.
    pub mount_point: String,
    /// Storage scoped to this mount.
    pub storage: Arc<dyn EngineStorage>,
    /// The mount's `options` map (e.g. `version` for kv).
    pub options: std::collections::BTreeMap<String, String>,
    /// The store's one clock: every time an engine stamps or compares (kv v2 version times)
    /// comes from it, so tests can move it.
    pub clock: SharedClock,
    /// Generates passwords from the default or a named password policy
    /// (`sys/policies/password`).
    pub passwords: crate::Passwords,
}

/// Builds an engine for one mount.
pub type Factory = fn(EngineConfig) -> Result<Arc<dyn Engine>, EngineError>;

/// A lease the core tracks for an engine, handed back on revoke and renew.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub lease_id: String,
    /// The request path (relative to the mount) that issued the secret.
    pub path: String,
    pub internal: Data,
    /// How long the lease has lived so far.
    pub age: Duration,
    /// The TTL the client asks for on renew (`increment`), if any.
    pub increment: Option<Duration>,
}

/// Paths with special treatment, as glob patterns relative to the mount (`login/*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialPaths {
    /// Served without a token (logins).
    pub unauthenticated: Vec<String>,
    /// Need `sudo` in addition to the operation's capability.
    pub root: Vec<String>,
}

/// A secrets engine or auth method mounted at some path.
#[async_trait]
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Handles one request.
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError>;

    /// For writes: whether the addressed item exists (`Some`), so the core can ask for the
    /// `create` or `update` capability; `None` when the path has no existence check (always
    /// `update`).
    async fn exists(&self, _request: &Request) -> Result<Option<bool>, EngineError> {
        Ok(None)
    }

    /// Revokes a lease this engine issued (drop the user, invalidate the OTP).
    async fn revoke(&self, _lease: &Lease) -> Result<(), EngineError> {
        Ok(())
    }

    /// Renews a lease; returns the TTL granted (the core caps it), or an error if the lease
    /// cannot be renewed.
    async fn renew(&self, lease: &Lease) -> Result<Duration, EngineError> {
        lease
            .increment
            .ok_or(EngineError::BadRequest("lease is not renewable".to_owned()))
    }

    /// The token with this [`crate::RequestAuth::token_hash`] was revoked or expired: drop
    /// whatever the engine keeps for it (cubbyhole drops the token's storage). Called on every
    /// mount for every revoked token; by default there is nothing to drop.
    async fn token_revoked(&self, _token_hash: &str) -> Result<(), EngineError> {
        Ok(())
    }

    /// Background work, as Vault's `PeriodicFunc`: the core calls it on every mounted engine
    /// about once a second while this server leads and the store is unsealed. It must be cheap
    /// when nothing is due; an error is logged and the next call comes anyway.
    async fn periodic(&self) -> Result<(), EngineError> {
        Ok(())
    }

    fn special_paths(&self) -> SpecialPaths {
        SpecialPaths::default()
    }
}
