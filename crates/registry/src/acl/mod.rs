//! ACL: who may do what. The [`Authz`] extractor resolves the request's token (from `?token=`,
//! `X-Registry-Token` / `X-Consul-Token`, or `Authorization: Bearer`, first match wins) to a
//! decision function that every handler consults before touching data.
//!
//! Where it sits: first extractor of every handler; `acl_rules.rs` is the pure rule evaluator
//! (longest-prefix match over `session`, `key`, `node`, `agent`, `service` rules and their
//! `_prefix` forms); `policy.rs` and `token.rs` are the `/v1/acl/policy*` and `/v1/acl/token*`
//! endpoints, `bootstrap.rs` the unauthenticated `/v1/acl/bootstrap`; `domain/acl.rs` writes
//! policies and tokens, `store/acl.rs` keeps them.
//!
//! What the name of each resource kind is, as in Consul: `Key` the KV key; `Node` and `Agent`
//! the node name; `Service` the service name; `Session` the name of the node the session is
//! on (Consul's session rules are per node).
//!
//! Resolution costs two storage gets (secret → accessor, then the token) and caches nothing:
//! each stored token carries its policies' rules already parsed and merged, and every policy
//! change rewrites the tokens linked to it in the same transaction, so a change is seen by the
//! next request.
//!
//! Invariants: with ACLs disabled every check passes and the ACL endpoints answer 401
//! `ACL support disabled`; with ACLs enabled an unknown token is a 403 `ACL not found`, a
//! missing permission a 403 `Permission denied`, and a request without a token acts with the
//! anonymous token; lists never fail on a missing permission, they drop what the token may not
//! read; only management tokens (linked to `global-management`) may read or write ACLs, except
//! the one-time bootstrap, which needs no token.

pub(crate) mod bootstrap;
pub(crate) mod policy;
pub(crate) mod token;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::HeaderName;
use http::request::Parts;

pub use crate::acl_rules::{Access, Resource};

use crate::acl_rules::RuleSet;
use crate::domain::acl::{ANONYMOUS_ACCESSOR_ID, ANONYMOUS_SECRET};
use crate::store::acl::TokenRecord;
use crate::{Error, State};

