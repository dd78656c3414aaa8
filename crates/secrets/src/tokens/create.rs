//! Building new tokens: `auth/token/create`, `create-orphan`, `create/:role` and logins,
//! with Vault's policy, orphan, TTL and display-name rules (`token_store.go:
//! handleCreateCommon`, `request_handling.go` for logins).
//!
//! Invariants: a non-root, non-sudo parent grants only a subset of its own policies (unless a
//! role allows more); `no_parent`, `period` and `id` need root or sudo; only a root parent
//! creates a `root` token; auth methods never do; no token is given `response-wrapping` except
//! the wrapping tokens [`TokenStore::create_wrapping`] makes (400 `cannot assign policy`).

use std::collections::BTreeMap;
use std::time::Duration;

use secrets_sdk::{Auth, Data, fields};

use super::roles::Role;
use super::{SYSTEM_MAX_TTL, TokenEntry, TokenStore, store};
use crate::mounts::MountEntry;
use crate::policy::names::RESPONSE_WRAPPING_POLICY;
use crate::{Error, State};

/// Which create endpoint was called.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CreateKind<'a> {
    /// `auth/token/create`.
    Normal,
    /// `auth/token/create-orphan`.
    Orphan,
    /// `auth/token/create/:role`.
    Role(&'a Role),
}

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidParameter(msg.into())
}

use crate::policy::names::{is_subset, sanitize_policies};

