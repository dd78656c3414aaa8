//! What an engine is asked to do.
//!
//! Invariant: `path` is relative to the mount and never starts with `/`; for a list it ends
//! with `/` unless it is empty (the mount root).

use std::sync::Arc;
use std::time::Duration;

use crate::Data;

/// The logical operation, after the core mapped the HTTP verb (LIST and `GET ?list=true` are
/// [`Operation::List`]; a write is [`Operation::Create`] when the engine's existence check
/// says the item is missing, else [`Operation::Update`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Read,
    Create,
    Update,
    Patch,
    Delete,
    List,
}

impl Operation {
    /// Whether the operation writes (create, update, patch, delete).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Operation::Create | Operation::Update | Operation::Patch | Operation::Delete
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Patch => "patch",
            Operation::Delete => "delete",
            Operation::List => "list",
        }
    }
}

/// Who is asking, as far as an engine needs to know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestAuth {
    /// The token's accessor (never the token itself).
    pub accessor: String,
    pub display_name: String,
    pub policies: Vec<String>,
    /// The identity entity the token is bound to, if any.
    pub entity_id: Option<String>,
    /// The SHA-256 of the token id, lowercase hex: unique to the token and stable for its
    /// life, so an engine may key per-token data by it (cubbyhole does); the core calls
    /// [`crate::Engine::token_revoked`] with it when the token goes. The id itself never
    /// reaches an engine.
    pub token_hash: String,
}

/// The lease TTLs in force on the request's mount: its tuned `default_lease_ttl` and
/// `max_lease_ttl`, else the system's (Vault's `System().DefaultLeaseTTL()` and
/// `MaxLeaseTTL()`). Engines default and cap the TTLs they issue by these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountTtls {
    pub default: Duration,
    pub max: Duration,
}

impl MountTtls {
    /// Vault's system default and maximum lease TTL: 768h (32 days).
    pub const SYSTEM: MountTtls = MountTtls {
        default: Duration::from_secs(768 * 3600),
        max: Duration::from_secs(768 * 3600),
    };
}

impl Default for MountTtls {
    fn default() -> MountTtls {
        MountTtls::SYSTEM
    }
}

/// One request to an engine.
#[derive(Debug, Clone)]
pub struct Request {
    pub operation: Operation,
    /// Relative to the mount.
    pub path: String,
    pub data: Data,
    /// The mount's path, with a trailing slash (`secret/`, `auth/userpass/`).
    pub mount_point: String,
    /// `None` for unauthenticated paths (logins). Shared: the core builds it once per token.
    pub auth: Option<Arc<RequestAuth>>,
    /// The mount's lease TTLs in force.
    pub ttls: MountTtls,
}

impl Request {
    pub fn new(operation: Operation, path: impl Into<String>) -> Request {
        Request {
            operation,
            path: path.into(),
            data: Data::new(),
            mount_point: String::new(),
            auth: None,
            ttls: MountTtls::SYSTEM,
        }
    }

    pub fn with_data(mut self, data: Data) -> Request {
        self.data = data;
        self
    }

    pub fn with_ttls(mut self, ttls: MountTtls) -> Request {
        self.ttls = ttls;
        self
    }
}
