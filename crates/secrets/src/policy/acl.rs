//! The ACL: a set of parsed policies merged for fast checks (pure: no I/O).
//!
//! Matching follows Vault's `vault/policy/acl.go` exactly:
//! 1. an exact rule for the path (for LIST also the path without its trailing `/`);
//! 2. otherwise the highest-priority rule among the longest-prefix glob rule and every
//!    matching `+` rule (for LIST, retried without the trailing `/`);
//! 3. otherwise denied.
//!
//! Priority, lowest first: the first `+`/`*` earlier; a trailing `*` below none; more `+`
//! segments; shorter; lexicographically smaller. The same pattern in several policies merges
//! (union of capabilities, parameters merged, `deny` clears everything); different patterns
//! never merge. `sudo` is needed on root-protected paths in addition to the operation's
//! capability. Parameter constraints (required, denied, allowed) apply to read, create, update
//! and patch; any failure is `permission denied`, as in Vault. A rule's `min_wrapping_ttl` and
//! `max_wrapping_ttl` admit only requests wrapped with a TTL within them (merged rules keep the
//! lesser of each bound). A rule's `mfa_methods` merge as a union; [`Acl::mfa_methods`] tells
//! dispatch which methods a request on a path must satisfy.
//!
//! Invariant: an `Acl` is immutable once built and cheap to clone (one `Arc`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use secrets_sdk::{Data, Operation};
use serde_json::Value;

use super::parse::{
    CAPABILITY_NAMES, CREATE, DELETE, DENY, LIST, PATCH, Permissions, Policy, READ, SUDO, UPDATE,
    classify, is_templated,
};
use crate::Error;

/// The identity a templated policy path (`{{identity.entity.id}}`) is resolved against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct TemplateIdentity {
    pub(crate) entity_id: String,
    pub(crate) entity_name: String,
}

/// A token's ACL, kept on its cached entry (`tokens::TokenEntry::acl_memo`) with the policy
/// store's generation it was built at, so that a request with a known token finds its ACL
/// without hashing its policy names into the store's ACL cache. A memo of another generation
/// is stale and rebuilt ([`super::PolicyStore::acl_for_token`]).
///
/// A clone is empty (a copy of an entry may be changed and must build its own), and memos
/// compare equal (entries compare by their stored fields).
#[derive(Debug, Default)]
pub(crate) struct AclMemo(std::sync::Mutex<Option<(u64, Acl)>>);

impl AclMemo {
    pub(crate) fn get(&self, generation: u64) -> Option<Acl> {
        let memo = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memo.as_ref()
            .filter(|(built_at, _)| *built_at == generation)
            .map(|(_, acl)| acl.clone())
    }

    pub(crate) fn set(&self, generation: u64, acl: &Acl) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((generation, acl.clone()));
    }
}

impl Clone for AclMemo {
    fn clone(&self) -> AclMemo {
        AclMemo::default()
    }
}

impl PartialEq for AclMemo {
    fn eq(&self, _: &AclMemo) -> bool {
        true
    }
}

/// A merged, immutable set of policies.
#[derive(Debug, Clone, Default)]
pub(crate) struct Acl {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    root: bool,
    exact: HashMap<String, Permissions>,
    /// Prefix rules, longest first.
    prefix: Vec<(String, Permissions)>,
    /// `+` rules keyed by their full pattern (trailing `*` kept).
    segment: HashMap<String, Permissions>,
}

impl Acl {
    /// The `root` policy's ACL: everything allowed.
    pub(crate) fn root() -> Acl {
        static ROOT: LazyLock<Acl> = LazyLock::new(|| Acl {
            inner: Arc::new(Inner {
                root: true,
                ..Inner::default()
            }),
        });
        ROOT.clone()
    }

