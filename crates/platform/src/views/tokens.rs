//! The `authentication-tokens` resource (user, team and organization tokens alike).
//!
//! Where it sits: rendered by `tokens.rs`.
//!
//! Invariant: the secret appears only when the caller passes it, which `tokens.rs` does in a
//! create response alone; every other representation has `token: null`.

use jsonapi::{Relationship, Resource};

use crate::ids;
use crate::store::tokens::TokenRecord;

/// The `authentication-tokens` resource; `secret` only in a create response.
pub(crate) fn token_resource(token: &TokenRecord, secret: Option<&str>) -> Resource {
    Resource::new("authentication-tokens", &token.id)
        .attribute("created-at", ids::format_time(token.created_at_ms))
        .attribute("last-used-at", None::<String>)
        .attribute("description", &token.description)
        .attribute("token", secret)
        .attribute("expired-at", token.expired_at_ms.map(ids::format_time))
        .relationship(
            "created-by",
            Relationship::optional("users", token.created_by.as_deref()),
        )
        .self_link(format!("/api/v2/authentication-tokens/{}", token.id))
}
