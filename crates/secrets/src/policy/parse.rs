//! Parsing ACL policy documents (pure: no I/O).
//!
//! A document is HCL (`path "secret/*" { capabilities = ["read"] }`) or JSON
//! (`{"path": {"secret/*": {"capabilities": ["read"]}}}`), optionally base64-encoded (the
//! endpoint decodes that before calling [`parse`]). The rules follow Vault's
//! `vault/policy/policy.go`:
//!
//! - top-level keys: `name` and `path` only; path keys: `capabilities`, `policy` (the old
//!   `deny`/`read`/`write`/`sudo` shorthands), `allowed_parameters`, `denied_parameters`,
//!   `required_parameters`, `min_wrapping_ttl`, `max_wrapping_ttl`, `mfa_methods`,
//!   `control_group`, `comment`, `expiration`, `pagination_limit`,
//!   `list_scan_response_keys_filter_path` (the last few are accepted and ignored);
//! - a leading `/` is stripped; `+*` is forbidden; a path with a `+` segment keeps its trailing
//!   `*` (the matcher handles it), a plain path ending in `*` becomes a prefix rule;
//! - an unknown capability is an error; `deny` anywhere in the list leaves only `deny`;
//! - parameter names are lower-cased; `max_wrapping_ttl` may not be below `min_wrapping_ttl`;
//! - `mfa_methods` (a string or a list of method names) is kept for dispatch's MFA check.
//!
//! Invariant: every error message starts with `failed to parse policy: ` (Vault's wording), so
//! the endpoint can return it as a 400 as is.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// Capability bits (Vault's bitmap order).
pub(crate) const DENY: u32 = 1;
pub(crate) const CREATE: u32 = 1 << 1;
pub(crate) const READ: u32 = 1 << 2;
pub(crate) const UPDATE: u32 = 1 << 3;
pub(crate) const DELETE: u32 = 1 << 4;
pub(crate) const LIST: u32 = 1 << 5;
pub(crate) const SUDO: u32 = 1 << 6;
pub(crate) const PATCH: u32 = 1 << 7;
/// Vault 1.16+ event subscriptions; accepted so such policies load, never checked here.
pub(crate) const SUBSCRIBE: u32 = 1 << 8;

/// Capability names and bits, in the order Vault reports them before sorting.
pub(crate) const CAPABILITY_NAMES: &[(&str, u32)] = &[
    ("sudo", SUDO),
    ("read", READ),
    ("list", LIST),
    ("update", UPDATE),
    ("delete", DELETE),
    ("create", CREATE),
    ("patch", PATCH),
    ("subscribe", SUBSCRIBE),
];

/// A parsed ACL policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Policy {
    pub(crate) paths: Vec<PathRules>,
    /// Some path uses identity templating (`{{identity.entity.id}}`).
    pub(crate) templated: bool,
}

/// One `path "..." { ... }` stanza.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PathRules {
    /// The path as written (minus a leading `/`), before templating and glob stripping.
    pub(crate) raw_path: String,
    pub(crate) permissions: Permissions,
}

/// What a path stanza grants; also the merged value in an [`super::acl::Acl`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Permissions {
    pub(crate) capabilities: u32,
    pub(crate) min_wrapping_ttl: Duration,
    pub(crate) max_wrapping_ttl: Duration,
    /// `None`: not given. Keys are lower-cased; an empty list allows any value.
    pub(crate) allowed_parameters: Option<BTreeMap<String, Vec<Value>>>,
    pub(crate) denied_parameters: Option<BTreeMap<String, Vec<Value>>>,
    pub(crate) required_parameters: Vec<String>,
    /// `mfa_methods`: MFA methods (by name) a request must satisfy on this path, each through
    /// the `X-Vault-MFA` header (`sys/mfa.rs`, checked by dispatch); empty: none.
    pub(crate) mfa_methods: Vec<String>,
}

/// How a (templated-and-resolved) policy path matches request paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathPattern {
    /// Without the trailing `*` for plain prefix rules; unchanged for `+` rules.
    pub(crate) path: String,
    pub(crate) is_prefix: bool,
    pub(crate) has_segment_wildcards: bool,
}

