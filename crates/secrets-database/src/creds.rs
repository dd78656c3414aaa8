//! `creds/:name`: a new database user under a lease, and the lease's revoke and renew.
//!
//! Issue: the role must exist (400 `unknown role: x`) and its connection allow it (400; Vault
//! answers 500), the plugin support its credential type; the username comes from the
//! connection's `username_template` or the plugin default; the user expires (where the
//! database has expiry) 5 s after the lease's TTL; the lease is `default_ttl` capped by
//! `max_ttl`, the request's mount TTLs standing in for either when the role sets none (the
//! core applies the same defaults and caps to the lease). The lease keeps the username,
//! role, connection and revocation statements.
//!
//! Revoke drops the user with the role's current revocation statements, or those kept in the
//! lease when the role is gone, or the plugin's default. Renew runs the renew statements (or the
//! plugin default) with the new expiry, within the role's `max_ttl`.

use std::time::Duration;

use secrets_sdk::{Data, EngineError, Lease, LeaseOptions, MountTtls, Request, Response, fields};
use serde_json::Value;

use crate::plugins::Credential;
use crate::store::{self, Role};
use crate::template::{self, UsernameMetadata};
use crate::{DatabaseEngine, bad, credentials};

/// `YYYY-MM-DD HH:MM:SS+0000` (Go's `2006-01-02 15:04:05-0700` in UTC), what `{{expiration}}`
/// renders as.
pub(crate) fn expiration(ms: i64) -> String {
    let rfc = stdx::time::format_rfc3339_secs(ms.div_euclid(1000));
    // `YYYY-MM-DDTHH:MM:SSZ`
    format!("{} {}+0000", &rfc[..10], &rfc[11..19])
}

/// The TTL a new credential's lease will get, as Vault's `framework.CalculateTTL` finds it:
/// the role's `default_ttl`, else the mount's default; capped by the role's `max_ttl` (within
/// the mount's max), else by the mount's max. The database-side expiry is this plus 5 s.
fn lease_ttl(role: &Role, mount: MountTtls) -> Duration {
    let default = match role.default_ttl {
        0 => mount.default,
        secs => Duration::from_secs(secs),
    };
    let max = match role.max_ttl {
        0 => mount.max,
        secs => Duration::from_secs(secs).min(mount.max),
    };
    default.min(max)
}

