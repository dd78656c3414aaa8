//! ACL rules: parsing Consul policy rules (HCL or JSON) and deciding access. Pure: no I/O.
//!
//! Where it sits: a leaf (it imports nothing else from the crate). `acl/policy.rs` calls
//! [`parse`] to validate a policy's `Rules` before storing it; `domain/acl.rs` stores each token
//! with its policies' rules already parsed and merged ([`merge`], kept in `store/acl.rs`'s
//! `TokenRecord`); the `acl::Authz` extractor builds a [`RuleSet`] from them per request and
//! asks [`RuleSet::allows`].
//!
//! Syntax (Consul's): blocks `session "name" { policy = "write" }` and their `_prefix` forms for
//! `session`, `key`, `node`, `agent` and `service`, with `policy` one of `read`, `write`, `deny`
//! (`key` and `key_prefix` also accept `list`, which grants what `read` grants here: listing and
//! reading). The same rules in Consul's JSON form (`{"key_prefix": {"": {"policy": "read"}}}`),
//! and a JSON string holding either form (py-consul sends `json.dumps(rules)`), are accepted.
//! Consul's other rule kinds (`acl`, `operator`, `keyring`, `mesh`, `peering`, `event`, `query`,
//! `identity` and their prefixes) are validated and kept in the stored text but grant nothing
//! here: those APIs do not exist in cairn. Anything else is an error, so a typo such as
//! `key_prefx` is reported instead of silently granting nothing.
//!
//! Evaluation, for a resource kind and a name:
//! 1. an exact rule (`key "a/b"`) for the name beats every prefix rule;
//! 2. otherwise the longest matching prefix rule (`key_prefix "a/"`) wins;
//! 3. with no matching rule the default policy decides (deny unless ACLs are configured with
//!    `default_policy = "allow"`, which allows read and write, as Consul's `allow`).
//!
//! `write` implies `read`; `deny` refuses both. When one token's policies (or one policy) hold
//! several rules for the same kind, exactness and name, they merge by Consul's precedence
//! (`takesPrecedenceOver` in Consul's `acl/policy.go`): `deny` wins, then the most permissive
//! (`write` over `list` over `read`). So deny always wins at the same specificity, and a more
//! specific rule still beats a less specific one whatever their policies.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The kinds of resource a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    Session,
    Key,
    Node,
    Agent,
    Service,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Session => "session",
            Resource::Key => "key",
            Resource::Node => "node",
            Resource::Agent => "agent",
            Resource::Service => "service",
        }
    }
}

/// What a request wants to do to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// A rule's policy. Consul's `list` is stored as [`Policy::Read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Policy {
    Read,
    Write,
    Deny,
}

impl Policy {
    /// Whether this policy grants `access`.
    pub(crate) fn permits(self, access: Access) -> bool {
        match (self, access) {
            (Policy::Deny, _) => false,
            (Policy::Read, Access::Read) | (Policy::Write, _) => true,
            (Policy::Read, Access::Write) => false,
        }
    }

    /// Consul's precedence for two rules at the same specificity: deny, then write, then read.
    fn merge(self, other: Policy) -> Policy {
        match (self, other) {
            (Policy::Deny, _) | (_, Policy::Deny) => Policy::Deny,
            (Policy::Write, _) | (_, Policy::Write) => Policy::Write,
            (Policy::Read, Policy::Read) => Policy::Read,
        }
    }
}

/// One rule: `key_prefix "a/" { policy = "read" }` is `{Key, prefix: true, "a/", Read}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub(crate) resource: Resource,
    pub(crate) prefix: bool,
    pub(crate) name: String,
    pub(crate) policy: Policy,
}

impl Rule {
    #[cfg(test)]
    fn new(resource: Resource, prefix: bool, name: &str, policy: Policy) -> Rule {
        Rule {
            resource,
            prefix,
            name: name.to_owned(),
            policy,
        }
    }
}