    /// Builds an ACL from parsed policies. Templated paths are resolved against `identity`;
    /// without one (or for an unknown template) they are skipped, as Vault skips paths whose
    /// templating fails.
    pub(crate) fn new<'a>(
        policies: impl IntoIterator<Item = &'a Policy>,
        identity: Option<&TemplateIdentity>,
    ) -> Acl {
        let mut exact: HashMap<String, Permissions> = HashMap::new();
        let mut prefix: HashMap<String, Permissions> = HashMap::new();
        let mut segment: HashMap<String, Permissions> = HashMap::new();
        for policy in policies {
            for rules in &policy.paths {
                let path = if is_templated(&rules.raw_path) {
                    match identity.and_then(|id| resolve_template(&rules.raw_path, id)) {
                        Some(path) => path,
                        None => continue,
                    }
                } else {
                    rules.raw_path.clone()
                };
                let Ok(pattern) = classify(&path) else {
                    continue;
                };
                let table = if pattern.has_segment_wildcards {
                    &mut segment
                } else if pattern.is_prefix {
                    &mut prefix
                } else {
                    &mut exact
                };
                match table.get_mut(&pattern.path) {
                    Some(existing) => merge(existing, &rules.permissions),
                    None => {
                        table.insert(pattern.path, rules.permissions.clone());
                    }
                }
            }
        }
        let mut prefix: Vec<(String, Permissions)> = prefix.into_iter().collect();
        prefix.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Acl {
            inner: Arc::new(Inner {
                root: false,
                exact,
                prefix,
                segment,
            }),
        }
    }

    pub(crate) fn is_root(&self) -> bool {
        self.inner.root
    }

    /// Checks one request that asked for no response wrapping. `path` is the full logical path
    /// (`secret/foo`, `sys/mounts`; for a list it ends with `/`); `needs_sudo` is set for
    /// root-protected paths.
    pub(crate) fn check(
        &self,
        path: &str,
        operation: Operation,
        data: &Data,
        needs_sudo: bool,
    ) -> Result<(), Error> {
        self.check_wrapped(path, operation, data, needs_sudo, None)
    }

    /// [`Acl::check`] for a request with its wrap TTL (`X-Vault-Wrap-TTL`; `None` when the
    /// request sent none), which a rule's `min_wrapping_ttl`/`max_wrapping_ttl` bound.
    pub(crate) fn check_wrapped(
        &self,
        path: &str,
        operation: Operation,
        data: &Data,
        needs_sudo: bool,
        wrap_ttl: Option<Duration>,
    ) -> Result<(), Error> {
        self.authorize(path, operation, data, needs_sudo, wrap_ttl)
            .map(|_| ())
    }

    /// [`Acl::check`] as a boolean.
    pub(crate) fn allows(
        &self,
        path: &str,
        operation: Operation,
        data: &Data,
        needs_sudo: bool,
    ) -> bool {
        self.allows_wrapped(path, operation, data, needs_sudo, None)
    }

    /// [`Acl::check_wrapped`] as a boolean.
    pub(crate) fn allows_wrapped(
        &self,
        path: &str,
        operation: Operation,
        data: &Data,
        needs_sudo: bool,
        wrap_ttl: Option<Duration>,
    ) -> bool {
        self.authorize(path, operation, data, needs_sudo, wrap_ttl)
            .is_ok()
    }

    /// [`Acl::check_wrapped`] and [`Acl::mfa_methods`] with one rule lookup, as dispatch asks
    /// them of every request: the MFA methods of the rule that allowed the request (empty for
    /// root), or `permission denied`.
    pub(crate) fn authorize(
        &self,
        path: &str,
        operation: Operation,
        data: &Data,
        needs_sudo: bool,
        wrap_ttl: Option<Duration>,
    ) -> Result<&[String], Error> {
        if self.inner.root {
            return Ok(&[]);
        }
        let Some(permissions) = self.find(path, operation == Operation::List) else {
            return Err(Error::PermissionDenied);
        };
        if permits(permissions, operation, data, needs_sudo, wrap_ttl) {
            // A `deny` rule permits nothing, so this rule is not one.
            Ok(&permissions.mfa_methods)
        } else {
            Err(Error::PermissionDenied)
        }
    }

    /// The MFA methods (`mfa_methods`) the rule governing `path` requires, in policy order,
    /// merged across policies as a union: what dispatch validates after [`Acl::check`] allowed
    /// the request. Empty for root and for paths no rule (or a `deny`) governs.
    pub(crate) fn mfa_methods(&self, path: &str, operation: Operation) -> &[String] {
        if self.inner.root {
            return &[];
        }
        match self.find(path, operation == Operation::List) {
            Some(permissions) if permissions.capabilities & DENY == 0 => &permissions.mfa_methods,
            _ => &[],
        }
    }

    /// The capabilities on `path`, sorted, as `sys/capabilities` reports them: `["root"]` for
    /// root, `["deny"]` when nothing (or `deny`) matches.
    pub(crate) fn capabilities(&self, path: &str) -> Vec<String> {
        if self.inner.root {
            return vec!["root".to_owned()];
        }
        let caps = self
            .find(path, true)
            .map(|p| p.capabilities)
            .unwrap_or_default();
        let mut names: Vec<String> = if caps & DENY != 0 {
            Vec::new()
        } else {
            CAPABILITY_NAMES
                .iter()
                .filter(|(_, bit)| caps & bit != 0)
                .map(|(name, _)| (*name).to_owned())
                .collect()
        };
        if names.is_empty() {
            names.push("deny".to_owned());
        }
        names.sort();
        names
    }

    /// The permissions that govern `path` (Vault's `AllowOperation` lookup order).
    fn find(&self, path: &str, is_list: bool) -> Option<&Permissions> {
        let path = path.trim_start_matches('/');
        if let Some(p) = self.inner.exact.get(path) {
            return Some(p);
        }
        if is_list && let Some(p) = self.inner.exact.get(path.strip_suffix('/').unwrap_or(path)) {
            return Some(p);
        }
        if let Some(p) = self.non_exact(path) {
            return Some(p);
        }
        if is_list && let Some(trimmed) = path.strip_suffix('/') {
            return self.non_exact(trimmed);
        }
        None
    }

    /// Vault's `CheckAllowedFromNonExactPaths` (without the bare-mount mode).
    fn non_exact(&self, path: &str) -> Option<&Permissions> {
        let glob = self
            .inner
            .prefix
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()));
        if self.inner.segment.is_empty() {
            return glob.map(|(_, p)| p);
        }
        let mut best: Option<Candidate<'_>> = glob.map(|(prefix, perms)| Candidate {
            first_wildcard: prefix.len(),
            is_prefix: true,
            wildcards: 0,
            path: prefix.as_str(),
            perms,
        });
        // The path's segments, split once and only if some pattern's literal start matches.
        let mut parts: Option<Vec<&str>> = None;
        'patterns: for (full, perms) in &self.inner.segment {
            if full.is_empty() {
                continue;
            }
            let first_wildcard = full.find('+').unwrap_or(full.len());
            let (current, is_prefix) = match full.strip_suffix('*') {
                Some(stripped) => (stripped, true),
                None => (full.as_str(), false),
            };
            // Every segment before the first `+` must match literally (the last one as a
            // prefix at most), so a matching path starts with the pattern's text up to it.
            if !path.starts_with(&current[..first_wildcard.min(current.len())]) {
                continue;
            }
            let parts = parts.get_or_insert_with(|| path.split('/').collect());
            let pattern_len = current.split('/').count();
            if parts.len() < pattern_len {
                continue;
            }
            if !is_prefix && parts.len() != pattern_len {
                continue;
            }
            let mut wildcards = 0;
            for (i, part) in current.split('/').enumerate() {
                let last = i == pattern_len - 1;
                if part == "+" {
                    wildcards += 1;
                } else if !(part == parts[i] || (is_prefix && last && parts[i].starts_with(part))) {
                    continue 'patterns;
                }
            }
            let candidate = Candidate {
                first_wildcard,
                is_prefix,
                wildcards,
                path: current,
                perms,
            };
            if best.as_ref().is_none_or(|b| b.lower_than(&candidate)) {
                best = Some(candidate);
            }
        }
        best.map(|c| c.perms)
    }
}

