//! Role name policy: which common names, DNS and email SANs, IP SANs, URI SANs, other SANs and
//! subject serial numbers a role lets a certificate carry (Vault's `validateNames` and
//! friends), as pure functions of the role and the requested values.
//!
//! Rules kept from upstream: `allow_any_name` still obeys `enforce_hostnames` and
//! `allow_wildcard_certificates`; wildcards follow RFC 6125 (one `*`, left-most label only);
//! `allow_localhost` admits `localhost`/`localdomain` (and their subdomains with
//! `allow_subdomains`); `allow_bare_domains`, `allow_subdomains` and `allow_glob_domains` match
//! against `allowed_domains`; email addresses are checked by their domain part; `*` globs are
//! go-glob's.
//!
//! Invariant: the functions answer the first name outside the policy (or an error message) and
//! never partially accept a request; the caller denies the whole request.

use std::collections::BTreeMap;

use crate::roles::Role;
use crate::sans::parse_other_sans;

fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    match bytes {
        [] => false,
        [one] => one.is_ascii_alphanumeric(),
        [first, middle @ .., last] => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && middle
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        }
    }
}

/// Vault's `hostnameRegex`: an optional `*.`, then labels, an optional trailing dot.
pub(crate) fn is_hostname(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_label)
}

/// Vault's `leftWildLabelRegex`: `*`, `*label`, `label*` or `lab*el`.
fn is_wild_label(label: &str) -> bool {
    if label == "*" {
        return true;
    }
    let Some((before, after)) = label.split_once('*') else {
        return false;
    };
    (before.is_empty() || is_label(before)) && (after.is_empty() || is_label(after))
}

/// Vault's `validateNames`: the first of `names` outside the role's policy, if any.
pub(crate) fn first_bad_name<'a>(
    role: &Role,
    display_name: &str,
    names: &'a [String],
) -> Option<&'a str> {
    names
        .iter()
        .find(|name| !name_allowed(role, display_name, name))
        .map(String::as_str)
}

fn name_allowed(role: &Role, display_name: &str, name: &str) -> bool {
    let mut reduced = name.to_owned();
    let mut email_domain = reduced.clone();
    let mut wildcard_label = String::new();
    let mut is_email = false;
    let mut is_wildcard = false;

    if reduced.contains('@') {
        let parts: Vec<&str> = reduced.split('@').collect();
        if parts.len() != 2 {
            return false;
        }
        reduced = parts[1].to_owned();
        email_domain = reduced.clone();
        is_email = true;
    }

    if reduced.contains('*') {
        is_wildcard = true;
        if !role.allow_wildcard_certificates {
            return false;
        }
        if reduced.matches('*').count() > 1 {
            return false;
        }
        match reduced.split_once('.') {
            None => {
                wildcard_label = reduced.clone();
                reduced = String::new();
            }
            Some((label, rest)) => {
                if rest.contains('*') {
                    return false;
                }
                wildcard_label = label.to_owned();
                reduced = rest.to_owned();
            }
        }
    }

    if is_email && is_wildcard {
        return false;
    }

    if role.enforce_hostnames {
        if !reduced.is_empty() && (!reduced.is_ascii() || !is_hostname(&reduced)) {
            return false;
        }
        if is_wildcard && !is_wild_label(&wildcard_label) {
            return false;
        }
    }

    if role.allow_any_name {
        return true;
    }

    if role.allow_localhost {
        if reduced == "localhost"
            || reduced == "localdomain"
            || (is_email && (email_domain == "localhost" || email_domain == "localdomain"))
        {
            return true;
        }
        if role.allow_subdomains
            && (reduced.ends_with(".localhost")
                || (is_wildcard && reduced == "localhost")
                || reduced.ends_with(".localdomain")
                || (is_wildcard && reduced == "localdomain"))
        {
            return true;
        }
    }

    if role.allow_token_displayname && !display_name.is_empty() {
        if name == display_name {
            return true;
        }
        if role.allow_subdomains {
            if is_email
                && let Some((_, host)) = display_name.split_once('@')
                && reduced.ends_with(&format!(".{host}"))
            {
                return true;
            }
            if reduced.ends_with(&format!(".{display_name}"))
                || (is_wildcard && reduced == display_name)
            {
                return true;
            }
        }
    }

    for domain in role.allowed_domains.iter().filter(|d| !d.is_empty()) {
        if role.allow_bare_domains
            && (name.eq_ignore_ascii_case(domain)
                || (is_email && email_domain.eq_ignore_ascii_case(domain)))
        {
            return true;
        }
        if role.allow_subdomains
            && (reduced.ends_with(&format!(".{domain}"))
                || (is_wildcard && reduced.eq_ignore_ascii_case(domain)))
        {
            return true;
        }
        if role.allow_glob_domains && domain.contains('*') && stdx::glob::matches(domain, name) {
            return true;
        }
    }
    false
}

/// Vault's `validateCommonName`: `None` when the CN is allowed, else the CN.
pub(crate) fn common_name_allowed(role: &Role, display_name: &str, cn: &str) -> bool {
    if role.cn_validations.len() == 1 && role.cn_validations[0] == "disabled" {
        return true;
    }
    if !name_allowed(role, display_name, cn) {
        return false;
    }
    if role.cn_validations.is_empty() {
        return true;
    }
    let wanted = if cn.contains('@') {
        "email"
    } else {
        "hostname"
    };
    role.cn_validations.iter().any(|v| v == wanted)
}