/// Merges rules (of one policy or of several) so that each (kind, exactness, name) appears once,
/// by Consul's precedence; the order of the result is stable (sorted).
pub(crate) fn merge(rules: impl IntoIterator<Item = Rule>) -> Vec<Rule> {
    let mut merged: HashMap<(Resource, bool, String), Policy> = HashMap::new();
    for rule in rules {
        merged
            .entry((rule.resource, rule.prefix, rule.name))
            .and_modify(|policy| *policy = policy.merge(rule.policy))
            .or_insert(rule.policy);
    }
    let mut rules: Vec<Rule> = merged
        .into_iter()
        .map(|((resource, prefix, name), policy)| Rule {
            resource,
            prefix,
            name,
            policy,
        })
        .collect();
    rules.sort_by(|a, b| {
        (a.resource.name(), a.prefix, &a.name).cmp(&(b.resource.name(), b.prefix, &b.name))
    });
    rules
}

/// The rules of one kind, indexed for lookups.
#[derive(Debug, Clone, Default)]
struct Table {
    exact: HashMap<String, Policy>,
    /// Longest prefix first.
    prefixes: Vec<(String, Policy)>,
}

impl Table {
    fn lookup(&self, name: &str) -> Option<Policy> {
        if let Some(policy) = self.exact.get(name) {
            return Some(*policy);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            .map(|(_, policy)| *policy)
    }
}

/// A token's rules, ready to answer questions.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleSet {
    tables: HashMap<Resource, Table>,
}

impl RuleSet {
    /// Indexes `rules`, merging duplicates by Consul's precedence.
    pub(crate) fn new<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> RuleSet {
        let mut tables: HashMap<Resource, Table> = HashMap::new();
        for rule in rules {
            let table = tables.entry(rule.resource).or_default();
            if rule.prefix {
                match table
                    .prefixes
                    .iter_mut()
                    .find(|(name, _)| *name == rule.name)
                {
                    Some((_, policy)) => *policy = policy.merge(rule.policy),
                    None => table.prefixes.push((rule.name.clone(), rule.policy)),
                }
            } else {
                table
                    .exact
                    .entry(rule.name.clone())
                    .and_modify(|policy| *policy = policy.merge(rule.policy))
                    .or_insert(rule.policy);
            }
        }
        for table in tables.values_mut() {
            table
                .prefixes
                .sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        }
        RuleSet { tables }
    }

    /// The policy of the most specific rule matching `name`, if any.
    pub(crate) fn lookup(&self, resource: Resource, name: &str) -> Option<Policy> {
        self.tables.get(&resource)?.lookup(name)
    }

    /// Whether `access` on `name` is allowed; `default_allow` decides when no rule matches.
    pub(crate) fn allows(
        &self,
        resource: Resource,
        name: &str,
        access: Access,
        default_allow: bool,
    ) -> bool {
        match self.lookup(resource, name) {
            Some(policy) => policy.permits(access),
            None => default_allow,
        }
    }

    /// Whether `access` is allowed on `prefix` and on everything under it: the prefix's own
    /// decision allows it and no more specific rule under the prefix refuses it (Consul's
    /// `KeyWritePrefix`, for recursive deletes).
    pub(crate) fn allows_subtree(
        &self,
        resource: Resource,
        prefix: &str,
        access: Access,
        default_allow: bool,
    ) -> bool {
        if !self.allows(resource, prefix, access, default_allow) {
            return false;
        }
        let Some(table) = self.tables.get(&resource) else {
            return true;
        };
        let beneath = |name: &str| name.len() > prefix.len() && name.starts_with(prefix);
        table
            .exact
            .iter()
            .map(|(name, policy)| (name.as_str(), *policy))
            .chain(
                table
                    .prefixes
                    .iter()
                    .map(|(name, policy)| (name.as_str(), *policy)),
            )
            .filter(|(name, _)| beneath(name))
            .all(|(_, policy)| policy.permits(access))
    }
}

/// The rule kinds that grant something here, by block name.
fn block_kind(name: &str) -> Option<(Resource, bool)> {
    Some(match name {
        "session" => (Resource::Session, false),
        "session_prefix" => (Resource::Session, true),
        "key" => (Resource::Key, false),
        "key_prefix" => (Resource::Key, true),
        "node" => (Resource::Node, false),
        "node_prefix" => (Resource::Node, true),
        "agent" => (Resource::Agent, false),
        "agent_prefix" => (Resource::Agent, true),
        "service" => (Resource::Service, false),
        "service_prefix" => (Resource::Service, true),
        _ => return None,
    })
}

/// Consul block kinds that are validated but grant nothing in cairn.
const IGNORED_BLOCKS: &[&str] = &[
    "event",
    "event_prefix",
    "query",
    "query_prefix",
    "identity",
    "identity_prefix",
];

