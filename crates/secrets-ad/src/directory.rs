//! The directory itself: LDAP sessions over ldap3 (rustls on aws-lc-rs), bound as the
//! configured `binddn`, that find service accounts, read when their password last changed and
//! set new passwords.
//!
//! A [`Session`] is opened per engine operation and closed at its end: the configured URLs are
//! tried in order and the next one only on a connection error (a failed bind is final); every
//! step is bounded by `request_timeout`. ldap3's connection future is driven in place, next to
//! each step (no task is spawned; dropping the session drops the connection).
//!
//! Schemas ([`Schema`]): Active Directory takes a password as a replace of `unicodePwd` with the
//! password in double quotes, UTF-16LE (the directory demands an encrypted connection for it)
//! and reports `pwdLastSet` in 100 ns ticks since 1601; OpenLDAP takes it through the password
//! modify extended operation (RFC 3062, so the server hashes it as configured) and reports
//! `pwdChangedTime` (a GeneralizedTime kept by the ppolicy overlay; without the overlay there is
//! none and only the engine's own rotation time counts).
//!
//! Invariant: no password or bind password appears in an error message or a log line.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ldap3::exop::PasswordModify;
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Mod, Scope, SearchEntry};
use secrets_sdk::EngineError;

use crate::store::{Config, Schema};

/// How long after a `rotate-root` the previous bind password is still tried (upstream's).
const LAST_BINDPASS_GRACE_MS: i64 = 10 * 60 * 1000;

type Driver = Pin<Box<dyn Future<Output = ldap3::result::Result<()>> + Send>>;

fn directory_error(message: impl Into<String>) -> EngineError {
    EngineError::BadRequest(message.into())
}

/// A service account found in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) dn: String,
    /// When its password last changed, Unix milliseconds, if the directory says.
    pub(crate) password_last_set_ms: Option<i64>,
}

/// One bound LDAP connection.
pub(crate) struct Session {
    ldap: Ldap,
    driver: Driver,
    closed: bool,
    timeout: Duration,
    schema: Schema,
    userdn: String,
    userattr: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("schema", &self.schema)
            .field("userdn", &self.userdn)
            .finish_non_exhaustive()
    }
}

/// The comma-separated URLs of `url`, trimmed, empty entries dropped.
pub(crate) fn urls(url: &str) -> Vec<String> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The TLS versions `tls_min_version`..=`tls_max_version` allow (rustls knows 1.2 and 1.3;
/// `tls10` and `tls11` as a minimum mean 1.2).
fn protocol_versions(
    min: &str,
    max: &str,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, EngineError> {
    let rank = |v: &str| match v {
        "tls10" => Some(10),
        "tls11" => Some(11),
        "tls12" | "" => Some(12),
        "tls13" => Some(13),
        _ => None,
    };
    let (Some(lo), Some(hi)) = (rank(min), rank(max)) else {
        return Err(directory_error("invalid TLS version"));
    };
    let mut out = Vec::new();
    if lo <= 12 && hi >= 12 {
        out.push(&rustls::version::TLS12);
    }
    if hi >= 13 {
        out.push(&rustls::version::TLS13);
    }
    if out.is_empty() {
        return Err(directory_error(
            "tls_max_version below tls12 is not supported",
        ));
    }
    Ok(out)
}

/// Parses the PEM `certificate` into a root store (400 when it holds no certificate).
pub(crate) fn root_store(pem: &str) -> Result<rustls::RootCertStore, EngineError> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|_| directory_error("failed to parse server tls cert"))?;
        roots
            .add(cert)
            .map_err(|_| directory_error("failed to parse server tls cert"))?;
    }
    if roots.is_empty() {
        return Err(directory_error("failed to parse server tls cert"));
    }
    Ok(roots)
}