/// The token header (canonical spelling; `X-Consul-Token` is aliased onto it).
const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-registry-token");

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
    /// The token's rules; `default_allow` decides where no rule matches.
    Rules {
        rules: Arc<RuleSet>,
        default_allow: bool,
    },
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

    /// The authority of a stored token.
    fn from_token(token: &TokenRecord, default_allow: bool) -> Authz {
        let grant = if token.management {
            Grant::Everything
        } else {
            Grant::Rules {
                rules: Arc::new(RuleSet::new(&token.rules)),
                default_allow,
            }
        };
        Authz {
            accessor: token.accessor_id.clone(),
            namespace: token.namespace.clone(),
            grant,
        }
    }

    /// Whether the token may do `access` on `resource` named `name`.
    pub(crate) fn allows(&self, resource: Resource, name: &str, access: Access) -> bool {
        match &self.grant {
            Grant::Everything => true,
            Grant::Rules {
                rules,
                default_allow,
            } => rules.allows(resource, name, access, *default_allow),
        }
    }

    /// Whether the token may do `access` on `prefix` and on everything under it: no more
    /// specific rule beneath the prefix refuses it (Consul's rule for recursive KV deletes).
    pub(crate) fn allows_subtree(&self, resource: Resource, prefix: &str, access: Access) -> bool {
        match &self.grant {
            Grant::Everything => true,
            Grant::Rules {
                rules,
                default_allow,
            } => rules.allows_subtree(resource, prefix, access, *default_allow),
        }
    }

    /// Like [`Authz::allows_subtree`], as a 403 error naming the missing permission.
    pub(crate) fn check_subtree(
        &self,
        resource: Resource,
        prefix: &str,
        access: Access,
    ) -> Result<(), Error> {
        if self.allows_subtree(resource, prefix, access) {
            Ok(())
        } else {
            Err(Error::PermissionDenied {
                accessor: self.accessor.clone(),
                permission: format!("{}:{}", resource.name(), access.name()),
                resource: prefix.to_owned(),
            })
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

    /// A 403 unless this is a management token; `permission` is `acl:read` or `acl:write`.
    fn require_management(&self, permission: &'static str) -> Result<(), Error> {
        if self.is_management() {
            Ok(())
        } else {
            Err(Error::AclPermissionDenied {
                accessor: self.accessor.clone(),
                permission,
            })
        }
    }

    /// The token's namespace, if it has one.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The token's AccessorID (`anonymous` when ACLs are disabled).
    fn accessor(&self) -> &str {
        &self.accessor
    }
}

impl FromRequestParts<State> for Authz {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Authz, Error> {
        let acl = &state.config().acl;
        if !acl.enabled {
            return Ok(Authz::unrestricted());
        }
        let presented = request_token(parts);
        let secret = presented.as_deref().unwrap_or(ANONYMOUS_SECRET);
        match crate::store::acl::token_by_secret(state.storage(), secret).await? {
            Some(token) => Ok(Authz::from_token(&token, acl.default_policy_allow)),
            // The anonymous token exists from bootstrap on; should it be missing, act as a
            // token without policies rather than refuse every tokenless request.
            None if secret == ANONYMOUS_SECRET => Ok(Authz {
                accessor: ANONYMOUS_ACCESSOR_ID.to_owned(),
                namespace: None,
                grant: Grant::Rules {
                    rules: Arc::default(),
                    default_allow: acl.default_policy_allow,
                },
            }),
            None => Err(Error::AclNotFound),
        }
    }
}

/// The token a request presents: `?token=`, then `X-Registry-Token` (the alias layer copies
/// `X-Consul-Token` there), then `Authorization: Bearer`. Empty values count as absent.
fn request_token(parts: &Parts) -> Option<String> {
    if let Some(query) = parts.uri.query()
        && query.contains("token=")
        && let Ok(pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        && let Some((_, token)) = pairs
            .into_iter()
            .find(|(key, value)| key == "token" && !value.is_empty())
    {
        return Some(token);
    }
    if let Some(value) = parts.headers.get(TOKEN_HEADER)
        && let Ok(value) = value.to_str()
        && !value.trim().is_empty()
    {
        return Some(value.trim().to_owned());
    }
    http_kit::bearer_token(&parts.headers).map(str::to_owned)
}

/// Decodes a JSON request body as Go's `encoding/json` does for Consul: object keys match the
/// struct's field names whatever their case (py-consul sends `name`, `rules`), unknown keys are
/// ignored, and an empty body is `{}`. `fields` are the canonical names of `T`'s fields;
/// `normalize` may fold nested objects the same way. A failure is a 400 `<what> decoding
/// failed: ...`, Consul's wording.
fn decode_body<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &str,
    fields: &[&str],
    normalize: impl FnOnce(&mut serde_json::Value),
) -> Result<T, Error> {
    let failed = |detail: String| Error::BadRequest(format!("{what} decoding failed: {detail}"));
    let mut value: serde_json::Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(bytes).map_err(|err| failed(err.to_string()))?
    };
    if !value.is_object() {
        return Err(failed("the body must be a JSON object".to_owned()));
    }
    fold_keys(&mut value, fields);
    normalize(&mut value);
    serde_json::from_value(value).map_err(|err| failed(err.to_string()))
}

/// Renames the keys of a JSON object that match one of `fields` ignoring case to that field's
/// spelling (the first key wins when several spellings are sent).
fn fold_keys(value: &mut serde_json::Value, fields: &[&str]) {
    let serde_json::Value::Object(object) = value else {
        return;
    };
    let mut folded = serde_json::Map::new();
    for (key, item) in std::mem::take(object) {
        let canonical = fields
            .iter()
            .find(|field| field.eq_ignore_ascii_case(&key))
            .map_or(key, |field| (*field).to_owned());
        folded.entry(canonical).or_insert(item);
    }
    *object = folded;
}

/// Answers 401 `ACL support disabled` when ACLs are off (every ACL endpoint starts with it).
fn ensure_enabled(state: &State) -> Result<(), Error> {
    if state.config().acl.enabled {
        Ok(())
    } else {
        Err(Error::AclDisabled)
    }
}