/// Consul's single-valued rules (`operator = "read"`), validated but granting nothing here.
const IGNORED_SCALARS: &[&str] = &["acl", "operator", "keyring", "mesh", "peering"];

/// What a block body may hold, besides `policy`.
fn allows_intentions(kind: &str) -> bool {
    matches!(
        kind,
        "service" | "service_prefix" | "identity" | "identity_prefix"
    )
}

/// Parses a policy's rules; the error is a client-facing detail (the caller prefixes it with
/// `Failed to parse policy: `). An empty text is an empty policy.
pub(crate) fn parse(source: &str) -> Result<Vec<Rule>, String> {
    parse_nested(source, 0)
}

fn parse_nested(source: &str, depth: u8) -> Result<Vec<Rule>, String> {
    let trimmed = source.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let mut rules = Vec::new();
    if trimmed.starts_with('{') {
        let value: serde_json::Value =
            serde_json::from_str(trimmed).map_err(|err| format!("invalid JSON: {err}"))?;
        parse_json(&value, &mut rules)?;
    } else if trimmed.starts_with('"') && depth == 0 {
        // A JSON string holding the rules (py-consul's `json.dumps` of an HCL text).
        let inner: String =
            serde_json::from_str(trimmed).map_err(|err| format!("invalid JSON string: {err}"))?;
        return parse_nested(&inner, depth + 1);
    } else {
        let body = hcl::parse(source).map_err(hcl_error)?;
        parse_hcl(&body, &mut rules)?;
    }
    Ok(rules)
}

fn hcl_error(err: hcl::Error) -> String {
    match err {
        hcl::Error::Parse(err) => format!(
            "line {}, column {}: {}",
            err.location().line(),
            err.location().column(),
            err.message()
        ),
        other => other.to_string(),
    }
}

fn parse_hcl(body: &hcl::Body, rules: &mut Vec<Rule>) -> Result<(), String> {
    for structure in body.iter() {
        match structure {
            hcl::Structure::Attribute(attribute) => {
                let key = attribute.key.as_str();
                if IGNORED_SCALARS.contains(&key) {
                    let value = hcl_string(&attribute.expr)
                        .ok_or_else(|| format!("{key}: the policy must be a quoted string"))?;
                    check_policy(key, None, value)?;
                } else if block_kind(key).is_some() || IGNORED_BLOCKS.contains(&key) {
                    return Err(format!(
                        "{key} must be a block with a name, as in {key} \"name\" {{ policy = \"read\" }}"
                    ));
                } else {
                    return Err(unknown_kind(key));
                }
            }
            hcl::Structure::Block(block) => {
                let kind = block.identifier.as_str();
                if block_kind(kind).is_none() && !IGNORED_BLOCKS.contains(&kind) {
                    if IGNORED_SCALARS.contains(&kind) {
                        return Err(format!(
                            "{kind} takes a policy directly, as in {kind} = \"read\""
                        ));
                    }
                    return Err(unknown_kind(kind));
                }
                let [label] = block.labels.as_slice() else {
                    return Err(format!(
                        "{kind} needs exactly one name, as in {kind} \"name\" {{ policy = \"read\" }}"
                    ));
                };
                let name = label.as_str();
                let mut policy = None;
                for item in block.body.iter() {
                    let hcl::Structure::Attribute(attribute) = item else {
                        return Err(format!("{kind} {name:?}: unexpected nested block"));
                    };
                    let field = attribute.key.as_str();
                    let value = hcl_string(&attribute.expr).ok_or_else(|| {
                        format!("{kind} {name:?}: {field} must be a quoted string")
                    })?;
                    block_field(kind, name, field, value, &mut policy)?;
                }
                push_rule(kind, name, policy, rules)?;
            }
        }
    }
    Ok(())
}

fn hcl_string(expr: &hcl::Expression) -> Option<&str> {
    match expr {
        hcl::Expression::String(value) => Some(value),
        _ => None,
    }
}

