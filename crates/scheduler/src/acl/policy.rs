//! ACL policy rules in Nomad's language: parsing and validation. Pure: no I/O.
//!
//! Where it sits: `handlers.rs` calls [`parse`] to validate a policy's `Rules` before storing it
//! (and to render `RulesJSON` on read); the [`Authz`](super::Authz) extractor parses the stored
//! rules of a token's policies and hands them to [`Acl::compile`](super::eval::Acl::compile).
//!
//! Syntax (Nomad's `acl/policy.go`), as HCL or as HCL's JSON form:
//!
//! ```hcl
//! namespace "default" { policy = "read" }             # deny | read | write | scale
//! namespace "prod-*"  { capabilities = ["submit-job", "read-logs"] }
//! namespace "ops" {
//!   policy = "write"
//!   variables { path "nomad/jobs/*" { capabilities = ["read", "list"] } }
//! }
//! node_pool "gpu" { policy = "read" }                 # capabilities: read, write, delete, deny
//! host_volume "data" { capabilities = ["mount-readonly"] }
//! agent    { policy = "read" }                        # deny | read | write
//! node     { policy = "write" }
//! operator { policy = "read" }                        # plus capabilities (snapshot-save ...)
//! quota    { policy = "read" }
//! plugin   { policy = "list" }                        # deny | list | read | write
//! ```
//!
//! A block's `policy` expands into capabilities (upstream's `expandNamespacePolicy` and
//! friends) that are added to its explicit `capabilities`; `host-volume-*` capabilities imply
//! the lesser ones, as upstream. The result is what upstream's `acl.Parse` returns, and what a
//! policy read shows as `RulesJSON`.
//!
//! Strictness (upstream's `PolicyParseStrict`, the mode used on writes): an unknown or repeated
//! top-level key is an error (`Invalid or duplicate policy keys: ...`). Unlike upstream, an
//! unknown key inside a block is an error too, so a typo such as `capabilites` is reported
//! instead of silently granting nothing. An empty text is an empty policy; a non-empty text that
//! defines nothing is `Invalid policy`. The spec's name `policy-engine-override` is accepted for
//! upstream's `sentinel-override` and stored under the upstream name.
//!
//! Invariants: [`parse`] never panics and its error is a client-facing sentence naming the
//! problem; a successfully parsed policy only holds capability names from the tables below.

use serde::{Serialize, Serializer};

/// Namespace capabilities upstream accepts (`isNamespaceCapabilityValid`), `deny` included.
pub(crate) const NAMESPACE_CAPABILITIES: &[&str] = &[
    "deny",
    "list-jobs",
    "parse-job",
    "read-job",
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-node-exec",
    "alloc-lifecycle",
    "sentinel-override",
    "csi-register-plugin",
    "csi-write-volume",
    "csi-read-volume",
    "csi-list-volume",
    "csi-mount-volume",
    "host-volume-create",
    "host-volume-register",
    "host-volume-read",
    "host-volume-write",
    "host-volume-delete",
    "list-scaling-policies",
    "read-scaling-policy",
    "read-job-scaling",
    "scale-job",
    "submit-recommendation",
    "register-job",
    "revert-job",
    "deregister-job",
    "purge-job",
    "evaluate-job",
    "plan-job",
    "tag-job-version",
    "stable-job",
    "fail-deployment",
    "pause-deployment",
    "promote-deployment",
    "unblock-deployment",
    "cancel-deployment",
    "set-alloc-health-deployment",
    "gc-allocation",
    "pause-allocation",
    "force-periodic-job",
    "delete-service-registration",
];

/// The spec's names for upstream capabilities (docs/design.md §D2): (alias, upstream name).
const NAMESPACE_CAPABILITY_ALIASES: &[(&str, &str)] =
    &[("policy-engine-override", "sentinel-override")];

const NODE_POOL_CAPABILITIES: &[&str] = &["delete", "deny", "read", "write"];
const HOST_VOLUME_CAPABILITIES: &[&str] = &["deny", "mount-readonly", "mount-readwrite"];
const VARIABLE_CAPABILITIES: &[&str] = &["list", "read", "write", "destroy", "deny"];
const OPERATOR_CAPABILITIES: &[&str] = &[
    "deny",
    "snapshot-save",
    "license-read",
    "keyring-rotate",
    "keyring-read",
    "keyring-delete",
];
const SENTINEL_CAPABILITIES: &[&str] = &[
    "deny",
    "sentinel-read",
    "sentinel-submit",
    "sentinel-delete",
];

