//! The `oauth-clients` and `oauth-tokens` resources (VCS connections).
//!
//! Where it sits: rendered by `oauth_clients.rs`.
//!
//! Invariant: no secret is rendered: the VCS token (`oauth-token-string`), the client secret
//! and a token's SSH key never appear; `has-ssh-key` says whether one is set.

use jsonapi::{Relationship, Resource};

use crate::ids;
use crate::store::oauth_clients::{OAuthClientRecord, OAuthTokenRecord};

/// The `oauth-clients` resource.
pub(crate) fn client_resource(client: &OAuthClientRecord) -> Resource {
    let id = &client.id;
    Resource::new("oauth-clients", id)
        .attribute("name", &client.name)
        .attribute("created-at", ids::format_time(client.created_at_ms))
        .attribute("callback-url", format!("/auth/{id}/callback"))
        .attribute(
            "connect-path",
            format!("/auth/{id}?organization_id={}", client.organization),
        )
        .attribute("service-provider", &client.service_provider)
        .attribute("service-provider-display-name", &client.service_provider)
        .attribute("http-url", &client.http_url)
        .attribute("api-url", &client.api_url)
        .attribute("key", &client.key)
        .attribute("rsa-public-key", &client.rsa_public_key)
        .attribute("organization-scoped", client.organization_scoped)
        .relationship(
            "organization",
            Relationship::one("organizations", &client.organization),
        )
        .relationship(
            "oauth-tokens",
            Relationship::many("oauth-tokens", client.token_id.iter().cloned())
                .related(format!("/api/v2/oauth-clients/{id}/oauth-tokens")),
        )
        .self_link(format!("/api/v2/oauth-clients/{id}"))
}

/// The `oauth-tokens` resource.
pub(crate) fn token_resource(token: &OAuthTokenRecord) -> Resource {
    Resource::new("oauth-tokens", &token.id)
        .attribute("uid", &token.id)
        .attribute("created-at", ids::format_time(token.created_at_ms))
        .attribute("has-ssh-key", token.ssh_key.is_some())
        .attribute("service-provider-user", &token.service_provider_user)
        .relationship(
            "oauth-client",
            Relationship::one("oauth-clients", &token.client_id)
                .related(format!("/api/v2/oauth-clients/{}", token.client_id)),
        )
        .self_link(format!("/api/v2/oauth-tokens/{}", token.id))
}