fn parse_json(value: &serde_json::Value, rules: &mut Vec<Rule>) -> Result<(), String> {
    let object = value
        .as_object()
        .ok_or_else(|| "the rules must be a JSON object".to_owned())?;
    for (kind, value) in object {
        let kind = kind.as_str();
        if IGNORED_SCALARS.contains(&kind) {
            let policy = value
                .as_str()
                .ok_or_else(|| format!("{kind}: the policy must be a string"))?;
            check_policy(kind, None, policy)?;
            continue;
        }
        if block_kind(kind).is_none() && !IGNORED_BLOCKS.contains(&kind) {
            return Err(unknown_kind(kind));
        }
        // HCL's JSON form: {"key": {"name": {...}}} or {"key": [{"name": {...}}, ...]}.
        for named in one_or_many(value) {
            let named = named
                .as_object()
                .ok_or_else(|| format!("{kind} must map names to rule bodies"))?;
            for (name, body) in named {
                let mut policy = None;
                for body in one_or_many(body) {
                    let body = body
                        .as_object()
                        .ok_or_else(|| format!("{kind} {name:?}: the rule must be an object"))?;
                    for (field, value) in body {
                        let value = value
                            .as_str()
                            .ok_or_else(|| format!("{kind} {name:?}: {field} must be a string"))?;
                        block_field(kind, name, field, value, &mut policy)?;
                    }
                }
                push_rule(kind, name, policy, rules)?;
            }
        }
    }
    Ok(())
}