/// Classifies a policy path as Vault does (`parsePaths`).
pub(crate) fn classify(path: &str) -> Result<PathPattern, String> {
    let path = path.strip_prefix('/').unwrap_or(path);
    if path.contains("+*") {
        return Err(format!(
            "path {path:?}: invalid use of wildcards ('+*' is forbidden)"
        ));
    }
    let has_segment_wildcards = path == "+" || path.contains("/+") || path.starts_with("+/");
    if !has_segment_wildcards && let Some(stripped) = path.strip_suffix('*') {
        return Ok(PathPattern {
            path: stripped.to_owned(),
            is_prefix: true,
            has_segment_wildcards,
        });
    }
    Ok(PathPattern {
        path: path.to_owned(),
        is_prefix: false,
        has_segment_wildcards,
    })
}

/// Whether a policy path uses identity templating.
pub(crate) fn is_templated(path: &str) -> bool {
    path.contains("{{")
}

/// Parses an HCL or JSON policy document.
pub(crate) fn parse(raw: &str) -> Result<Policy, String> {
    parse_inner(raw).map_err(|err| format!("failed to parse policy: {err}"))
}

fn parse_inner(raw: &str) -> Result<Policy, String> {
    let stanzas = if raw.trim_start().starts_with('{') {
        json_stanzas(raw)?
    } else {
        hcl_stanzas(raw)?
    };
    let mut policy = Policy::default();
    for (key, body) in stanzas {
        let rules = path_rules(&key, &body)?;
        if is_templated(&rules.raw_path) {
            policy.templated = true;
        }
        policy.paths.push(rules);
    }
    Ok(policy)
}

type Stanza = (String, serde_json::Map<String, Value>);

fn json_stanzas(raw: &str) -> Result<Vec<Stanza>, String> {
    let doc: Value = serde_json::from_str(raw).map_err(|err| err.to_string())?;
    let Value::Object(top) = doc else {
        return Err("does not contain a root object".to_owned());
    };
    let mut out = Vec::new();
    for (key, value) in top {
        match key.as_str() {
            "name" => {}
            "path" => collect_json_paths(value, &mut out)?,
            other => return Err(format!("invalid key {other:?}")),
        }
    }
    Ok(out)
}

/// `"path"` is an object of path → body, or (HCL1 JSON) a list of such objects.
fn collect_json_paths(value: Value, out: &mut Vec<Stanza>) -> Result<(), String> {
    match value {
        Value::Object(paths) => {
            for (path, body) in paths {
                match body {
                    Value::Object(body) => out.push((path, body)),
                    Value::Array(items) => {
                        for item in items {
                            match item {
                                Value::Object(body) => out.push((path.clone(), body)),
                                _ => return Err(format!("path {path:?}: expected an object")),
                            }
                        }
                    }
                    _ => return Err(format!("path {path:?}: expected an object")),
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for item in items {
                collect_json_paths(item, out)?;
            }
            Ok(())
        }
        _ => Err("\"path\" must be an object".to_owned()),
    }
}

fn hcl_stanzas(raw: &str) -> Result<Vec<Stanza>, String> {
    // HCL1 (what Vault parses) accepts `path "a" { x = 1 }`-style one-liners that HCL2
    // rejects when a block holds a nested object or its `}` shares a line: retry with every
    // brace outside strings and comments on its own line.
    let body = match hcl::parse(raw) {
        Ok(body) => body,
        Err(err) => hcl::parse(&braces_on_own_lines(raw)).map_err(|_| err.to_string())?,
    };
    let mut out = Vec::new();
    for structure in body.into_iter() {
        match structure {
            hcl::Structure::Attribute(attr) => match attr.key.as_str() {
                "name" => {}
                "path" => {
                    // `path = { "secret/*" = { ... } }`
                    let value = hcl_value(&attr.expr)?;
                    collect_json_paths(value, &mut out)?;
                }
                other => return Err(format!("invalid key {other:?}")),
            },
            hcl::Structure::Block(block) => {
                if block.identifier.as_str() != "path" {
                    return Err(format!("invalid key {:?}", block.identifier.as_str()));
                }
                let [label] = block.labels.as_slice() else {
                    return Err("a path block needs exactly one label: path \"...\" { }".to_owned());
                };
                let key = label.as_str().to_owned();
                out.push((key, hcl_body(&block.body)?));
            }
        }
    }
    Ok(out)
}

/// Puts a newline after every `{` and before every `}` outside strings and comments.
fn braces_on_own_lines(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + 16);
    let mut chars = raw.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '#' => {
                out.push(c);
                for next in chars.by_ref() {
                    out.push(next);
                    if next == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                out.push(c);
                for next in chars.by_ref() {
                    out.push(next);
                    if next == '\n' {
                        break;
                    }
                }
            }
            '{' => out.push_str("{\n"),
            '}' => out.push_str("\n}"),
            _ => out.push(c),
        }
    }
    out
}