/// What `namespace { policy = "read" }` grants (upstream's `expandNamespacePolicy`).
const NAMESPACE_READ: &[&str] = &[
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "read-job-scaling",
    "list-scaling-policies",
    "read-scaling-policy",
    "host-volume-read",
];

/// What `policy = "write"` adds to [`NAMESPACE_READ`].
const NAMESPACE_WRITE_EXTRA: &[&str] = &[
    "scale-job",
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-lifecycle",
    "csi-mount-volume",
    "csi-write-volume",
    "submit-recommendation",
    "host-volume-create",
];

/// What `policy = "scale"` grants.
const NAMESPACE_SCALE: &[&str] = &[
    "list-scaling-policies",
    "read-scaling-policy",
    "read-job-scaling",
    "scale-job",
    "read-job",
    "submit-recommendation",
];

/// A parsed, validated policy (upstream's `acl.Policy`), serialized as `RulesJSON`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PolicyRules {
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) namespaces: Vec<NamespaceRule>,
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) node_pools: Vec<NamedRule>,
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) host_volumes: Vec<NamedRule>,
    pub(crate) agent: Option<LevelRule>,
    pub(crate) node: Option<LevelRule>,
    pub(crate) operator: Option<NamedRule>,
    pub(crate) sentinel: Option<NamedRule>,
    pub(crate) quota: Option<LevelRule>,
    pub(crate) plugin: Option<LevelRule>,
}

impl PolicyRules {
    fn is_empty(&self) -> bool {
        self == &PolicyRules::default()
    }
}

/// A `namespace "<glob>" { ... }` block; `capabilities` already include the expanded policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NamespaceRule {
    pub(crate) name: String,
    pub(crate) policy: String,
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) capabilities: Vec<String>,
    pub(crate) variables: Option<VariablesRule>,
}

/// `variables { path "<glob>" { capabilities = [...] } }` inside a namespace block. Validated
/// and shown; cairn has no variables API, so it grants nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct VariablesRule {
    pub(crate) paths: Vec<PathRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PathRule {
    pub(crate) path_spec: String,
    pub(crate) capabilities: Vec<String>,
}

/// A block with a policy and capabilities: `node_pool`, `host_volume` (named), `operator` and
/// `sentinel` (unnamed: `name` is empty and not shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NamedRule {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) name: String,
    pub(crate) policy: String,
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) capabilities: Vec<String>,
}

/// A block with only a coarse policy: `agent`, `node`, `quota`, `plugin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct LevelRule {
    pub(crate) policy: String,
}

fn null_if_empty<T: Serialize, S: Serializer>(
    items: &[T],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    if items.is_empty() {
        serializer.serialize_none()
    } else {
        serializer.collect_seq(items)
    }
}

/// Parses and validates policy rules. The error is what upstream reports after
/// `failed to parse rules: `.
pub(crate) fn parse(rules: &str) -> Result<PolicyRules, String> {
    if rules.is_empty() {
        return Ok(PolicyRules::default());
    }
    let items = if rules.trim_start().starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(rules)
            .map_err(|err| format!("Failed to parse ACL Policy: {err}"))?;
        match &value {
            serde_json::Value::Object(object) => json_items(object, TOP_LABELED),
            _ => return Err("Failed to parse ACL Policy: the rules must be an object".to_owned()),
        }
    } else {
        let body = hcl::parse(rules)
            .map_err(|err| format!("Failed to parse ACL Policy: {}", hcl_error(err)))?;
        hcl_items(&body)
    };
    let policy = interpret(&items)?;
    if policy.is_empty() {
        return Err(format!("Invalid policy: {rules}"));
    }
    Ok(policy)
}

/// One key of the rules, whatever the syntax: `key "label" { ... }` or `key = value`.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    key: String,
    labels: Vec<String>,
    value: Value,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    List(Vec<String>),
    Block(Vec<Item>),
    /// Anything else (numbers, booleans, expressions): named for the error message.
    Other(&'static str),
}

impl Value {
    fn describe(&self) -> &'static str {
        match self {
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Block(_) => "a block",
            Value::Other(what) => what,
        }
    }
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