impl DatabaseEngine {
    pub(crate) async fn issue(
        &self,
        request: &Request,
        name: &str,
    ) -> Result<Option<Response>, EngineError> {
        let Some(role) =
            store::get::<Role>(self.storage(), &format!("{}{name}", store::ROLE)).await?
        else {
            return Err(bad(format!("unknown role: {name}")));
        };
        let (config, client) = self.client(&role.db_name).await?;
        if !config.allows(name) {
            return Err(bad(format!("{name:?} is not an allowed role")));
        }
        let credential_type = role.credentials.credential_type.as_str();
        if !client.kind.supports(credential_type) {
            return Err(bad(format!(
                "unsupported credential_type: {credential_type:?}"
            )));
        }
        let now = self.now_ms();
        let ttl = lease_ttl(&role, request.ttls);
        let expires_ms = now + i64::try_from(ttl.as_secs() + 5).unwrap_or(i64::MAX / 2) * 1000;
        let meta = UsernameMetadata {
            display_name: request
                .auth
                .as_ref()
                .map(|a| a.display_name.clone())
                .unwrap_or_default(),
            role_name: name.to_owned(),
        };
        let template_text = fields::string(&config.connection_details, "username_template")?
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| client.kind.default_username_template().to_owned());
        let username = template::render(&template_text, &meta, now)
            .map_err(|err| bad(format!("unable to generate username: {err}")))?;
        let mut data = Data::new();
        let credential = match credential_type {
            "rsa_private_key" => {
                let (public, private) =
                    credentials::rsa_key_pair(&role.credentials.credential_config)?;
                data.insert("rsa_private_key".into(), Value::String(private));
                Credential::PublicKey(public)
            }
            "client_certificate" => {
                let (subject, cert) = credentials::client_certificate(
                    &role.credentials.credential_config,
                    &meta,
                    now,
                    expires_ms,
                )?;
                data.extend(cert);
                Credential::Subject(subject)
            }
            _ => {
                let policy = role
                    .credentials
                    .credential_config
                    .get("password_policy")
                    .filter(|p| !p.is_empty())
                    .unwrap_or(&config.password_policy);
                let password = self.passwords.generate(policy).await?;
                data.insert("password".into(), Value::String(password.clone()));
                Credential::Password(password)
            }
        };
        client
            .new_user(
                &username,
                &credential,
                &expiration(expires_ms),
                &role.creation_statements,
                &role.rollback_statements,
            )
            .await?;
        data.insert("username".into(), Value::String(username.clone()));
        let mut internal = Data::new();
        internal.insert("username".into(), Value::String(username));
        internal.insert("role".into(), Value::String(name.to_owned()));
        internal.insert("db_name".into(), Value::String(role.db_name.clone()));
        internal.insert(
            "revocation_statements".into(),
            Value::Array(
                role.revocation_statements
                    .iter()
                    .cloned()
                    .map(Value::String)
                    .collect(),
            ),
        );
        Ok(Some(Response {
            data: Some(data),
            secret: Some(LeaseOptions {
                ttl: Duration::from_secs(role.default_ttl),
                max_ttl: (role.max_ttl > 0).then(|| Duration::from_secs(role.max_ttl)),
                renewable: true,
                internal,
            }),
            ..Response::default()
        }))
    }

    pub(crate) async fn revoke_lease(&self, lease: &Lease) -> Result<(), EngineError> {
        let username = fields::string(&lease.internal, "username")?.unwrap_or_default();
        let db_name = fields::string(&lease.internal, "db_name")?.unwrap_or_default();
        let role_name = fields::string(&lease.internal, "role")?.unwrap_or_default();
        if username.is_empty() {
            return Err(bad("secret is missing username internal data"));
        }
        let role =
            store::get::<Role>(self.storage(), &format!("{}{role_name}", store::ROLE)).await?;
        let statements = match role {
            Some(role) => role.revocation_statements,
            None => match lease.internal.get("revocation_statements") {
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            },
        };
        let (_, client) = self.client(&db_name).await?;
        client.delete_user(&username, &statements).await
    }

    pub(crate) async fn renew_lease(&self, lease: &Lease) -> Result<Duration, EngineError> {
        let username = fields::string(&lease.internal, "username")?.unwrap_or_default();
        let role_name = fields::string(&lease.internal, "role")?.unwrap_or_default();
        let Some(role) =
            store::get::<Role>(self.storage(), &format!("{}{role_name}", store::ROLE)).await?
        else {
            return Err(bad(format!(
                "error during renew: could not find role with name {role_name}"
            )));
        };
        let mut granted = lease
            .increment
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_secs(role.default_ttl.max(1)));
        if role.max_ttl > 0 {
            let left = Duration::from_secs(role.max_ttl).saturating_sub(lease.age);
            granted = granted.min(left);
        }
        let (_, client) = self.client(&role.db_name).await?;
        let expires_ms =
            self.now_ms() + i64::try_from(granted.as_millis()).unwrap_or(i64::MAX / 2) + 5000;
        client
            .update_expiration(&username, &expiration(expires_ms), &role.renew_statements)
            .await?;
        Ok(granted)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrets_sdk::MountTtls;

    use crate::store::Role;

    #[test]
    fn a_role_without_ttls_takes_its_mounts_and_its_own_max_stays_within_the_mounts() {
        let hours = |h: u64| Duration::from_secs(h * 3600);
        let mount = MountTtls {
            default: hours(2),
            max: hours(4),
        };
        let role = |default_ttl: u64, max_ttl: u64| Role {
            default_ttl: default_ttl * 3600,
            max_ttl: max_ttl * 3600,
            ..Role::default()
        };
        assert_eq!(super::lease_ttl(&role(0, 0), mount), hours(2));
        assert_eq!(super::lease_ttl(&role(3, 0), mount), hours(3));
        assert_eq!(super::lease_ttl(&role(0, 1), mount), hours(1));
        assert_eq!(super::lease_ttl(&role(6, 8), mount), hours(4));
        assert_eq!(super::lease_ttl(&role(0, 0), MountTtls::SYSTEM), hours(768));
    }

    #[test]
    fn expirations_render_as_go_does() {
        assert_eq!(
            super::expiration(86_400_000 + 3_723_000),
            "1970-01-02 01:02:03+0000"
        );
    }
}
