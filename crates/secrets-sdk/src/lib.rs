//! The secrets-engine SDK: everything an engine (kv, pki, ssh, database, ...) sees of the
//! secrets store, and nothing more.
//!
//! Request flow: the core (`crates/secrets`) authenticates the token, checks the ACL on
//! (path, operation), finds the mount by longest prefix and calls [`Engine::handle`] with a
//! [`Request`] whose `path` is relative to the mount; the engine answers with a [`Response`]
//! (or `None`: 204 for writes, 404 for reads) or an [`EngineError`]. Leases an engine issues
//! ([`Response::secret`]) are tracked by the core, which calls [`Engine::revoke`] and
//! [`Engine::renew`] later.
//!
//! Invariants:
//! - An engine reaches storage only through its [`EngineStorage`] view, already scoped to its
//!   mount and encrypted by the core's barrier: it cannot read another mount's data.
//! - An engine depends on this crate only (never on `secrets` or `storage`).
//! - An engine reads the time only from [`EngineConfig::clock`], the store's one clock.
//! - Background work (rotations, schedules) runs only in [`Engine::periodic`], which the core
//!   calls about once a second on the leader; an engine spawns no tasks of its own.
//! - Field parsing is Vault's weak typing ([`fields`]), so every engine accepts `"true"`/`1`,
//!   `"22"`/`22`, `"1h"`/`3600`, `"a,b"`/`["a","b"]` alike, and JSON `null` means "not given".

mod engine;
mod error;
pub mod fields;
pub mod password;
mod request;
mod response;
pub mod storage;
pub mod testing;

pub use engine::{Engine, EngineConfig, Factory, Lease, SpecialPaths};
pub use error::EngineError;
pub use password::{PasswordPolicy, PasswordPolicySource, Passwords};
pub use request::{MountTtls, Operation, Request, RequestAuth};
pub use response::{Auth, DataText, LeaseOptions, RawResponse, Response};
pub use stdx::clock::{Clock, SharedClock};
pub use storage::{EngineStorage, StorageError};

/// Request data: the JSON object of the body (or query, for reads).
pub type Data = serde_json::Map<String, serde_json::Value>;