fn hcl_items(body: &hcl::Body) -> Vec<Item> {
    body.iter()
        .map(|structure| match structure {
            hcl::Structure::Attribute(attribute) => Item {
                key: attribute.key.as_str().to_owned(),
                labels: Vec::new(),
                value: hcl_value(&attribute.expr),
            },
            hcl::Structure::Block(block) => Item {
                key: block.identifier.as_str().to_owned(),
                labels: block
                    .labels
                    .iter()
                    .map(|label| label.as_str().to_owned())
                    .collect(),
                value: Value::Block(hcl_items(&block.body)),
            },
        })
        .collect()
}

fn hcl_value(expr: &hcl::Expression) -> Value {
    match expr {
        hcl::Expression::String(value) => Value::Str(value.clone()),
        hcl::Expression::Array(items) => {
            let strings: Option<Vec<String>> = items
                .iter()
                .map(|item| match item {
                    hcl::Expression::String(value) => Some(value.clone()),
                    _ => None,
                })
                .collect();
            strings.map_or(Value::Other("a list of non-strings"), Value::List)
        }
        // HCL1's `agent = { policy = "read" }` form.
        hcl::Expression::Object(object) => Value::Block(
            object
                .iter()
                .map(|(key, value)| Item {
                    key: match key {
                        hcl::ObjectKey::Identifier(identifier) => identifier.as_str().to_owned(),
                        hcl::ObjectKey::Expression(hcl::Expression::String(key)) => key.clone(),
                        _ => "<expression>".to_owned(),
                    },
                    labels: Vec::new(),
                    value: hcl_value(value),
                })
                .collect(),
        ),
        hcl::Expression::Null => Value::Other("null"),
        hcl::Expression::Bool(_) => Value::Other("a boolean"),
        hcl::Expression::Number(_) => Value::Other("a number"),
        _ => Value::Other("an expression"),
    }
}

/// Keys whose JSON objects map labels to bodies, at the top level and inside `variables`.
const TOP_LABELED: &[&str] = &["namespace", "node_pool", "host_volume"];
const VARIABLES_LABELED: &[&str] = &["path"];

fn json_items(object: &serde_json::Map<String, serde_json::Value>, labeled: &[&str]) -> Vec<Item> {
    let mut items = Vec::new();
    for (key, value) in object {
        let nested: &[&str] = if key == "variables" {
            VARIABLES_LABELED
        } else {
            &[]
        };
        if labeled.contains(&key.as_str()) {
            for element in one_or_many(value) {
                let serde_json::Value::Object(named) = element else {
                    items.push(Item {
                        key: key.clone(),
                        labels: Vec::new(),
                        value: json_value(element, nested),
                    });
                    continue;
                };
                for (label, body) in named {
                    for body in one_or_many(body) {
                        items.push(Item {
                            key: key.clone(),
                            labels: vec![label.clone()],
                            value: json_value(body, nested),
                        });
                    }
                }
            }
        } else if let serde_json::Value::Array(elements) = value
            && !elements.is_empty()
            && elements.iter().all(serde_json::Value::is_object)
        {
            for element in elements {
                items.push(Item {
                    key: key.clone(),
                    labels: Vec::new(),
                    value: json_value(element, nested),
                });
            }
        } else {
            items.push(Item {
                key: key.clone(),
                labels: Vec::new(),
                value: json_value(value, nested),
            });
        }
    }
    items
}