fn one_or_many(value: &serde_json::Value) -> Vec<&serde_json::Value> {
    match value {
        serde_json::Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

fn unknown_kind(kind: &str) -> String {
    format!(
        "unknown rule {kind:?}: expected one of session, key, node, agent, service (or their \
         _prefix forms), event, query, identity (or their _prefix forms), acl, operator, \
         keyring, mesh or peering"
    )
}

/// Reads one field of a rule body into `policy`.
fn block_field<'a>(
    kind: &str,
    name: &str,
    field: &str,
    value: &'a str,
    policy: &mut Option<&'a str>,
) -> Result<(), String> {
    match field {
        "policy" => {
            check_policy(kind, Some(name), value)?;
            *policy = Some(value);
        }
        "intentions" if allows_intentions(kind) => {
            check_policy(kind, Some(name), value)?;
        }
        other => return Err(format!("{kind} {name:?}: unknown field {other:?}")),
    }
    Ok(())
}

/// Checks a policy value for `kind`; `list` only for keys.
fn check_policy(kind: &str, name: Option<&str>, value: &str) -> Result<Policy, String> {
    match value {
        "read" => Ok(Policy::Read),
        "write" => Ok(Policy::Write),
        "deny" => Ok(Policy::Deny),
        "list" if matches!(kind, "key" | "key_prefix") => Ok(Policy::Read),
        other => {
            let allowed = if matches!(kind, "key" | "key_prefix") {
                "read, write, list or deny"
            } else {
                "read, write or deny"
            };
            Err(match name {
                Some(name) => {
                    format!("Invalid {kind} policy {other:?} on {name:?}: must be {allowed}")
                }
                None => format!("Invalid {kind} policy {other:?}: must be {allowed}"),
            })
        }
    }
}

fn push_rule(
    kind: &str,
    name: &str,
    policy: Option<&str>,
    rules: &mut Vec<Rule>,
) -> Result<(), String> {
    let value = policy.ok_or_else(|| format!("{kind} {name:?}: missing policy"))?;
    let policy = check_policy(kind, Some(name), value)?;
    if let Some((resource, prefix)) = block_kind(kind) {
        rules.push(Rule {
            resource,
            prefix,
            name: name.to_owned(),
            policy,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Read, Write};
    use Policy::{Deny, Read as R, Write as W};
    use Resource::{Agent, Key, Node, Service, Session};

    fn rules(source: &str) -> Vec<Rule> {
        parse(source).unwrap_or_else(|err| panic!("{source:?}: {err}"))
    }

    #[test]
    fn parse_accepts_every_kind_in_hcl() {
        let table: &[(&str, Rule)] = &[
            (
                r#"session "n1" { policy = "write" }"#,
                Rule::new(Session, false, "n1", W),
            ),
            (
                r#"session_prefix "" { policy = "read" }"#,
                Rule::new(Session, true, "", R),
            ),
            (
                r#"key "a/b" { policy = "deny" }"#,
                Rule::new(Key, false, "a/b", Deny),
            ),
            (
                r#"key_prefix "a/" { policy = "list" }"#,
                Rule::new(Key, true, "a/", R),
            ),
            (
                r#"node "web" { policy = "read" }"#,
                Rule::new(Node, false, "web", R),
            ),
            (
                r#"node_prefix "w" { policy = "write" }"#,
                Rule::new(Node, true, "w", W),
            ),
            (
                r#"agent "n1" { policy = "read" }"#,
                Rule::new(Agent, false, "n1", R),
            ),
            (
                r#"agent_prefix "" { policy = "deny" }"#,
                Rule::new(Agent, true, "", Deny),
            ),
            (
                r#"service "db" { policy = "write" }"#,
                Rule::new(Service, false, "db", W),
            ),
            (
                "service_prefix \"\" {\n policy = \"read\"\n intentions = \"read\"\n}",
                Rule::new(Service, true, "", R),
            ),
            (
                r#"key foo { policy = "read" }"#,
                Rule::new(Key, false, "foo", R),
            ),
        ];
        for (source, expected) in table {
            assert_eq!(rules(source), vec![expected.clone()], "{source}");
        }
    }

    #[test]
    fn parse_accepts_the_json_forms() {
        let table: &[(&str, Vec<Rule>)] = &[
            (
                r#"{"key_prefix": {"": {"policy": "read"}}, "key": {"a": {"policy": "write"}}}"#,
                vec![Rule::new(Key, true, "", R), Rule::new(Key, false, "a", W)],
            ),
            (
                r#"{"session": [{"n1": {"policy": "write"}}, {"n2": [{"policy": "deny"}]}]}"#,
                vec![
                    Rule::new(Session, false, "n1", W),
                    Rule::new(Session, false, "n2", Deny),
                ],
            ),
            (r#"{"operator": "read"}"#, vec![]),
            (
                r#""key \"x\" { policy = \"read\" }""#,
                vec![Rule::new(Key, false, "x", R)],
            ),
        ];
        for (source, expected) in table {
            assert_eq!(merge(rules(source)), merge(expected.clone()), "{source}");
        }
    }

    #[test]
    fn parse_validates_but_ignores_consul_kinds_cairn_lacks() {
        assert!(rules("operator = \"read\"\nevent \"x\" { policy = \"write\" }").is_empty());
    }

    #[test]
    fn parse_rejects_bad_rules_with_a_reason() {
        let table: &[(&str, &str)] = &[
            (
                r#"key "a" { policy = "admin" }"#,
                "Invalid key policy \"admin\"",
            ),
            (
                r#"node "a" { policy = "list" }"#,
                "Invalid node policy \"list\"",
            ),
            (
                r#"key_prefx "a" { policy = "read" }"#,
                "unknown rule \"key_prefx\"",
            ),
            (r#"key "a" { }"#, "missing policy"),
            (r#"key "a" { policy = read }"#, "must be a quoted string"),
            (r#"key "a" "b" { policy = "read" }"#, "exactly one name"),
            (r#"key { policy = "read" }"#, "exactly one name"),
            (r#"key "a" { policy = "read" "#, "line 1"),
            (r#"key "a" { poilcy = "read" }"#, "unknown field \"poilcy\""),
            (
                r#"key "a" { intentions = "read" }"#,
                "unknown field \"intentions\"",
            ),
            (r#"operator = "admin""#, "Invalid operator policy"),
            (r#"key = "read""#, "must be a block"),
            (
                r#"namespace "a" { policy = "read" }"#,
                "unknown rule \"namespace\"",
            ),
            (r#"{"key": {"a": {"policy": 1}}}"#, "must be a string"),
            (r#"{"key": "#, "invalid JSON"),
            (r#"{"nope": {}}"#, "unknown rule \"nope\""),
        ];
        for (source, expected) in table {
            let err = parse(source).expect_err(source);
            assert!(err.contains(expected), "{source}: {err}");
        }
    }

    #[test]
    fn parse_of_an_empty_text_is_an_empty_policy() {
        assert!(rules("").is_empty());
        assert!(rules("  \n# only a comment\n").is_empty());
    }

    /// (rules, resource, name, access, default allow, expected).
    type Case = (&'static str, Resource, &'static str, Access, bool, bool);

    #[test]
    fn evaluation_follows_consul_precedence() {
        let cases: &[Case] = &[
            // No rule: the default decides.
            ("", Key, "a", Read, false, false),
            ("", Key, "a", Write, true, true),
            // Write implies read; read does not imply write.
            (
                r#"key "a" { policy = "write" }"#,
                Key,
                "a",
                Read,
                false,
                true,
            ),
            (
                r#"key "a" { policy = "read" }"#,
                Key,
                "a",
                Write,
                false,
                false,
            ),
            // Deny refuses even with an allow default.
            (
                r#"key "a" { policy = "deny" }"#,
                Key,
                "a",
                Read,
                true,
                false,
            ),
            // An exact rule only matches its own name.
            (
                r#"key "a" { policy = "write" }"#,
                Key,
                "ab",
                Read,
                false,
                false,
            ),
            // Exact beats prefix, whichever is more permissive.
            (
                "key_prefix \"a\" { policy = \"write\" }\nkey \"ab\" { policy = \"deny\" }",
                Key,
                "ab",
                Read,
                false,
                false,
            ),
            (
                "key_prefix \"ab\" { policy = \"deny\" }\nkey \"ab\" { policy = \"read\" }",
                Key,
                "ab",
                Read,
                false,
                true,
            ),
            // The longest prefix wins.
            (
                "key_prefix \"\" { policy = \"write\" }\nkey_prefix \"secret/\" { policy = \"deny\" }",
                Key,
                "secret/x",
                Read,
                false,
                false,
            ),
            (
                "key_prefix \"\" { policy = \"deny\" }\nkey_prefix \"app/\" { policy = \"read\" }",
                Key,
                "app/x",
                Read,
                false,
                true,
            ),
            (
                "key_prefix \"\" { policy = \"write\" }\nkey_prefix \"secret/\" { policy = \"deny\" }",
                Key,
                "public/x",
                Write,
                false,
                true,
            ),
            // Deny wins over allow for the same name and exactness.
            (
                "key_prefix \"a\" { policy = \"write\" }\nkey_prefix \"a\" { policy = \"deny\" }",
                Key,
                "a/b",
                Read,
                false,
                false,
            ),
            // Otherwise the most permissive of equal rules.
            (
                "node \"n\" { policy = \"read\" }\nnode \"n\" { policy = \"write\" }",
                Node,
                "n",
                Write,
                false,
                true,
            ),
            // Kinds do not leak into each other.
            (
                r#"node_prefix "" { policy = "write" }"#,
                Service,
                "web",
                Read,
                false,
                false,
            ),
            (
                r#"agent_prefix "" { policy = "read" }"#,
                Agent,
                "n1",
                Read,
                false,
                true,
            ),
            (
                r#"session_prefix "n" { policy = "write" }"#,
                Session,
                "n1",
                Write,
                false,
                true,
            ),
            (
                r#"service "db" { policy = "read" }"#,
                Service,
                "db",
                Read,
                false,
                true,
            ),
        ];
        for (source, resource, name, access, default_allow, expected) in cases {
            let set = RuleSet::new(&rules(source));
            assert_eq!(
                set.allows(*resource, name, *access, *default_allow),
                *expected,
                "{source} / {resource:?} {name:?} {access:?} default_allow={default_allow}"
            );
        }
    }

    #[test]
    fn merging_several_policies_keeps_deny_and_the_most_permissive() {
        let first =
            rules("key_prefix \"a/\" { policy = \"read\" }\nnode \"n\" { policy = \"deny\" }");
        let second =
            rules("key_prefix \"a/\" { policy = \"write\" }\nnode \"n\" { policy = \"write\" }");
        let merged = merge(first.into_iter().chain(second));
        assert_eq!(
            merged,
            vec![
                Rule::new(Key, true, "a/", W),
                Rule::new(Node, false, "n", Deny)
            ]
        );
        let set = RuleSet::new(&merged);
        assert!(set.allows(Key, "a/x", Write, false));
        assert!(!set.allows(Node, "n", Read, true));
    }

    #[test]
    fn subtree_access_needs_every_rule_beneath_to_allow_it() {
        let set = RuleSet::new(&rules(
            "key_prefix \"app/\" { policy = \"write\" }\nkey \"app/locked\" { policy = \"read\" }",
        ));
        assert!(!set.allows_subtree(Key, "app/", Write, false));
        assert!(set.allows_subtree(Key, "app/", Read, false));
        assert!(set.allows_subtree(Key, "app/open/", Write, false));
        assert!(!set.allows_subtree(Key, "other/", Write, false));
    }
}