fn hcl_body(body: &hcl::Body) -> Result<serde_json::Map<String, Value>, String> {
    let mut map = serde_json::Map::new();
    for structure in body.iter() {
        match structure {
            hcl::Structure::Attribute(attr) => {
                map.insert(attr.key.as_str().to_owned(), hcl_value(&attr.expr)?);
            }
            hcl::Structure::Block(block) => {
                // HCL1-style nested object: `allowed_parameters { foo = [] }`.
                if !block.labels.is_empty() {
                    return Err(format!(
                        "unexpected labels on {:?}",
                        block.identifier.as_str()
                    ));
                }
                map.insert(
                    block.identifier.as_str().to_owned(),
                    Value::Object(hcl_body(&block.body)?),
                );
            }
        }
    }
    Ok(map)
}

fn hcl_value(expr: &hcl::Expression) -> Result<Value, String> {
    use hcl::Expression as E;
    Ok(match expr {
        E::Null => Value::Null,
        E::Bool(b) => Value::Bool(*b),
        E::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(f) = n.as_f64() {
                Value::from(f)
            } else {
                Value::String(n.to_string())
            }
        }
        E::String(s) => Value::String(s.clone()),
        E::TemplateExpr(template) => Value::String(template.to_string()),
        E::Array(items) => Value::Array(items.iter().map(hcl_value).collect::<Result<_, _>>()?),
        E::Object(object) => {
            let mut map = serde_json::Map::new();
            for (key, value) in object {
                let key = match key {
                    hcl::ObjectKey::Identifier(ident) => ident.as_str().to_owned(),
                    hcl::ObjectKey::Expression(expr) => match hcl_value(expr)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    },
                    _ => return Err("unsupported object key".to_owned()),
                };
                map.insert(key, hcl_value(value)?);
            }
            Value::Object(map)
        }
        E::Parenthesis(inner) => hcl_value(inner)?,
        // A bare identifier (`policy = read`) reads as its name, as HCL1 did.
        E::Variable(var) => Value::String(var.to_string()),
        _ => return Err("unsupported expression (only literals are allowed)".to_owned()),
    })
}

const PATH_KEYS: &[&str] = &[
    "comment",
    "policy",
    "capabilities",
    "allowed_parameters",
    "denied_parameters",
    "required_parameters",
    "min_wrapping_ttl",
    "max_wrapping_ttl",
    "mfa_methods",
    "pagination_limit",
    "expiration",
    "list_scan_response_keys_filter_path",
    "control_group",
];

fn path_rules(key: &str, body: &serde_json::Map<String, Value>) -> Result<PathRules, String> {
    for name in body.keys() {
        if !PATH_KEYS.contains(&name.as_str()) {
            return Err(format!("path {key:?}: invalid key {name:?}"));
        }
    }
    let raw_path = key.strip_prefix('/').unwrap_or(key).to_owned();
    // Validate the shape now (templated paths are re-checked once resolved).
    classify(&raw_path)?;

    let mut capabilities: Vec<String> = string_list(body.get("capabilities"))
        .map_err(|why| format!("path {key:?}: capabilities: {why}"))?;
    if let Some(old) = body.get("policy").filter(|v| !v.is_null()) {
        let old = old
            .as_str()
            .ok_or_else(|| format!("path {key:?}: policy must be a string"))?;
        let implied: &[&str] = match old {
            "" => &[],
            "deny" => &["deny"],
            "read" => &["read", "list"],
            "write" => &["create", "read", "update", "delete", "list"],
            "sudo" => &["create", "read", "update", "delete", "list", "sudo"],
            other => return Err(format!("path {key:?}: invalid policy {other:?}")),
        };
        if old == "deny" {
            capabilities = vec!["deny".to_owned()];
        } else {
            capabilities.extend(implied.iter().map(|s| (*s).to_owned()));
        }
    }

    let mut permissions = Permissions::default();
    for capability in &capabilities {
        if capability == "deny" {
            permissions.capabilities = DENY;
            return Ok(PathRules {
                raw_path,
                permissions,
            });
        }
        let bit = CAPABILITY_NAMES
            .iter()
            .find(|(name, _)| name == capability)
            .map(|(_, bit)| *bit)
            .ok_or_else(|| format!("path {key:?}: invalid capability {capability:?}"))?;
        permissions.capabilities |= bit;
    }

    permissions.allowed_parameters = parameter_map(body.get("allowed_parameters"))
        .map_err(|why| format!("path {key:?}: allowed_parameters: {why}"))?;
    permissions.denied_parameters = parameter_map(body.get("denied_parameters"))
        .map_err(|why| format!("path {key:?}: denied_parameters: {why}"))?;
    permissions.required_parameters = string_list(body.get("required_parameters"))
        .map_err(|why| format!("path {key:?}: required_parameters: {why}"))?;
    for method in string_list(body.get("mfa_methods"))
        .map_err(|why| format!("path {key:?}: mfa_methods: {why}"))?
    {
        if !permissions.mfa_methods.contains(&method) {
            permissions.mfa_methods.push(method);
        }
    }
    if let Some(ttl) = duration(body.get("min_wrapping_ttl"))
        .map_err(|why| format!("error parsing min_wrapping_ttl: {why}"))?
    {
        permissions.min_wrapping_ttl = ttl;
    }
    if let Some(ttl) = duration(body.get("max_wrapping_ttl"))
        .map_err(|why| format!("error parsing max_wrapping_ttl: {why}"))?
    {
        permissions.max_wrapping_ttl = ttl;
    }
    if !permissions.min_wrapping_ttl.is_zero()
        && !permissions.max_wrapping_ttl.is_zero()
        && permissions.max_wrapping_ttl < permissions.min_wrapping_ttl
    {
        return Err("max_wrapping_ttl cannot be less than min_wrapping_ttl".to_owned());
    }
    Ok(PathRules {
        raw_path,
        permissions,
    })
}