fn settings(config: &Config) -> Result<LdapConnSettings, EngineError> {
    let mut settings = LdapConnSettings::new()
        .set_conn_timeout(Duration::from_secs(config.request_timeout.max(1)))
        .set_starttls(config.starttls);
    if config.insecure_tls {
        settings = settings.set_no_tls_verify(true);
    } else if !config.certificate.is_empty() {
        let versions = protocol_versions(&config.tls_min_version, &config.tls_max_version)?;
        let tls = rustls::ClientConfig::builder_with_protocol_versions(&versions)
            .with_root_certificates(root_store(&config.certificate)?)
            .with_no_client_auth();
        settings = settings.set_config(Arc::new(tls));
    }
    Ok(settings)
}

/// Runs one LDAP step while driving the connection, bounded by `timeout`.
async fn step<T>(
    driver: &mut Driver,
    closed: &mut bool,
    timeout: Duration,
    what: &str,
    op: impl Future<Output = ldap3::result::Result<T>>,
) -> Result<T, EngineError> {
    if *closed {
        return Err(directory_error(format!(
            "{what}: the LDAP connection is closed"
        )));
    }
    tokio::select! {
        biased;
        result = tokio::time::timeout(timeout, op) => match result {
            Err(_) => Err(directory_error(format!("{what}: timed out after {}s", timeout.as_secs()))),
            Ok(Err(err)) => Err(directory_error(format!("{what}: {err}"))),
            Ok(Ok(value)) => Ok(value),
        },
        ended = driver.as_mut() => {
            *closed = true;
            Err(directory_error(match ended {
                Ok(()) => format!("{what}: the LDAP server closed the connection"),
                Err(err) => format!("{what}: LDAP connection failed: {err}"),
            }))
        }
    }
}

impl Session {
    /// Connects to the first reachable URL and binds as `binddn` (or `binddn@upndomain`),
    /// falling back to the previous bind password shortly after a root rotation.
    pub(crate) async fn open(config: &Config, now_ms: i64) -> Result<Session, EngineError> {
        let settings = settings(config)?;
        let mut failures = Vec::new();
        let mut connected = None;
        for url in urls(&config.url) {
            match LdapConnAsync::with_settings(settings.clone(), &url).await {
                Ok(pair) => {
                    connected = Some(pair);
                    break;
                }
                Err(err) => failures.push(format!("{url}: {err}")),
            }
        }
        let Some((conn, ldap)) = connected else {
            return Err(directory_error(format!(
                "failed to connect to the directory: {}",
                if failures.is_empty() {
                    "no url configured".to_owned()
                } else {
                    failures.join("; ")
                }
            )));
        };
        let mut session = Session {
            ldap,
            driver: Box::pin(conn.drive()),
            closed: false,
            timeout: Duration::from_secs(config.request_timeout.max(1)),
            schema: config.schema,
            userdn: config.userdn.clone(),
            userattr: if config.userattr.is_empty() {
                config.schema.default_userattr().to_owned()
            } else {
                config.userattr.clone()
            },
        };
        let who = if config.upndomain.is_empty() {
            config.binddn.clone()
        } else {
            format!("{}@{}", config.binddn, config.upndomain)
        };
        if config.bindpass.is_empty() {
            return Err(directory_error(
                "unable to bind due to lack of configured password",
            ));
        }
        let first = session.bind(&who, &config.bindpass).await;
        if first.is_ok() {
            return Ok(session);
        }
        let recent = config.last_bind_password_rotation_ms > 0
            && now_ms < config.last_bind_password_rotation_ms + LAST_BINDPASS_GRACE_MS;
        if recent
            && !config.last_bindpass.is_empty()
            && session.bind(&who, &config.last_bindpass).await.is_ok()
        {
            return Ok(session);
        }
        first.map(|()| session)
    }

    /// A simple bind; any result but success is an error.
    pub(crate) async fn bind(&mut self, dn: &str, password: &str) -> Result<(), EngineError> {
        let result = step(
            &mut self.driver,
            &mut self.closed,
            self.timeout,
            "LDAP bind",
            self.ldap.simple_bind(dn, password),
        )
        .await?;
        result
            .success()
            .map(|_| ())
            .map_err(|err| directory_error(format!("LDAP bind as {dn:?} failed: {err}")))
    }