/// Whether `permissions` (the rule governing the path) allow `operation` with this data,
/// sudo need and wrap TTL: Vault's capability, wrapping and parameter checks.
fn permits(
    permissions: &Permissions,
    operation: Operation,
    data: &Data,
    needs_sudo: bool,
    wrap_ttl: Option<Duration>,
) -> bool {
    let caps = permissions.capabilities;
    if needs_sudo && caps & SUDO == 0 {
        return false;
    }
    let needed = match operation {
        Operation::Read => READ,
        Operation::List => LIST,
        Operation::Create => CREATE,
        Operation::Update => UPDATE,
        Operation::Patch => PATCH,
        Operation::Delete => DELETE,
    };
    if caps & needed == 0 {
        return false;
    }
    if !wrapping_allowed(permissions, wrap_ttl) {
        return false;
    }
    if matches!(
        operation,
        Operation::Read | Operation::Create | Operation::Update | Operation::Patch
    ) {
        return parameters_allowed(permissions, data);
    }
    true
}

/// Vault's wrapping bounds: a bound set on the rule needs a wrapped request whose TTL is within
/// it (a request sending no wrap TTL is denied); bounds that crossed when policies merged
/// deny everything.
fn wrapping_allowed(permissions: &Permissions, wrap_ttl: Option<Duration>) -> bool {
    let (min, max) = (permissions.min_wrapping_ttl, permissions.max_wrapping_ttl);
    if !max.is_zero() && wrap_ttl.is_none_or(|ttl| ttl > max) {
        return false;
    }
    if !min.is_zero() && wrap_ttl.is_none_or(|ttl| ttl < min) {
        return false;
    }
    min.is_zero() || max.is_zero() || min <= max
}

struct Candidate<'a> {
    first_wildcard: usize,
    is_prefix: bool,
    wildcards: usize,
    path: &'a str,
    perms: &'a Permissions,
}

impl Candidate<'_> {
    /// Vault's `less`: whether `self` has lower priority than `other`.
    fn lower_than(&self, other: &Candidate<'_>) -> bool {
        if self.first_wildcard != other.first_wildcard {
            return self.first_wildcard < other.first_wildcard;
        }
        if self.is_prefix != other.is_prefix {
            return self.is_prefix;
        }
        if self.wildcards != other.wildcards {
            return self.wildcards > other.wildcards;
        }
        if self.path.len() != other.path.len() {
            return self.path.len() < other.path.len();
        }
        self.path < other.path
    }
}