fn one_or_many(value: &serde_json::Value) -> Vec<&serde_json::Value> {
    match value {
        serde_json::Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

fn json_value(value: &serde_json::Value, labeled: &[&str]) -> Value {
    match value {
        serde_json::Value::String(value) => Value::Str(value.clone()),
        serde_json::Value::Array(items) => {
            let strings: Option<Vec<String>> = items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect();
            strings.map_or(Value::Other("a list of non-strings"), Value::List)
        }
        serde_json::Value::Object(object) => Value::Block(json_items(object, labeled)),
        serde_json::Value::Null => Value::Other("null"),
        serde_json::Value::Bool(_) => Value::Other("a boolean"),
        serde_json::Value::Number(_) => Value::Other("a number"),
    }
}

/// Turns the syntax-neutral items into a validated policy.
fn interpret(items: &[Item]) -> Result<PolicyRules, String> {
    let mut policy = PolicyRules::default();
    let mut extra_keys = Vec::new();
    for item in items {
        match item.key.as_str() {
            "namespace" => policy
                .namespaces
                .push(namespace_rule(item, &mut extra_keys)?),
            "node_pool" => {
                let rule = named_rule(item, &mut extra_keys, NamedKind::NodePool)?;
                policy.node_pools.push(rule);
            }
            "host_volume" => {
                let rule = named_rule(item, &mut extra_keys, NamedKind::HostVolume)?;
                policy.host_volumes.push(rule);
            }
            "agent" => set_once(
                &mut policy.agent,
                level_rule(item, &mut extra_keys)?,
                item,
                &mut extra_keys,
            ),
            "node" => set_once(
                &mut policy.node,
                level_rule(item, &mut extra_keys)?,
                item,
                &mut extra_keys,
            ),
            "quota" => set_once(
                &mut policy.quota,
                level_rule(item, &mut extra_keys)?,
                item,
                &mut extra_keys,
            ),
            "plugin" => set_once(
                &mut policy.plugin,
                level_rule(item, &mut extra_keys)?,
                item,
                &mut extra_keys,
            ),
            "operator" => {
                let rule = named_rule(item, &mut extra_keys, NamedKind::Operator)?;
                set_once(&mut policy.operator, rule, item, &mut extra_keys);
            }
            "sentinel" => {
                let rule = named_rule(item, &mut extra_keys, NamedKind::Sentinel)?;
                set_once(&mut policy.sentinel, rule, item, &mut extra_keys);
            }
            other => extra_keys.push(other.to_owned()),
        }
    }
    if !extra_keys.is_empty() {
        return Err(format!(
            "Invalid or duplicate policy keys: {}",
            extra_keys.join(", ")
        ));
    }
    validate_levels(&policy)?;
    Ok(policy)
}

/// Keeps the first of repeated unnamed blocks (`agent`, `node`...) and reports the others.
fn set_once<T>(slot: &mut Option<T>, rule: T, item: &Item, extra_keys: &mut Vec<String>) {
    if slot.is_some() {
        extra_keys.push(item.key.clone());
    } else {
        *slot = Some(rule);
    }
}

/// The block body of `item`, or an error naming what it is instead.
fn block_body<'a>(item: &'a Item, what: &str) -> Result<&'a [Item], String> {
    match &item.value {
        Value::Block(body) => Ok(body),
        other => Err(format!(
            "Invalid {what}: expected a block, found {}",
            other.describe()
        )),
    }
}

/// The single label of a named block (`""` when missing, as upstream, so the name check fails).
fn single_label(item: &Item, what: &str) -> Result<String, String> {
    match item.labels.as_slice() {
        [] => Ok(String::new()),
        [label] => Ok(label.clone()),
        labels => Err(format!(
            "Invalid {what}: expected one name, found {} ({})",
            labels.len(),
            labels.join(", ")
        )),
    }
}

fn string_field(field: &Item, context: &str) -> Result<String, String> {
    match &field.value {
        Value::Str(value) => Ok(value.clone()),
        other => Err(format!(
            "Invalid {context}: {} must be a string, found {}",
            field.key,
            other.describe()
        )),
    }
}

fn list_field(field: &Item, context: &str) -> Result<Vec<String>, String> {
    match &field.value {
        Value::List(values) => Ok(values.clone()),
        // HCL1 accepted a single string where a list was expected.
        Value::Str(value) => Ok(vec![value.clone()]),
        other => Err(format!(
            "Invalid {context}: {} must be a list of strings, found {}",
            field.key,
            other.describe()
        )),
    }
}

fn is_valid_name(name: &str, extra: &[char]) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '*' || extra.contains(&c))
}

/// Upstream's `isPolicyValid`: the values of `policy` for namespaces, node pools, host volumes,
/// agent, node, operator and quota.
fn is_policy_valid(policy: &str) -> bool {
    matches!(policy, "deny" | "read" | "write" | "scale")
}