    fn last_set_attr(&self) -> &'static str {
        match self.schema {
            Schema::Ad => "pwdLastSet",
            Schema::Openldap => "pwdChangedTime",
        }
    }

    fn account_from(&self, entry: SearchEntry) -> Account {
        let attr = self.last_set_attr();
        let raw = entry
            .attrs
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(attr))
            .and_then(|(_, values)| values.first().cloned());
        let password_last_set_ms = raw.and_then(|raw| match self.schema {
            Schema::Ad => parse_ticks(&raw),
            Schema::Openldap => parse_generalized_time(&raw),
        });
        Account {
            dn: entry.dn,
            password_last_set_ms,
        }
    }

    /// The one entry under `userdn` whose user attribute equals `name` (400 when there is none
    /// or more than one).
    pub(crate) async fn find_account(&mut self, name: &str) -> Result<Account, EngineError> {
        let filter = format!("({}={})", self.userattr, ldap3::ldap_escape(name));
        let attrs = vec![self.last_set_attr()];
        let base = self.userdn.clone();
        let result = step(
            &mut self.driver,
            &mut self.closed,
            self.timeout,
            "LDAP search",
            self.ldap.search(&base, Scope::Subtree, &filter, attrs),
        )
        .await?;
        let (entries, _) = result
            .success()
            .map_err(|err| directory_error(format!("LDAP search under {base:?} failed: {err}")))?;
        let mut found: Vec<SearchEntry> = entries
            .into_iter()
            .filter(|e| !e.is_ref() && !e.is_intermediate())
            .map(SearchEntry::construct)
            .collect();
        match found.len() {
            0 => Err(directory_error(format!(
                "unable to find service account named {name} in the directory, searches are case sensitive"
            ))),
            1 => Ok(self.account_from(found.remove(0))),
            n => Err(directory_error(format!(
                "expected one matching service account named {name}, but found {n}"
            ))),
        }
    }

    /// The entry at `dn` itself (for the bind account: exactly one, or 400).
    pub(crate) async fn entry_at(&mut self, dn: &str) -> Result<Account, EngineError> {
        let attrs = vec![self.last_set_attr()];
        let result = step(
            &mut self.driver,
            &mut self.closed,
            self.timeout,
            "LDAP search",
            self.ldap.search(dn, Scope::Base, "(objectClass=*)", attrs),
        )
        .await?;
        let (entries, _) = result
            .success()
            .map_err(|err| directory_error(format!("LDAP search of {dn:?} failed: {err}")))?;
        let mut found: Vec<SearchEntry> = entries.into_iter().map(SearchEntry::construct).collect();
        if found.len() != 1 {
            return Err(directory_error(format!(
                "binddn {dn:?} doesn't match just one entry (use a fully qualified DN)"
            )));
        }
        Ok(self.account_from(found.remove(0)))
    }

    /// Sets the password of the entry at `dn`, as the schema wants it.
    pub(crate) async fn set_password(
        &mut self,
        dn: &str,
        password: &str,
    ) -> Result<(), EngineError> {
        match self.schema {
            Schema::Ad => {
                let value: HashSet<Vec<u8>> = HashSet::from([unicode_pwd(password)]);
                let mods = vec![Mod::Replace(b"unicodePwd".to_vec(), value)];
                let result = step(
                    &mut self.driver,
                    &mut self.closed,
                    self.timeout,
                    "LDAP modify",
                    self.ldap.modify(dn, mods),
                )
                .await?;
                result.success().map(|_| ()).map_err(|err| {
                    directory_error(format!("setting the password of {dn:?} failed: {err}"))
                })
            }
            Schema::Openldap => {
                let exop = PasswordModify {
                    user_id: Some(dn),
                    old_pass: None,
                    new_pass: Some(password),
                };
                let result = step(
                    &mut self.driver,
                    &mut self.closed,
                    self.timeout,
                    "LDAP password modify",
                    self.ldap.extended(exop),
                )
                .await?;
                result.success().map(|_| ()).map_err(|err| {
                    directory_error(format!("setting the password of {dn:?} failed: {err}"))
                })
            }
        }
    }

    /// Unbinds (best effort) and closes the connection.
    pub(crate) async fn close(mut self) {
        let timeout = self.timeout.min(Duration::from_secs(5));
        let _ = step(
            &mut self.driver,
            &mut self.closed,
            timeout,
            "LDAP unbind",
            self.ldap.unbind(),
        )
        .await;
    }
}