/// `token` or `token-<name>` with runs of characters outside `[A-Za-z0-9-]` turned into `-`
/// and a trailing `-` dropped (Vault's `displayNameSanitize`).
fn display_name(requested: Option<&str>) -> String {
    let Some(name) = requested.filter(|n| !n.is_empty()) else {
        return "token".to_owned();
    };
    let mut out = String::from("token-");
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out.trim_end_matches('-').to_owned()
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

/// The TTLs of a new token: (ttl granted, expire_time, max_expire), plus warnings.
fn lifetimes(
    now: i64,
    requested: Duration,
    default_ttl: Duration,
    max_ttl: Duration,
    explicit_max: Duration,
    period: Duration,
    warnings: &mut Vec<String>,
) -> (Duration, Option<i64>, Option<i64>) {
    let mut ttl = if !period.is_zero() {
        period
    } else if !requested.is_zero() {
        requested
    } else {
        default_ttl
    };
    if period.is_zero() && ttl > max_ttl {
        warnings.push(format!(
            "TTL of \"{}s\" exceeded the effective max_ttl of \"{}s\"; TTL value is capped accordingly",
            ttl.as_secs(),
            max_ttl.as_secs()
        ));
        ttl = max_ttl;
    }
    if !explicit_max.is_zero() && ttl > explicit_max {
        warnings.push(format!(
            "Explicit max TTL of \"{}s\" is less than the requested TTL; the token will expire sooner",
            explicit_max.as_secs()
        ));
        ttl = explicit_max;
    }
    let mut max_expire: Option<i64> = None;
    if !explicit_max.is_zero() {
        max_expire = Some(now + ms(explicit_max));
    }
    if period.is_zero() {
        let cap = now + ms(max_ttl);
        max_expire = Some(max_expire.map_or(cap, |m| m.min(cap)));
    }
    (ttl, Some(now + ms(ttl)), max_expire)
}

/// Vault's non-assignable policies: `response-wrapping` belongs to wrapping tokens alone.
fn refuse_internal_policies(policies: &[String]) -> Result<(), Error> {
    match policies.iter().find(|p| *p == RESPONSE_WRAPPING_POLICY) {
        Some(policy) => Err(bad(format!("cannot assign policy {policy:?}"))),
        None => Ok(()),
    }
}

impl TokenStore {
    /// The token mount's default and max TTL (the system's 768h unless tuned).
    fn token_mount_ttls(state: &State) -> (Duration, Duration) {
        match state.mounts().get("auth/token/") {
            Some(mount) => (mount.default_lease_ttl(), mount.max_lease_ttl()),
            None => (SYSTEM_MAX_TTL, SYSTEM_MAX_TTL),
        }
    }

    /// Creates a token as a child of `parent` (or an orphan); `sudo` is whether the caller
    /// holds root or sudo on the create path. Returns the entry and warnings.
    pub(crate) async fn create_token(
        &self,
        state: &State,
        parent: &TokenEntry,
        sudo: bool,
        data: &Data,
        kind: CreateKind<'_>,
    ) -> Result<(TokenEntry, Vec<String>), Error> {
        let sudo = sudo || parent.is_root();
        let mut warnings = Vec::new();
        let token_type = fields::string(data, "type")?.unwrap_or_default();
        let role_type = match kind {
            CreateKind::Role(role) => role.token_type.clone(),
            _ => String::new(),
        };
        match (token_type.as_str(), role_type.as_str()) {
            ("batch", _) | ("" | "default", "batch" | "default-batch") => {
                return Err(bad(
                    "batch tokens are not supported by this server; use type=service",
                ));
            }
            ("" | "service" | "default", _) => {}
            (other, _) => return Err(bad(format!("invalid 'token_type' value {other:?}"))),
        }
        if fields::string(data, "entity_alias")?.is_some_and(|a| !a.is_empty()) {
            return Err(bad("entity_alias is not supported by this server"));
        }
        let id = fields::string(data, "id")?.filter(|id| !id.is_empty());
        let requested = fields::comma_list(data, "policies")?.unwrap_or_default();
        let meta = fields::string_map(data, "meta")?.unwrap_or_default();
        let no_parent = fields::bool(data, "no_parent")?.unwrap_or(false);
        let no_default_policy = fields::bool(data, "no_default_policy")?.unwrap_or(false);
        let mut renewable = fields::bool(data, "renewable")?.unwrap_or(true);
        let ttl = match fields::duration(data, "ttl")? {
            Some(ttl) => ttl,
            None => fields::duration(data, "lease")?.unwrap_or_default(),
        };
        let mut explicit_max = fields::duration(data, "explicit_max_ttl")?.unwrap_or_default();
        let mut period = fields::duration(data, "period")?.unwrap_or_default();
        let name = fields::string(data, "display_name")?;
        let num_uses = fields::int(data, "num_uses")?.unwrap_or(0);
        if num_uses < 0 {
            return Err(bad("number of uses cannot be negative"));
        }
        if id.is_some() && !sudo {
            return Err(bad("root or sudo privileges required to specify token id"));
        }
        if let Some(id) = &id
            && (id.contains('/') || id.trim() != id)
        {
            return Err(bad("invalid token id"));
        }

        let mut path = "auth/token/create".to_owned();
        let orphan;
        let mut policies;
        match kind {
            CreateKind::Role(role) => {
                path = format!("auth/token/create/{}", role.name);
                if !role.path_suffix.is_empty() {
                    path = format!("{path}/{}", role.path_suffix);
                }
                orphan = role.orphan;
                if !role.renewable {
                    renewable = false;
                }
                if !period.is_zero() && !sudo {
                    return Err(bad(
                        "root or sudo privileges required to create periodic token",
                    ));
                }
                if role.period > 0 {
                    period = Duration::from_secs(role.period);
                }
                if role.explicit_max_ttl > 0 {
                    let cap = Duration::from_secs(role.explicit_max_ttl);
                    if explicit_max.is_zero() || explicit_max > cap {
                        explicit_max = cap;
                    }
                }
                let no_default = no_default_policy || role.token_no_default_policy;
                let asked = sanitize_policies(&requested, false);
                let allowed = sanitize_policies(&role.allowed_policies, false);
                policies = if !allowed.is_empty() {
                    if asked.is_empty() {
                        allowed.clone()
                    } else if is_subset(&allowed, &asked) {
                        asked
                    } else {
                        return Err(bad(format!(
                            "token policies ({asked:?}) must be subset of the role's allowed policies ({allowed:?})"
                        )));
                    }
                } else if asked.is_empty() {
                    sanitize_policies(&parent.policies, false)
                } else {
                    asked
                };
                let disallowed = sanitize_policies(&role.disallowed_policies, false);
                if let Some(p) = policies.iter().find(|p| disallowed.contains(p)) {
                    return Err(bad(format!(
                        "token policy {p:?} is disallowed by this role"
                    )));
                }
                policies = sanitize_policies(&policies, !no_default);
                if no_default {
                    policies.retain(|p| p != "default");
                }
            }
            CreateKind::Normal | CreateKind::Orphan => {
                if let CreateKind::Orphan = kind {
                    path = "auth/token/create-orphan".to_owned();
                    orphan = true;
                } else {
                    if no_parent && !sudo {
                        return Err(bad(
                            "root or sudo privileges required to create orphan token",
                        ));
                    }
                    orphan = no_parent;
                }
                if !period.is_zero() && !sudo {
                    return Err(bad(
                        "root or sudo privileges required to create periodic token",
                    ));
                }
                let asked = if requested.is_empty() {
                    parent.policies.clone()
                } else {
                    requested
                };
                if sudo {
                    policies = sanitize_policies(&asked, !no_default_policy);
                } else {
                    let child = sanitize_policies(&asked, false);
                    let mine = sanitize_policies(&parent.policies, false);
                    if !is_subset(&mine, &child) {
                        return Err(bad("child policies must be subset of parent"));
                    }
                    policies = child;
                    if !no_default_policy && parent.policies.iter().any(|p| p == "default") {
                        policies.push("default".to_owned());
                    }
                    policies = sanitize_policies(&policies, false);
                }
                if no_default_policy {
                    policies.retain(|p| p != "default");
                }
            }
        }
        refuse_internal_policies(&policies)?;
        if policies.iter().any(|p| p == "root") && !parent.is_root() {
            return Err(bad(
                "root tokens may not be created without parent token being root",
            ));
        }

        let now = state.now_ms();
        let (default_ttl, max_ttl) = Self::token_mount_ttls(state);
        let (ttl, expire_time, max_expire) = lifetimes(
            now,
            ttl,
            default_ttl,
            max_ttl,
            explicit_max,
            period,
            &mut warnings,
        );
        let entry = TokenEntry {
            version: 1,
            id: id.unwrap_or_else(store::new_token_id),
            accessor: store::new_accessor(),
            policies,
            entity_id: parent.entity_id.clone(),
            display_name: display_name(name.as_deref()),
            path,
            meta,
            num_uses,
            parent: (!orphan).then(|| parent.hash()),
            creation_time: now,
            ttl: secs(ttl),
            expire_time,
            max_expire,
            explicit_max_ttl: secs(explicit_max),
            period: secs(period),
            renewable,
            last_renewal: None,
            role: match kind {
                CreateKind::Role(role) => Some(role.name.clone()),
                _ => None,
            },
            token_type: "service".to_owned(),
            hash_memo: super::HashMemo::default(),
            auth_memo: super::AuthMemo::default(),
            acl_memo: crate::policy::acl::AclMemo::default(),
        };
        self.insert_new(state, &entry).await?;
        Ok((entry, warnings))
    }

    /// Creates a response-wrapping token (Vault's `wrapInCubbyhole`): an orphan holding only
    /// the `response-wrapping` policy, usable once, living `ttl` from `now_ms` at most.
    /// `display_name` is the caller's; `path` the request path that was wrapped.
    pub(crate) async fn create_wrapping(
        &self,
        state: &State,
        display_name: &str,
        path: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<TokenEntry, Error> {
        let expire = now_ms.saturating_add(ms(ttl));
        let entry = TokenEntry {
            version: 1,
            id: store::new_token_id(),
            accessor: store::new_accessor(),
            policies: vec![RESPONSE_WRAPPING_POLICY.to_owned()],
            entity_id: None,
            display_name: display_name.to_owned(),
            path: path.to_owned(),
            meta: BTreeMap::new(),
            num_uses: 1,
            parent: None,
            creation_time: now_ms,
            ttl: secs(ttl),
            expire_time: Some(expire),
            max_expire: Some(expire),
            explicit_max_ttl: secs(ttl),
            period: 0,
            renewable: false,
            last_renewal: None,
            role: None,
            token_type: "service".to_owned(),
            hash_memo: super::HashMemo::default(),
            auth_memo: super::AuthMemo::default(),
            acl_memo: crate::policy::acl::AclMemo::default(),
        };
        self.insert_new(state, &entry).await?;
        Ok(entry)
    }

    /// Creates the token a successful login grants (an orphan bound to `entity_id`).
    pub(crate) async fn create_for_login(
        &self,
        state: &State,
        mount: &MountEntry,
        auth: &Auth,
        entity_id: Option<String>,
    ) -> Result<TokenEntry, Error> {
        let policies = sanitize_policies(&auth.policies, true);
        refuse_internal_policies(&policies)?;
        if policies.iter().any(|p| p == "root") {
            return Err(bad("auth methods cannot create root tokens"));
        }
        let source = mount
            .path
            .strip_prefix("auth/")
            .unwrap_or(&mount.path)
            .replace('/', "-");
        let display = format!("{source}{}", auth.display_name)
            .trim_end_matches('-')
            .to_owned();
        let mount_max = mount.max_lease_ttl();
        let max_ttl = auth
            .max_ttl
            .filter(|d| !d.is_zero())
            .map_or(mount_max, |d| d.min(mount_max));
        let period = auth.period.unwrap_or_default();
        let now = state.now_ms();
        let mut warnings = Vec::new();
        let (ttl, expire_time, max_expire) = lifetimes(
            now,
            auth.ttl.unwrap_or_default(),
            mount.default_lease_ttl(),
            max_ttl,
            Duration::ZERO,
            period,
            &mut warnings,
        );
        let meta: BTreeMap<String, String> = auth.metadata.clone();
        let entry = TokenEntry {
            version: 1,
            id: store::new_token_id(),
            accessor: store::new_accessor(),
            policies,
            entity_id,
            display_name: display,
            path: format!("{}login/{}", mount.path, auth.alias_name),
            meta,
            num_uses: 0,
            parent: None,
            creation_time: now,
            ttl: secs(ttl),
            expire_time,
            max_expire,
            explicit_max_ttl: 0,
            period: secs(period),
            renewable: auth.renewable,
            last_renewal: None,
            role: None,
            token_type: "service".to_owned(),
            hash_memo: super::HashMemo::default(),
            auth_memo: super::AuthMemo::default(),
            acl_memo: crate::policy::acl::AclMemo::default(),
        };
        self.insert_new(state, &entry).await?;
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_are_prefixed_and_sanitized() {
        assert_eq!(display_name(None), "token");
        assert_eq!(display_name(Some("my app!")), "token-my-app");
        assert_eq!(display_name(Some("ci")), "token-ci");
    }

    #[test]
    fn ttl_is_capped_by_max_and_explicit_max() {
        let mut w = Vec::new();
        let h = Duration::from_secs(3600);
        let (ttl, exp, max) =
            lifetimes(0, 10 * h, h, 2 * h, Duration::ZERO, Duration::ZERO, &mut w);
        assert_eq!(ttl, 2 * h);
        assert_eq!(exp, Some(7_200_000));
        assert_eq!(max, Some(7_200_000));
        assert_eq!(w.len(), 1);
        let (ttl, _, max) = lifetimes(
            0,
            Duration::ZERO,
            h,
            2 * h,
            Duration::from_secs(60),
            Duration::ZERO,
            &mut w,
        );
        assert_eq!(ttl, Duration::from_secs(60));
        assert_eq!(max, Some(60_000));
        let (ttl, _, max) = lifetimes(0, Duration::ZERO, h, 2 * h, Duration::ZERO, 3 * h, &mut w);
        assert_eq!(
            ttl,
            3 * h,
            "periodic tokens are not capped by the system max"
        );
        assert_eq!(max, None);
    }
}
