//! The `users` resource.
//!
//! Where it sits: rendered by `users.rs` and included by memberships, invitations, teams
//! (`include=users`) and runs (`include=created_by`).
//!
//! Invariant: `username` is `null` for a user created by an invitation nobody accepted.

use jsonapi::{Relationship, Resource};
use serde_json::json;

use crate::store::users::UserRecord;

/// The `users` resource.
pub(crate) fn user_resource(user: &UserRecord) -> Resource {
    let avatar = format!(
        "https://www.gravatar.com/avatar/{}?s=100&d=mm",
        &crate::ids::hash_secret(&user.email.trim().to_lowercase())[..32]
    );
    Resource::new("users", &user.id)
        .attribute("username", &user.username)
        .attribute("is-service-account", false)
        .attribute("auth-method", "tfe")
        .attribute("avatar-url", avatar)
        .attribute("v2-only", false)
        .attribute("is-admin", user.is_admin)
        .attribute("is-site-admin", user.is_admin)
        .attribute("is-sso-login", false)
        .attribute("email", &user.email)
        .attribute("unconfirmed-email", None::<String>)
        .attribute("two-factor", json!({"enabled": false, "verified": false}))
        .attribute(
            "permissions",
            json!({
                "can-create-organizations": user.is_admin,
                "can-change-email": true,
                "can-change-username": true,
                "can-manage-user-tokens": true,
            }),
        )
        .relationship(
            "authentication-tokens",
            Relationship::links_only()
                .related(format!("/api/v2/users/{}/authentication-tokens", user.id)),
        )
        .self_link(format!("/api/v2/users/{}", user.id))
}