/// Active Directory's `unicodePwd` value: the password in double quotes, UTF-16LE.
pub(crate) fn unicode_pwd(password: &str) -> Vec<u8> {
    format!("\"{password}\"")
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// `pwdLastSet` (100 ns ticks since 1601-01-01 UTC) as Unix milliseconds; `0` (must change at
/// next logon) and garbage are `None`.
pub(crate) fn parse_ticks(raw: &str) -> Option<i64> {
    const TICKS_PER_MS: i64 = 10_000;
    const UNIX_EPOCH_MS_SINCE_1601: i64 = 11_644_473_600_000;
    let ticks: i64 = raw.trim().parse().ok()?;
    if ticks <= 0 {
        return None;
    }
    Some(ticks / TICKS_PER_MS - UNIX_EPOCH_MS_SINCE_1601)
}

/// An LDAP GeneralizedTime in UTC (`20240501120000Z`, with an optional fraction of a second
/// `.123Z`) as Unix milliseconds.
pub(crate) fn parse_generalized_time(raw: &str) -> Option<i64> {
    let raw = raw.trim().strip_suffix('Z')?;
    let (whole, fraction) = match raw.split_once(['.', ',']) {
        Some((whole, fraction)) => (whole, fraction),
        None => (raw, ""),
    };
    if whole.len() != 14 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |range: std::ops::Range<usize>| whole[range].parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(8..10)?, num(10..12)?, num(12..14)?);
    if !(1..=12).contains(&month) || day < 1 || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let month = u32::try_from(month).ok()?;
    if day > i64::from(stdx::time::days_in_month(year, month)) {
        return None;
    }
    let days = stdx::time::days_from_civil(year, month, u32::try_from(day).ok()?);
    let millis = format!("{fraction:0<3}")[..3].parse::<i64>().ok()?;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicode_pwd_is_the_quoted_password_in_utf16le() {
        assert_eq!(unicode_pwd("aé"), vec![b'"', 0, b'a', 0, 0xe9, 0, b'"', 0]);
    }

    #[test]
    fn pwd_last_set_ticks_become_unix_milliseconds() {
        // 2021-01-01T00:00:00Z
        assert_eq!(parse_ticks("132539328000000000"), Some(1_609_459_200_000));
        assert_eq!(parse_ticks("0"), None);
        assert_eq!(parse_ticks("soon"), None);
    }

    #[test]
    fn generalized_times_become_unix_milliseconds() {
        assert_eq!(
            parse_generalized_time("20210101000000Z"),
            Some(1_609_459_200_000)
        );
        assert_eq!(
            parse_generalized_time("20210101000001.25Z"),
            Some(1_609_459_201_250)
        );
        assert_eq!(parse_generalized_time("20211301000000Z"), None);
        assert_eq!(parse_generalized_time("20210101000000"), None);
    }

    #[test]
    fn urls_are_split_on_commas_in_order() {
        assert_eq!(
            urls(" ldap://a:389 ,ldaps://b,, "),
            vec!["ldap://a:389", "ldaps://b"]
        );
    }

    #[test]
    fn tls_versions_map_to_what_rustls_offers() {
        assert_eq!(protocol_versions("tls12", "tls12").unwrap().len(), 1);
        assert_eq!(protocol_versions("tls10", "tls13").unwrap().len(), 2);
        assert_eq!(protocol_versions("tls13", "tls13").unwrap().len(), 1);
        assert!(protocol_versions("tls10", "tls11").is_err());
        assert!(protocol_versions("ssl3", "tls12").is_err());
    }
}