fn string_list(value: Option<&Value>) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("expected strings, got {other}")),
            })
            .collect(),
        Some(other) => Err(format!("expected a list of strings, got {other}")),
    }
}

fn parameter_map(value: Option<&Value>) -> Result<Option<BTreeMap<String, Vec<Value>>>, String> {
    let object = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object.clone(),
        // HCL1 JSON lists of objects: merge them.
        Some(Value::Array(items)) => {
            let mut merged = serde_json::Map::new();
            for item in items {
                let Value::Object(object) = item else {
                    return Err("expected an object".to_owned());
                };
                merged.extend(object.clone());
            }
            merged
        }
        Some(other) => return Err(format!("expected an object, got {other}")),
    };
    let mut out = BTreeMap::new();
    for (name, values) in object {
        let values = match values {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            single => vec![single],
        };
        out.insert(name.to_lowercase(), values);
    }
    Ok(Some(out))
}

fn duration(value: Option<&Value>) -> Result<Option<Duration>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|secs| Some(Duration::from_secs(secs)))
            .ok_or_else(|| format!("invalid duration {n}")),
        Some(Value::String(s)) => secrets_sdk::fields::parse_duration(s).map(Some),
        Some(other) => Err(format!("invalid duration {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hcl_path_with_every_option_parses() {
        let policy = parse(
            r#"
            # comment
            path "secret/foo" {
              capabilities = ["create", "read", "update", "patch", "delete", "list", "sudo"]
              required_parameters = ["bar"]
              allowed_parameters = {
                "Bar" = ["zip", "zap*"]
                "*" = []
              }
              denied_parameters = { "baz" = [] }
              min_wrapping_ttl = "1s"
              max_wrapping_ttl = 90
            }
            "#,
        )
        .unwrap();
        assert_eq!(policy.paths.len(), 1);
        let rules = &policy.paths[0];
        assert_eq!(rules.raw_path, "secret/foo");
        let p = &rules.permissions;
        assert_eq!(
            p.capabilities,
            CREATE | READ | UPDATE | PATCH | DELETE | LIST | SUDO
        );
        assert_eq!(p.required_parameters, vec!["bar".to_owned()]);
        let allowed = p.allowed_parameters.as_ref().unwrap();
        assert_eq!(
            allowed["bar"],
            vec![Value::from("zip"), Value::from("zap*")]
        );
        assert!(allowed["*"].is_empty());
        assert!(p.denied_parameters.as_ref().unwrap()["baz"].is_empty());
        assert_eq!(p.min_wrapping_ttl, Duration::from_secs(1));
        assert_eq!(p.max_wrapping_ttl, Duration::from_secs(90));
    }

    #[test]
    fn json_policy_parses_like_hcl() {
        let json = parse(r#"{"path": {"secret/*": {"capabilities": ["read", "list"]}, "sys/x": {"policy": "write"}}}"#).unwrap();
        let hcl = parse(
            r#"path "secret/*" { capabilities = ["read", "list"] }
               path "sys/x" { policy = "write" }"#,
        )
        .unwrap();
        assert_eq!(json, hcl);
        assert_eq!(
            json.paths[1].permissions.capabilities,
            CREATE | READ | UPDATE | DELETE | LIST
        );
    }

    #[test]
    fn deny_anywhere_leaves_only_deny() {
        let policy = parse(r#"path "a" { capabilities = ["read", "deny", "sudo"] }"#).unwrap();
        assert_eq!(policy.paths[0].permissions.capabilities, DENY);
    }

    #[test]
    fn bad_documents_are_rejected_with_vaults_prefix() {
        for (doc, needle) in [
            (
                r#"path "a" { capabilities = ["reed"] }"#,
                "invalid capability \"reed\"",
            ),
            (
                "path \"a\" {\n capabilities = [\"read\"]\n bogus = 1\n}",
                "invalid key \"bogus\"",
            ),
            (
                r#"paths "a" { capabilities = ["read"] }"#,
                "invalid key \"paths\"",
            ),
            (
                r#"path "a/+*" { capabilities = ["read"] }"#,
                "'+*' is forbidden",
            ),
            (
                r#"path "a" { policy = "admin" }"#,
                "invalid policy \"admin\"",
            ),
            (r#"path "a" { capabilities = ["read"] "#, ""),
            (r#"{"path": 3}"#, ""),
            (
                r#"path "a" {
                   capabilities = ["read"]
                   min_wrapping_ttl = "10s"
                   max_wrapping_ttl = "5s" }"#,
                "max_wrapping_ttl cannot be less than min_wrapping_ttl",
            ),
        ] {
            let err = parse(doc).unwrap_err();
            assert!(err.starts_with("failed to parse policy: "), "{err}");
            assert!(err.contains(needle), "{doc}: {err}");
        }
    }

    #[test]
    fn hcl1_one_liners_parse() {
        let policy = parse(
            r#"path "s/a" { capabilities = ["update"]
               allowed_parameters = { "k" = ["1"] } }
               path "s/b" { policy = "read" }"#,
        )
        .unwrap();
        assert_eq!(policy.paths.len(), 2);
        assert_eq!(policy.paths[1].permissions.capabilities, READ | LIST);
    }

    #[test]
    fn empty_document_is_an_empty_policy() {
        assert_eq!(parse("").unwrap(), Policy::default());
        assert_eq!(parse("# nothing\n").unwrap(), Policy::default());
    }

    #[test]
    fn classify_follows_vaults_glob_and_segment_rules() {
        let p = classify("/secret/foo*").unwrap();
        assert_eq!(
            (p.path.as_str(), p.is_prefix, p.has_segment_wildcards),
            ("secret/foo", true, false)
        );
        let p = classify("secret/+/bar*").unwrap();
        assert_eq!(
            (p.path.as_str(), p.is_prefix, p.has_segment_wildcards),
            ("secret/+/bar*", false, true)
        );
        let p = classify("+").unwrap();
        assert!(p.has_segment_wildcards);
        let p = classify("+/x").unwrap();
        assert!(p.has_segment_wildcards);
        let p = classify("secret/exact").unwrap();
        assert_eq!((p.is_prefix, p.has_segment_wildcards), (false, false));
    }

    #[test]
    fn mfa_methods_are_kept_in_order_without_duplicates() {
        let policy = parse(
            r#"path "secret/foo" {
                 capabilities = ["read"]
                 mfa_methods  = ["my_totp", "other", "my_totp"]
               }
               path "secret/bar" {
                 capabilities = ["read"]
                 mfa_methods = "one"
               }"#,
        )
        .unwrap();
        assert_eq!(
            policy.paths[0].permissions.mfa_methods,
            ["my_totp", "other"]
        );
        assert_eq!(policy.paths[1].permissions.mfa_methods, ["one"]);
        let json =
            parse(r#"{"path": {"a": {"capabilities": ["read"], "mfa_methods": ["m"]}}}"#).unwrap();
        assert_eq!(json.paths[0].permissions.mfa_methods, ["m"]);
        let err =
            parse("path \"a\" {\n capabilities = [\"read\"]\n mfa_methods = [1]\n}").unwrap_err();
        assert!(err.contains("mfa_methods"), "{err}");
    }

    #[test]
    fn templated_paths_are_flagged() {
        let policy = parse(
            r#"path "identity/entity/id/{{identity.entity.id}}" { capabilities = ["read"] }"#,
        )
        .unwrap();
        assert!(policy.templated);
    }
}