fn namespace_rule(item: &Item, extra_keys: &mut Vec<String>) -> Result<NamespaceRule, String> {
    let name = single_label(item, "namespace")?;
    let context = format!("namespace {name:?}");
    if !is_valid_name(&name, &[]) {
        return Err(format!("Invalid namespace name: {name:?}"));
    }
    let mut rule = NamespaceRule {
        name,
        policy: String::new(),
        capabilities: Vec::new(),
        variables: None,
    };
    for field in block_body(item, &context)? {
        match field.key.as_str() {
            "policy" => rule.policy = string_field(field, &context)?,
            "capabilities" => {
                for capability in list_field(field, &context)? {
                    let canonical = NAMESPACE_CAPABILITY_ALIASES
                        .iter()
                        .find(|(alias, _)| *alias == capability)
                        .map_or(capability.as_str(), |(_, upstream)| upstream);
                    if !NAMESPACE_CAPABILITIES.contains(&canonical) {
                        return Err(format!(
                            "Invalid namespace capability '{capability}' in namespace {:?}",
                            rule.name
                        ));
                    }
                    rule.capabilities.push(canonical.to_owned());
                }
            }
            "variables" => rule.variables = Some(variables_rule(field, &rule.name, extra_keys)?),
            other => extra_keys.push(format!("{other} (in {context})")),
        }
    }
    if !rule.policy.is_empty() {
        if !is_policy_valid(&rule.policy) {
            return Err(format!(
                "Invalid namespace policy {:?} in namespace {:?}: must be deny, read, write or scale",
                rule.policy, rule.name
            ));
        }
        rule.capabilities.extend(
            expand_namespace_policy(&rule.policy)
                .iter()
                .map(|cap| (*cap).to_owned()),
        );
    }
    expand_host_volume_capabilities(&mut rule.capabilities);
    Ok(rule)
}

fn expand_namespace_policy(policy: &str) -> Vec<&'static str> {
    match policy {
        "deny" => vec!["deny"],
        "read" => NAMESPACE_READ.to_vec(),
        "write" => NAMESPACE_READ
            .iter()
            .chain(NAMESPACE_WRITE_EXTRA)
            .copied()
            .collect(),
        "scale" => NAMESPACE_SCALE.to_vec(),
        _ => Vec::new(),
    }
}

/// Upstream's `expandNamespaceCapabilities`: host-volume capabilities imply lesser ones.
fn expand_host_volume_capabilities(capabilities: &mut Vec<String>) {
    let mut implied = Vec::new();
    for capability in capabilities.iter() {
        implied.extend_from_slice(match capability.as_str() {
            "host-volume-write" => &[
                "host-volume-register",
                "host-volume-create",
                "host-volume-delete",
                "host-volume-read",
            ][..],
            "host-volume-register" => &["host-volume-create", "host-volume-read"][..],
            "host-volume-create" => &["host-volume-read"][..],
            _ => &[][..],
        });
    }
    for capability in implied {
        if !capabilities.iter().any(|existing| existing == capability) {
            capabilities.push(capability.to_owned());
        }
    }
}

fn variables_rule(
    item: &Item,
    namespace: &str,
    extra_keys: &mut Vec<String>,
) -> Result<VariablesRule, String> {
    let context = format!("variables of namespace {namespace:?}");
    let mut paths = Vec::new();
    for field in block_body(item, &context)? {
        if field.key != "path" {
            extra_keys.push(format!("{} (in {context})", field.key));
            continue;
        }
        let path_spec = single_label(field, &context)?;
        if path_spec.is_empty() {
            return Err(format!(
                "Invalid missing variable path in namespace {namespace}"
            ));
        }
        if path_spec.starts_with('/') {
            return Err(format!(
                "Invalid variable path {path_spec:?} in namespace {namespace}: cannot start with a leading '/'"
            ));
        }
        let path_context = format!("variable path {path_spec:?} in namespace {namespace:?}");
        let mut capabilities = Vec::new();
        for entry in block_body(field, &path_context)? {
            if entry.key != "capabilities" {
                extra_keys.push(format!("{} (in {path_context})", entry.key));
                continue;
            }
            for capability in list_field(entry, &path_context)? {
                if !VARIABLE_CAPABILITIES.contains(&capability.as_str()) {
                    return Err(format!(
                        "Invalid variable capability '{capability}' in namespace {namespace}"
                    ));
                }
                capabilities.push(capability);
            }
        }
        // Upstream's expandVariablesCapabilities: deny alone; read implies list.
        if capabilities.iter().any(|cap| cap == "deny") {
            capabilities = vec!["deny".to_owned()];
        } else if capabilities.iter().any(|cap| cap == "read")
            && !capabilities.iter().any(|cap| cap == "list")
        {
            capabilities.push("list".to_owned());
        }
        paths.push(PathRule {
            path_spec,
            capabilities,
        });
    }
    if paths.is_empty() {
        return Err(format!(
            "Invalid variable policy: no variable paths in namespace {namespace}"
        ));
    }
    Ok(VariablesRule { paths })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamedKind {
    NodePool,
    HostVolume,
    Operator,
    Sentinel,
}

impl NamedKind {
    fn what(self) -> &'static str {
        match self {
            NamedKind::NodePool => "node pool",
            NamedKind::HostVolume => "host volume",
            NamedKind::Operator => "operator",
            NamedKind::Sentinel => "sentinel",
        }
    }

    fn capabilities(self) -> &'static [&'static str] {
        match self {
            NamedKind::NodePool => NODE_POOL_CAPABILITIES,
            NamedKind::HostVolume => HOST_VOLUME_CAPABILITIES,
            NamedKind::Operator => OPERATOR_CAPABILITIES,
            NamedKind::Sentinel => SENTINEL_CAPABILITIES,
        }
    }

    fn is_named(self) -> bool {
        matches!(self, NamedKind::NodePool | NamedKind::HostVolume)
    }

    /// The capabilities a `policy` grants (upstream's `expand*Policy`).
    fn expand(self, policy: &str) -> &'static [&'static str] {
        match (self, policy) {
            (_, "deny") => &["deny"],
            (NamedKind::NodePool, "read") => &["read"],
            (NamedKind::NodePool, "write") => &["delete", "read", "write"],
            (NamedKind::HostVolume, "read") => &["mount-readonly"],
            (NamedKind::HostVolume, "write") => &["mount-readonly", "mount-readwrite"],
            (NamedKind::Operator, "read") => &["license-read", "keyring-read"],
            (NamedKind::Operator, "write") => &[
                "snapshot-save",
                "license-read",
                "keyring-rotate",
                "keyring-read",
                "keyring-delete",
            ],
            (NamedKind::Sentinel, "read") => &["sentinel-read"],
            (NamedKind::Sentinel, "write") => {
                &["sentinel-read", "sentinel-submit", "sentinel-delete"]
            }
            _ => &[],
        }
    }
}