/// Merges a rule for the same pattern from another policy (Vault's `NewACL`).
fn merge(existing: &mut Permissions, new: &Permissions) {
    if existing.capabilities & DENY != 0 {
        return;
    }
    if new.capabilities & DENY != 0 {
        existing.capabilities = DENY;
        existing.allowed_parameters = None;
        existing.denied_parameters = None;
        return;
    }
    existing.capabilities |= new.capabilities;
    // The lesser of two set bounds wins.
    if !new.max_wrapping_ttl.is_zero()
        && (existing.max_wrapping_ttl.is_zero() || new.max_wrapping_ttl < existing.max_wrapping_ttl)
    {
        existing.max_wrapping_ttl = new.max_wrapping_ttl;
    }
    if !new.min_wrapping_ttl.is_zero()
        && (existing.min_wrapping_ttl.is_zero() || new.min_wrapping_ttl < existing.min_wrapping_ttl)
    {
        existing.min_wrapping_ttl = new.min_wrapping_ttl;
    }
    merge_parameters(&mut existing.allowed_parameters, &new.allowed_parameters);
    merge_parameters(&mut existing.denied_parameters, &new.denied_parameters);
    for required in &new.required_parameters {
        if !existing.required_parameters.contains(required) {
            existing.required_parameters.push(required.clone());
        }
    }
    for method in &new.mfa_methods {
        if !existing.mfa_methods.contains(method) {
            existing.mfa_methods.push(method.clone());
        }
    }
}

fn merge_parameters(
    existing: &mut Option<BTreeMap<String, Vec<Value>>>,
    new: &Option<BTreeMap<String, Vec<Value>>>,
) {
    let Some(new) = new.as_ref().filter(|m| !m.is_empty()) else {
        return;
    };
    match existing {
        None => *existing = Some(new.clone()),
        Some(existing) => {
            for (key, values) in new {
                let current = existing.get(key);
                // An empty list (any value) overrides every other list.
                if values.is_empty() || current.is_some_and(Vec::is_empty) {
                    existing.insert(key.clone(), Vec::new());
                } else {
                    let mut merged = values.clone();
                    merged.extend(current.cloned().unwrap_or_default());
                    existing.insert(key.clone(), merged);
                }
            }
        }
    }
}

/// Required, denied and allowed parameters (Vault's order: required first, then an empty
/// request passes, then denied wins over allowed).
fn parameters_allowed(permissions: &Permissions, data: &Data) -> bool {
    // JSON null means "not given" throughout this server.
    let present = |name: &str| data.get(name).is_some_and(|v| !v.is_null());
    for required in &permissions.required_parameters {
        if !present(&required.to_lowercase()) {
            return false;
        }
    }
    let given: Vec<(&String, &Value)> = data.iter().filter(|(_, v)| !v.is_null()).collect();
    if given.is_empty() {
        return true;
    }
    if let Some(denied) = permissions
        .denied_parameters
        .as_ref()
        .filter(|m| !m.is_empty())
    {
        if denied.contains_key("*") {
            return false;
        }
        for (name, value) in &given {
            if let Some(list) = denied.get(&name.to_lowercase())
                && value_in_list(value, list)
            {
                return false;
            }
        }
    }
    let Some(allowed) = permissions
        .allowed_parameters
        .as_ref()
        .filter(|m| !m.is_empty())
    else {
        return true;
    };
    let allowed_all = allowed.contains_key("*");
    if allowed.len() == 1 && allowed_all {
        return true;
    }
    for (name, value) in &given {
        match allowed.get(&name.to_lowercase()) {
            None if !allowed_all => return false,
            Some(list) if !value_in_list(value, list) => return false,
            _ => {}
        }
    }
    true
}

/// Vault's `valueInParameterList`: an empty list holds every value; strings match globs
/// (`foo*`, `*foo`, `*foo*`); anything else compares as JSON (numbers by value).
fn value_in_list(value: &Value, list: &[Value]) -> bool {
    if list.is_empty() {
        return true;
    }
    list.iter().any(|item| match (item, value) {
        (Value::String(pattern), Value::String(value)) => globbed_match(pattern, value),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        // Query strings and form bodies carry numbers and bools as text.
        (Value::Number(n), Value::String(s)) => s.parse::<f64>().ok() == n.as_f64(),
        (Value::Bool(b), Value::String(s)) => secrets_sdk::fields::parse_bool(s) == Some(*b),
        _ => item == value,
    })
}

