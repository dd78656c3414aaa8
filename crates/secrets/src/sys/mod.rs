//! System endpoints (`/v1/sys/*`), one file per URL family.
//!
//! `health` (and S1's init, unseal, seal-status) have explicit routes in `routes.rs`; every
//! other `sys/` path comes through `dispatch.rs` (token, ACL, sudo on root-protected paths)
//! to [`handle`], which fans out by prefix. Paths reach each family relative to the `sys/`
//! mount (`mounts/secret/tune`, `leases/lookup`, `policies/acl/x`).
//!
//! Invariant: a path no family serves is 404 `unsupported path`; each family returns
//! `Err(Error::UnsupportedPath)` for sub-paths it does not know.

pub(crate) mod auth;
pub(crate) mod capabilities;
pub(crate) mod ha;
pub(crate) mod health;
pub(crate) mod leases;
pub(crate) mod metrics;
pub(crate) mod mfa;
pub(crate) mod mounts;
pub(crate) mod password_policies;
pub(crate) mod policies;
pub(crate) mod seal;
pub(crate) mod snapshots;
pub(crate) mod step_down;
pub(crate) mod wrapping;

use secrets_sdk::{Request, Response};

use crate::request::RequestContext;
use crate::{Error, State};

/// Which family serves a `sys/` path (relative to `sys/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Mounts,
    Auth,
    Policies,
    PasswordPolicies,
    Capabilities,
    Leases,
    Seal,
    Wrapping,
    Metrics,
    Mfa,
    Snapshots,
    Ha,
}

fn family(path: &str) -> Option<Family> {
    if path == "policies/password" || path.starts_with("policies/password/") {
        return Some(Family::PasswordPolicies);
    }
    let head = path.split('/').next().unwrap_or_default();
    Some(match head {
        "mounts" | "remount" => Family::Mounts,
        "auth" => Family::Auth,
        "policy" | "policies" => Family::Policies,
        "capabilities" | "capabilities-self" | "capabilities-accessor" => Family::Capabilities,
        "leases" | "renew" | "revoke" | "revoke-prefix" | "revoke-force" => Family::Leases,
        "seal" | "rotate" | "key-status" | "step-down" => Family::Seal,
        "wrapping" => Family::Wrapping,
        "metrics" => Family::Metrics,
        "mfa" => Family::Mfa,
        "storage" => Family::Snapshots,
        "ha-status" => Family::Ha,
        _ => return None,
    })
}

/// Serves one `sys/` request (already authenticated and authorised by dispatch).
pub(crate) async fn handle(
    state: &State,
    ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    match family(&req.path) {
        Some(Family::Mounts) => mounts::handle(state, ctx, req).await,
        Some(Family::Auth) => auth::handle(state, ctx, req).await,
        Some(Family::Policies) => policies::handle(state, ctx, req).await,
        Some(Family::PasswordPolicies) => password_policies::handle(state, ctx, req).await,
        Some(Family::Capabilities) => capabilities::handle(state, ctx, req).await,
        Some(Family::Leases) => leases::handle(state, ctx, req).await,
        Some(Family::Seal) => seal::handle(state, ctx, req).await,
        Some(Family::Wrapping) => wrapping::handle(state, ctx, req).await,
        Some(Family::Metrics) => metrics::handle(state, ctx, req).await,
        Some(Family::Mfa) => mfa::handle(state, ctx, req).await,
        Some(Family::Snapshots) => snapshots::handle(state, ctx, req).await,
        Some(Family::Ha) => ha::handle(state, ctx, req).await,
        None => Err(Error::UnsupportedPath),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sys_paths_fan_out_by_their_first_segment() {
        assert_eq!(family("mounts"), Some(Family::Mounts));
        assert_eq!(family("mounts/secret/tune"), Some(Family::Mounts));
        assert_eq!(family("remount"), Some(Family::Mounts));
        assert_eq!(family("auth/userpass"), Some(Family::Auth));
        assert_eq!(family("policies/acl/x"), Some(Family::Policies));
        assert_eq!(
            family("policies/password/p/generate"),
            Some(Family::PasswordPolicies)
        );
        assert_eq!(family("policies/password/"), Some(Family::PasswordPolicies));
        assert_eq!(family("capabilities-self"), Some(Family::Capabilities));
        assert_eq!(family("leases/lookup/"), Some(Family::Leases));
        assert_eq!(family("rotate/config"), Some(Family::Seal));
        assert_eq!(family("wrapping/unwrap"), Some(Family::Wrapping));
        assert_eq!(family("metrics"), Some(Family::Metrics));
        assert_eq!(family("mfa/method/totp/m"), Some(Family::Mfa));
        assert_eq!(
            family("storage/raft/snapshot-auto/config/x"),
            Some(Family::Snapshots)
        );
        assert_eq!(family("nope"), None);
    }
}