fn named_rule(
    item: &Item,
    extra_keys: &mut Vec<String>,
    kind: NamedKind,
) -> Result<NamedRule, String> {
    let what = kind.what();
    let name = if kind.is_named() {
        let name = single_label(item, what)?;
        let extra: &[char] = if kind == NamedKind::NodePool {
            &['_']
        } else {
            &[]
        };
        if !is_valid_name(&name, extra) {
            return Err(format!("Invalid {what} name {name:?}"));
        }
        name
    } else {
        if !item.labels.is_empty() {
            return Err(format!("Invalid {what} policy: {} takes no name", item.key));
        }
        String::new()
    };
    let context = if kind.is_named() {
        format!("{what} {name:?}")
    } else {
        what.to_owned()
    };
    let mut rule = NamedRule {
        name,
        policy: String::new(),
        capabilities: Vec::new(),
    };
    for field in block_body(item, &context)? {
        match field.key.as_str() {
            "policy" => rule.policy = string_field(field, &context)?,
            "capabilities" => {
                for capability in list_field(field, &context)? {
                    if !kind.capabilities().contains(&capability.as_str()) {
                        return Err(format!(
                            "Invalid {what} capability '{capability}' in {context}"
                        ));
                    }
                    rule.capabilities.push(capability);
                }
            }
            other => extra_keys.push(format!("{other} (in {context})")),
        }
    }
    if !rule.policy.is_empty() {
        if !is_policy_valid(&rule.policy) {
            return Err(format!(
                "Invalid {what} policy {:?} in {context}: must be deny, read, write or scale",
                rule.policy
            ));
        }
        rule.capabilities.extend(
            kind.expand(&rule.policy)
                .iter()
                .map(|cap| (*cap).to_owned()),
        );
    }
    Ok(rule)
}

fn level_rule(item: &Item, extra_keys: &mut Vec<String>) -> Result<LevelRule, String> {
    let what = item.key.as_str();
    if !item.labels.is_empty() {
        return Err(format!("Invalid {what} policy: {what} takes no name"));
    }
    let mut policy = String::new();
    for field in block_body(item, what)? {
        match field.key.as_str() {
            "policy" => policy = string_field(field, what)?,
            other => extra_keys.push(format!("{other} (in {what})")),
        }
    }
    Ok(LevelRule { policy })
}