/// `strutil.GlobbedStringsMatch`.
fn globbed_match(pattern: &str, value: &str) -> bool {
    if pattern.len() < 2 {
        return pattern == value;
    }
    let leading = pattern.starts_with('*');
    let trailing = pattern.ends_with('*');
    match (leading, trailing) {
        (true, true) => value.contains(&pattern[1..pattern.len() - 1]),
        (true, false) => value.ends_with(&pattern[1..]),
        (false, true) => value.starts_with(&pattern[..pattern.len() - 1]),
        (false, false) => pattern == value,
    }
}

/// Resolves `{{identity.entity.id}}` and `{{identity.entity.name}}`; `None` for any other
/// template (the path is then skipped).
fn resolve_template(path: &str, identity: &TemplateIdentity) -> Option<String> {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}")?;
        let value = match after[..end].trim() {
            "identity.entity.id" => &identity.entity_id,
            "identity.entity.name" => &identity.entity_name,
            _ => return None,
        };
        if value.is_empty() {
            return None;
        }
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse;
    use super::*;

    fn build(docs: &[&str]) -> Acl {
        let policies: Vec<Policy> = docs.iter().map(|d| parse(d).unwrap()).collect();
        Acl::new(&policies, None)
    }

    fn data(json: serde_json::Value) -> Data {
        json.as_object().cloned().unwrap_or_default()
    }

    const OPS: &[(&str, Operation)] = &[
        ("read", Operation::Read),
        ("list", Operation::List),
        ("create", Operation::Create),
        ("update", Operation::Update),
        ("patch", Operation::Patch),
        ("delete", Operation::Delete),
    ];

    fn op(name: &str) -> Operation {
        OPS.iter().find(|(n, _)| *n == name).unwrap().1
    }

    /// (path, operation, allowed) rows against one ACL.
    fn table(acl: &Acl, rows: &[(&str, &str, bool)]) {
        for (path, operation, expected) in rows {
            let got = acl.allows(path, op(operation), &Data::new(), false);
            assert_eq!(got, *expected, "{operation} {path}");
        }
    }

    #[test]
    fn docs_priority_example_plus_plus_foo_glob_is_lower_than_secret_glob() {
        // docs/concepts/policies: "secret/+/+/foo/*" has lower priority than "secret/*" (same
        // first wildcard position, both trailing globs, more `+` segments).
        let acl = build(&[
            r#"path "secret/*" { capabilities = ["read"] }"#,
            r#"path "secret/+/+/foo/*" { capabilities = ["update"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/a/b/foo/c", "read", true),
                ("secret/a/b/foo/c", "update", false),
            ],
        );
    }

    #[test]
    fn docs_priority_rules_table() {
        // Each row: two patterns; the second wins for the path.
        let cases: &[(&str, &str, &str)] = &[
            // first wildcard later wins: foo/a* over foo/+ ...
            ("secret/+", "secret/a*", "secret/ab"),
            ("secret/+/bar/baz", "secret/bar/+/baz", "secret/bar/bar/baz"),
            // no trailing glob wins over a trailing glob
            ("secret/+/ba*", "secret/+/bar", "secret/x/bar"),
            ("secret/*", "secret/+", "secret/x"),
            // fewer + segments win
            ("secret/+/+/baz", "secret/bar/+/baz", "secret/bar/x/baz"),
            // longer wins
            ("secret/+/bar/b*", "secret/+/bar/ba*", "secret/x/bar/baz"),
            // longest prefix among globs
            ("secret/*", "secret/foo*", "secret/foobar"),
        ];
        for (low, high, path) in cases {
            let acl = build(&[
                &format!(r#"path "{low}" {{ capabilities = ["read"] }}"#),
                &format!(r#"path "{high}" {{ capabilities = ["update"] }}"#),
            ]);
            assert!(
                acl.allows(path, Operation::Update, &Data::new(), false),
                "{high} should beat {low} for {path}"
            );
            assert!(
                !acl.allows(path, Operation::Read, &Data::new(), false),
                "{low} must not apply to {path} next to {high}"
            );
        }
    }

    #[test]
    fn docs_plus_segment_examples() {
        // "secret/+/teamb" matches secret/foo/teamb but not secret/foo/bar/teamb;
        // "secret/+/+/teamb*" with a trailing glob.
        let acl = build(&[
            r#"path "secret/+/teamb" { capabilities = ["read"] }"#,
            r#"path "secret/+/+/teamc*" { capabilities = ["read"] }"#,
            r#"path "+/x" { capabilities = ["read"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/foo/teamb", "read", true),
                ("secret/bar/teamb", "read", true),
                ("secret/foo/bar/teamb", "read", false),
                ("secret/teamb", "read", false),
                ("secret/foo/teamb/x", "read", false),
                ("secret/a/b/teamc", "read", true),
                ("secret/a/b/teamcool/more", "read", true),
                ("secret/a/teamc", "read", false),
                ("anything/x", "read", true),
                ("anything/y", "read", false),
            ],
        );
    }

    #[test]
    fn docs_glob_examples() {
        // "secret/foo*" matches secret/foo, secret/foobar, secret/foo/bar; "secret/foo" only
        // itself.
        let acl = build(&[
            r#"path "secret/foo*" { capabilities = ["read"] }"#,
            r#"path "secret/exact" { capabilities = ["read"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/foo", "read", true),
                ("secret/foobar", "read", true),
                ("secret/foo/bar", "read", true),
                ("secret/fo", "read", false),
                ("secret/exact", "read", true),
                ("secret/exact/more", "read", false),
                ("secret/exactly", "read", false),
            ],
        );
    }

    #[test]
    fn exact_match_beats_globs_and_list_matches_without_trailing_slash() {
        let acl = build(&[
            r#"path "secret/*" { capabilities = ["read"] }"#,
            r#"path "secret/+" { capabilities = ["read"] }"#,
            r#"path "secret/dir" { capabilities = ["list"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/dir", "list", true),
                ("secret/dir/", "list", true),
                ("secret/dir", "read", false),
                ("secret/dir/x", "read", true),
            ],
        );
        // A glob written for the folder matches the list path with its trailing slash.
        let acl2 = build(&[r#"path "kv/metadata/app" { capabilities = ["list"] }"#]);
        assert!(acl2.allows("kv/metadata/app/", Operation::List, &Data::new(), false));
        let acl3 = build(&[r#"path "kv/+/app" { capabilities = ["list"] }"#]);
        assert!(acl3.allows("kv/x/app/", Operation::List, &Data::new(), false));
    }

    #[test]
    fn same_pattern_across_policies_is_a_union_different_patterns_are_not() {
        let acl = build(&[
            r#"path "secret/*" { capabilities = ["read"] }"#,
            r#"path "secret/*" { capabilities = ["update"] }"#,
            r#"path "secret/foo" { capabilities = ["delete"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/bar", "read", true),
                ("secret/bar", "update", true),
                ("secret/foo", "delete", true),
                ("secret/foo", "read", false),
            ],
        );
    }

    #[test]
    fn deny_clears_every_other_capability_whichever_policy_comes_first() {
        for order in [[0, 1], [1, 0]] {
            let docs = [
                r#"path "secret/*" { capabilities = ["deny"] }"#,
                r#"path "secret/*" { capabilities = ["read", "sudo"] }"#,
            ];
            let acl = build(&[docs[order[0]], docs[order[1]]]);
            table(&acl, &[("secret/x", "read", false)]);
            assert_eq!(acl.capabilities("secret/x"), vec!["deny"]);
        }
        // A more specific deny overrides a broad grant.
        let acl = build(&[
            r#"path "secret/*" { capabilities = ["read"] }"#,
            r#"path "secret/super-secret" { capabilities = ["deny"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/super-secret", "read", false),
                ("secret/other", "read", true),
            ],
        );
    }

    #[test]
    fn create_and_update_are_distinct() {
        let acl = build(&[
            r#"path "secret/create-only" { capabilities = ["create"] }"#,
            r#"path "secret/update-only" { capabilities = ["update"] }"#,
        ]);
        table(
            &acl,
            &[
                ("secret/create-only", "create", true),
                ("secret/create-only", "update", false),
                ("secret/update-only", "update", true),
                ("secret/update-only", "create", false),
            ],
        );
    }

    #[test]
    fn sudo_is_needed_in_addition_on_root_protected_paths() {
        let acl = build(&[
            r#"path "sys/rotate" { capabilities = ["update"] }"#,
            r#"path "sys/audit/*" { capabilities = ["update", "sudo"] }"#,
            r#"path "sys/raw/*" { capabilities = ["sudo"] }"#,
        ]);
        let none = Data::new();
        assert!(acl.allows("sys/rotate", Operation::Update, &none, false));
        assert!(!acl.allows("sys/rotate", Operation::Update, &none, true));
        assert!(acl.allows("sys/audit/file", Operation::Update, &none, true));
        // sudo alone grants no operation.
        assert!(!acl.allows("sys/raw/x", Operation::Read, &none, true));
    }

    #[test]
    fn root_acl_allows_everything() {
        let root = Acl::root();
        assert!(root.is_root());
        assert!(root.allows("sys/rotate", Operation::Update, &Data::new(), true));
        assert_eq!(root.capabilities("anything"), vec!["root"]);
    }

    #[test]
    fn no_match_is_denied_and_reports_deny() {
        let acl = build(&[r#"path "secret/*" { capabilities = ["read"] }"#]);
        assert!(!acl.allows("other/x", Operation::Read, &Data::new(), false));
        assert_eq!(acl.capabilities("other/x"), vec!["deny"]);
        assert!(matches!(
            acl.check("other/x", Operation::Read, &Data::new(), false),
            Err(Error::PermissionDenied)
        ));
    }

    #[test]
    fn capabilities_are_sorted() {
        let acl = build(&[
            r#"path "secret/*" { capabilities = ["update", "read", "sudo", "create", "list", "delete", "patch"] }"#,
        ]);
        assert_eq!(
            acl.capabilities("secret/x"),
            vec![
                "create", "delete", "list", "patch", "read", "sudo", "update"
            ]
        );
    }

    #[test]
    fn docs_parameter_examples() {
        // From docs/concepts/policies "Parameter constraints".
        let acl = build(&[
            r#"path "secret/required" {
                 capabilities = ["create"]
                 required_parameters = ["bar", "baz"]
               }"#,
            r#"path "secret/allowed-any-bar" {
                 capabilities = ["create"]
                 allowed_parameters = { "bar" = [] }
               }"#,
            r#"path "secret/allowed-values" {
                 capabilities = ["create"]
                 allowed_parameters = { "bar" = ["zip", "zap"], "*" = [] }
               }"#,
            r#"path "secret/denied-bar" {
                 capabilities = ["create"]
                 denied_parameters = { "bar" = [] }
               }"#,
            r#"path "secret/denied-values" {
                 capabilities = ["create"]
                 denied_parameters = { "bar" = ["zip", "zap"] }
               }"#,
            r#"path "secret/denied-all" {
                 capabilities = ["create"]
                 denied_parameters = { "*" = [] }
               }"#,
            r#"path "secret/globbed" {
                 capabilities = ["create"]
                 allowed_parameters = { "bar" = ["foo-*", "*-suffix", "*mid*"] }
               }"#,
            r#"path "secret/denied-wins" {
                 capabilities = ["create"]
                 allowed_parameters = { "bar" = [] }
                 denied_parameters = { "bar" = ["zip"] }
               }"#,
        ]);
        let rows: &[(&str, serde_json::Value, bool)] = &[
            (
                "secret/required",
                serde_json::json!({"bar": "x", "baz": "y"}),
                true,
            ),
            ("secret/required", serde_json::json!({"bar": "x"}), false),
            ("secret/required", serde_json::json!({}), false),
            (
                "secret/allowed-any-bar",
                serde_json::json!({"bar": "anything"}),
                true,
            ),
            (
                "secret/allowed-any-bar",
                serde_json::json!({"bar": "x", "other": 1}),
                false,
            ),
            ("secret/allowed-any-bar", serde_json::json!({}), true),
            (
                "secret/allowed-values",
                serde_json::json!({"bar": "zip"}),
                true,
            ),
            (
                "secret/allowed-values",
                serde_json::json!({"bar": "zop"}),
                false,
            ),
            (
                "secret/allowed-values",
                serde_json::json!({"bar": "zap", "x": 1}),
                true,
            ),
            ("secret/denied-bar", serde_json::json!({"bar": "x"}), false),
            ("secret/denied-bar", serde_json::json!({"BAR": "x"}), false),
            ("secret/denied-bar", serde_json::json!({"baz": "x"}), true),
            (
                "secret/denied-values",
                serde_json::json!({"bar": "zip"}),
                false,
            ),
            (
                "secret/denied-values",
                serde_json::json!({"bar": "zop"}),
                true,
            ),
            ("secret/denied-all", serde_json::json!({"x": 1}), false),
            ("secret/denied-all", serde_json::json!({}), true),
            ("secret/globbed", serde_json::json!({"bar": "foo-1"}), true),
            (
                "secret/globbed",
                serde_json::json!({"bar": "a-suffix"}),
                true,
            ),
            ("secret/globbed", serde_json::json!({"bar": "amidb"}), true),
            ("secret/globbed", serde_json::json!({"bar": "nope"}), false),
            (
                "secret/denied-wins",
                serde_json::json!({"bar": "zip"}),
                false,
            ),
            (
                "secret/denied-wins",
                serde_json::json!({"bar": "zap"}),
                true,
            ),
        ];
        for (path, body, expected) in rows {
            let got = acl.allows(path, Operation::Create, &data(body.clone()), false);
            assert_eq!(got, *expected, "{path} {body}");
        }
        // Parameters are not checked on delete or list.
        assert!(acl.allows(
            "secret/required",
            Operation::Create,
            &data(serde_json::json!({"bar":1,"baz":2})),
            false
        ));
    }

    #[test]
    fn parameter_lists_merge_across_policies_with_empty_list_winning() {
        let acl = build(&[
            r#"path "s/a" {
               capabilities = ["update"]
               allowed_parameters = { "k" = ["1"] } }"#,
            r#"path "s/a" {
               capabilities = ["update"]
               allowed_parameters = { "k" = ["2"] } }"#,
            r#"path "s/b" {
               capabilities = ["update"]
               allowed_parameters = { "k" = ["1"] } }"#,
            r#"path "s/b" {
               capabilities = ["update"]
               allowed_parameters = { "k" = [] } }"#,
        ]);
        let body = |v: &str| data(serde_json::json!({ "k": v }));
        assert!(acl.allows("s/a", Operation::Update, &body("1"), false));
        assert!(acl.allows("s/a", Operation::Update, &body("2"), false));
        assert!(!acl.allows("s/a", Operation::Update, &body("3"), false));
        assert!(acl.allows("s/b", Operation::Update, &body("3"), false));
    }

    #[test]
    fn wrapping_ttl_bounds_deny_unwrapped_requests() {
        let acl = build(&[r#"path "s/w" {
            capabilities = ["read"]
            max_wrapping_ttl = "1h"
        }"#]);
        assert!(!acl.allows("s/w", Operation::Read, &Data::new(), false));
    }

    #[test]
    fn wrapping_ttl_bounds_allow_wrapped_requests_within_them() {
        let acl = build(&[
            r#"path "s/both" { capabilities = ["read"]
                 min_wrapping_ttl = "1m"
                 max_wrapping_ttl = "1h" }"#,
            r#"path "s/min" { capabilities = ["read"]
                 min_wrapping_ttl = "1m" }"#,
            r#"path "s/none" { capabilities = ["read"] }"#,
        ]);
        let secs = |s: u64| Some(Duration::from_secs(s));
        for (path, ttl, allowed) in [
            ("s/both", secs(60), true),
            ("s/both", secs(3600), true),
            ("s/both", secs(59), false),
            ("s/both", secs(3601), false),
            ("s/both", None, false),
            ("s/min", secs(86_400), true),
            ("s/min", secs(0), false),
            ("s/none", None, true),
            ("s/none", secs(5), true),
        ] {
            let got = acl.allows_wrapped(path, Operation::Read, &Data::new(), false, ttl);
            assert_eq!(got, allowed, "{path} {ttl:?}");
        }
    }

    #[test]
    fn merged_wrapping_bounds_keep_the_lesser_and_crossed_bounds_deny() {
        let acl = build(&[
            r#"path "s/w" { capabilities = ["read"]
                 min_wrapping_ttl = "10m" }"#,
            r#"path "s/w" { capabilities = ["read"]
                 max_wrapping_ttl = "5m" }"#,
        ]);
        for secs in [60, 300, 600, 900] {
            let ttl = Some(Duration::from_secs(secs));
            assert!(
                !acl.allows_wrapped("s/w", Operation::Read, &Data::new(), false, ttl),
                "{secs}"
            );
        }
    }

    #[test]
    fn mfa_methods_of_the_governing_rule_merge_across_policies() {
        let acl = build(&[
            "path \"secret/foo\" {\n capabilities = [\"read\"]\n mfa_methods = [\"a\"]\n}\n\
             path \"secret/*\" { capabilities = [\"read\", \"list\"] }",
            "path \"secret/foo\" {\n capabilities = [\"update\"]\n mfa_methods = [\"b\", \"a\"]\n}",
        ]);
        assert_eq!(acl.mfa_methods("secret/foo", op("read")), ["a", "b"]);
        assert_eq!(acl.mfa_methods("secret/foo", op("update")), ["a", "b"]);
        assert!(acl.mfa_methods("secret/other", op("read")).is_empty());
        assert!(acl.mfa_methods("nowhere", op("read")).is_empty());
        assert!(Acl::root().mfa_methods("secret/foo", op("read")).is_empty());
        let denied = build(&[
            "path \"s/x\" {\n capabilities = [\"read\"]\n mfa_methods = [\"a\"]\n}",
            r#"path "s/x" { capabilities = ["deny"] }"#,
        ]);
        assert!(denied.mfa_methods("s/x", op("read")).is_empty());
    }

    #[test]
    fn templated_paths_resolve_against_the_identity_or_are_skipped() {
        let policy = parse(
            r#"path "identity/entity/id/{{identity.entity.id}}" { capabilities = ["read"] }
               path "secret/{{identity.entity.name}}/*" { capabilities = ["read"] }
               path "secret/{{identity.groups.names}}/*" { capabilities = ["read"] }"#,
        )
        .unwrap();
        let id = TemplateIdentity {
            entity_id: "e1".into(),
            entity_name: "alice".into(),
        };
        let acl = Acl::new([&policy], Some(&id));
        table(
            &acl,
            &[
                ("identity/entity/id/e1", "read", true),
                ("identity/entity/id/e2", "read", false),
                ("secret/alice/x", "read", true),
                ("secret/bob/x", "read", false),
            ],
        );
        let anonymous = Acl::new([&policy], None);
        table(&anonymous, &[("identity/entity/id/e1", "read", false)]);
    }
}