/// Checks requested other SANs against the role: `Err` with Vault's message for the first
/// OID or value it does not allow.
pub(crate) fn check_other_sans(
    role: &Role,
    requested: &BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    if role.allowed_other_sans.len() == 1 && role.allowed_other_sans[0] == "*" {
        return Ok(());
    }
    let allowed = parse_other_sans(&role.allowed_other_sans)
        .map_err(|err| format!("error parsing role's allowed SANs: {err}"))?;
    for (oid, values) in requested {
        let Some(patterns) = allowed.get(oid) else {
            return Err(format!("other SAN OID {oid} not allowed by this role"));
        };
        for value in values {
            if !patterns.iter().any(|p| stdx::glob::matches(p, value)) {
                return Err(format!(
                    "other SAN {value} not allowed for OID {oid} by this role"
                ));
            }
        }
    }
    Ok(())
}

/// Whether a URI SAN matches one of the role's `allowed_uri_sans` globs.
pub(crate) fn uri_allowed(role: &Role, uri: &str) -> bool {
    role.allowed_uri_sans
        .iter()
        .any(|pattern| stdx::glob::matches(pattern, uri))
}

/// Vault's `validateSerialNumber`: exact or glob match against `allowed_serial_numbers`.
pub(crate) fn serial_number_allowed(role: &Role, serial: &str) -> bool {
    role.allowed_serial_numbers.iter().any(|allowed| {
        !allowed.is_empty()
            && (allowed == serial
                || (allowed.contains('*') && stdx::glob::matches(allowed, serial)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(edit: impl FnOnce(&mut Role)) -> Role {
        let mut role = Role::default();
        edit(&mut role);
        role
    }

    fn allowed(role: &Role, name: &str) -> bool {
        first_bad_name(role, "", &[name.to_owned()]).is_none()
    }

    #[test]
    fn hostnames_and_wildcard_labels_follow_upstreams_patterns() {
        assert!(is_hostname("a.example.com"));
        assert!(is_hostname("*.example.com"));
        assert!(is_hostname("example.com."));
        assert!(!is_hostname("-a.example.com"));
        assert!(!is_hostname("a..com"));
        assert!(!is_hostname("host^1.example.com"));
        assert!(is_wild_label("*"));
        assert!(is_wild_label("b*z"));
        assert!(!is_wild_label("**"));
    }

    #[test]
    fn subdomains_bare_domains_and_globs_match_allowed_domains() {
        let r = role(|r| {
            r.allowed_domains = vec!["example.com".into(), "*.glob.net".into()];
            r.allow_subdomains = true;
        });
        assert!(allowed(&r, "a.example.com"));
        assert!(allowed(&r, "*.example.com"));
        assert!(allowed(&r, "user@a.example.com"));
        assert!(!allowed(&r, "example.com"));
        assert!(!allowed(&r, "a.example.org"));
        assert!(!allowed(&r, "x.glob.net"));
        let bare = role(|r| {
            r.allowed_domains = vec!["example.com".into()];
            r.allow_bare_domains = true;
        });
        assert!(allowed(&bare, "example.com"));
        assert!(allowed(&bare, "me@example.com"));
        assert!(!allowed(&bare, "a.example.com"));
        let glob = role(|r| {
            r.allowed_domains = vec!["ftp*.example.com".into()];
            r.allow_glob_domains = true;
        });
        assert!(allowed(&glob, "ftp1.example.com"));
        assert!(!allowed(&glob, "www.example.com"));
    }

    #[test]
    fn any_name_still_obeys_hostname_and_wildcard_rules() {
        let r = role(|r| r.allow_any_name = true);
        assert!(allowed(&r, "anything.example"));
        assert!(!allowed(&r, "not a hostname"));
        assert!(!allowed(&r, "a.*.example.com"));
        let no_wild = role(|r| {
            r.allow_any_name = true;
            r.allow_wildcard_certificates = false;
        });
        assert!(!allowed(&no_wild, "*.example.com"));
        let loose = role(|r| {
            r.allow_any_name = true;
            r.enforce_hostnames = false;
        });
        assert!(allowed(&loose, "not a hostname"));
    }

    #[test]
    fn localhost_is_allowed_by_default_only() {
        assert!(allowed(&Role::default(), "localhost"));
        assert!(!allowed(&role(|r| r.allow_localhost = false), "localhost"));
    }

    #[test]
    fn common_names_obey_cn_validations() {
        let r = role(|r| {
            r.allow_any_name = true;
            r.cn_validations = vec!["email".into()];
        });
        assert!(common_name_allowed(&r, "", "me@example.com"));
        assert!(!common_name_allowed(&r, "", "example.com"));
        let disabled = role(|r| r.cn_validations = vec!["disabled".into()]);
        assert!(common_name_allowed(&disabled, "", "Any Thing At All"));
    }

    #[test]
    fn other_sans_are_checked_by_oid_and_glob() {
        let r = role(|r| {
            r.allowed_other_sans = vec!["1.3.6.1.4.1.311.20.2.3;UTF8:*@example.com".into()]
        });
        let ok = parse_other_sans(&["1.3.6.1.4.1.311.20.2.3;utf8:me@example.com".into()]).unwrap();
        assert!(check_other_sans(&r, &ok).is_ok());
        let bad_value =
            parse_other_sans(&["1.3.6.1.4.1.311.20.2.3;UTF8:me@evil.com".into()]).unwrap();
        assert!(
            check_other_sans(&r, &bad_value)
                .unwrap_err()
                .contains("not allowed for OID")
        );
        let bad_oid = parse_other_sans(&["1.2.3;UTF8:x".into()]).unwrap();
        assert!(
            check_other_sans(&r, &bad_oid)
                .unwrap_err()
                .contains("OID 1.2.3 not allowed")
        );
        assert!(parse_other_sans(&["1.2.3;UTF16:x".into()]).is_err());
    }
}