/// The coarse policies' values, checked after the blocks (upstream's order).
fn validate_levels(policy: &PolicyRules) -> Result<(), String> {
    let coarse = [
        ("agent", &policy.agent),
        ("node", &policy.node),
        ("quota", &policy.quota),
    ];
    for (what, rule) in coarse {
        if let Some(rule) = rule
            && !is_policy_valid(&rule.policy)
        {
            return Err(format!(
                "Invalid {what} policy {:?}: must be deny, read, write or scale",
                rule.policy
            ));
        }
    }
    if let Some(plugin) = &policy.plugin
        && !matches!(plugin.policy.as_str(), "deny" | "read" | "list" | "write")
    {
        return Err(format!(
            "Invalid plugin policy {:?}: must be deny, list, read or write",
            plugin.policy
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(rules: &str) -> PolicyRules {
        parse(rules).unwrap_or_else(|err| panic!("{rules:?}: {err}"))
    }

    fn err(rules: &str) -> String {
        match parse(rules) {
            Ok(policy) => panic!("{rules:?} parsed: {policy:?}"),
            Err(err) => err,
        }
    }

    #[test]
    fn namespace_read_policy_expands_to_read_capabilities() {
        let policy = ok(r#"namespace "default" { policy = "read" }"#);
        assert_eq!(policy.namespaces.len(), 1);
        let rule = &policy.namespaces[0];
        assert_eq!(rule.name, "default");
        for cap in [
            "list-jobs",
            "read-job",
            "parse-job",
            "csi-list-volume",
            "read-job-scaling",
        ] {
            assert!(rule.capabilities.iter().any(|c| c == cap), "{cap}");
        }
        assert!(!rule.capabilities.iter().any(|c| c == "submit-job"));
    }

    #[test]
    fn namespace_write_policy_includes_submit_and_exec() {
        let policy = ok(r#"namespace "*" { policy = "write" }"#);
        let caps = &policy.namespaces[0].capabilities;
        for cap in [
            "list-jobs",
            "submit-job",
            "dispatch-job",
            "alloc-exec",
            "alloc-lifecycle",
            "read-logs",
        ] {
            assert!(caps.iter().any(|c| c == cap), "{cap}");
        }
        assert!(!caps.iter().any(|c| c == "alloc-node-exec"));
    }

    #[test]
    fn explicit_capabilities_add_to_the_policy() {
        let policy = ok(r#"
            namespace "dev" {
              policy       = "read"
              capabilities = ["submit-job", "alloc-node-exec"]
            }
        "#);
        let caps = &policy.namespaces[0].capabilities;
        assert!(caps.iter().any(|c| c == "submit-job"));
        assert!(caps.iter().any(|c| c == "alloc-node-exec"));
        assert!(caps.iter().any(|c| c == "list-jobs"));
    }

    #[test]
    fn spec_alias_for_sentinel_override_is_stored_under_upstream_name() {
        let policy = ok(r#"namespace "a" { capabilities = ["policy-engine-override"] }"#);
        assert_eq!(policy.namespaces[0].capabilities, vec!["sentinel-override"]);
    }

    #[test]
    fn host_volume_capabilities_imply_lesser_ones() {
        let policy = ok(r#"namespace "a" { capabilities = ["host-volume-write"] }"#);
        let caps = &policy.namespaces[0].capabilities;
        for cap in [
            "host-volume-register",
            "host-volume-create",
            "host-volume-delete",
            "host-volume-read",
        ] {
            assert!(caps.iter().any(|c| c == cap), "{cap}");
        }
    }

    #[test]
    fn every_block_kind_parses() {
        let policy = ok(r#"
            namespace "default" { policy = "scale" }
            node_pool "gpu_pool" { policy = "write" }
            host_volume "data-*" { capabilities = ["mount-readonly"] }
            agent { policy = "read" }
            node { policy = "write" }
            operator { policy = "read" }
            quota { policy = "read" }
            plugin { policy = "list" }
        "#);
        assert_eq!(
            policy.node_pools[0].capabilities,
            vec!["delete", "read", "write"]
        );
        assert_eq!(policy.host_volumes[0].name, "data-*");
        assert_eq!(
            policy.agent,
            Some(LevelRule {
                policy: "read".to_owned()
            })
        );
        assert_eq!(
            policy.node,
            Some(LevelRule {
                policy: "write".to_owned()
            })
        );
        assert_eq!(
            policy
                .operator
                .as_ref()
                .map(|rule| rule.capabilities.clone()),
            Some(vec!["license-read".to_owned(), "keyring-read".to_owned()])
        );
        assert_eq!(
            policy.plugin,
            Some(LevelRule {
                policy: "list".to_owned()
            })
        );
        assert!(
            policy.namespaces[0]
                .capabilities
                .iter()
                .any(|c| c == "scale-job")
        );
    }

    #[test]
    fn hcl1_object_assignment_and_json_forms_parse_the_same() {
        let hcl = ok(r#"
            namespace "default" { policy = "read" }
            agent = { policy = "read" }
        "#);
        let json =
            ok(r#"{"namespace": {"default": {"policy": "read"}}, "agent": {"policy": "read"}}"#);
        assert_eq!(hcl, json);
    }

    #[test]
    fn variables_paths_validate_and_read_implies_list() {
        let policy = ok(r#"
            namespace "default" {
              variables {
                path "nomad/jobs/*" { capabilities = ["read"] }
              }
            }
        "#);
        let variables = policy.namespaces[0]
            .variables
            .as_ref()
            .map(|v| v.paths.clone());
        assert_eq!(
            variables,
            Some(vec![PathRule {
                path_spec: "nomad/jobs/*".to_owned(),
                capabilities: vec!["read".to_owned(), "list".to_owned()],
            }])
        );
        assert!(
            err(r#"
            namespace "a" {
              variables {
                path "/x" { capabilities = ["read"] }
              }
            }
        "#)
            .contains("leading '/'")
        );
        assert!(err("namespace \"a\" {\n  variables {}\n}").contains("no variable paths"));
    }

    #[test]
    fn empty_rules_are_an_empty_policy_but_blank_rules_are_invalid() {
        assert_eq!(ok(""), PolicyRules::default());
        assert!(err("  \n").starts_with("Invalid policy"));
        assert!(err("# only a comment\n").starts_with("Invalid policy"));
    }

    #[test]
    fn syntax_errors_name_the_position() {
        let message = err(r#"namespace "default" { policy = "read" "#);
        assert!(
            message.starts_with("Failed to parse ACL Policy: line "),
            "{message}"
        );
    }

    #[test]
    fn bad_values_name_the_problem() {
        let cases: &[(&str, &str)] = &[
            (
                r#"namespace "default" { policy = "admin" }"#,
                "Invalid namespace policy \"admin\"",
            ),
            (
                r#"namespace "default" { capabilities = ["fly"] }"#,
                "Invalid namespace capability 'fly'",
            ),
            (
                r#"namespace "a b" { policy = "read" }"#,
                "Invalid namespace name",
            ),
            (
                r#"namespace { policy = "read" }"#,
                "Invalid namespace name: \"\"",
            ),
            (r#"namespace "a" { policy = 1 }"#, "policy must be a string"),
            (
                r#"agent { policy = "list" }"#,
                "Invalid agent policy \"list\"",
            ),
            (r#"agent { }"#, "Invalid agent policy \"\""),
            (r#"plugin { policy = "scale" }"#, "Invalid plugin policy"),
            (
                r#"node_pool "a.b" { policy = "read" }"#,
                "Invalid node pool name",
            ),
            (
                r#"node_pool "a" { capabilities = ["mount"] }"#,
                "Invalid node pool capability 'mount'",
            ),
            (
                r#"operator { capabilities = ["reboot"] }"#,
                "Invalid operator capability 'reboot'",
            ),
            (
                "namespace \"a\" { policy = \"read\" }\njobs { policy = \"read\" }",
                "Invalid or duplicate policy keys: jobs",
            ),
            (
                "agent { policy = \"read\" }\nagent { policy = \"write\" }",
                "Invalid or duplicate policy keys: agent",
            ),
            (
                r#"namespace "a" { capabilites = ["read-job"] }"#,
                "capabilites (in namespace \"a\")",
            ),
            ("{\"agent\": 5}", "expected a block"),
            ("{\"namespace\": 5}", "Invalid namespace name"),
            ("[1]", "Failed to parse ACL Policy"),
            ("{not json", "Failed to parse ACL Policy"),
        ];
        for (rules, expected) in cases {
            let message = err(rules);
            assert!(
                message.contains(expected),
                "{rules:?}: {message:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn rules_json_shows_nulls_for_missing_parts() {
        let policy = ok(r#"namespace "default" { policy = "deny" }"#);
        let json = serde_json::to_value(&policy).unwrap_or_default();
        assert_eq!(json["Namespaces"][0]["Name"], "default");
        assert_eq!(
            json["Namespaces"][0]["Capabilities"],
            serde_json::json!(["deny"])
        );
        assert!(json["NodePools"].is_null());
        assert!(json["Agent"].is_null());
    }
}
